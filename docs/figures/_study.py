"""Shared pieces of the preferential-subsampling figure scripts (Putcha et al. 2023; thesis chapter 4).

:func:`ksd_vs_passes` runs SGLD with several gradient estimators on one model and returns, for each,
the kernel Stein discrepancy of the pooled chains' draws so far against the data passes used so far
(set-up included). The KSD uses the exact full-data scores at the kept draws, the IMQ kernel (c = 1,
beta = -1/2) and one preconditioner for all methods (the median heuristic on the first method's draws).
"""

from __future__ import annotations

import time

import numpy as np

import sgmc
from sgmc.diagnostics import cumulative_ksd, ksd_preconditioner
from sgmc.optimize import find_mode, negative_hessian, newton


def mode_and_curvature(model, seed=0):
    """Posterior mode (Adam then Newton), the Laplace covariance and the largest curvature there."""
    theta = find_mode(model, seed, np.zeros(model.dim), n_steps=2000)
    theta, _ = newton(model, theta)
    prec = np.asarray(negative_hessian(model, theta))
    return np.asarray(theta).reshape(-1), np.linalg.inv(prec), float(np.linalg.eigvalsh(prec)[-1])


def ksd_vs_passes(model, methods, *, chains=10, n_iter=10_000, thin=10, seed=0, checkpoints=10):
    """``{name: rows}`` with rows ``(iteration, data passes, KSD)`` at ``checkpoints`` points.

    ``methods`` maps a label to ``(estimator, step_size)`` or ``(estimator, step_size, burn_in)``; every
    method starts where its estimator's ``prepare`` puts it (the mode, for the control-variate and
    preferential estimators; N(0, I) draws for plain minibatches, which then get ``burn_in`` extra
    iterations, discarded but counted in the data passes, as the thesis gives SGLD a burn-in).
    """
    out, pre, timing = {}, None, {}
    for name, spec in methods.items():
        est, h = spec[0], spec[1]
        burn = spec[2] if len(spec) > 2 else 0
        t0 = time.perf_counter()
        tr = sgmc.sample(model, "sgld", est, step_size=h, n_iter=n_iter + burn, burn_in=burn, chains=chains,
                         thin=thin, store_grads="full", rng=seed, progress=False)
        timing[name] = time.perf_counter() - t0
        draws, grads = np.asarray(tr.draws), np.asarray(tr.grads)
        if pre is None:
            pre = ksd_preconditioner(draws, "med")
        path = np.asarray(cumulative_ksd(draws, grads, preconditioner=pre))
        passes = tr.info["setup_data_passes"] + tr.stats["data_passes"].mean(axis=0)
        kept = np.asarray(tr.iterations)
        picks = np.unique(np.linspace(0, len(kept) - 1, checkpoints).round().astype(int))
        out[name] = [(int(kept[i]) + 1 - burn, float(passes[kept[i]]), float(path[i])) for i in picks]
        out[name + " batch"] = float(tr.stats["batch_size"].mean())
    return out, timing


def print_table(results, title):
    print(title)
    print(f"{'method':<14} {'iteration':>9} {'passes':>9} {'KSD':>10}")
    for name, rows in results.items():
        if name.endswith(" batch"):
            continue
        for it, passes, k in rows:
            print(f"{name:<14} {it:>9d} {passes:>9.2f} {k:>10.4g}")
        print(f"{name:<14} mean batch size {results[name + ' batch']:.1f}")


def plot(results, path, title):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot written")
        return
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, rows in results.items():
        if name.endswith(" batch"):
            continue
        rows = np.asarray(rows)
        ax.plot(rows[:, 1], rows[:, 2], marker="o", ms=3, label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("data passes")
    ax.set_ylabel("KSD")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")
