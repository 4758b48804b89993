"""Peak memory of a run on a process pool: the parent and every worker, against the size of the data.

A linear regression with N x d float64 data (0.8 GB at the default N = 1e6, d = 100) is built
without temporaries, then ``sgmc.sample`` runs 4 chains in 2 groups on a ``ProcessPoolExecutor``
of 2 workers (started by "spawn", as ``executor="processes"`` starts them). Peak resident
memory (``ru_maxrss``: anonymous and file-backed pages, so memory-mapped data count) is read in
the parent after the run and in each worker by a task sent after the run. Each measurement runs in
a fresh Python process; ``--tree DIR`` measures the sgmc of another checkout (for a before/after
comparison), put first on that process's path and on its workers'.

Run from the repository root::

    python asv_benchmarks/worker_memory.py --tree /tmp/before --json

which measures the given tree and this one and writes ``docs/results/worker_memory.json``;
``--executor dask`` measures a Dask ``LocalCluster`` of 2 worker processes instead (the workers'
peaks by ``client.run``) and writes ``docs/results/worker_memory_dask.json``.
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
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _worker_peak(_: int) -> tuple:
    time.sleep(0.3)  # long enough that the pool's two workers share the probes
    return os.getpid(), _peak_mib()


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
            t0 = time.perf_counter()
            trace = sgmc.sample(model, "sgld", step_size=1e-7, batch_size=1000, n_iter=iters, chains=4,
                                group_size=2, rng=1, progress=False, executor=client)
            wall = time.perf_counter() - t0
            peaks = client.run(_peak_mib)
        assert bool(np.all(np.isfinite(trace.draws)))
        return {"sgmc": os.path.dirname(os.path.dirname(sgmc.__file__)), "data_mib": data_mib,
                "parent_before_run_mib": before, "parent_peak_mib": _peak_mib(),
                "worker_peaks_mib": sorted(peaks.values()), "wall_s": wall}
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        list(pool.map(_worker_peak, range(2)))  # start both workers before the run
        t0 = time.perf_counter()
        trace = sgmc.sample(model, "sgld", step_size=1e-7, batch_size=1000, n_iter=iters, chains=4,
                            group_size=2, rng=1, progress=False, executor=pool)
        wall = time.perf_counter() - t0
        peaks: dict = {}
        for _ in range(5):
            for pid, peak in pool.map(_worker_peak, range(4)):
                peaks[pid] = max(peaks.get(pid, 0.0), peak)
            if len(peaks) >= 2:
                break
    assert bool(np.all(np.isfinite(trace.draws)))
    return {
        "sgmc": os.path.dirname(os.path.dirname(sgmc.__file__)),
        "data_mib": data_mib,
        "parent_before_run_mib": before,
        "parent_peak_mib": _peak_mib(),
        "worker_peaks_mib": sorted(peaks.values()),
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
    p.add_argument("--json", action="store_true", help="write docs/results/worker_memory.json")
    args = p.parse_args()
    if args.measure:
        print(json.dumps(measure(args.n, args.d, args.iters, args.executor)))
        return
    sys.path.append(str(ROOT))  # after any PYTHONPATH tree: the measured sgmc is the one first on the path
    from docs._results import write_results

    rows = []
    for tree in args.tree + [str(ROOT)]:
        env = dict(os.environ, PYTHONPATH=tree + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, __file__, "--measure", "--n", str(args.n), "--d", str(args.d),
               "--iters", str(args.iters), "--executor", args.executor]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        label = "this checkout" if tree == str(ROOT) else tree
        assert os.path.realpath(r["sgmc"]) == os.path.realpath(tree), (r["sgmc"], tree)
        rows.append([
            label, _commit(tree), round(r["data_mib"]), round(r["parent_before_run_mib"]),
            round(r["parent_peak_mib"]), round(r["parent_peak_mib"] / r["data_mib"], 2),
            " / ".join(str(round(w)) for w in r["worker_peaks_mib"]),
            round(max(r["worker_peaks_mib"]) / r["data_mib"], 2), round(r["wall_s"], 1),
        ])
        print(rows[-1], flush=True)
    table = {
        "columns": ["sgmc", "commit", "data MiB", "parent before run MiB", "parent peak MiB",
                    "parent peak / data", "worker peaks MiB", "worker peak / data", "run s"],
        "rows": rows,
        "notes": (f"N = {args.n}, d = {args.d}, LinearRegression, SGLD, {args.iters} iterations, 4 chains in "
                  + ("2 groups on a ProcessPoolExecutor(2) started by spawn" if args.executor == "processes"
                     else "2 groups on a Dask LocalCluster(n_workers=2, threads_per_worker=1, processes=True)")
                  + "; peak = ru_maxrss"),
    }
    if args.json:
        name = "worker_memory" if args.executor == "processes" else "worker_memory_dask"
        write_results(name, {args.executor: table})


if __name__ == "__main__":
    main()
