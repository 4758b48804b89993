"""Bias and variance of the particle score estimators against the exact (Kalman) gradient.

On the scalar linear Gaussian model of the thesis's particle experiments (phi = 0.9, sigma = 0.7,
tau = 1, so ``theta = (phi, 1/sigma, 1/tau)``), one simulated series of length T, this script runs
``reps`` independent particle filters per setting and prints, for each coordinate of the score, the
bias of the mean estimate against :meth:`sgmc.ssm.LGSSM.grad_log_lik` (with its standard error) and
the variance of one estimate. Settings: the path-space estimator (Poyiadjis et al. O(N), thesis
Alg. 2), PaRIS (2 backward draws) and, at small N, the O(N^2) smoother; bootstrap and fully adapted
("optimal") proposals; N particles.

Usage (from the repository root)::

    python docs/particle_scores.py                 # T = 100, N in {50, 200}, 200 replicates
    python docs/particle_scores.py --T 400 --reps 100 --results none

The table goes to ``docs/results/particle_scores.json`` (``--results``), which docs/particles.md renders.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported first: it records the load at start)

import numpy as np  # noqa: E402

from sgmc import backends
from sgmc.ssm import LGSSM
from sgmc.ssm.particle import ScalarLGSSMKernel, particle_filter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", type=int, default=100)
    ap.add_argument("--n", type=int, nargs="+", default=[50, 200])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--results", default="particle_scores",
                    help="results file docs/results/NAME.json (default particle_scores; 'none' writes nothing)")
    args = ap.parse_args()
    rows = []
    phi, sig, tau = 0.9, 0.7, 1.0
    v0 = sig**2 / (1 - phi**2)
    theta = np.array([[phi, 1 / sig, 1 / tau]])
    _, y = LGSSM.simulate_scalar(backends.default_rng(3), args.T, theta[0], 0.0, v0)
    model = LGSSM(y, P0=v0)
    g = np.asarray(model.grad_log_lik(theta))[0]
    y = np.asarray(y)
    B = args.reps
    Y = np.ascontiguousarray(np.broadcast_to(y[None, :, None], (B, args.T, 1)))
    w = np.ones((B, args.T))
    print(f"scalar LGSSM, T = {args.T}, {B} replicates; Kalman gradient (phi, psi_sigma, psi_tau) = {np.round(g, 3)}")
    print(f"{'proposal':>9} {'smoother':>13} {'N':>5} {'bias (se) phi':>18} {'bias (se) psi_s':>18} {'bias (se) psi_t':>18} {'var phi':>9} {'var psi_s':>9} {'var psi_t':>9} {'s':>6}")
    for proposal in ("bootstrap", "optimal"):
        for n in args.n:
            for smoother in ("path", "paris", "poyiadjis_n2"):
                if smoother == "poyiadjis_n2" and n > 50:
                    continue
                k = ScalarLGSSMKernel(np.full(B, phi), np.full(B, sig), np.full(B, tau), proposal=proposal)
                t0 = time.perf_counter()
                s = particle_filter(backends.default_rng(11), k, Y, n, stat_weight=w, smoother=smoother).score
                dt = time.perf_counter() - t0
                bias = s.mean(axis=0) - g
                se = s.std(axis=0, ddof=1) / np.sqrt(B)
                var = s.var(axis=0, ddof=1)
                cells = " ".join(f"{b:>+8.3f} ({e:.3f})" for b, e in zip(bias, se))
                print(f"{proposal:>9} {smoother:>13} {n:>5} {cells} {var[0]:>9.3f} {var[1]:>9.3f} {var[2]:>9.3f} {dt:>6.1f}")
                name = {"poyiadjis_n2": "O(N^2)"}.get(smoother, smoother)
                rows.append([proposal, name, n, *(f"{b:+.2f} ({e:.2f})" for b, e in zip(bias, se)),
                             *map(float, var), dt])
    if args.results != "none":
        cols = ["proposal", "smoother", "N", "bias phi (se)", "bias psi_sigma (se)", "bias psi_tau (se)",
                "var phi", "var psi_sigma", "var psi_tau", "time s"]
        note = (f"Scalar LGSSM, T = {args.T}, {B} independent runs per row; Kalman gradient "
                f"({g[0]:.3f}, {g[1]:.3f}, {g[2]:.3f}); time: wall seconds for all {B} runs.")
        tables = {"scores": {"columns": cols, "rows": rows, "notes": note,
                             "formats": [None, None, None, None, None, None, ".2f", ".2f", ".2f", ".1f"]}}
        print("wrote", write_results(args.results, tables, extra={"settings": vars(args)}))


if __name__ == "__main__":
    main()
