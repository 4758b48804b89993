"""Peak memory of SGLD at N = 100,000, d = 100: sgmc against a hand-written NumPy loop.

Every case runs in a fresh Python process that simulates the same data (X: N x d standard normal
float64, 76.3 MiB; y: N labels, 0.8 MiB), runs SGLD for ``--iters`` iterations with minibatches of
1000 and reports its own peak resident set, the kernel's high-water mark ``VmHWM`` from
``/proc/self/status`` (``getrusage``'s ``ru_maxrss`` would also count the parent's pages from before
``exec``), and whether Numba was loaded. The cases:

* ``hand NumPy loop``: logistic regression, the minibatch gradient and the SGLD update written with
  NumPy only, the draws kept in a preallocated (iters, d) array (the floor any library pays);
* ``sgmc, logistic regression, natives off``: ``sgmc.sample(LogisticRegression(X, y), "sgld",
  "minibatch")`` with ``SGMC_NATIVE=0``, the NumPy path;
* ``sgmc, Gaussian mean, natives on``: ``sgmc.sample(Gaussian(X), "sgld", "minibatch")``, a model
  without a compiled kernel, with the default settings;
* ``sgmc, logistic regression, natives on``: the default run, whose GLM gradient runs in compiled
  blocks (Numba is loaded, and its runtime's 110-130 MiB come with it: docs/performance.md).

The table gives the median of ``--reps`` processes per case, the data's size, the peak over the data,
and whether the peak is within the data plus 120 MiB. It goes to ``docs/results/peak_memory.json``,
which docs/performance.md renders.

Usage (from the repository root)::

    python docs/peak_memory.py [--reps 3] [--iters 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from docs._results import write_results  # noqa: E402  (records the load at start)

N, D, BATCH = 100_000, 100, 1000
BUDGET_MIB = 120.0

_COMMON = """
import json, sys
import numpy as np

def peak_mib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024

N, D, BATCH, ITERS = {n}, {d}, {batch}, {iters}
r = np.random.default_rng(0)
X = r.standard_normal((N, D))
y = (r.random(N) < 1.0 / (1.0 + np.exp(-(X @ (r.standard_normal(D) / np.sqrt(D)))))).astype(np.float64)
data_mib = (X.nbytes + y.nbytes) / 2**20
"""

_HAND = """
theta = np.zeros(D)
draws = np.empty((ITERS, D))
h = 1e-5
for t in range(ITERS):
    idx = r.choice(N, BATCH, replace=False)
    xb = X[idx]
    p = 1.0 / (1.0 + np.exp(-(xb @ theta)))
    grad = (N / BATCH) * (xb.T @ (y[idx] - p)) - theta / 10.0
    theta = theta + 0.5 * h * grad + np.sqrt(h) * r.standard_normal(D)
    draws[t] = theta
assert np.all(np.isfinite(draws))
"""

_SGMC = """
import sgmc
from sgmc.models import Gaussian, LogisticRegression
model = Gaussian(X) if {gaussian} else LogisticRegression(X, y)
trace = sgmc.sample(model, "sgld", "minibatch", step_size=1e-5, batch_size=BATCH, n_iter=ITERS, chains=1, rng=1,
                    progress=False)
assert np.all(np.isfinite(trace.draws))
"""

_END = """
print(json.dumps({"peak": peak_mib(), "data": data_mib, "numba": "numba" in sys.modules}))
"""

CASES = [
    ("hand NumPy loop, logistic regression", _HAND, "0"),
    ("sgmc, logistic regression, natives off (SGMC_NATIVE=0)", _SGMC.format(gaussian=False), "0"),
    ("sgmc, Gaussian mean, natives on", _SGMC.format(gaussian=True), "1"),
    ("sgmc, logistic regression, natives on (compiled GLM blocks)", _SGMC.format(gaussian=False), "1"),
]


def _run(body: str, native: str, iters: int) -> dict:
    code = _COMMON.format(n=N, d=D, batch=BATCH, iters=iters) + body + _END
    env = dict(os.environ, SGMC_NATIVE=native, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode != 0:
        msg = f"the measuring process failed (exit {out.returncode}):\n{out.stderr[-2000:]}"
        raise RuntimeError(msg)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="fresh processes per case (the median is reported)")
    parser.add_argument("--iters", type=int, default=1000, help="SGLD iterations per run")
    args = parser.parse_args(argv)
    if args.reps < 1 or args.iters < 1:
        msg = f"--reps and --iters must be positive; got {args.reps} and {args.iters}"
        raise SystemExit(msg)
    if not os.path.exists("/proc/self/status"):
        raise SystemExit("this script reads the peak resident set (VmHWM) from /proc/self/status (Linux)")
    found = {name: [] for name, _, _ in CASES}
    for _ in range(args.reps):  # the cases alternate, so that a change in load touches each alike
        for name, body, native in CASES:
            found[name].append(_run(body, native, args.iters))
    rows = []
    for name, _, native in CASES:
        got = found[name]
        peak = statistics.median(g["peak"] for g in got)
        data = got[0]["data"]
        loaded = sorted({g["numba"] for g in got})
        rows.append([name, round(peak, 1), round(data, 1), round(peak - data, 1),
                     "yes" if loaded == [True] else ("no" if loaded == [False] else "varied"),
                     "yes" if peak <= data + BUDGET_MIB else "no"])
        print(f"{name:62s} peak {peak:7.1f} MiB  over data {peak - data:6.1f} MiB  numba {loaded}", flush=True)
    tables = {
        "peak_rss": {
            "columns": ["process", "peak RSS, MiB", "data, MiB", "over the data, MiB", "Numba loaded",
                        f"within data + {BUDGET_MIB:.0f} MiB"],
            "rows": rows,
            "notes": (f"SGLD, N = {N:,}, d = {D}, minibatches of {BATCH}, {args.iters} iterations, one chain; "
                     f"median of {args.reps} fresh processes per case (VmHWM), one BLAS thread."),
        }
    }
    write_results("peak_memory", tables, extra={"runs": found, "iters": args.iters, "reps": args.reps},
                  packages=("numba",))
    return tables


if __name__ == "__main__":
    main()
