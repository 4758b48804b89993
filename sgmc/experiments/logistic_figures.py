"""Figures 2 and 3 of Nemeth and Fearnhead (2021, section 6.1): logistic regression at d = 10.

Figure 2: trace plots of the first components of theta against the iteration for SGLD, SGLD-CV,
SGHMC, SGHMC-CV, SGNHT, SGNHT-CV and ULA, every chain from theta_0 ~ N(0, I) (the CV chains start
after their SGD steps, at theta_hat), with the posterior mean of a long NUTS run as dashed lines.
Step sizes are chosen by the KSD of pilot runs as for Table 2.

Figure 3: SGLD, SGLD-CV, ULA and NUTS each run for the same wall-clock budget (the paper: 10 minutes,
the first minute burn-in), through ``sgmc.sample(..., max_time=...)``; the running mean and variance
of theta_1 after the burn-in against seconds, beside the truth from a long NUTS run. ``curves.csv``
holds the curves. NUTS comes from NumPyro (``pip install "sgmc[reproduce]"``); without it, the NUTS
curve is left out and the truth is a long MALA run of sgmc.

Options: ``n`` (N), ``iters`` (Figure 2), ``sgd_steps``, ``pilot_iters``, ``grid``, ``budget`` (seconds
per method, Figure 3), ``burn_fraction``, ``truth_draws``, ``nuts`` (False: no NumPyro).
"""

from __future__ import annotations

import math
import time

import numpy as np

from .. import backends
from ..run import sample
from ._logistic import METHODS, make_problem, references, nuts, nuts_for, run_method, tune
from ._output import Context, Experiment

FULL = {"n": 100_000, "iters": 20_000, "sgd_steps": 10_000, "pilot_iters": 2000,
        "grid": (0.1, 0.3, 1.0, 3.0, 10.0), "budget": 600.0, "burn_fraction": 0.1, "truth_draws": 10_000,
        "nuts": True, "components": 3}
QUICK = {"n": 5_000, "iters": 2_000, "sgd_steps": 1_000, "pilot_iters": 300, "grid": (0.3, 1.0, 3.0, 10.0),
         "budget": 3.0, "burn_fraction": 0.1, "truth_draws": 1500, "nuts": True, "components": 3}
FIG3 = ["SGLD", "SGLD-CV", "ULA"]


def settings(ctx: Context) -> dict:
    base = QUICK if ctx.quick else FULL
    return {k: ctx.option(k, v) for k, v in base.items()}


def _truth(ctx: Context, problem, cfg: dict, reference, seed: int) -> tuple:
    """Posterior mean (all components) and variance of theta_1 from a long exact run."""
    if reference is not None:
        r = nuts(problem, 1000, int(cfg["truth_draws"]), seed)
        draws, how = r["draws"], f"NUTS (NumPyro), 1000 + {cfg['truth_draws']} iterations"
    else:
        n = int(cfg["truth_draws"])
        tr = sample(problem.model, "mala", "full", step_size=0.5 / problem.lambda_max, n_iter=2 * n, burn_in=n,
                    chains=4, init=problem.mode, rng=seed, progress=False)
        draws, how = backends.to_numpy(tr.flat_draws()), f"MALA (sgmc), 4 chains of {n} + {n} iterations"
    return draws.mean(axis=0), float(draws[:, 0].var()), how


def _running(x: np.ndarray) -> tuple:
    k = np.arange(1, len(x) + 1)
    mean = np.cumsum(x) / k
    var = np.cumsum(x * x) / k - mean * mean
    return mean, np.maximum(var, 0.0)


def run(ctx: Context) -> dict:
    cfg = settings(ctx)
    reference = references(ctx, cfg["nuts"], "NUTS")
    ctx.status(f"simulating N = {cfg['n']}, d = 10 and finding the mode ...")
    problem = make_problem(int(cfg["n"]), 10, ctx.seed, ctx.backend)
    seeds = np.random.SeedSequence([ctx.seed, 10, 2]).spawn(2 * len(METHODS) + 4)
    be = backends.get_backend(problem.model.xp)
    ctx.status("truth: a long exact run ...")
    truth_mean, truth_var, truth_how = _truth(ctx, problem, cfg, reference, int(seeds[-1].generate_state(1)[0]))
    ctx.notes["truth"] = truth_how

    # Figure 2: traces against iterations, steps tuned by KSD.
    traces, steps, rate = {}, {}, {}
    for k, (label, smp, est) in enumerate(METHODS):
        ctx.status(f"Figure 2: {label}: tuning h and running {cfg['iters']} iterations ...")
        rng = backends.default_rng(seeds[2 * k], backend=be, device=problem.model.device)
        res = tune(problem, smp, est, int(cfg["pilot_iters"]), cfg["grid"], rng)
        order = sorted((r for r in res.table if not r["diverged"]), key=lambda r: r["ksd"])
        for row in order:
            try:
                r = run_method(problem, smp, est, row["step_size"], int(cfg["iters"]), int(cfg["sgd_steps"]),
                               seeds[2 * k + 1])
                break
            except FloatingPointError:
                continue
        steps[label] = row["step_size"]
        tr = r["trace"]
        traces[label] = backends.to_numpy(tr.draws[0])
        rate[label] = tr.info["sampling_time"] / max(tr.info["iterations_done"], 1)
    fig2 = _figure2(traces, truth_mean, int(cfg["sgd_steps"]), int(cfg["components"]), steps)
    ctx.save_figure(fig2, "fig2.png")

    # Figure 3: fixed wall-clock budgets.
    budget, burn = float(cfg["budget"]), float(cfg["budget"]) * float(cfg["burn_fraction"])
    curves = {}
    for j, label in enumerate(FIG3):
        smp, est = next((s, e) for lab, s, e in METHODS if lab == label)
        ctx.status(f"Figure 3: {label} for {budget:g} s ...")
        n_iter = int(3 * budget / max(rate[label], 1e-7)) + 1000
        t0 = time.perf_counter()
        r = run_method(problem, smp, est, steps[label], n_iter + int(cfg["sgd_steps"]) * (est == "cv"),
                       int(cfg["sgd_steps"]), seeds[2 * len(METHODS) + j], max_time=budget)
        tr = r["trace"]
        seconds = r["sgd_time"] + tr.stats["wall_time"][0]
        theta1 = backends.to_numpy(tr.draws[0, :, 0])
        curves[label] = _curve(seconds, theta1, burn)
        ctx.notes[f"fig3_{label}"] = {"iterations": tr.info["iterations_done"], "stopped": tr.info["stopped"],
                                      "seconds": round(time.perf_counter() - t0, 2)}
    if reference is not None:
        ctx.status(f"Figure 3: NUTS for {budget:g} s ...")
        r = nuts_for(problem, budget, int(seeds[-2].generate_state(1)[0]),
                     warmup=min(500, max(50, int(cfg["truth_draws"]) // 3)))
        curves["NUTS"] = _curve(r["seconds"], r["draws"][:, 0], burn)
        ctx.notes["fig3_NUTS"] = {"draws": int(r["draws"].shape[0])}
    fig3 = _figure3(curves, truth_mean[0], truth_var, budget, burn)
    ctx.save_figure(fig3, "fig3.png")

    rows = []
    for label, c in curves.items():
        for s, m, v in zip(*_grid_points(c, budget, burn)):
            rows.append([label, s, m, v])
    ctx.write_table("curves", ["method", "seconds", "running_mean_theta1", "running_var_theta1"], rows,
                    title="Figure 3 curves: running mean and variance of theta_1 after the burn-in, once a second.")
    final = [[label, c["mean"][-1] if len(c["mean"]) else math.nan, c["var"][-1] if len(c["var"]) else math.nan,
              len(c["mean"]), abs(c["mean"][-1] - truth_mean[0]) if len(c["mean"]) else math.nan]
             for label, c in curves.items()]
    final.append(["truth", float(truth_mean[0]), truth_var, int(cfg["truth_draws"]), 0.0])
    md = ctx.write_table("fig3_final", ["method", "mean theta_1", "var theta_1", "draws after burn-in",
                                        "|mean - truth|"], final,
                         title=f"Figure 3 at the end of the {budget:g} s budget ({burn:g} s burn-in); truth: {truth_how}.")
    ctx.notes["step_sizes"] = steps
    ctx.notes["settings"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.items()}
    return {"final": final, "markdown": md, "truth_mean": truth_mean.tolist(), "truth_var": truth_var,
            "steps": steps}


def _curve(seconds: np.ndarray, x: np.ndarray, burn: float) -> dict:
    keep = seconds >= burn
    mean, var = _running(np.asarray(x, dtype=float)[keep])
    return {"seconds": np.asarray(seconds)[keep], "mean": mean, "var": var}


def _grid_points(c: dict, budget: float, burn: float) -> tuple:
    """The curve once a second (the last draw made by each whole second)."""
    if len(c["seconds"]) == 0:
        return [], [], []
    marks = np.arange(math.ceil(burn), math.floor(budget) + 1, dtype=float)
    idx = np.searchsorted(c["seconds"], marks, side="right") - 1
    ok = idx >= 0
    return marks[ok].tolist(), c["mean"][idx[ok]].tolist(), c["var"][idx[ok]].tolist()


def _figure2(traces: dict, truth: np.ndarray, sgd_steps: int, comps: int, steps: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(13, 5.5), sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (label, draws) in zip(axes.flat, traces.items()):
        offset = sgd_steps if label.endswith("-CV") else 0
        it = np.arange(offset, offset + draws.shape[0])
        for c in range(comps):
            ax.plot(it, draws[:, c], lw=0.6, color=colours[c])
            ax.axhline(truth[c], color=colours[c], ls="--", lw=0.8)
        if offset:
            ax.axvline(offset, color="grey", lw=0.6, ls=":")
        ax.set_title(f"{label} (h = {steps[label]:.2g})", fontsize=9)
        ax.set_xlabel("iteration", fontsize=8)
        ax.tick_params(labelsize=7)
    for c in range(comps):
        axes.flat[-1].plot([], [], color=colours[c], label=f"theta_{c + 1}")
    axes.flat[-1].plot([], [], color="k", ls="--", label="NUTS mean")
    axes.flat[-1].legend(loc="center", fontsize=8, frameon=False)
    axes.flat[-1].axis("off")
    fig.suptitle("Trace plots, logistic regression, d = 10 (CV chains start after their SGD steps)", fontsize=10)
    fig.tight_layout()
    return fig


def _figure3(curves: dict, truth_mean: float, truth_var: float, budget: float, burn: float):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for label, c in curves.items():
        a.plot(c["seconds"], c["mean"], lw=1, label=label)
        b.plot(c["seconds"], c["var"], lw=1, label=label)
    a.axhline(truth_mean, color="k", ls="--", lw=0.8, label="truth")
    b.axhline(truth_var, color="k", ls="--", lw=0.8, label="truth")
    a.set_ylabel("running mean of theta_1")
    b.set_ylabel("running variance of theta_1")
    b.set_yscale("log")
    for ax in (a, b):
        ax.set_xlabel("seconds")
        ax.set_xlim(burn, budget)
        ax.legend(fontsize=8)
    fig.suptitle(f"{budget:g} s per method, the first {burn:g} s burn-in (logistic regression, d = 10)", fontsize=10)
    fig.tight_layout()
    return fig


EXPERIMENT = Experiment(
    name="logistic-figures",
    title="Figures 2 and 3: trace plots and fixed wall-clock budgets, logistic regression at d = 10",
    run=run,
    paper="Nemeth & Fearnhead (2021), section 6.1, Figures 2 and 3",
)

__all__ = ["EXPERIMENT", "FULL", "QUICK"]
