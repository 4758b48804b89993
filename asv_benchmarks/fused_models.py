"""CPU time per iteration of the fused blocks for the Bayesian neural network and BPMF, against the loop.

For each model, sampler and gradient estimator, ``sgmc.sample`` runs three ways in one process, the
order alternating between repetitions (A, B, C, then C, B, A, ...) so that machine noise falls on all
alike:

* ``fused``: the blocks of iterations on the compiled native (``"bnn_fused_block"`` or
  ``"bpmf_fused_block"``, :mod:`sgmc.samplers._fused`);
* ``declined``: the same blocks with the native declining (``NotImplemented``), so each block runs
  the twin: the samplers' own ``step`` on the pre-drawn numbers, with the per-step natives on
  (what runs wherever the fused block declines);
* ``loop``: one ``step`` per iteration drawing from the generator (no blocks), the per-step natives on
  (the library before the fused blocks).

The time per iteration is ``(T(n_iter) - T(1)) / (n_iter - 1)`` of the process's CPU time, medians
over the repetitions, so the set-up (the control variate's full gradient at the centre, SVRG's first
snapshot) is not counted. Everything runs on one core (``--cores``, default core 0) with one thread
for BLAS and Numba, checked before and after timing. Sizes: the review's MNIST network
784-100-10 (dim 79,514) with minibatches of n = 500 (and n = 50) on N = 10,000 synthetic inputs (N only
sets the cost of SVRG's refresh, once per N / n iterations), and BPMF at the MovieLens-100k size (943 users,
1,682 items, d = 20, dim 52,580, 80,000 training ratings) with n = 800, 2,500 and 8,000 (the
experiment's 10%), one chain each. Where a fused block declines at a size (``BPMF_MAX_TOUCH`` in
:mod:`sgmc.backends._numba_fused_models`), its ``fused`` column times the declined blocks; the rows
marked "no limit" time the compiled block there with the limit lifted. The table goes to ``docs/results/fused_models.json``, which
docs/performance.md renders.

Usage (from the repository root)::

    python asv_benchmarks/fused_models.py
    python asv_benchmarks/fused_models.py --models bpmf --reps 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pinning import Clock, cores_arg, load, pin, verify  # noqa: E402

if __name__ == "__main__":
    CORES = pin(cores_arg(default="0"))  # before NumPy and Numba start their threads

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported before measuring: it records the load at start)

import numpy as np  # noqa: E402

import sgmc  # noqa: E402
from sgmc.backends import _numba_fused_models  # noqa: E402
from sgmc.estimators import SVRG, ControlVariate, Minibatch  # noqa: E402
from sgmc.models import BPMF, BayesianNeuralNetwork  # noqa: E402
from sgmc.samplers import SGHMC, SGLD, SGNHT, _fused  # noqa: E402

LOADS: list = []


def bnn_model(n_data: int = 10_000, seed: int = 0):
    r = np.random.default_rng(seed)
    X = r.random((n_data, 784))
    y = r.integers(0, 10, n_data)
    return BayesianNeuralNetwork(X, y, n_hidden=100, n_classes=10)


def bpmf_model(seed: int = 0):
    r = np.random.default_rng(seed)
    n = 80_000
    return BPMF(r.integers(0, 943, n), r.integers(0, 1682, n), r.integers(1, 6, n).astype(float), 943, 1682, d=20,
                centre=True)


def _cases(model_name: str) -> list:
    """(model label, model, batch, method label, sampler, estimator factory, step size, iterations)."""
    if model_name == "bnn":
        m = bnn_model()
        sizes = [(500, 16), (50, 60)]
        h = 1e-6
    else:
        m = bpmf_model()
        sizes = [(800, 300), (2500, 120), (8000, 60)]
        h = 1e-6
    centre = np.random.default_rng(1).normal(scale=0.01, size=m.dim)
    label = ("BNN 784-100-10" if model_name == "bnn" else "BPMF 943x1682, d=20")
    out = []
    for n, iters in sizes:
        out += [
            (label, m, n, "SGLD", SGLD(), lambda m, n: Minibatch(m, n, replace=True), h, iters),
            (label, m, n, "SGLD-CV", SGLD(), lambda m, n: ControlVariate(m, n, centre=centre, replace=True), h,
             iters),
            (label, m, n, "SGLD-SVRG", SGLD(), lambda m, n: SVRG(m, n, replace=True), h,
             max(iters, 2 * -(-m.n_data // n))),  # at least two snapshot refreshes
            (label, m, n, "SGHMC (L=5)", SGHMC(n_leapfrog=5), lambda m, n: Minibatch(m, n, replace=True), h,
             max(4, iters // 5)),
            (label, m, n, "SGNHT", SGNHT(), lambda m, n: Minibatch(m, n, replace=True), h, iters),
        ]
    if model_name == "bpmf":  # above the size limit, with the limit lifted: why the block declines there
        out += [(label, m, 8000, f"{c[3]}, no limit", c[4], c[5], h, c[7]) for c in out
                if c[2] == 8000 and c[3] in ("SGLD", "SGLD-CV", "SGNHT")]
    return out


def _run(model, sampler, est, h, n_iter, how):
    """CPU seconds of one ``sample`` call run ``how`` ("fused", "declined" or "loop")."""
    init = np.random.default_rng(2).normal(scale=0.01, size=(1, model.dim))
    kw = dict(step_size=h, n_iter=n_iter, chains=1, rng=3, progress=False, init=init, thin=max(1, n_iter // 4))
    saved_plan, saved_run = sgmc.chains.fused_plan, _fused.FusedPlan.run
    try:
        if how == "loop":
            sgmc.chains.fused_plan = lambda *a: None
        elif how == "declined":
            def run(self, state, hs, z, idx, keep_grads=False):
                return _fused.twin_block(self.sampler, self.estimator, state, hs, z, idx, keep_grads)

            _fused.FusedPlan.run = run
        with Clock() as c:
            sgmc.sample(model, sampler, est, **kw)
    finally:
        sgmc.chains.fused_plan, _fused.FusedPlan.run = saved_plan, saved_run
    return c.cpu


def measure(case, reps: int) -> dict:
    label, model, n, method, sampler, make, h, iters = case
    limit = _numba_fused_models.BPMF_MAX_TOUCH
    if method.endswith("no limit"):
        _numba_fused_models.BPMF_MAX_TOUCH = float("inf")
    try:
        return _measure(model, n, sampler, make, h, iters, reps)
    finally:
        _numba_fused_models.BPMF_MAX_TOUCH = limit


def _measure(model, n, sampler, make, h, iters, reps):
    est = make(model, n)
    assert _fused.plan(sampler, est, np.zeros((1, model.dim))) is not None, "no fused plan for the case"
    names = ["fused", "declined", "loop"]
    for how in names:  # warm-up: compile, load, fill caches
        _run(model, sampler, est, h, 2, how)
    per = {k: [] for k in names}
    for rep in range(reps):
        LOADS.append(load())
        for how in (names if rep % 2 == 0 else names[::-1]):
            t1 = _run(model, sampler, est, h, 1, how)
            tk = _run(model, sampler, est, h, iters + 1, how)
            per[how].append((tk - t1) / iters)
    return {k: statistics.median(v) for k, v in per.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["bnn", "bpmf"], choices=["bnn", "bpmf"])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--cores", default="0", help="cores to run on (default: core 0)")
    p.add_argument("--results", default="fused_models", help="name of the results file under docs/results/")
    args = p.parse_args(argv)
    extra = {"threads": verify(CORES), "reps": args.reps}
    rows = []
    for name in args.models:
        for case in _cases(name):
            t = measure(case, args.reps)
            label, _, n, method = case[:4]
            row = [label, n, method, round(1e3 * t["fused"], 3), round(1e3 * t["declined"], 3),
                   round(1e3 * t["loop"], 3), round(t["loop"] / t["fused"], 2)]
            print(row, flush=True)
            rows.append(row)
    extra["threads_after"] = verify(CORES)
    extra["loads"] = LOADS
    tables = {"fused_models": {
        "columns": ["model", "n", "method", "fused ms/iter", "declined ms/iter", "loop ms/iter", "loop / fused"],
        "rows": rows,
        "notes": ("CPU time per iteration, one chain, one core, one BLAS thread; medians of "
                  f"{args.reps} alternating repetitions. 'declined': the blocks on the twin (the samplers' "
                  "step on the pre-drawn numbers, per-step natives on); 'loop': one step per iteration."),
    }}
    print("wrote", write_results(args.results, tables, extra=extra))


if __name__ == "__main__":
    main()
