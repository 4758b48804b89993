"""Posterior sds at the step sizes that ``step_size="auto"`` and ``tune_step_size`` choose, against exact ones.

Four posteriors, each sampled by SGLD and SGHMC with minibatch ("minibatch", batches of N / 100) and
control-variate ("cv") gradients:

``linreg5``        conjugate linear regression, d = 5, N = 10^4, covariates N(0, I); exact Gaussian
                   posterior in closed form (``LinearRegression.posterior``).
``linreg50``       the same with d = 50.
``linreg10corr``   the same with d = 10, N = 2000 and the review's correlated covariates
                   (``covariate_covariance(10, 0.4)``): a posterior with unequal scales.
``logistic``       logistic regression, d = 10, N = 2 x 10^4 (``logistic_regression_data``, the review's
                   section 6.1 design); reference: self-normalised importance sampling from the Laplace
                   approximation (mode by SciPy's BFGS, its covariance scaled by 1.2^2; NumPy only, no
                   sgmc code), whose weights' effective sample size is recorded.

For each cell, ``auto`` is one ``sgmc.sample(..., step_size="auto")`` run with its default burn-in
(half the iterations); ``tuned`` runs :func:`sgmc.tuning.tune_step_size` with its defaults (default grid,
pilots of 2000 iterations, up to 3 pilots past an edge) and then the same run at its choice (half
burn-in). Every run has ``--chains`` chains and ``--iters`` iterations (``--iters-sghmc`` for SGHMC,
whose iterations cost 5 gradients; both times ``--logistic-factor`` for the logistic regression). The sd ratio is the pooled sample sd over the exact one per
coordinate (smallest and largest shown), its Monte Carlo error the standard error of the per-chain
sds' mean (chains as replicates; largest over coordinates). The warnings each run raised are listed.

Usage (from the repository root)::

    taskset -c 1 python docs/step_size_study.py     # writes docs/results/step_size_study.json
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported first: it records the load at start)

import numpy as np  # noqa: E402
from scipy.optimize import minimize  # noqa: E402

import sgmc  # noqa: E402
from sgmc._stepbias import StepSizeBiasWarning  # noqa: E402
from sgmc.datasets import covariate_covariance, logistic_regression_data  # noqa: E402
from sgmc.diagnostics.mixing import MixingWarning  # noqa: E402
from sgmc.diagnostics.runaway import RunawayChainWarning  # noqa: E402
from sgmc.models import LinearRegression, LogisticRegression  # noqa: E402
from sgmc.tuning import StepSizeEdgeWarning, tune_step_size  # noqa: E402

FLAGS = {StepSizeBiasWarning: "bias", StepSizeEdgeWarning: "edge", MixingWarning: "not mixed",
         RunawayChainWarning: "runaway"}


def linreg(n, d, seed, cov_x=None):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if cov_x is not None:
        X = X @ np.linalg.cholesky(cov_x).T
    model = LinearRegression(X, X @ rng.normal(size=d) + rng.normal(size=n))
    _, cov = model.posterior()
    return model, np.sqrt(np.diag(np.asarray(cov))), {"reference": "closed form"}


def logistic(draws, seed):
    data = logistic_regression_data(n=20_000, dim=10, n_test=10, rng=seed)
    X, y = data.X, data.y
    model = LogisticRegression(X, y)          # prior N(0, 10 I)

    def neg_log_post(t):
        eta = X @ t
        return -(y @ eta - np.logaddexp(0.0, eta).sum()) + t @ t / 20.0, -(X.T @ (y - 1 / (1 + np.exp(-eta)))) + t / 10.0

    mode = minimize(neg_log_post, np.zeros(10), jac=True, method="BFGS", options={"gtol": 1e-8}).x
    p = 1 / (1 + np.exp(-X @ mode))
    cov = np.linalg.inv((X * (p * (1 - p))[:, None]).T @ X + np.eye(10) / 10.0) * 1.2 ** 2
    rng = np.random.default_rng(seed + 1)
    L = np.linalg.cholesky(cov)
    z = rng.normal(size=(draws, 10))
    theta = mode + z @ L.T
    logq = -0.5 * np.sum(z * z, axis=1)
    logp = np.empty(draws)
    for a in range(0, draws, 1000):
        t = theta[a:a + 1000]
        eta = t @ X.T
        logp[a:a + 1000] = (eta * y).sum(1) - np.logaddexp(0.0, eta).sum(1) - (t * t).sum(1) / 20.0
    w = np.exp(logp - logq - np.max(logp - logq))
    w /= w.sum()
    mean = w @ theta
    sd = np.sqrt(w @ (theta - mean) ** 2)
    ess = 1.0 / np.sum(w * w)
    print(f"logistic reference: importance sampling ESS {ess:.0f} of {draws}", flush=True)
    return model, sd, {"reference": "importance sampling from the Laplace approximation", "is_ess": ess,
                       "is_draws": draws}


def _ratios(trace, sd):
    draws = np.asarray(trace.draws)
    ratio = draws.reshape(-1, draws.shape[-1]).std(axis=0) / sd
    per_chain = draws.std(axis=1) / sd
    se = per_chain.std(axis=0, ddof=1) / math.sqrt(draws.shape[0])
    return float(ratio.min()), float(ratio.max()), float(se.max())


def _flags(caught):
    names = []
    for w in caught:
        for cls, name in FLAGS.items():
            if issubclass(w.category, cls) and name not in names:
                names.append(name)
    return ", ".join(names) if names else "-"


def cell(problem, model, sd, sampler, estimator, args, seed):
    iters = args.iters_sghmc if sampler == "sghmc" else args.iters
    if problem == "logistic":        # its posterior's scales are less even: longer runs
        iters = int(iters * args.logistic_factor)
    rows = []
    t0 = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = sgmc.sample(model, sampler, estimator, step_size="auto", n_iter=iters, chains=args.chains,
                            rng=seed, progress=False)
    auto = trace.info["step_size_auto"]
    bias = auto["sd_inflation"] or {}
    lo, hi, se = _ratios(trace, sd)
    rows.append([problem, sampler, estimator, "auto", auto["step_size"], lo, hi, se,
                 bias.get("worst"), _flags(caught), time.process_time() - t0])
    print(rows[-1], f"(KSD step {auto['step_size_ksd']:.3g})", flush=True)
    t0 = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            res = tune_step_size(model, sampler, estimator, chains=4, rng=seed + 1, progress=False)
            trace = sgmc.sample(model, sampler, estimator, step_size=res.best, n_iter=iters, burn_in=iters // 2,
                                chains=args.chains, rng=seed + 2, progress=False)
            lo, hi, se = _ratios(trace, sd)
            step = res.best
        except FloatingPointError as err:       # a diverged final run: reported, not a result
            print(problem, sampler, estimator, "tuned: diverged", err, flush=True)
            step, lo, hi, se = res.best, None, None, None
    rows.append([problem, sampler, estimator, "tuned", step, lo, hi, se, None, _flags(caught),
                 time.process_time() - t0])
    print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=160_000, help="iterations per SGLD run (half burn-in)")
    ap.add_argument("--iters-sghmc", type=int, default=40_000, help="iterations per SGHMC run (half burn-in)")
    ap.add_argument("--logistic-factor", type=float, default=2.5, help="iterations factor for the logistic runs")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--is-draws", type=int, default=20_000, help="importance samples for the logistic reference")
    ap.add_argument("--problems", nargs="+", default=["linreg5", "linreg50", "linreg10corr", "logistic"])
    ap.add_argument("--samplers", nargs="+", default=["sgld", "sghmc"])
    ap.add_argument("--estimators", nargs="+", default=["minibatch", "cv"])
    ap.add_argument("--results", default="step_size_study", help="docs/results/NAME.json ('none' writes nothing)")
    args = ap.parse_args()
    makers = {"linreg5": lambda: linreg(10_000, 5, 0), "linreg50": lambda: linreg(10_000, 50, 1),
              "linreg10corr": lambda: linreg(2000, 10, 2, covariate_covariance(10, 0.4, rng=2)),
              "logistic": lambda: logistic(args.is_draws, 3)}
    rows, refs = [], {}
    t_all = time.process_time()
    for p, name in enumerate(args.problems):
        model, sd, ref = makers[name]()
        refs[name] = ref
        for s, sampler in enumerate(args.samplers):
            for e, estimator in enumerate(args.estimators):
                rows += cell(name, model, sd, sampler, estimator, args, 100 * p + 10 * s + 3 * e)
    cpu = time.process_time() - t_all
    print(f"total CPU {cpu:.0f} s", flush=True)
    if args.results != "none":
        table = {"columns": ["problem", "sampler", "estimator", "method", "step", "sd ratio min", "sd ratio max",
                             "MC se", "predicted worst", "warnings", "CPU s"],
                 "rows": rows, "formats": ["", "", "", "", ".3g", ".3f", ".3f", ".3f", ".3f", "", ".1f"],
                 "notes": f"{args.chains} chains; SGLD runs of {args.iters} iterations, SGHMC runs of "
                          f"{args.iters_sghmc} (5 leapfrog steps each), {args.logistic_factor} times as many for "
                          "the logistic regression, half burn-in; 'tuned' = tune_step_size "
                          "defaults then the same run; sd ratio = sample sd / exact sd per coordinate; MC se the "
                          "largest over coordinates; 'predicted worst' = auto's estimated max(high, 1/low) sd "
                          f"factor at its step; total {cpu:.0f} CPU s."}
        print("wrote", write_results(args.results, {"step_size_study": table},
                                     extra={"settings": vars(args), "references": refs, "cpu_seconds": cpu}))


if __name__ == "__main__":
    main()
