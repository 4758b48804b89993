"""SGRLD with the complete-data Fisher metric against SGLD at the same time budget (Aicher 2020, 3.5).

Both samplers use the same buffered gradient estimator (subsequences of length ``S`` with ``B``
buffer times on each side) on a scalar LGSSM (phi = 0.9, Q = 0.5, R = 1) and a 2-state Gaussian HMM
(Pi = [[0.95, 0.05], [0.1, 0.9]], mu = (-1, 1), sigma^2 = (0.5, 0.8)), each simulated with ``T``
observations, and start away from the truth. SGRLD uses the model's
:meth:`fisher_metric` (:mod:`sgmc.ssm.fisher`). Every sampler runs for the same wall-clock budget at each
step size of its grid (SGLD: ``h = 2 eps / T`` for eps in ``--eps``, the thesis's convention; SGRLD:
``h`` in ``--h``, on the metric's scale, where steps of order one are natural) and keeps the step with
the smallest kernel Stein discrepancy over the second half of its draws (IMQ kernel, scores = exact
gradients of the log posterior at the draws, Kalman / forward-backward over the whole series). The
table gives, at that step, the iterations run, log10 KSD, the smallest bulk ESS over the coordinates
per second of sampling, and the posterior means.

Run ``python docs/ssm_precond.py`` (``--T 1000000`` for the long series; ``--seconds`` sets the
budget per run). Results go to ``docs/results/ssm-precond.json``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported first: it records the load at start)

import numpy as np  # noqa: E402

import sgmc  # noqa: E402
from sgmc import backends  # noqa: E402
from sgmc.diagnostics import ess, ksd  # noqa: E402
from sgmc.ssm import LGSSM, GaussianHMM, HMMParams  # noqa: E402


def lgssm_problem(T, seed):
    theta = np.array([0.9, 1 / math.sqrt(0.5), 1.0])
    _, y = LGSSM.simulate_scalar(backends.default_rng(seed), T, theta)
    return LGSSM(np.asarray(y)), np.array([0.5, 1.0, 1.0])


def hmm_problem(T, seed):
    truth = HMMParams(np.array([[0.95, 0.05], [0.1, 0.9]]), np.array([[-1.0], [1.0]]), np.array([[[0.5]], [[0.8]]]))
    proto = GaussianHMM(np.zeros((T, 1)), 2)
    _, y = proto.simulate(backends.default_rng(seed), T, proto.unconstrain(truth))
    model = GaussianHMM(np.asarray(y), 2)
    init = np.asarray(model.unconstrain(HMMParams(np.array([[0.6, 0.4], [0.4, 0.6]]), np.array([[-0.5], [0.5]]),
                                                  np.array([[[1.0]], [[1.0]]]))))
    return model, init


def scores_at(model, draws):
    chunk = max(1, int(2e7 // model.T))
    return np.concatenate([np.asarray(model.grad_log_posterior(np.ascontiguousarray(draws[i : i + chunk])))
                           for i in range(0, draws.shape[0], chunk)])


def run_one(model, init, sampler, h, args):
    opts = dict(subsequence_length=args.S, buffer=args.B)
    common = dict(chains=args.chains, init=init, rng=args.seed, progress=False, estimator_options=opts)
    try:
        t0 = time.perf_counter()
        sgmc.sample(model, sampler, "buffered", step_size=h, n_iter=5, **common)
        per_iter = (time.perf_counter() - t0) / 5
        n_iter = int(min(args.max_iter, max(50, args.seconds / per_iter)))
        t0 = time.perf_counter()
        tr = sgmc.sample(model, sampler, "buffered", step_size=h, n_iter=n_iter, burn_in=n_iter // 2, **common)
    except (sgmc.DivergenceError, np.linalg.LinAlgError) as err:   # a step too large for the model
        return {"diverged": str(err).split("\n")[0]}
    wall = time.perf_counter() - t0
    draws = np.asarray(tr.draws)
    if not np.all(np.isfinite(draws)):
        return {"diverged": "non-finite draws"}
    kept = draws[:, :: max(1, draws.shape[1] // args.keep), :]
    flat = kept.reshape(-1, model.dim)
    sc = scores_at(model, flat)
    if not np.all(np.isfinite(sc)):
        return {"diverged": "non-finite scores"}
    return {"n_iter": n_iter, "wall": wall, "ksd": float(ksd(flat, sc)),
            "ess_s": float(np.min(np.asarray(ess(draws)))) / (wall / 2), "mean": flat.mean(axis=0)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--T", type=int, default=10_000)
    p.add_argument("--S", type=int, default=20)
    p.add_argument("--B", type=int, default=10)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--max-iter", type=int, default=20_000)
    p.add_argument("--keep", type=int, default=100, help="draws per chain kept for the KSD")
    p.add_argument("--eps", type=float, nargs="+", default=[1.0, 0.3, 0.1, 0.03, 0.01, 0.001], help="SGLD: h = 2 eps / T")
    p.add_argument("--h", type=float, nargs="+", default=[1.0, 0.3, 0.1, 0.03, 0.01, 0.001], help="SGRLD steps (metric scale)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results", default="ssm-precond")
    args = p.parse_args(argv)
    rows = []
    for name, make in (("LGSSM", lgssm_problem), ("Gaussian HMM", hmm_problem)):
        model, init = make(args.T, args.seed)
        for sampler, grid in (("sgld", [2 * e / args.T for e in args.eps]), ("sgrld", args.h)):
            best, tried = None, []
            for h in grid:
                r = run_one(model, init, sampler, h, args)
                tried.append(f"{h:.3g}" + (" (diverged)" if "diverged" in r else f": {math.log10(r['ksd']):.2f}"))
                if "diverged" not in r and (best is None or r["ksd"] < best[1]["ksd"]):
                    best = (h, r)
            print(f"{name} {sampler}: " + ", ".join(tried), flush=True)
            if best is None:
                rows.append([name, args.T, sampler, None, None, None, None, None, "all steps diverged", "; ".join(tried)])
                continue
            h, r = best
            rows.append([name, args.T, sampler.upper(), h, r["n_iter"], round(r["wall"], 1), round(math.log10(r["ksd"]), 3),
                         round(r["ess_s"], 2), np.array2string(r["mean"], precision=3, separator=", "), "; ".join(tried)])
    notes = (f"Buffered gradients S = {args.S}, B = {args.B}; {args.chains} chains; about {args.seconds:g} s per run; "
             "the step with the smallest KSD of each grid (h: log10 KSD for each step tried); "
             "min ESS/s = smallest bulk ESS over coordinates per second of the kept half.")
    table = {"columns": ["model", "T", "sampler", "h", "iterations", "time s", "log10 KSD", "min ESS/s",
                         "posterior mean", "grid (h: log10 KSD)"], "rows": rows, "notes": notes}
    tid = f"T{args.T}"
    path = write_results(args.results, {tid: table})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
