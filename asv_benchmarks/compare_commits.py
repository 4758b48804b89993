"""Time two source trees of sgmc against each other in one interleaved run.

The script answers one question: is the ``new`` tree slower than the ``base`` tree on the
workloads below? Both trees are timed by the same harness (this file), each in fresh Python
processes that import ``sgmc`` from that tree alone (``PYTHONPATH=<tree>``), so a comparison needs
no second virtual environment and no install step. A typical ``base`` is a detached worktree of the
last commit::

    git worktree add --detach /tmp/sgmc_base HEAD

Usage (from the repository root, with the project's virtual environment active)::

    python asv_benchmarks/compare_commits.py --base /tmp/sgmc_base --new .
    python asv_benchmarks/compare_commits.py --base /tmp/sgmc_base --new . --rounds 8 --json c.json
    python asv_benchmarks/compare_commits.py --base /tmp/sgmc_base --new . --quick --rounds 2
    python asv_benchmarks/compare_commits.py --base /tmp/sgmc_base --new . --only sgld_d10_c32

Workloads
---------
All use the public API only (``sgmc.sample``, ``sgmc.models.LogisticRegression``,
``sgmc.diagnostics.ksd``), so any two trees sharing that API can be compared. The data are a
Bayesian logistic regression with N = 100 000 rows: ``X`` standard normal from
``numpy.random.default_rng(0)``, ``theta_true = normal(d) / sqrt(d)``, ``y`` Bernoulli with
probability ``sigmoid(X theta_true)``, stored as float64.

==================  ===========================================================  ==================
name                call                                                         unit
==================  ===========================================================  ==================
sgld_d10_c1         SGLD, "minibatch", n = 1000, h = 1e-5, d = 10, 2000 iter     us / iteration
sgld_d10_c32        as above, 32 chains, 300 iterations                          us / chain-iter.
sgld_d100_c1        d = 100, 1 chain, 1000 iterations                            us / iteration
sgld_d100_c32       d = 100, 32 chains, 100 iterations                           us / chain-iter.
sgldcv_d10_c1       SGLD, "cv" centred at ``theta_true``, d = 10, 2000 iter      us / iteration
sgldcv_d100_c1      as above, d = 100, 1000 iterations                           us / iteration
ksd_n5000_d10       ``ksd(s, -s)`` for 5000 x 10 standard normal ``s``           seconds
==================  ===========================================================  ==================

Every ``sgmc.sample`` call passes ``rng=0`` and ``progress=False``, so each repeat does identical
work. The control-variate centre is fixed (``theta_true``), so no mode search is timed; the one
full-data gradient at the centre is. ``--quick`` divides every iteration count by 5 and uses 2000
points for the KSD.

Method
------
For every round and every workload the parent starts one worker process per tree, with
``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` (and the other common BLAS thread
variables) set to 1. The order of the two trees flips from round to round (base, new; then new,
base; ...), so a slow drift of the machine does not favour either side; an even ``--rounds``
balances it exactly. A worker imports ``sgmc``, checks that it came from its tree, builds the data
once, makes one untimed warm-up call with the same arguments, then times ``--repeats`` calls with
``time.perf_counter`` (``--clock cpu``: its CPU time) and reports the fastest as one JSON line.
Before the rounds start, each tree is imported once and its ``sgmc.__file__`` printed; the script
stops if the package does not come from inside the tree given, and any worker that fails stops the
run with that worker's output.

Defaults: 5 rounds, 3 timed repeats per worker. Each worker pays a process start, the data
generation and the warm-up call once, then makes the timed calls; on a 2-core machine the whole
default run (70 workers) took about 3 minutes, which leaves room inside a 6-minute budget for a
busier machine. The repeats only smooth noise within one process, a second or so of calls; a slow
spell of the machine (see "Busy machines") lasts longer, so when a workload is borderline add rounds
rather than repeats (``--rounds 10`` takes about 6 minutes). ``--quick`` takes about 12 s per round.

Reading the output
------------------
For each workload the table gives the median over rounds of the per-worker best times for
``base`` and ``new``, the ratio ``new / base`` of those medians, the smallest and largest of the
per-round ratios (each round's ``new`` over the same round's ``base``), and ``best/best``, the
fastest ``new`` round over the fastest ``base`` round. A ratio below 1 means ``new`` is faster.

Comparing a tree with itself shows the noise floor. On a 2-core virtual machine the same-tree
ratios of the medians fell within about 5 per cent of 1 for all workloads but ``sgld_d10_c32``
(0.92), and single rounds strayed by up to 10 per cent. A change is "no slower" on a workload when
its ratios are within that noise: the per-round range straddles 1 or lies below it, and the ratio
and ``best/best`` are not both clearly above 1. A ratio of, say, 1.10 with every per-round ratio
above 1.05 is a real slowdown. ``--json PATH`` writes the table plus every per-round time.

Busy machines
-------------
Anything else running on the machine (a test suite, a build) takes cores from the workers and
can slow single rounds by a factor of 2 or more, for ``base`` and ``new`` alike but not at the same
moments. Each worker therefore also records its CPU time (``time.process_time``); when the best
repeat's wall time exceeds its CPU time by more than 10 per cent the worker had to wait for a core,
and the script lists such workers under the table. Then rerun on an idle machine, or pass
``--clock cpu`` to rank repeats and report figures by CPU time, which leaves out the waiting (but
not the cache and memory-bandwidth contention that a busy neighbour also causes). Apart from
that, ``best/best`` is the figure least affected by a slow round, and more ``--rounds`` steady the
medians.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

N_DATA = 100_000
BATCH = 1_000
STEP_SIZE = 1e-5
QUICK_FACTOR = 5
THREAD_VARS = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
WORKER_TIMEOUT_S = 900
BUSY_FACTOR = 1.10  # wall / CPU time above which a worker is reported as having waited for a core


@dataclass(frozen=True)
class Workload:
    """One timed call: an ``sgmc.sample`` run or a KSD evaluation.

    Attributes
    ----------
    name : str
        Identifier used on the command line and in the table.
    kind : {"sample", "ksd"}
        Which public function is timed.
    dim : int
        Parameter dimension (``sample``) or sample dimension (``ksd``).
    chains : int
        Chains for ``sample``; ignored for ``ksd``.
    size : int
        Iterations for ``sample``, number of points for ``ksd`` (full-length run).
    estimator : str
        Gradient estimator given to ``sgmc.sample``.
    """

    name: str
    kind: str
    dim: int
    chains: int
    size: int
    estimator: str = "minibatch"

    def scaled_size(self, quick: bool) -> int:
        """Iterations (or KSD points) for this run: reduced under ``--quick``."""
        if not quick:
            return self.size
        if self.kind == "ksd":
            return 2_000
        return max(1, self.size // QUICK_FACTOR)

    def unit(self) -> str:
        """The unit the table reports this workload in."""
        if self.kind == "ksd":
            return "s"
        return "us/iter" if self.chains == 1 else "us/chain-iter"

    def per_unit(self, seconds: float, quick: bool) -> float:
        """Convert one call's wall time to the reported unit."""
        if self.kind == "ksd":
            return seconds
        return seconds / (self.scaled_size(quick) * self.chains) * 1e6


WORKLOADS = {
    w.name: w
    for w in (
        Workload("sgld_d10_c1", "sample", 10, 1, 2000),
        Workload("sgld_d10_c32", "sample", 10, 32, 300),
        Workload("sgld_d100_c1", "sample", 100, 1, 1000),
        Workload("sgld_d100_c32", "sample", 100, 32, 100),
        Workload("sgldcv_d10_c1", "sample", 10, 1, 2000, estimator="cv"),
        Workload("sgldcv_d100_c1", "sample", 100, 1, 1000, estimator="cv"),
        Workload("ksd_n5000_d10", "ksd", 10, 1, 5000),
    )
}


# -- worker side: runs in a child process, with PYTHONPATH pointing at one tree --------------------
def _inside(path: str, tree: str) -> bool:
    """Whether ``path`` lies inside the directory ``tree`` (after resolving links)."""
    path, tree = os.path.realpath(path), os.path.realpath(tree)
    return os.path.commonpath([path, tree]) == tree


def _import_sgmc(tree: str):
    """Import ``sgmc`` and stop unless it was loaded from ``tree``."""
    import sgmc

    if not _inside(sgmc.__file__, tree):
        msg = f"sgmc was imported from {sgmc.__file__}, not from the tree {tree}"
        raise SystemExit(msg)
    return sgmc


def _logistic_data(dim: int, n_data: int = N_DATA):
    """The benchmark's logistic-regression data set and its true parameter (seed 0)."""
    import numpy as np

    rng = np.random.default_rng(0)
    X = rng.standard_normal((n_data, dim))
    theta_true = rng.standard_normal(dim) / math.sqrt(dim)
    prob = 1.0 / (1.0 + np.exp(-(X @ theta_true)))
    y = (rng.random(n_data) < prob).astype(np.float64)
    return X, y, theta_true


def _make_call(workload: Workload, quick: bool, tree: str):
    """Build the inputs once and return a zero-argument function doing one timed call."""
    sgmc = _import_sgmc(tree)
    size = workload.scaled_size(quick)
    if workload.kind == "ksd":
        import numpy as np
        from sgmc.diagnostics import ksd

        samples = np.random.default_rng(0).standard_normal((size, workload.dim))
        scores = -samples
        return lambda: ksd(samples, scores)

    from sgmc.models import LogisticRegression

    X, y, theta_true = _logistic_data(workload.dim)
    model = LogisticRegression(X, y)
    options = {"centre": theta_true} if workload.estimator == "cv" else None

    def call():
        return sgmc.sample(
            model,
            "sgld",
            workload.estimator,
            step_size=STEP_SIZE,
            batch_size=BATCH,
            n_iter=size,
            chains=workload.chains,
            rng=0,
            progress=False,
            estimator_options=options,
        )

    return call


def run_worker(name: str, tree: str, quick: bool, repeats: int, clock: str) -> None:
    """Time one workload in this process and print the result as one JSON line on stdout.

    Each repeat records both the wall time (``time.perf_counter``) and this process's CPU time
    (``time.process_time``); ``best`` is the fastest repeat on ``clock``. With single-threaded BLAS
    the two agree unless the process had to wait for a core.
    """
    import gc

    workload = WORKLOADS[name]
    call = _make_call(workload, quick, tree)
    call()  # warm-up: imports, first-touch allocations, caches
    wall, cpu = [], []
    for _ in range(repeats):
        gc.collect()
        c0, w0 = time.process_time(), time.perf_counter()
        call()
        w1, c1 = time.perf_counter(), time.process_time()
        wall.append(w1 - w0)
        cpu.append(c1 - c0)
    import sgmc

    times = wall if clock == "wall" else cpu
    k = min(range(repeats), key=times.__getitem__)
    record = {
        "workload": name,
        "sgmc_file": sgmc.__file__,
        "wall": wall,
        "cpu": cpu,
        "best": times[k],
        "wall_over_cpu": wall[k] / cpu[k] if cpu[k] > 0 else float("nan"),
    }
    print(json.dumps(record), flush=True)


# -- parent side -----------------------------------------------------------------------------------
def child_env(tree: str) -> dict[str, str]:
    """Environment for a worker: single-threaded BLAS and only ``tree`` on ``PYTHONPATH``."""
    env = dict(os.environ)
    for var in THREAD_VARS:
        env[var] = "1"
    env["PYTHONPATH"] = tree
    env["PYTHONSAFEPATH"] = "1"  # keep the working directory and script folder off sys.path
    env.pop("PYTHONHOME", None)
    env.pop("PYTHONSTARTUP", None)
    return env


def _run_child(args: list[str], tree: str, what: str) -> str:
    """Run ``python <args>`` for ``tree`` from a neutral directory; return stdout or stop loudly."""
    try:
        proc = subprocess.run(
            [sys.executable, *args],
            env=child_env(tree),
            cwd=tempfile.gettempdir(),
            capture_output=True,
            text=True,
            timeout=WORKER_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        msg = f"{what} for {tree} timed out after {WORKER_TIMEOUT_S} s"
        raise SystemExit(msg) from exc
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:])
        sys.stderr.write(proc.stderr[-4000:])
        msg = f"{what} failed for {tree} (exit status {proc.returncode}); its output is above"
        raise SystemExit(msg)
    return proc.stdout


def check_tree(tree: str) -> str:
    """Import ``sgmc`` from ``tree`` in a child process; return its ``__file__`` or stop."""
    if not os.path.isfile(os.path.join(tree, "sgmc", "__init__.py")):
        msg = f"{tree} has no sgmc/__init__.py: not an sgmc source tree"
        raise SystemExit(msg)
    code = "import sgmc, sgmc.diagnostics, sgmc.models; print(sgmc.__file__)"
    out = _run_child(["-c", code], tree, "importing sgmc")
    path = out.strip().splitlines()[-1]
    if not _inside(path, tree):
        msg = f"PYTHONPATH={tree} imported sgmc from {path}, outside the tree; refusing to compare"
        raise SystemExit(msg)
    return path


def tree_revision(tree: str) -> str:
    """Short commit of ``tree`` plus ``+dirty`` when its sgmc/ has uncommitted changes, or ``?``."""

    def git(*args: str) -> str:
        proc = subprocess.run(
            ["git", "-C", tree, *args], capture_output=True, text=True, check=False
        )
        return proc.stdout.strip() if proc.returncode == 0 else ""

    rev = git("rev-parse", "--short", "HEAD")
    if not rev:
        return "?"
    dirty = git("status", "--porcelain", "--", "sgmc")
    return rev + ("+dirty" if dirty else "")


def time_in_child(name: str, tree: str, quick: bool, repeats: int, clock: str) -> dict:
    """One worker process timing ``name`` on ``tree``; returns its JSON record."""
    args = [os.path.abspath(__file__), "--worker", name, "--tree", tree]
    args += ["--repeats", str(repeats), "--clock", clock]
    if quick:
        args.append("--quick")
    out = _run_child(args, tree, f"workload {name}")
    record = json.loads(out.strip().splitlines()[-1])
    if not _inside(record["sgmc_file"], tree):
        msg = f"worker for {tree} imported sgmc from {record['sgmc_file']}"
        raise SystemExit(msg)
    return record


def summarise(name: str, base: list[float], new: list[float], quick: bool) -> dict:
    """Medians, ratio of medians and per-round ratio range for one workload."""
    w = WORKLOADS[name]
    base_u = [w.per_unit(t, quick) for t in base]
    new_u = [w.per_unit(t, quick) for t in new]
    ratios = [n / b for n, b in zip(new, base)]
    base_med, new_med = statistics.median(base_u), statistics.median(new_u)
    return {
        "workload": name,
        "unit": w.unit(),
        "base_median": base_med,
        "new_median": new_med,
        "ratio": new_med / base_med,
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "best_ratio": min(new) / min(base),
        "base_rounds": base_u,
        "new_rounds": new_u,
        "round_ratios": ratios,
    }


def format_table(rows: list[dict]) -> str:
    """The summary as a fixed-width text table."""
    head = ("workload", "unit", "base", "new", "new/base", "round min", "round max", "best/best")
    lines = ["{:<16} {:<14} {:>10} {:>10} {:>9} {:>10} {:>10} {:>10}".format(*head)]
    lines.append("-" * len(lines[0]))
    for r in rows:
        fmt = "{:10.4f}" if r["unit"] == "s" else "{:10.1f}"
        lines.append(
            "{:<16} {:<14} {} {} {:9.3f} {:10.3f} {:10.3f} {:10.3f}".format(
                r["workload"],
                r["unit"],
                fmt.format(r["base_median"]),
                fmt.format(r["new_median"]),
                r["ratio"],
                r["ratio_min"],
                r["ratio_max"],
                r["best_ratio"],
            )
        )
    return "\n".join(lines)


def compare(args: argparse.Namespace) -> int:
    """Check both trees, run the interleaved rounds, print the table and write the JSON."""
    start = time.perf_counter()
    trees = {"base": os.path.realpath(args.base), "new": os.path.realpath(args.new)}
    info = {}
    for label, tree in trees.items():
        path = check_tree(tree)
        info[label] = {"tree": tree, "sgmc_file": path, "revision": tree_revision(tree)}
        print(f"{label:>4}: {path}  [{info[label]['revision']}]", flush=True)
    names = args.only or list(WORKLOADS)
    times: dict[str, dict[str, list[float]]] = {n: {"base": [], "new": []} for n in names}
    raw: dict[str, dict[str, list[dict]]] = {n: {"base": [], "new": []} for n in names}
    waited = []  # workers whose best repeat spent over BUSY_FACTOR of its CPU time waiting
    for rnd in range(args.rounds):
        order = ("base", "new") if rnd % 2 == 0 else ("new", "base")
        for name in names:
            for label in order:
                rec = time_in_child(name, trees[label], args.quick, args.repeats, args.clock)
                times[name][label].append(rec["best"])
                raw[name][label].append({k: rec[k] for k in ("wall", "cpu", "wall_over_cpu")})
                if rec["wall_over_cpu"] > BUSY_FACTOR:
                    ratio = rec["wall_over_cpu"]
                    waited.append(f"{name} ({label}, round {rnd + 1}: x{ratio:.2f})")
            b, n = times[name]["base"][-1], times[name]["new"][-1]
            print(
                f"round {rnd + 1}/{args.rounds} {'-'.join(order):<8} {name:<16} "
                f"base {b:8.4f} s  new {n:8.4f} s  ratio {n / b:6.3f}",
                file=sys.stderr,
                flush=True,
            )
    rows = [summarise(n, times[n]["base"], times[n]["new"], args.quick) for n in names]
    wall = time.perf_counter() - start
    print()
    print(format_table(rows))
    print(
        f"\n{args.rounds} rounds, best of {args.repeats} per worker"
        f"{', --quick' if args.quick else ''}; clock {args.clock}; wall time {wall:.0f} s"
    )
    if waited:
        total = len(names) * 2 * args.rounds
        advice = (
            "Rerun on an idle machine or with --clock cpu."
            if args.clock == "wall"
            else "CPU times leave the waiting out, but not the cache contention; rerun when idle."
        )
        print(
            f"warning: {len(waited)} of {total} workers waited for a core (best repeat's wall time"
            f" over {BUSY_FACTOR:.2f} x its CPU time): other processes were competing. "
            + advice
            + " Affected: "
            + "; ".join(waited[:6])
            + (f"; and {len(waited) - 6} more (all in --json)" if len(waited) > 6 else "")
        )
    if args.json:
        payload = {
            "trees": info,
            "rounds": args.rounds,
            "repeats": args.repeats,
            "quick": args.quick,
            "clock": args.clock,
            "busy_workers": waited,
            "python": sys.version,
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "wall_s": wall,
            "results": rows,
            "workers": raw,
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2)
        print(f"wrote {args.json}")
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--base", help="source tree whose sgmc/ is the reference")
    p.add_argument("--new", help="source tree whose sgmc/ is compared with the reference")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per worker (default 3)")
    p.add_argument("--quick", action="store_true", help="iterations / 5 and 2000 KSD points")
    p.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="time.perf_counter (default) or the worker's CPU time, steadier on a shared machine",
    )
    p.add_argument(
        "--only",
        nargs="+",
        choices=list(WORKLOADS),
        metavar="NAME",
        help="run these workloads only: " + ", ".join(WORKLOADS),
    )
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--worker", choices=list(WORKLOADS), help=argparse.SUPPRESS)
    p.add_argument("--tree", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rounds < 1 or args.repeats < 1:
        p.error("--rounds and --repeats must be at least 1")
    if args.worker is None and (args.base is None or args.new is None):
        p.error("--base and --new are required")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker is not None:
        run_worker(args.worker, args.tree, args.quick, args.repeats, args.clock)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
