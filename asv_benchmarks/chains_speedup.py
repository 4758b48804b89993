"""Wall-clock speed-up of chain groups in local processes and on Dask, against one process.

``sgmc.sample`` splits its chains into groups and can run the groups in this process
(``executor=None``), in the workers of a ``concurrent.futures.ProcessPoolExecutor``, or on a Dask
cluster. This script times the same run in three modes and reports how much faster the two
parallel modes are:

* ``in-process``: ``executor=None``, the groups one after another;
* ``processes``: a ``ProcessPoolExecutor`` with 2 workers;
* ``dask``: a ``distributed.Client`` on a ``LocalCluster`` with 2 worker processes of one thread;
* ``dask-no-trim`` (with ``--dask-no-trim``): the same, but the workers are started without the
  ``MALLOC_TRIM_THRESHOLD_`` variable that Dask's nanny sets by default (configuration key
  ``distributed.nanny.pre-spawn-environ``). Setting that variable switches off glibc's adaptive
  threshold above which allocations are served by fresh ``mmap`` pages, so every temporary array
  larger than 128 KiB (the minibatch rows of a group of chains) is mapped and unmapped again on each
  iteration; this mode shows what that costs.

The workload is SGLD on Bayesian logistic regression with N = 100 000 data, minibatches of
n = 1000, step size 1e-5, 32 chains in 2 groups of 16, for d = 10 and d = 100 (``X`` standard normal
from ``numpy.random.default_rng(0)``, ``y`` Bernoulli(sigmoid(X theta)) with theta ~ N(0, I / d)).
The pool and the cluster are created once, before any timing, and warmed up with one small run, so
the figures include what every run pays (pickling or scattering the model and the data, sending the
draws back) but not starting the workers. BLAS and OpenMP are limited to one thread (the variables
are set before NumPy is imported, and the workers inherit them), so each process uses one core and
the comparison is one core against two.

The modes alternate within every round, in an order rotated from round to round, so that a change
in the load of the machine affects all modes alike. Every run uses the same seed, and the script
checks that the draws of every mode are bit-identical to those of the in-process run; it stops
with an ``AssertionError`` naming the mode and the largest difference if they are not.

Usage (from the repository root, with ``dask[distributed]`` installed)::

    python asv_benchmarks/chains_speedup.py                       # 2000 iterations, 3 rounds
    python asv_benchmarks/chains_speedup.py --iters 500 --rounds 1 --dims 10
    python asv_benchmarks/chains_speedup.py --json speedup.json
    python asv_benchmarks/chains_speedup.py --dask-no-trim        # adds the fourth mode

Reading the output: one row per dimension and mode, with the median wall-clock seconds of one
``sgmc.sample`` call over the rounds, the fastest and slowest round, the median of the longest
group's sampling loop (``trace.info["sampling_time"]``, measured where the group ran), and the
speed-up, the median in-process time divided by the median time of the mode. With two groups on two
cores, 2.0 is the ceiling. In process the call takes about twice the loop time (the two groups run
one after the other); with an executor, the call time minus the loop time is the cost of moving the
model and the draws between processes and of the scheduler, and a loop time above the in-process
one means each iteration runs slower in the worker than here. The default run takes four to five
minutes on a 2-core machine (about 1.3 more with ``--dask-no-trim``).
"""

from __future__ import annotations

import os

# Before NumPy is imported, here and (by inheritance) in every worker process.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import concurrent.futures as cf  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported before measuring: it records the load at start)

import contextlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import sgmc  # noqa: E402
from sgmc.models import LogisticRegression  # noqa: E402

N_DATA = 100_000
BATCH = 1_000
STEP_SIZE = 1e-5
CHAINS = 32
GROUP_SIZE = 16
N_WORKERS = 2
SEED = 0
MODES = ("in-process", "processes", "dask")
NO_TRIM = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


def make_data(n_data: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels of a logistic regression problem.

    Parameters
    ----------
    n_data, dim : int
        Number of data and of parameters.
    seed : int
        Seed of ``numpy.random.default_rng``.

    Returns
    -------
    X : ndarray, shape (n_data, dim)
        Standard normal features.
    y : ndarray, shape (n_data,)
        Labels in {0, 1}, Bernoulli(sigmoid(X theta)) with theta ~ N(0, I / dim).
    """
    r = np.random.default_rng(seed)
    X = r.standard_normal((n_data, dim))
    theta = r.standard_normal(dim) / math.sqrt(dim)
    y = (r.random(n_data) < 1.0 / (1.0 + np.exp(-X @ theta))).astype(np.float64)
    return X, y


def run(model: LogisticRegression, n_iter: int, executor=None, *, chains: int = CHAINS,
        group_size: int = GROUP_SIZE) -> tuple[float, float, np.ndarray]:
    """Time one ``sgmc.sample`` call.

    Parameters
    ----------
    model : LogisticRegression
    n_iter : int
    executor : None, concurrent.futures.Executor or distributed.Client
    chains, group_size : int

    Returns
    -------
    seconds : float
        Wall-clock time of the call.
    loop_seconds : float
        The longest group's sampling loop, ``trace.info["sampling_time"]``.
    draws : ndarray, shape (chains, n_iter, dim)
    """
    t0 = time.perf_counter()
    trace = sgmc.sample(model, "sgld", "minibatch", step_size=STEP_SIZE, batch_size=BATCH,
                        n_iter=n_iter, chains=chains, group_size=group_size, rng=SEED,
                        progress=False, executor=executor)
    seconds = time.perf_counter() - t0
    return seconds, float(trace.info["sampling_time"]), np.asarray(trace.draws)


def check_identical(reference: np.ndarray, draws: np.ndarray, mode: str, dim: int) -> None:
    """Raise ``AssertionError`` unless ``draws`` equal ``reference`` bit for bit.

    Parameters
    ----------
    reference, draws : ndarray
        The in-process draws and those of ``mode``.
    mode : str
    dim : int
        Used in the message only.
    """
    if reference.shape != draws.shape:
        msg = f"d={dim}: {mode} draws have shape {draws.shape}, in-process {reference.shape}"
        raise AssertionError(msg)
    same = reference.view(np.uint8) == draws.view(np.uint8)
    if not bool(np.all(same)):
        diff = np.abs(reference - draws)
        bad = np.argwhere(reference != draws)
        msg = (
            f"d={dim}: {mode} draws differ from the in-process draws in {len(bad)} of "
            f"{reference.size} values (largest difference {np.nanmax(diff):.3e}, first at "
            f"chain, draw, coordinate = {tuple(int(i) for i in bad[0])})"
        )
        raise AssertionError(msg)


def machine() -> dict:
    """A description of the machine and of the versions that matter for the timings."""
    import distributed

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
        if names:
            cpu = names[0]
    except OSError:
        pass
    try:
        load = [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "distributed": distributed.__version__,
        "sgmc": getattr(sgmc, "__version__", "unknown"),
        "load_average_at_start": load,
    }


def table(rows: list) -> str:
    """The results as a Markdown table."""
    head = "| d | mode | median s | min s | max s | loop s | speed-up (in-process / mode) |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dim']} | {r['mode']} | {r['median_s']:.2f} | {r['min_s']:.2f} | "
                     f"{r['max_s']:.2f} | {r['loop_s']:.2f} | {r['speedup']:.2f} |")
    return "\n".join(lines)


def main(argv: list | None = None) -> int:
    """Run the comparison; return the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=2000, help="iterations per run (default 2000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds over the modes (default 3)")
    ap.add_argument("--dims", type=int, nargs="+", default=[10, 100], help="dimensions (default 10 100)")
    ap.add_argument("--dask-no-trim", action="store_true",
                    help="add a Dask cluster whose workers keep glibc's default malloc thresholds")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--results", default="chains_speedup",
                    help="results file docs/results/NAME.json (default chains_speedup; 'none' writes nothing)")
    args = ap.parse_args(argv)
    if args.iters < 1 or args.rounds < 1:
        ap.error("--iters and --rounds must be at least 1")

    try:
        import dask
        import distributed
    except ImportError:
        print("this script needs Dask's distributed scheduler: pip install 'sgmc[dask]'", file=sys.stderr)
        return 2

    info = machine()
    print(f"{info['cpu']}, {info['cores']} cores; Python {info['python']}, NumPy {info['numpy']}, "
          f"distributed {info['distributed']}; load average {info['load_average_at_start']}")
    modes = MODES + (("dask-no-trim",) if args.dask_no_trim else ())
    print(f"SGLD, logistic regression, N={N_DATA}, n={BATCH}, {CHAINS} chains in groups of "
          f"{GROUP_SIZE}, {args.iters} iterations, {args.rounds} rounds", flush=True)

    t_start = time.perf_counter()
    rows = []
    warm_model = LogisticRegression(*make_data(1_000, 2))
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(cf.ProcessPoolExecutor(N_WORKERS))
        executors = {"in-process": None, "processes": pool}
        # start the pool's workers (and import sgmc in them) before any Dask nanny has run: a nanny
        # copies its pre-spawn variables into this process's environment, where later children
        # would inherit them
        run(warm_model, 20, None, chains=4, group_size=2)
        run(warm_model, 20, pool, chains=4, group_size=2)
        for mode in modes[2:]:
            if mode == "dask-no-trim":
                os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)
            with dask.config.set(NO_TRIM if mode == "dask-no-trim" else {}):
                cluster = stack.enter_context(distributed.LocalCluster(
                    n_workers=N_WORKERS, threads_per_worker=1, processes=True, dashboard_address=None))
                client = stack.enter_context(distributed.Client(cluster))
                client.wait_for_workers(N_WORKERS)
            executors[mode] = client
            trim = set(client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_")).values())
            info[f"{mode}_MALLOC_TRIM_THRESHOLD_"] = sorted(map(str, trim))
            if (mode == "dask-no-trim") != (trim == {None}):
                msg = f"{mode}: the workers have MALLOC_TRIM_THRESHOLD_ in {trim}"
                raise RuntimeError(msg)
            run(warm_model, 20, client, chains=4, group_size=2)
        t_ready = time.perf_counter()
        print(f"pool and clusters ready in {t_ready - t_start:.1f} s", flush=True)

        for dim in args.dims:
            model = LogisticRegression(*make_data(N_DATA, dim))
            times: dict = {m: [] for m in modes}
            loops: dict = {m: [] for m in modes}
            reference = None
            for r in range(args.rounds):
                order = modes[r % len(modes):] + modes[:r % len(modes)]
                for mode in order:
                    seconds, loop, draws = run(model, args.iters, executors[mode])
                    times[mode].append(seconds)
                    loops[mode].append(loop)
                    if reference is None:   # the first round starts in process
                        reference = draws
                    else:
                        check_identical(reference, draws, mode, dim)
                    print(f"  d={dim} round {r + 1} {mode:<12} {seconds:7.2f} s (loop {loop:6.2f} s)",
                          flush=True)
                    del draws
            base = statistics.median(times["in-process"])
            for mode in modes:
                med = statistics.median(times[mode])
                rows.append({"dim": dim, "mode": mode, "median_s": med, "min_s": min(times[mode]),
                             "max_s": max(times[mode]), "loop_s": statistics.median(loops[mode]),
                             "speedup": base / med, "times_s": times[mode], "loop_times_s": loops[mode]})
            print(f"  d={dim}: draws of all modes identical bit for bit", flush=True)
    total = time.perf_counter() - t_start

    print()
    print(table(rows))
    print(f"\ntotal wall time {total:.1f} s")
    record = {"rows": rows, "iters": args.iters, "rounds": args.rounds, "chains": CHAINS,
              "group_size": GROUP_SIZE, "n_data": N_DATA, "batch_size": BATCH,
              "step_size": STEP_SIZE, "workers": N_WORKERS, "machine": info,
              "identical": True, "total_s": total}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(record, fh, indent=2)
    if args.results != "none":
        cols = ["d", "mode", "median s", "min s", "max s", "loop s", "speed-up (in-process / mode)"]
        body = [[r["dim"], r["mode"], r["median_s"], r["min_s"], r["max_s"], r["loop_s"], r["speedup"]]
                for r in rows]
        tables = {"speedup": {"columns": cols, "rows": body, "formats": [None, None] + [".2f"] * 5,
                              "notes": f"{args.iters} iterations, medians of {args.rounds} rounds; the draws of "
                                       f"every mode were bit-identical; the script took {total:.0f} s."}}
        print("wrote", write_results(args.results, tables, extra=record, packages=["distributed", "dask"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
