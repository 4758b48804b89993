"""Thesis Figure 4.5.3 (Putcha et al. 2023, Figure 3): adaptive subsample sizes, KSD against data passes.

SGLD-CV and SGLD-CV-PS at fixed n = 0.1% of N against ASGLD-CV and ASGLD-CV-PS, whose n_t follows
||theta_t - theta_hat||^2 (thesis eq. 4.3.14), with V_0 calibrated as in section 4.5.3: 10 fixed-n
pilot chains (SGLD-CV for ASGLD-CV, SGLD-CV-PS for ASGLD-CV-PS) of 1000 iterations, the 95th
percentile of ||theta - theta_hat||^2 along each, the largest bound over the chains. 10 chains of 10^4
iterations each. Data:

* the papers' synthetic balanced logistic regression (N = 10^4, 4 covariates and an intercept,
  h = 1e-4 as in the thesis; :func:`sgmc.datasets.classification_data`);
* its imbalanced version (95% positives);
* ISLR ``Default`` (N = 10,000, 3.3% positives, h = 0.1 / lambda_max), the real imbalanced data set
  that stands in for covertype.

Prints the table behind the plot, including each method's mean n_t.

Usage: ``python docs/figures/fig_4_5_3_adaptive.py [--iters 10000] [--chains 10] [--out-prefix fig_4_5_3]``
"""

from __future__ import annotations

import argparse

from _study import ksd_vs_passes, mode_and_curvature, plot, print_table

from sgmc.backends import default_rng
from sgmc.datasets import classification_data, default_credit
from sgmc.estimators import AdaptiveControlVariate, ControlVariatePS
from sgmc.models import LogisticRegression


def data_sets():
    s = classification_data(10_000, dim=4, positive_fraction=0.5, rng=105)
    yield "synthetic balanced", LogisticRegression(s.X, s.y), 1e-4
    s = classification_data(10_000, dim=4, positive_fraction=0.95, rng=105)
    yield "synthetic imbalanced", LogisticRegression(s.X, s.y), 1e-4
    c = default_credit()
    yield "Default (imbalanced)", LogisticRegression(c.X, c.y), None


def methods(model, n, mode, h, pilot_iter):
    out = {}
    for label, w in (("CV", "uniform"), ("CV-PS", "approx")):
        fixed = ControlVariatePS(model, n, w, mode)
        out[f"SGLD-{label}"] = (fixed, h)
        adaptive = AdaptiveControlVariate(model, n, w, mode, pilot_step_size=h, pilot_iter=pilot_iter)
        out[f"ASGLD-{label}"] = (adaptive.prepare(default_rng(7), mode[None, :]).estimator, h)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=10_000)
    ap.add_argument("--chains", type=int, default=10)
    ap.add_argument("--pilot-iters", type=int, default=1000)
    ap.add_argument("--out-prefix", default="fig_4_5_3")
    args = ap.parse_args(argv)
    for k, (label, model, h) in enumerate(data_sets()):
        mode, _, lam = mode_and_curvature(model)
        h = h if h is not None else 0.1 / lam
        n = max(1, round(0.001 * model.n_data))
        ms = methods(model, n, mode, h, args.pilot_iters)
        res, timing = ksd_vs_passes(model, ms, chains=args.chains, n_iter=args.iters,
                                    thin=max(1, args.iters // 1000))
        print_table(res, f"\n{label}: N = {model.n_data}, d = {model.dim}, n = {n}, h = {h:.3g}")
        print("V_0: " + ", ".join(f"{m} {e.v0:.4g}" for m, (e, _) in ms.items() if hasattr(e, "v0")))
        print("sampling seconds: " + ", ".join(f"{m} {t:.1f}" for m, t in timing.items()))
        plot(res, f"{args.out_prefix}_{k}.png", label)


if __name__ == "__main__":
    main()
