"""Peak memory of a run on a process pool: the parent and every worker, against the size of the data.

A linear regression with N x d float64 data (0.8 GB at the default N = 1e6, d = 100) is built
without temporaries, then ``sgmc.sample`` runs 4 chains in 2 groups on a ``ProcessPoolExecutor``
of 2 workers (started by "spawn", as ``executor="processes"`` starts them). Peak resident
memory (``VmHWM``: anonymous and file-backed pages, so memory-mapped data count; unlike
``ru_maxrss`` it starts afresh when a spawned worker execs) is read in the parent after the run and
in each worker by a task sent after the run. Each measurement runs in
a fresh Python process; ``--tree DIR`` measures the sgmc of another checkout (for a before/after
comparison), put first on that process's path and on its workers'.

Run from the repository root::

    git worktree add --detach build/before COMMIT
    python asv_benchmarks/worker_memory.py --tree build/before --json

which measures the given tree and this one and writes ``docs/results/worker_memory.json``;
``--executor dask`` measures a Dask ``LocalCluster`` of 2 worker processes instead (the workers'
peaks by ``client.run``) and writes ``docs/results/worker_memory_dask.json``. Each worker's peak is
also read before the run (the interpreter and the libraries it has loaded: the floor that the data
come on top of). ``--no-native`` measures each tree a second time with ``SGMC_NATIVE=0`` (no
compiled gradient, so no Numba runtime in the workers).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _peak_mib() -> float:
    """This process's peak resident memory: VmHWM, which starts afresh when a process execs.

    (``ru_maxrss`` does not: a worker spawned by this process would start from this process's peak.)
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _private_dirty_mib() -> float:
    """Memory this process wrote and holds alone (its own allocations and copies), now, from smaps_rollup."""
    try:
        with open("/proc/self/smaps_rollup") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
    except OSError:
        return float("nan")
    return int(fields["Private_Dirty"].split()[0]) / 1024.0


def _worker_peak(_: int) -> tuple:
    time.sleep(0.3)  # long enough that the pool's two workers share the probes
    return os.getpid(), _peak_mib()


def _worker_private(_: int) -> tuple:
    time.sleep(0.3)
    return os.getpid(), _private_dirty_mib()


def measure(n: int, d: int, iters: int, executor: str = "processes") -> dict:
    """One measurement in this process: data size, the parent's peak and each worker's."""
    import concurrent.futures as cf
    import multiprocessing

    import numpy as np

    import sgmc
    from sgmc.models import LinearRegression

    rng = np.random.default_rng(0)
    X = np.empty((n, d))
    rng.standard_normal(out=X)
    y = X @ (np.ones(d) / np.sqrt(d))
    y += rng.standard_normal(n)
    model = LinearRegression(X, y)
    data_mib = (X.nbytes + y.nbytes) / 2**20
    before = _peak_mib()
    if executor == "dask":
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            client.wait_for_workers(2)
            workers_before = sorted(client.run(_peak_mib).values())
            t0 = time.perf_counter()
            trace = sgmc.sample(model, "sgld", step_size=1e-7, batch_size=1000, n_iter=iters, chains=4,
                                group_size=2, rng=1, progress=False, executor=client)
            wall = time.perf_counter() - t0
            peaks = client.run(_peak_mib)
            private = client.run(_private_dirty_mib)
        assert bool(np.all(np.isfinite(trace.draws)))
        return {"sgmc": os.path.dirname(os.path.dirname(sgmc.__file__)), "data_mib": data_mib,
                "parent_before_run_mib": before, "parent_peak_mib": _peak_mib(),
                "worker_before_run_mib": workers_before, "worker_peaks_mib": sorted(peaks.values()),
                "worker_private_mib": sorted(private.values()), "wall_s": wall}
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        workers_before: dict = {}
        for _ in range(5):  # start both workers before the run
            workers_before.update(pool.map(_worker_peak, range(2)))
            if len(workers_before) >= 2:
                break
        t0 = time.perf_counter()
        trace = sgmc.sample(model, "sgld", step_size=1e-7, batch_size=1000, n_iter=iters, chains=4,
                            group_size=2, rng=1, progress=False, executor=pool)
        wall = time.perf_counter() - t0
        peaks: dict = {}
        private: dict = {}
        for _ in range(5):
            for pid, peak in pool.map(_worker_peak, range(4)):
                peaks[pid] = max(peaks.get(pid, 0.0), peak)
            private.update(pool.map(_worker_private, range(4)))
            if len(peaks) >= 2 and len(private) >= 2:
                break
    assert bool(np.all(np.isfinite(trace.draws)))
    return {
        "sgmc": os.path.dirname(os.path.dirname(sgmc.__file__)),
        "data_mib": data_mib,
        "parent_before_run_mib": before,
        "parent_peak_mib": _peak_mib(),
        "worker_before_run_mib": sorted(workers_before.values()),
        "worker_peaks_mib": sorted(peaks.values()),
        "worker_private_mib": sorted(private.values()),
        "wall_s": wall,
    }


def _commit(tree: str) -> str:
    out = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "not a git checkout"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=100)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--tree", action="append", default=[], help="another checkout to measure first")
    p.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--executor", choices=("processes", "dask"), default="processes")
    p.add_argument("--no-native", action="store_true", help="also measure each tree with SGMC_NATIVE=0")
    p.add_argument("--json", action="store_true", help="write docs/results/worker_memory.json")
    args = p.parse_args()
    if args.measure:
        print(json.dumps(measure(args.n, args.d, args.iters, args.executor)))
        return
    sys.path.append(str(ROOT))  # after any PYTHONPATH tree: the measured sgmc is the one first on the path
    from docs._results import write_results

    rows = []
    runs = [(tree, native) for tree in args.tree + [str(ROOT)] for native in ((True, False) if args.no_native else (True,))]
    for tree, native in runs:
        env = dict(os.environ, PYTHONPATH=tree + os.pathsep + os.environ.get("PYTHONPATH", ""))
        if not native:
            env["SGMC_NATIVE"] = "0"
        cmd = [sys.executable, __file__, "--measure", "--n", str(args.n), "--d", str(args.d),
               "--iters", str(args.iters), "--executor", args.executor]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        label = "this checkout" if tree == str(ROOT) else tree
        assert os.path.realpath(r["sgmc"]) == os.path.realpath(tree), (r["sgmc"], tree)
        rows.append([
            label, _commit(tree), "on" if native else "off (SGMC_NATIVE=0)", round(r["data_mib"]),
            round(r["parent_before_run_mib"]),
            round(r["parent_peak_mib"]), round(r["parent_peak_mib"] / r["data_mib"], 2),
            " / ".join(str(round(w)) for w in r["worker_before_run_mib"]),
            " / ".join(str(round(w)) for w in r["worker_peaks_mib"]),
            round(max(r["worker_peaks_mib"]) / r["data_mib"], 2),
            " / ".join(str(round(w)) for w in r["worker_private_mib"]), round(r["wall_s"], 1),
        ])
        print(rows[-1], flush=True)
    table = {
        "columns": ["sgmc", "commit", "compiled gradient", "data MiB", "parent before run MiB", "parent peak MiB",
                    "parent peak / data", "workers before run MiB", "worker peaks MiB", "worker peak / data",
                    "worker private dirty MiB after run", "run s"],
        "rows": rows,
        "notes": (f"N = {args.n}, d = {args.d}, LinearRegression, SGLD, {args.iters} iterations, 4 chains in "
                  + ("2 groups on a ProcessPoolExecutor(2) started by spawn" if args.executor == "processes"
                     else "2 groups on a Dask LocalCluster(n_workers=2, threads_per_worker=1, processes=True)")
                  + "; peak = VmHWM (resident pages, file-backed ones included: mapped data and shared "
                  "libraries count in every process that touched them); private dirty = pages the process "
                  "wrote and holds alone (smaps_rollup Private_Dirty), read after the run"),
    }
    if args.json:
        name = "worker_memory" if args.executor == "processes" else "worker_memory_dask"
        write_results(name, {args.executor: table})


if __name__ == "__main__":
    main()
