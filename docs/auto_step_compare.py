"""``step_size="auto"`` against the grid tuner: accuracy against a reference and total cost.

Three posteriors, each sampled by SGLD with minibatch (or buffered subsequence) gradients, 4 chains:

``logistic``  the review's section 6.1 logistic regression (N = 10^4, d = 5, the data of
              ``sgmc reproduce``); reference: the Laplace approximation N(mode, P^-1) found by Newton
              steps, as the reproductions use it.
``bnn``       a one-hidden-layer softmax network (5 inputs, 10 hidden, 3 classes, N = 2000 simulated
              from a random network of that shape); no tractable reference: the held-out log-loss of
              the posterior predictive on 2000 further points from the same network.
``ssm``       the scalar linear-Gaussian state space model (A = 0.9, 1/sigma = 2, 1/tau = 2, T = 1000)
              with buffered subsequence gradients; reference: MALA with the exact Kalman gradients.

Each method ends with the same final run (``--iters`` iterations, the first half burn-in, the
second half kept). The grid tuner (:func:`sgmc.tuning.tune_step_size`, its default grid, pilots of
``--pilot`` iterations with the first half dropped and up to 4 runs added past an edge) chooses the
step first; ``step_size="auto"`` chooses it within the final run's burn-in. Cost is the data passes
per chain of everything: the pilots' iterations and their exact scores, the adaptation (its windows
and scores), set-up and the final run. Accuracy: the error of the posterior mean in reference
standard deviations (root mean square over coordinates) and the ratio of the standard deviations
(geometric mean over coordinates) for the logistic regression and the SSM; held-out log-loss for the BNN.

Usage (from the repository root)::

    python docs/auto_step_compare.py            # writes docs/results/auto_step.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported first: it records the load at start)

import numpy as np  # noqa: E402

import sgmc  # noqa: E402
from sgmc import backends  # noqa: E402
from sgmc.experiments._logistic import make_problem  # noqa: E402
from sgmc.models import BayesianNeuralNetwork  # noqa: E402
from sgmc.models.bnn import log_loss  # noqa: E402
from sgmc.ssm import LGSSM  # noqa: E402
from sgmc.tuning import tune_step_size  # noqa: E402

CHAINS = 4


def _passes(trace) -> float:
    """Data passes per chain of one run: set-up (and adaptation) and every iteration."""
    return float(trace.info["setup_data_passes"] + np.mean(trace.stats["data_passes"][:, -1]))


def _grid(model, estimator, batch_size, pilot, seed, init):
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = tune_step_size(model, "sgld", estimator, batch_size=batch_size, pilot_iters=pilot, chains=CHAINS,
                             burn_in=pilot // 2, n_ksd=400, rng=seed, keep_traces=True, progress=False,
                             init=init, extend=4)
    cost = 0.0
    for tr in res.traces:
        if tr is not None:   # a diverged pilot stops at its first check: its few passes are not counted
            cost += _passes(tr) + tr.n_draws           # the exact score at every kept draw: one pass each
    return res, cost, time.perf_counter() - t0


def _final(model, estimator, batch_size, iters, seed, step, init):
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr = sgmc.sample(model, "sgld", estimator, step_size=step, batch_size=batch_size, n_iter=iters,
                         burn_in=iters // 2, chains=CHAINS, rng=seed, init=init, progress=False)
    return tr, time.perf_counter() - t0


def _moments_error(draws, ref_mean, ref_sd):
    x = np.asarray(draws).reshape(-1, draws.shape[-1])
    err = float(np.sqrt(np.mean(((x.mean(0) - ref_mean) / ref_sd) ** 2)))
    ratio = float(np.exp(np.mean(np.log(x.std(0) / ref_sd))))
    return err, ratio


def compare(name, model, estimator, batch_size, iters, pilot, seed, init, score):
    rows = []
    res, pilot_cost, pilot_time = _grid(model, estimator, batch_size, pilot, seed, init)
    tr, t = _final(model, estimator, batch_size, iters, seed + 1, res.best, init)
    rows.append([name, "grid tuner", res.best, "edge" if res.at_edge else "bracketed", *score(tr),
                 pilot_cost + _passes(tr), pilot_time + t])
    tr, t = _final(model, estimator, batch_size, iters, seed + 1, "auto", init)
    auto = tr.info["step_size_auto"]
    rows.append([name, "auto", auto["step_size"], "bracketed" if auto["bracketed"] else "edge", *score(tr),
                 _passes(tr), t])
    for r in rows:
        print(r, flush=True)
    return rows


def logistic(args):
    problem = make_problem(10_000, 5, seed=0)
    mode = np.asarray(problem.mode)
    sd = np.sqrt(np.diag(np.linalg.inv(np.asarray(problem.precision))))
    return compare("logistic", problem.model, "minibatch", 100, args.iters, args.pilot, 10, None,
                   lambda tr: (*_moments_error(tr.draws, mode, sd), "n/a"))


def bnn(args):
    rng = np.random.default_rng(1)
    d, h, k, n = 5, 10, 3, 4000
    X = rng.normal(size=(n, d))
    B, A = rng.normal(size=(d, h)) * 2, rng.normal(size=(h, k)) * 3
    z = np.exp(X @ B - (X @ B).max(1, keepdims=True))
    z /= z.sum(1, keepdims=True)
    logits = z @ A
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = np.array([rng.choice(k, p=pi) for pi in p])
    model = BayesianNeuralNetwork(X[:2000], y[:2000], n_hidden=h, n_classes=k)
    Xt, yt = X[2000:], y[2000:]

    def score(tr):
        draws = np.asarray(tr.draws)[:, ::10, :].reshape(-1, model.dim)
        probs = np.asarray(model.predict_proba(draws, Xt)).mean(0)
        return "n/a", "n/a", float(log_loss(probs, yt))

    return compare("bnn", model, "minibatch", 50, args.iters, args.pilot, 20, None, score)


def ssm(args):
    theta = [0.9, 2.0, 2.0]
    _, y = LGSSM.simulate_scalar(backends.default_rng(0), 1000, theta)
    model = LGSSM(y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sgmc.sample(model, "mala", "full", step_size=args.mala_step_ssm, n_iter=args.mala_iters,
                          burn_in=args.mala_iters // 2, chains=CHAINS, rng=39, init=theta, progress=False)
    x = np.asarray(ref.draws).reshape(-1, model.dim)
    mean, sd = x.mean(0), x.std(0)
    print("ssm reference acceptance", ref.info.get("acceptance_rate"), "mean", mean, "sd", sd, flush=True)
    rows = compare("ssm", model, "buffered", 20, args.iters, args.pilot, 30, theta,
                   lambda tr: (*_moments_error(tr.draws, mean, sd), "n/a"))
    rows.append(["ssm", "MALA (reference)", args.mala_step_ssm, "-", "reference", "reference", "n/a", _passes(ref),
                 ref.info["sampling_time"]])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=4000, help="iterations of each final run (half burn-in)")
    ap.add_argument("--pilot", type=int, default=2000, help="iterations of each grid pilot (half dropped)")
    ap.add_argument("--mala-iters", type=int, default=6000)
    ap.add_argument("--mala-step-ssm", type=float, default=7e-4)
    ap.add_argument("--problems", nargs="+", default=["logistic", "bnn", "ssm"])
    ap.add_argument("--results", default="auto_step", help="docs/results/NAME.json ('none' writes nothing)")
    args = ap.parse_args()
    rows = []
    for name in args.problems:
        rows += {"logistic": logistic, "bnn": bnn, "ssm": ssm}[name](args)
    if args.results != "none":
        table = {"columns": ["problem", "method", "step", "choice", "mean error (sd)", "sd ratio",
                             "held-out log-loss", "data passes", "seconds"],
                 "rows": rows, "formats": ["", "", ".3g", "", ".3f", ".3f", ".4f", ".0f", ".1f"],
                 "notes": f"SGLD, {CHAINS} chains; final runs of {args.iters} iterations (half burn-in); grid "
                          f"pilots of {args.pilot} iterations; data passes per chain, tuning included."}
        print("wrote", write_results(args.results, {"auto_step": table}, extra={"settings": vars(args)}))


if __name__ == "__main__":
    main()
