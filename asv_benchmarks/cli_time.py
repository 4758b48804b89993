"""How long the main job takes: ``sgmc run`` (and ``sgmc run --quick``) timed as a user runs it.

Each configuration runs the command in a fresh process, ``--reps`` times, the configurations
alternating round by round, and reports the median wall time and the median CPU time of the child
(user + system, from ``resource.getrusage(RUSAGE_CHILDREN)``), with the load average before each
round. Configurations:

* ``one core``: the command under ``taskset -c CORE`` (``--core``, default 1) with
  ``OPENBLAS_NUM_THREADS=1`` (and the other one-thread switches);
* ``all cores, as typed``: the command as a user types it (it limits BLAS to one thread itself, with
  threadpoolctl);
* ``all cores, N BLAS threads``: the same with ``SGMC_BLAS_THREADS`` set to the core count, the BLAS
  libraries' default, to show whether the limit pays.

CPU time is reported beside wall time: on a machine shared with other work the wall time grows with
the load, the CPU time much less.

The table goes to ``docs/results/cli_time.json``, which README.md renders.

Usage (from the repository root)::

    python asv_benchmarks/cli_time.py              # sgmc run, 3 rounds
    python asv_benchmarks/cli_time.py --quick      # sgmc run --quick
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from docs._results import write_results  # noqa: E402  (imported first: it records the load at start)
from _pinning import ONE_THREAD_ENV  # noqa: E402
from sgmc.cli import BLAS_THREAD_VARS  # noqa: E402


def run_once(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of ``cmd``; raise if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        msg = f"{' '.join(cmd)} exited with status {proc.returncode}:\n{proc.stderr[-2000:]}"
        raise RuntimeError(msg)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--core", type=int, default=1, help="the core of the one-core runs (default 1)")
    ap.add_argument("--quick", action="store_true", help="time sgmc run --quick")
    ap.add_argument("--results", help="results file docs/results/NAME.json (default cli_time or cli_time_quick)")
    args = ap.parse_args()
    sgmc_cmd = shutil.which("sgmc")
    if sgmc_cmd is None:
        print("the sgmc command is not installed (pip install -e .)", file=sys.stderr)
        return 2
    base = [sgmc_cmd, "run"] + (["--quick"] if args.quick else [])
    taskset = shutil.which("taskset")
    # sgmc run limits BLAS to one thread itself (threadpoolctl); SGMC_BLAS_THREADS sets another count
    plain = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARS}
    configs = {"all cores, as typed (sgmc run's own one BLAS thread)": (base, plain),
               f"all cores, {os.cpu_count()} BLAS threads (SGMC_BLAS_THREADS={os.cpu_count()})":
               (base, dict(plain, SGMC_BLAS_THREADS=str(os.cpu_count())))}
    if taskset:
        configs[f"one core (taskset -c {args.core}), one BLAS thread"] = (
            [taskset, "-c", str(args.core), *base], dict(os.environ, **ONE_THREAD_ENV))
    times = {k: {"wall": [], "cpu": []} for k in configs}
    loads = []
    names = list(configs)
    for rep in range(args.reps):
        loads.append(os.getloadavg()[0])
        for k in (names if rep % 2 == 0 else names[::-1]):
            wall, cpu = run_once(*configs[k])
            times[k]["wall"].append(wall)
            times[k]["cpu"].append(cpu)
            print(f"{k}: {wall:.1f} s wall, {cpu:.1f} s CPU (load {loads[-1]:.1f})", flush=True)
    rows = [[" ".join(["sgmc", *base[1:]]), k, statistics.median(v["wall"]), statistics.median(v["cpu"]),
             f"{min(loads):.1f}-{max(loads):.1f}"] for k, v in times.items()]
    name = args.results or ("cli_time_quick" if args.quick else "cli_time")
    if name != "none":
        table = {"columns": ["command", "how", "wall s (median)", "CPU s (median)", "load average"],
                 "rows": rows, "formats": [None, None, ".1f", ".1f", None],
                 "notes": f"Medians of {args.reps} runs of each, alternating."}
        print("wrote", write_results(name, {"time": table}, extra={"times": times, "loads": loads}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
