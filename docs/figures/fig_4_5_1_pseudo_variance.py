"""Thesis Figure 4.5.1 (Putcha et al. 2023, Figure 1): pseudo-variance against n/N.

Three synthetic data sets of N = 1000: (a) the bivariate Gaussian (x_i ~ N(theta, Sigma_x), theta =
(0, 1), Sigma_x = [[1e5, 6e4], [6e4, 2e5]], prior N(0, 1e3 I)); (b) balanced and (c) imbalanced (95%
positive) logistic regression with an intercept and one covariate. At 10 values of theta drawn from
the Laplace approximation of the posterior, the exact pseudo-variance
(:func:`sgmc.diagnostics.pseudo_variance`) of SGLD (with and without replacement), SGLD-PS (exact and
approximate weights), SGLD-CV and SGLD-CV-PS (exact and approximate; not for the Gaussian, where the
CV-PS weights are uniform) is averaged over the thetas, for n/N from 0.5% to 100%.

Usage: ``python docs/figures/fig_4_5_1_pseudo_variance.py [--out fig_4_5_1.png]``
"""

from __future__ import annotations

import argparse

import numpy as np

from sgmc.datasets import classification_data
from sgmc.diagnostics import pseudo_variance
from sgmc.models import Gaussian, LogisticRegression
from sgmc.optimize import negative_hessian, newton

N = 1000
FRACTIONS = [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]


def scenarios():
    r = np.random.default_rng(0)
    cov_x = np.array([[1e5, 6e4], [6e4, 2e5]])
    x = r.multivariate_normal([0.0, 1.0], cov_x, size=N)
    yield "gaussian", Gaussian(x, cov=cov_x, prior_cov=1e3), False
    for frac, label in ((0.5, "balanced logistic"), (0.95, "imbalanced logistic")):
        d = classification_data(N, dim=1, positive_fraction=frac, rng=1)
        yield label, LogisticRegression(d.X, d.y), True


def study():
    table = {}
    for label, model, has_cv_ps in scenarios():
        mode, _ = newton(model, np.zeros(model.dim))
        mode = np.asarray(mode).reshape(-1)
        cov = np.linalg.inv(np.asarray(negative_hessian(model, mode)))
        thetas = np.random.default_rng(2).multivariate_normal(mode, cov, size=10)
        schemes = {
            "SGLD WR": dict(),
            "SGLD WOR": dict(replace=False),
            "SGLD-PS exact": dict(weights="exact"),
            "SGLD-PS approx": dict(weights="approx", mode=mode),
            "SGLD-CV": dict(mode=mode, control_variate=True),
        }
        if has_cv_ps:
            schemes["SGLD-CV-PS exact"] = dict(weights="exact", mode=mode, control_variate=True)
            schemes["SGLD-CV-PS approx"] = dict(weights="approx", mode=mode, control_variate=True)
        rows = {}
        for name, kw in schemes.items():
            rows[name] = [float(np.mean(np.asarray(pseudo_variance(model, thetas, max(1, round(f * N)), **kw))))
                          for f in FRACTIONS]
        table[label] = rows
    return table


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="fig_4_5_1.png")
    args = ap.parse_args(argv)
    table = study()
    for label, rows in table.items():
        print(f"\n{label}: mean pseudo-variance over 10 thetas")
        print(f"{'scheme':<18}" + "".join(f"{f:>11.3g}" for f in FRACTIONS))
        for name, vals in rows.items():
            print(f"{name:<18}" + "".join(f"{v:>11.3e}" for v in vals))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot written")
        return
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, (label, rows) in zip(axes, table.items()):
        for name, vals in rows.items():
            ax.plot(FRACTIONS, np.maximum(vals, 1e-300), marker="o", ms=3, label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("n / N")
        ax.set_title(label)
    axes[0].set_ylabel("pseudo-variance")
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
