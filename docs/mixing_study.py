"""The mixing and runaway flags of sgmc.sample: false alarms on well-tuned runs, the two failure cases, the cost.

Three tables for docs/convergence.md, written to ``docs/results/mixing_flags.json``:

* ``false_alarms``: how often :class:`sgmc.MixingWarning` or :class:`sgmc.RunawayChainWarning` fires on
  well-tuned runs whose posterior is known: SGLD with the exact gradient on N(0, diag(1, 1/4)) at
  h = 0.2 (4 chains x 2,500 kept draws), and SGLD with minibatches (n = 50 of N = 2,000) on a
  conjugate linear regression at h = 0.2 / lambda_max (4 x 2,500), one run per seed.
* ``failures``: the two cases the flags exist for, on a logistic regression (N = 1,000, d = 5): SGLD
  past its stability limit (h = 10, chains far outside the posterior and stationary there) and SGLD
  with control variates at h = 1e-8 (chains that barely leave the mode).
* ``cost``: CPU seconds of ``sample`` with the per-iteration checks against the same run with them
  replaced by a no-op, for the one-step loop (a Gaussian target, exact gradient) and the compiled
  blocks (logistic regressions with minibatches, a small and a larger one), best of three (the
  mixing verdict at the end is in both).

Usage (from the repository root)::

    python docs/mixing_study.py [--seeds 50]
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
import sgmc.chains  # noqa: E402
from sgmc.diagnostics import runaway  # noqa: E402
from sgmc.models import GaussianTarget, LinearRegression, LogisticRegression  # noqa: E402

FLAGS = (sgmc.MixingWarning, sgmc.RunawayChainWarning)


def _run(model, **kw):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        trace = sgmc.sample(model, progress=False, **kw)
    return trace, [w for w in rec if issubclass(w.category, FLAGS)]


def _false_alarms(label, model, seeds, **kw):
    alarms, ess_min, rhat_max = 0, [], []
    for seed in range(seeds):
        trace, flagged = _run(model, rng=seed, **kw)
        alarms += bool(flagged)
        ess_min.append(trace.info["mixing"]["ess_bulk"])
        rhat_max.append(trace.info["mixing"]["rhat"])
    return [label, seeds, alarms, float(np.min(ess_min)), float(np.median(ess_min)), float(np.max(rhat_max))]


def _logistic(n=1000, d=5):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-X @ np.ones(d) / np.sqrt(d / 5)))).astype(float)
    return LogisticRegression(X, y)


class _NoWatch(runaway.Watch):
    """The per-iteration checks replaced by nothing (for the cost table only)."""

    def one(self, k, position, grad):
        return None

    def block(self, k, positions, grads):
        return None

    def plain(self, info):
        return info

    def flush(self, info):
        return info


def _best(model, repeat=3, **kw):
    out = []
    for _ in range(repeat):
        t0 = time.process_time()
        _run(model, **kw)
        out.append(time.process_time() - t0)
    return min(out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50)
    args = parser.parse_args(argv)

    gauss = GaussianTarget(np.zeros(2), np.diag([1.0, 0.25]))
    rng = np.random.default_rng(11)
    X = rng.normal(size=(2000, 3))
    y = X @ np.array([1.0, -0.5, 0.25]) + rng.normal(size=2000)
    linear = LinearRegression(X, y)
    lam = float(np.linalg.eigvalsh(X.T @ X / linear.noise_var)[-1])
    rows = [
        _false_alarms("SGLD, exact gradient, N(0, diag(1, 1/4)), h = 0.2", gauss, args.seeds, sampler="sgld",
                      estimator="full", step_size=0.2, n_iter=3000, burn_in=500, chains=4),
        _false_alarms("SGLD, minibatch n = 50, conjugate linear regression, h = 0.2 / lambda_max", linear,
                      args.seeds, sampler="sgld", estimator="minibatch", step_size=0.2 / lam, batch_size=50,
                      n_iter=3000, burn_in=500, chains=4),
    ]
    false_alarms = {"columns": ["run", "seeds", "runs flagged", "min bulk ESS", "median bulk ESS", "max R-hat"],
                    "rows": rows, "formats": ["", "d", "d", ".0f", ".0f", ".3f"]}

    logit = _logistic()
    fails = []
    trace, flagged = _run(logit, sampler="sgld", estimator="minibatch", step_size=10.0, n_iter=2000, burn_in=1000,
                          chains=4, rng=1)
    found = trace.info["runaway"]
    fails.append(["SGLD, minibatch, h = 10", ", ".join(sorted({w.category.__name__ for w in flagged})),
                  f"{len(found)} of 4 chains: {found[0]['kind'] if found else '-'}",
                  min(r["factor"] for r in found) if found else None, max(trace.info["abs_max"]),
                  trace.info["mixing"]["rhat"], trace.info["mixing"]["ess_bulk"]])
    trace, flagged = _run(logit, sampler="sgld", estimator="cv", step_size=1e-8, batch_size=50, n_iter=1000, chains=4,
                          rng=3)
    v = trace.info["mixing"]
    fails.append(["SGLD-CV, h = 1e-8", ", ".join(sorted({w.category.__name__ for w in flagged})),
                  "not mixed: " + ", ".join(r["check"] for r in v["reasons"]),
                  float(np.sqrt(max(v["spread"], 0.0))), max(trace.info["abs_max"]), v["rhat"], v["ess_bulk"]])
    failures = {"columns": ["run", "warning", "finding", "spread / posterior sd", "max |theta|", "max R-hat",
                            "min bulk ESS"],
                "rows": fails, "formats": ["", "", "", ".3g", ".4g", ".3f", ".0f"],
                "notes": "spread / posterior sd: sqrt of the Stein ratio (runaway: the smallest chain's; "
                         "SGLD-CV: the chains' average)"}

    cost = []
    cases = [("one-step loop: Gaussian d = 10, exact gradient, 4 chains, 20,000 iterations",
              GaussianTarget(np.zeros(10), np.eye(10)), dict(sampler="sgld", estimator="full", step_size=0.1,
                                                             n_iter=20000, chains=4, rng=0)),
             ("compiled blocks: logistic N = 1,000, d = 5, minibatch 10, 4 chains, 20,000 iterations", logit,
              dict(sampler="sgld", estimator="minibatch", step_size=1e-3, n_iter=20000, chains=4, rng=0)),
             ("compiled blocks: logistic N = 20,000, d = 20, minibatch 200, 4 chains, 5,000 iterations",
              _logistic(20000, 20), dict(sampler="sgld", estimator="minibatch", step_size=1e-4, batch_size=200,
                                         n_iter=5000, chains=4, rng=0))]
    for label, model, kw in cases:
        _run(model, **{**kw, "n_iter": 200})  # compile and warm up
        with_checks = _best(model, **kw)
        saved = sgmc.chains.Watch
        sgmc.chains.Watch = _NoWatch
        try:
            without = _best(model, **kw)
        finally:
            sgmc.chains.Watch = saved
        cost.append([label, with_checks, without, 1e6 * (with_checks - without) / kw["n_iter"],
                     100.0 * (with_checks / without - 1.0)])
    cost_table = {"columns": ["run", "CPU s, with the checks", "CPU s, without", "us per iteration", "overhead %"],
                  "rows": cost, "formats": ["", ".3f", ".3f", ".1f", ".1f"],
                  "notes": "best of three; without: the per-iteration statistics replaced by a no-op"}
    path = write_results("mixing_flags", {"false_alarms": false_alarms, "failures": failures, "cost": cost_table})
    print(path)


if __name__ == "__main__":
    main()
