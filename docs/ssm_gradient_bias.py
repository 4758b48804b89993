"""Stochastic gradient error of buffered subsequences against S and B (Aicher 2020, Figs. 3.3-3.4).

For each data set simulated at the true parameters ``theta*`` this script computes, exactly (every
subsequence start enumerated, no Monte Carlo over S):

* the thesis's error metric ``E_S || g_bar_S(theta*) - g_{S,B}(theta*) ||_2``, where ``g_bar_S`` is
  the same subsequence's gradient with a full buffer (B = T, unbiased) and ``g_{S,B}`` the buffered
  one; and
* the bias ``|| E_S[g_{S,B}(theta*)] - grad log p(y | theta*) ||_2`` against the Kalman /
  forward-backward full gradient.

Models: the thesis's 2-dimensional rotating LGSSM (Fig. 3.4; A = 0.7 Rot(pi/4), Q = 0.1 I, C = I,
R = I), the scalar LGSSM of its particle experiments (A = 0.9, Q = 0.5, R = 1; the N = infinity line
of Fig. 3.7), and a 2-state Gaussian HMM in R^2 with the thesis's switching matrix
Pi = [[0.1, 0.9], [0.9, 0.1]] standing in for its ARHMM (Fig. 3.3; sgmc has no ARHMM). The
particle-smoother dimension (N) is covered with the particle methods (docs/particles.md).

Run ``python docs/ssm_gradient_bias.py`` (T = 1000, 5 data sets, about a minute) or ``--quick``.
Tables go to stdout and to ``docs/results/ssm_gradient_bias.json`` (``--results``; docs/timeseries.md
renders the table against B), the figure to ``docs/figures/ssm_gradient_bias.png``.
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

from sgmc import backends  # noqa: E402
from sgmc.ssm import LGSSM, GaussianHMM, HMMParams, LGSSMParams, gather_windows, windows_at  # noqa: E402


def rot(angle):
    return np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])


def make_models(T, seed):
    rng = backends.default_rng(seed)
    proto = LGSSM(np.zeros((2, 2)))
    th2 = proto.unconstrain(LGSSMParams(0.7 * rot(math.pi / 4), 0.1 * np.eye(2), np.eye(2), np.eye(2)))
    _, y2 = proto.simulate(rng, T, th2)
    th1 = np.array([0.9, 1 / math.sqrt(0.5), 1.0])
    _, y1 = LGSSM.simulate_scalar(rng, T, th1)
    hp = GaussianHMM(np.zeros((2, 2)), 2)
    thh = hp.unconstrain(HMMParams(np.array([[0.1, 0.9], [0.9, 0.1]]), np.array([[1.0, 1.0], [-1.0, -1.0]]), np.array([np.eye(2), np.eye(2)])))
    _, yh = hp.simulate(rng, T, thh)
    return {"lgssm2d": (LGSSM(y2), th2), "lgssm1d": (LGSSM(y1), th1), "hmm": (GaussianHMM(yh, 2), thh)}


def per_start_scores(model, theta, S, B):
    """Weighted score of every subsequence start (rows), with weights 1 / Pr(t in S)."""
    n = model.T - S + 1
    w = windows_at(np.arange(n)[:, None], model.T, S, min(B, model.T), 1)
    th = np.broadcast_to(theta, (n, model.dim))
    return model.exact_window_score(th, w, gather_windows(np, model.y, w))


def errors(model, theta, S, B, full, cache):
    g = per_start_scores(model, theta, S, B)
    if S not in cache:
        cache[S] = per_start_scores(model, theta, S, model.T)
    g_bar = cache[S]
    err = float(np.mean(np.linalg.norm(g_bar - g, axis=1)))
    bias = float(np.linalg.norm(g.mean(axis=0) - full))
    return err, bias


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=1000)
    ap.add_argument("--datasets", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="T = 200, 2 data sets")
    ap.add_argument("--results", default="ssm_gradient_bias",
                    help="results file docs/results/NAME.json (default ssm_gradient_bias; 'none' writes nothing)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "figures", "ssm_gradient_bias.png"))
    args = ap.parse_args(argv)
    T, D = (200, 2) if args.quick else (args.T, args.datasets)
    S_grid = [s for s in (1, 2, 4, 8, 16, 32, 64, 128) if s <= T // 2]
    B_grid = [0, 1, 2, 4, 6, 8, 10, 12, 16]
    results = {}
    t0 = time.perf_counter()
    for d in range(D):
        for name, (model, theta) in make_models(T, 100 + d).items():
            full = model.grad_log_lik(theta[None])[0]
            r = results.setdefault(name, {"S": {}, "B": {}})
            cache = {}
            for B in (0, 10):
                for S in S_grid:
                    r["S"].setdefault((B, S), []).append(errors(model, theta, S, B, full, cache))
            for S in (4, 64):
                if S > T // 2:
                    continue
                for B in B_grid:
                    r["B"].setdefault((S, B), []).append(errors(model, theta, S, B, full, cache))
    print(f"T = {T}, {D} data sets, {time.perf_counter() - t0:.1f} s")
    if args.results != "none":
        rows = []
        for name, r in results.items():
            for B in B_grid:
                cells = []
                for S in (4, 64):
                    v = np.mean(r["B"][(S, B)], axis=0) if (S, B) in r["B"] else (None, None)
                    cells += [None if x is None else float(x) for x in v]
                rows.append([name, B, *cells])
        cols = ["model", "B", "error, S = 4", "bias, S = 4", "error, S = 64", "bias, S = 64"]
        note = (f"T = {T}, means over {D} simulated data sets; error: E_S||g_bar_S - g_(S,B)||, bias: "
                "||E_S g_(S,B) - g|| against the exact gradient, both at the true parameters, every "
                "subsequence start enumerated.")
        tables = {"by_B": {"columns": cols, "rows": rows, "notes": note,
                           "formats": [None, None, ".3g", ".3g", ".3g", ".3g"]}}
        print("wrote", write_results(args.results, tables, extra={"settings": vars(args)}))
    for name, r in results.items():
        print(f"\n{name}: E_S||g_bar - g_SB|| (bias ||E g_SB - g||), mean over data sets")
        print("   S " + "".join(f"{'B=' + str(B):>26}" for B in (0, 10)))
        for S in S_grid:
            cells = []
            for B in (0, 10):
                v = np.mean(r["S"][(B, S)], axis=0)
                cells.append(f"{v[0]:12.4g} ({v[1]:10.3g})")
            print(f"{S:4d} " + "".join(f"{c:>26}" for c in cells))
        print("   B " + "".join(f"{'S=' + str(S):>26}" for S in (4, 64) if S <= T // 2))
        for B in B_grid:
            cells = []
            for S in (4, 64):
                if S > T // 2:
                    continue
                v = np.mean(r["B"][(S, B)], axis=0)
                cells.append(f"{v[0]:12.4g} ({v[1]:10.3g})")
            print(f"{B:4d} " + "".join(f"{c:>26}" for c in cells))
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        print("matplotlib not installed: no figure")
        return results
    fig = Figure(figsize=(10, 3.2 * len(results)))
    FigureCanvasAgg(fig)
    for i, (name, r) in enumerate(results.items()):
        ax = fig.add_subplot(len(results), 2, 2 * i + 1)
        for B in (0, 10):
            v = np.array([np.mean(r["S"][(B, S)], axis=0)[0] for S in S_grid])
            sd = np.array([np.std(r["S"][(B, S)], axis=0)[0] for S in S_grid])
            ax.errorbar(S_grid, v, yerr=sd, marker="o", label=f"B = {B}")
        ax.set(xscale="log", yscale="log", xlabel="S", ylabel="E||g_bar - g_SB||", title=name)
        ax.legend(fontsize=8)
        ax = fig.add_subplot(len(results), 2, 2 * i + 2)
        for S in (4, 64):
            if S > T // 2:
                continue
            v = np.array([np.mean(r["B"][(S, B)], axis=0)[0] for B in B_grid])
            ax.plot(B_grid, v, marker="o", label=f"S = {S}")
        ax.set(yscale="log", xlabel="B", title=name)
        ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"figure: {args.out}")
    return results


if __name__ == "__main__":
    main()
