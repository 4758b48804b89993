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

With ``clock="cpu"`` the budget of Figure 3 is counted in the process's CPU time
(``time.process_time``) instead of the wall clock, so that a run on a machine shared with other jobs
gets the same computing as on a quiet one: each method runs in chunks of about ``chunk_seconds``
(each chunk a :func:`sgmc.sample` call continuing the chain from its last draw; SGLD, SGLD-CV and
ULA keep no state but the position) until the budget is spent, BLAS limited to one thread, and a
draw's second is interpolated within its chunk. NUTS runs in chunks of 25 draws on the same clock.

Figure 2 comes with a table (``fig2_convergence``): for each method, the first iteration at which the
chain enters the posterior's bulk (its Mahalanobis distance from the truth's mean, in the Laplace
metric, below the 99% point of chi_d), that iteration in CPU seconds, and the fraction of the second
half of the run inside that region (0.99 for exact draws; lower when the chain over-disperses).

Options: ``n`` (N), ``iters`` (Figure 2), ``sgd_steps``, ``pilot_iters``, ``grid``, ``budget`` (seconds
per method, Figure 3), ``burn_fraction``, ``truth_draws``, ``nuts`` (False: no NumPyro), ``clock``
(``"wall"`` or ``"cpu"``), ``chunk_seconds`` (CPU clock only).
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
        "nuts": True, "components": 3, "clock": "wall", "chunk_seconds": 1.0}
QUICK = {"n": 5_000, "iters": 2_000, "sgd_steps": 1_000, "pilot_iters": 300, "grid": (0.3, 1.0, 3.0, 10.0),
         "budget": 3.0, "burn_fraction": 0.1, "truth_draws": 1500, "nuts": True, "components": 3, "clock": "wall",
         "chunk_seconds": 0.2}
FIG3 = ["SGLD", "SGLD-CV", "ULA"]


def settings(ctx: Context) -> dict:
    base = QUICK if ctx.quick else FULL
    cfg = {k: ctx.option(k, v) for k, v in base.items()}
    if cfg["clock"] not in ("wall", "cpu"):
        msg = f"option `clock` must be 'wall' or 'cpu'; got {cfg['clock']!r}"
        raise ValueError(msg)
    for key in ("budget", "chunk_seconds"):
        v = cfg[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            msg = f"option `{key}` must be a positive number of seconds; got {v!r}"
            raise ValueError(msg)
    return cfg


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
    traces, steps, rate, cost = {}, {}, {}, {}
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
        cost[label] = (r["sgd_cpu"], (r["cpu"] - r["sgd_cpu"]) / max(tr.info["iterations_done"], 1))
    fig2 = _figure2(traces, truth_mean, int(cfg["sgd_steps"]), int(cfg["components"]), steps)
    ctx.save_figure(fig2, "fig2.png")
    ctx.write_table("fig2_convergence", ["method", "h", "iterations to the bulk", "of which SGD",
                                         "CPU s to the bulk", "CPU us per iteration",
                                         "second half inside the 99% region"],
                    _convergence(problem, traces, truth_mean, int(cfg["sgd_steps"]), steps, cost),
                    title=("Figure 2: the first iteration (counted from theta_0; for CV the SGD steps "
                           "included) at which the chain is within the 99% region of the Laplace "
                           "approximation centred at the truth's mean, in CPU seconds, and the fraction of "
                           "the run's second half inside that region (0.99 for exact draws)."))

    if cfg["clock"] == "cpu":
        return _run_cpu_budget(ctx, cfg, problem, steps, rate, seeds, reference, truth_mean, truth_var, truth_how)

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
    return _figure3_outputs(ctx, cfg, curves, truth_mean, truth_var, truth_how, steps)


def _figure3_outputs(ctx: Context, cfg: dict, curves: dict, truth_mean, truth_var: float, truth_how: str,
                     steps: dict) -> dict:
    budget, burn = float(cfg["budget"]), float(cfg["budget"]) * float(cfg["burn_fraction"])
    unit = "CPU seconds" if cfg["clock"] == "cpu" else "seconds"
    fig3 = _figure3(curves, truth_mean[0], truth_var, budget, burn, unit)
    ctx.save_figure(fig3, "fig3.png")

    rows = []
    for label, c in curves.items():
        for s, m, v in zip(*_grid_points(c, budget, burn)):
            rows.append([label, s, m, v])
    ctx.write_table("curves", ["method", "seconds", "running_mean_theta1", "running_var_theta1"], rows,
                    title=f"Figure 3 curves: running mean and variance of theta_1 after the burn-in, once a second ({unit}).")
    final = [[label, c["mean"][-1] if len(c["mean"]) else math.nan, c["var"][-1] if len(c["var"]) else math.nan,
              len(c["mean"]), abs(c["mean"][-1] - truth_mean[0]) if len(c["mean"]) else math.nan,
              c["var"][-1] / truth_var if len(c["var"]) else math.nan]
             for label, c in curves.items()]
    final.append(["truth", float(truth_mean[0]), truth_var, int(cfg["truth_draws"]), 0.0, 1.0])
    md = ctx.write_table("fig3_final", ["method", "mean theta_1", "var theta_1", "draws after burn-in",
                                        "|mean - truth|", "var / truth's"], final,
                         title=(f"Figure 3 at the end of the {budget:g} s budget ({unit}; {burn:g} s burn-in); "
                                f"truth: {truth_how}."))
    ctx.notes["step_sizes"] = steps
    ctx.notes["settings"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.items()}
    return {"final": final, "markdown": md, "truth_mean": truth_mean.tolist(), "truth_var": truth_var,
            "steps": steps}


def _run_cpu_budget(ctx: Context, cfg: dict, problem, steps: dict, rate: dict, seeds, reference, truth_mean,
                    truth_var: float, truth_how: str) -> dict:
    """Figure 3 with the budget counted in the process's CPU time (see the module's docstring)."""
    budget, burn = float(cfg["budget"]), float(cfg["budget"]) * float(cfg["burn_fraction"])
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - the cpu extra brings it
        threadpool_limits = None
    limit = threadpool_limits(1) if threadpool_limits is not None else None
    curves = {}
    try:
        for j, label in enumerate(FIG3):
            smp, est = next((s, e) for lab, s, e in METHODS if lab == label)
            ctx.status(f"Figure 3: {label} for {budget:g} CPU s ...")
            chunk = max(10, int(float(cfg["chunk_seconds"]) / max(rate[label], 1e-7)))
            seconds, theta1, info = _chunked(problem, smp, est, steps[label], int(cfg["sgd_steps"]),
                                             seeds[2 * len(METHODS) + j], budget, chunk)
            curves[label] = _curve(seconds, theta1, burn)
            ctx.notes[f"fig3_{label}"] = info
        if reference is not None:
            ctx.status(f"Figure 3: NUTS for {budget:g} CPU s ...")
            w0 = time.perf_counter()
            r = nuts_for(problem, budget, int(seeds[-2].generate_state(1)[0]),
                         warmup=min(500, max(50, int(cfg["truth_draws"]) // 3)), clock=time.process_time)
            curves["NUTS"] = _curve(r["seconds"], r["draws"][:, 0], burn)
            ctx.notes["fig3_NUTS"] = {"draws": int(r["draws"].shape[0]), "cpu_seconds": round(float(r["seconds"][-1]), 2),
                                      "wall_seconds": round(time.perf_counter() - w0, 2)}
    finally:
        if limit is not None:
            limit.unregister()
    return _figure3_outputs(ctx, cfg, curves, truth_mean, truth_var, truth_how, steps)


def _chunked(problem, sampler: str, estimator: str, h: float, sgd_steps: int, seed, budget: float,
             chunk: int) -> tuple:
    """One chain run in chunks of ``chunk`` iterations until ``budget`` CPU seconds are spent (the
    mode search of a CV method included). Returns the CPU second of each draw (interpolated within
    its chunk), theta_1 of each draw, and what was run."""
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    c0, w0 = time.process_time(), time.perf_counter()
    first = run_method(problem, sampler, estimator, h, chunk + sgd_steps * (estimator == "cv"), sgd_steps,
                       ss.spawn(1)[0])
    options = {"centre": first["centre"]} if estimator == "cv" else None
    tr = first["trace"]
    c_start = c0 + first["sgd_cpu"]
    theta1 = [backends.to_numpy(tr.draws[0, :, 0])]
    seconds = [np.linspace(c_start, time.process_time(), chunk + 1)[1:] - c0]
    last = tr.draws[0, -1:, :]
    chunks = 1
    while time.process_time() - c0 < budget:
        a = time.process_time()
        tr = sample(problem.model, sampler, estimator, step_size=h, n_iter=chunk, init=last, rng=ss.spawn(1)[0],
                    estimator_options=options, progress=False)
        theta1.append(backends.to_numpy(tr.draws[0, :, 0]))
        seconds.append(np.linspace(a, time.process_time(), chunk + 1)[1:] - c0)
        last = tr.draws[0, -1:, :]
        chunks += 1
    secs = np.concatenate(seconds)
    info = {"iterations": int(secs.shape[0]), "chunks": chunks, "chunk": chunk, "stopped": "cpu_budget",
            "cpu_seconds": round(float(secs[-1]), 2), "wall_seconds": round(time.perf_counter() - w0, 2),
            "mode_search_cpu_seconds": round(float(first["sgd_cpu"]), 3)}
    return secs, np.concatenate(theta1), info


def _convergence(problem, traces: dict, truth_mean, sgd_steps: int, steps: dict, cost: dict) -> list:
    """For each trace: the first iteration inside the 99% region of N(truth_mean, P^-1) (P the
    Laplace precision), in CPU seconds, and the fraction of the second half inside it."""
    P = np.asarray(backends.to_numpy(problem.precision), dtype=float)
    L = np.linalg.cholesky(P)
    d = P.shape[0]
    z = np.random.default_rng(12345).standard_normal((200_000, d))
    r99 = float(np.quantile(np.einsum("ij,ij->i", z, z), 0.99))
    rows = []
    for label, draws in traces.items():
        diff = (np.asarray(draws, dtype=float) - np.asarray(truth_mean, dtype=float)[None, :]) @ L
        r2 = np.einsum("ij,ij->i", diff, diff)
        inside = np.flatnonzero(r2 <= r99)
        offset = sgd_steps if label.endswith("-CV") else 0
        sgd_cpu, per_iter = cost[label]
        if inside.size:
            k = int(inside[0])
            hit, cpu = offset + k, sgd_cpu + k * per_iter
        else:
            hit, cpu = math.nan, math.nan
        half = r2[r2.shape[0] // 2:]
        rows.append([label, steps[label], hit, offset, cpu, 1e6 * per_iter, float(np.mean(half <= r99))])
    return rows


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


def _figure3(curves: dict, truth_mean: float, truth_var: float, budget: float, burn: float,
             unit: str = "seconds"):
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
        ax.set_xlabel(unit)
        ax.set_xlim(burn, budget)
        ax.legend(fontsize=8)
    fig.suptitle(f"{budget:g} {unit} per method, the first {burn:g} burn-in (logistic regression, d = 10)",
                 fontsize=10)
    fig.tight_layout()
    return fig


EXPERIMENT = Experiment(
    name="logistic-figures",
    title="Figures 2 and 3: trace plots and fixed wall-clock budgets, logistic regression at d = 10",
    run=run,
    paper="Nemeth & Fearnhead (2021), section 6.1, Figures 2 and 3",
)

__all__ = ["EXPERIMENT", "FULL", "QUICK"]
