"""Table 2 of Nemeth and Fearnhead (2021, section 6.1): logistic regression with N = 10^5, d = 10, 50, 100.

For each d: the simulated data of :func:`sgmc.datasets.logistic_regression_data` (prior N(0, 10 I)),
theta_0 ~ N(0, I) shared by every sampler, a step size for each method chosen by the KSD of pilot
runs over a grid (two chains each, scored after a burn-in of half the pilot on thinned draws; the
grid extended past an edge choice), then 20,000 iterations of SGLD, SGHMC (5 leapfrog steps an
iteration), SGNHT and ULA from theta_0, and of their control-variate versions 10,000 SGD steps to
theta_hat, polished by Newton steps, followed by 10,000 sampling iterations. Time (seconds, step-size
tuning excluded; the mode search included for the CV methods; a second CPU row adds the tuning's
pilot runs, NUTS's warm-up being part of its run), log-loss on 10,000 held-out points,
KSD (eq. 13) on the last 1,000 draws as the review scores them, and the KSD of 1,000 draws thinned
from the last 10,000 iterations. The control runs (``controls``) repeat each CV method at the
unpolished SGD estimate (each centre's distance from the mode at the mode's curvature and its Newton
decrement reported), and score 1,000 independent Laplace draws, the KSD an independent sample of
that size gets. NUTS (2,000 iterations,
the first 1,000 adaptation, as the paper's STAN run) and mean-field ADVI come from NumPyro when it is
installed (``pip install "sgmc[reproduce]"``); without it those columns are dashes.

Options (``reproduce(..., dims=(10,), n=..., ...)``): ``dims``, ``n`` (N), ``iters``, ``sgd_steps``,
``keep`` (draws scored), ``pilot_iters``, ``grid`` (multipliers of the base step), ``nuts`` (False
skips NUTS and ADVI), ``nuts_warmup``, ``nuts_draws``, ``advi_steps``, ``advi_lr`` (Adam's rate), ``controls`` (False skips
the control runs), ``columns`` (the columns to
run, for example ``NUTS,ADVI``; the others are left empty). Every column draws from its own seed, so a
column run alone equals the same column of a whole run, and columns can run in separate processes.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from .. import backends
from ._logistic import (EXTRA, METHODS, advi, laplace_ksd, make_problem, meanfield_ksd, metrics, references,
                        nuts, run_method, tune)
from ._output import Context, Experiment

FULL = {"dims": (10, 50, 100), "n": 100_000, "iters": 20_000, "sgd_steps": 10_000, "keep": 1000,
        "pilot_iters": 2000, "grid": (0.1, 0.3, 1.0, 3.0, 10.0), "nuts": True, "nuts_warmup": 1000, "nuts_draws": 1000,
        "advi_steps": 10_000, "advi_lr": 0.02, "controls": True}
QUICK = {"dims": (10,), "n": 5_000, "iters": 2_000, "sgd_steps": 1_000, "keep": 500, "pilot_iters": 300,
         "grid": (0.3, 1.0, 3.0, 10.0), "nuts": True, "nuts_warmup": 200, "nuts_draws": 300, "advi_steps": 2000,
         "advi_lr": 0.02, "controls": True}

# The paper's Table 2 (time in minutes), verbatim.
PAPER_COLUMNS = ["Metric", "d", "STAN", "SGLD", "SGLDCV", "SGHMC", "SGHMCCV", "SGNHT", "SGNHTCV", "ULA", "ADVI"]
PAPER_ROWS = [
    ["Time (mins)", 10, 21.64, 1.74, 1.46, 11.24, 6.53, 2.56, 1.54, 8.05, 0.76],
    ["", 50, 157.24, 2.55, 2.06, 13.43, 7.76, 3.33, 1.93, 29.21, 2.37],
    ["", 100, 229.76, 3.42, 2.60, 16.01, 9.63, 4.38, 2.36, 51.25, 4.15],
    ["Log-loss", 10, 0.10, 0.11, 0.10, 0.10, 0.10, 0.10, 0.10, 0.10, 0.10],
    ["", 50, 0.04, 0.06, 0.05, 0.06, 0.05, 0.05, 0.05, 0.05, 0.07],
    ["", 100, 0.04, 0.06, 0.05, 0.06, 0.05, 0.05, 0.05, 0.06, 0.07],
    ["KSD", 10, 6.12, 6.26, 6.24, 6.18, 6.25, 6.21, 6.23, 6.19, 6.97],
    ["", 50, 9.24, 11.73, 11.05, 11.59, 11.11, 11.00, 11.33, 11.30, 11.66],
    ["", 100, 11.62, 15.70, 15.53, 15.64, 15.07, 15.14, 15.07, 15.97, 13.61],
]
COLUMNS = ["Metric", "d", "NUTS"] + [m[0] for m in METHODS] + ["ADVI"]


def settings(ctx: Context) -> dict:
    base = QUICK if ctx.quick else FULL
    cfg = {k: ctx.option(k, v) for k, v in base.items()}
    dims = cfg["dims"]
    dims = (dims,) if isinstance(dims, int) else dims
    if not dims or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims):
        msg = f"option `dims` must be a positive int or a sequence of them; got {cfg['dims']!r}"
        raise ValueError(msg)
    cfg["dims"] = tuple(dims)
    cols = ctx.option("columns", None)
    if cols is None:
        cols = tuple(COLUMNS[2:])
    else:  # a sequence, or one string with the names separated by commas (the command line's form)
        cols = tuple(c.strip() for c in cols.split(",")) if isinstance(cols, str) else tuple(cols)
    unknown = [c for c in cols if c not in COLUMNS[2:]]
    if unknown or not cols:
        msg = f"option `columns` must name some of {', '.join(COLUMNS[2:])}; got {ctx.option('columns', None)!r}"
        raise ValueError(msg)
    cfg["columns"] = cols
    return cfg


def thinned_tail(draws: Any, tail: int, keep: int) -> Any:
    """``keep`` draws evenly thinned from the last ``tail`` of ``draws`` (n, dim), ending at the last."""
    tail = min(tail, int(draws.shape[0]))
    step = max(1, tail // keep)
    start = int(draws.shape[0]) - 1 - step * (min(keep, tail) - 1)
    return draws[start::step, :]


def run_dim(ctx: Context, cfg: dict, dim: int, reference) -> dict:
    """Every method at one d: {column: {"time", "log_loss", "ksd", "ksd_thin", "h", ...}}, the tuning
    tables, the control runs of the CV methods (centred at the unpolished SGD estimate) and the KSD of
    independent Laplace draws."""
    ctx.status(f"d = {dim}: simulating N = {cfg['n']} and finding the mode ...")
    problem = make_problem(cfg["n"], dim, ctx.seed, ctx.backend)
    seeds = np.random.SeedSequence([ctx.seed, dim, 1]).spawn(2 * len(METHODS) + 3)
    be = backends.get_backend(problem.model.xp)
    tail = cfg["iters"] - cfg["sgd_steps"]
    out, tuning, controls = {}, {}, {}
    for k, (label, smp, est) in enumerate(METHODS):
        if label not in cfg["columns"]:
            continue
        ctx.status(f"d = {dim}: {label}: tuning h by KSD over {len(cfg['grid'])} pilot runs ...")
        rng = backends.default_rng(seeds[2 * k], backend=be, device=problem.model.device)
        t0, c0 = time.perf_counter(), time.process_time()
        res = tune(problem, smp, est, cfg["pilot_iters"], cfg["grid"], rng)
        tune_time, tune_cpu = time.perf_counter() - t0, time.process_time() - c0
        tuning[label] = res
        h, run, diverged = run_tuned(ctx, problem, label, smp, est, res, cfg, seeds[2 * k + 1])
        chain = run["trace"].draws[0]
        loss, k_, k_thin = metrics(problem, chain[-cfg["keep"]:, :], thinned_tail(chain, tail, cfg["keep"]))
        out[label] = {"time": run["time"], "cpu": run["cpu"], "log_loss": loss, "ksd": k_, "ksd_thin": k_thin, "h": h,
                      "at_edge": res.at_edge, "diverged": diverged, "gap": run.get("gap"),
                      "gap_sgd": run.get("gap_sgd"), "dist": run.get("dist"), "tune_time": tune_time,
                      "tune_cpu": tune_cpu, "cpu_all": tune_cpu + run["cpu"]}
        if est == "cv" and cfg["controls"]:
            ctx.status(f"d = {dim}: {label}: control run centred at the unpolished SGD estimate ...")
            try:
                ctl = run_method(problem, smp, est, h, cfg["iters"], cfg["sgd_steps"], seeds[2 * k + 1],
                                 polish=False)
            except FloatingPointError as err:   # reported in the control table, not raised
                ctx.status(f"d = {dim}: {label}: the control run diverged: {err}")
                controls[label] = {"time": math.nan, "log_loss": "diverged", "ksd": "diverged",
                                   "ksd_thin": "diverged", "gap": float(getattr(err, "gap", math.nan)),
                                   "dist": float(getattr(err, "dist", math.nan))}
                continue
            c_chain = ctl["trace"].draws[0]
            c_loss, c_k, c_thin = metrics(problem, c_chain[-cfg["keep"]:, :], thinned_tail(c_chain, tail, cfg["keep"]))
            controls[label] = {"time": ctl["time"], "log_loss": c_loss, "ksd": c_k, "ksd_thin": c_thin,
                               "gap": ctl["gap"], "dist": ctl["dist"]}
    floor = laplace_ksd(problem, cfg["keep"], seeds[-3]) if cfg["controls"] else math.nan
    if reference is not None and "NUTS" in cfg["columns"]:
        ctx.status(f"d = {dim}: NUTS ({cfg['nuts_warmup']} + {cfg['nuts_draws']} iterations) ...")
        r = nuts(problem, cfg["nuts_warmup"], cfg["nuts_draws"], int(seeds[-2].generate_state(1)[0]))
        loss, k_ = metrics(problem, r["draws"][-cfg["keep"]:])
        out["NUTS"] = {"time": r["time"], "cpu": r["cpu"], "log_loss": loss, "ksd": k_, "ksd_thin": k_,
                       "cpu_all": r["cpu"]}
    if reference is not None and "ADVI" in cfg["columns"]:
        ctx.status(f"d = {dim}: ADVI ({cfg['advi_steps']} steps) ...")
        r = advi(problem, cfg["advi_steps"], cfg["keep"], int(seeds[-1].generate_state(1)[0]), lr=float(cfg["advi_lr"]))
        loss, k_ = metrics(problem, r["draws"])
        out["ADVI"] = {"time": r["time"], "cpu": r["cpu"], "log_loss": loss, "ksd": k_, "ksd_thin": k_,
                       "cpu_all": r["cpu"]}
        sd = np.asarray(r["draws"]).std(axis=0)
        P = np.asarray(backends.to_numpy(problem.precision), dtype=float)
        advi_rows = [["ADVI (NumPyro, mean-field)", k_, float(np.median(sd * np.sqrt(np.diag(P))))],
                     ["N(mode, diag(1 / P_ii)), independent draws (control: the best mean-field Gaussian)",
                      meanfield_ksd(problem, cfg["keep"], seeds[-1]), 1.0],
                     ["N(mode, P^-1), independent draws (the Laplace floor)", laplace_ksd(problem, cfg["keep"], seeds[-3]),
                      float(np.median(np.sqrt(np.diag(np.linalg.inv(P)) * np.diag(P))))]]
    return {"results": out, "tuning": tuning, "controls": controls, "floor": floor,
            "advi": advi_rows if "ADVI" in out else []}


def run_tuned(ctx: Context, problem, label: str, smp: str, est: str, res, cfg: dict, seed) -> tuple:
    """The long run at the step with the smallest pilot KSD; if it diverges, at the next best step."""
    order = [row["step_size"] for row in sorted((r for r in res.table if not r["diverged"]), key=lambda r: r["ksd"])]
    smallest = min(row["step_size"] for row in res.table)
    order += [smallest / 3.0 ** i for i in range(1, 4)]  # when every pilot step diverges in the long run
    diverged = []
    for h in order:
        ctx.status(f"d = {problem.dim}: {label}: h = {h:.3g}; running {cfg['iters']} iterations ...")
        try:
            return h, run_method(problem, smp, est, h, cfg["iters"], cfg["sgd_steps"], seed), diverged
        except FloatingPointError:
            diverged.append(h)
            ctx.status(f"d = {problem.dim}: {label}: diverged at h = {h:.3g}; the next best pilot step")
    msg = f"{label} diverged at every step size tried: {order}"
    raise FloatingPointError(msg)


def table_rows(by_dim: dict) -> list:
    rows = []
    for metric, key in (("Time (s)", "time"), ("CPU time (s)", "cpu"), ("CPU time with tuning (s)", "cpu_all"),
                        ("Log-loss", "log_loss"), ("KSD", "ksd"), ("KSD (thinned)", "ksd_thin")):
        for i, (dim, res) in enumerate(by_dim.items()):
            row = [metric if i == 0 else "", dim]
            for col in COLUMNS[2:]:
                row.append(float(res[col][key]) if col in res and key in res[col] else math.nan)
            rows.append(row)
    return rows


def run(ctx: Context) -> dict:
    cfg = settings(ctx)
    reference = references(ctx, cfg["nuts"], "NUTS and ADVI")
    by_dim, steps, control_rows, advi_rows = {}, [], [], []
    for dim in cfg["dims"]:
        if by_dim:  # what is done so far, in case a later dimension fails
            ctx.write_table("table2_partial", COLUMNS, table_rows(by_dim), title="Table 2 so far")
        r = run_dim(ctx, cfg, dim, reference)
        by_dim[dim] = r["results"]
        advi_rows += [[dim, *row] for row in r["advi"]]
        for label, t in r["tuning"].items():
            used = r["results"][label]
            steps.append([dim, label, used["h"], t.extended, "yes" if t.at_edge else "no",
                          " ".join(f"{h:.3g}" for h in used["diverged"]) or "–",
                          " ".join(f"{row['step_size']:.3g}:{row['ksd']:.3g}" for row in t.table)])
        for label, ctl in r["controls"].items():
            used = r["results"][label]
            control_rows.append([dim, label, "SGD + Newton (the protocol)", used["dist"], used["gap"], used["h"],
                                 used["log_loss"], used["ksd"], used["ksd_thin"]])
            control_rows.append([dim, label, "SGD only (control)", ctl["dist"], ctl["gap"], used["h"], ctl["log_loss"],
                                 ctl["ksd"], ctl["ksd_thin"]])
        if cfg["controls"]:
            control_rows.append([dim, f"Laplace, {cfg['keep']} independent draws", "–", math.nan, math.nan, math.nan,
                                 math.nan, r["floor"], r["floor"]])
    rows = table_rows(by_dim)
    size = "quick size" if ctx.quick else "full size"
    title = (f"Table 2 (sgmc, {size}): N = {cfg['n']}, {cfg['iters']} iterations ({cfg['sgd_steps']} SGD + "
             f"{cfg['iters'] - cfg['sgd_steps']} sampling for CV), metrics on the last {cfg['keep']} draws "
             f"(KSD (thinned): {cfg['keep']} draws thinned from the last {cfg['iters'] - cfg['sgd_steps']}); "
             f"time in seconds (wall clock, and the process's CPU time), h tuning excluded; CPU time with tuning adds "
             f"the step size's pilot runs of the SG columns (NUTS's warm-up is in its CPU time); NUTS {cfg['nuts_warmup']} + {cfg['nuts_draws']} iterations "
             "(NumPyro), ADVI mean-field (NumPyro).")
    if "references" in ctx.notes:
        title += f" {ctx.notes['references']}."
    md = ctx.write_table("table2", COLUMNS, rows, title=title)
    ctx.write_table("table2_paper", PAPER_COLUMNS, PAPER_ROWS, digits=5,
                    title="Table 2 of Nemeth and Fearnhead (2021), verbatim (time in minutes; STAN is NUTS).")
    ctx.write_table("step_sizes", ["d", "method", "h", "pilots added past the edge", "best pilot at grid edge",
                                   "long run diverged at", "grid (h:pilot KSD)"], steps,
                    title="Step sizes chosen by the KSD of pilot runs (review convention for h).")
    if control_rows:
        ctx.write_table("cv_controls", ["d", "method", "centre", "distance from the mode (sds)",
                                        "Newton decrement at the centre (sds)", "h", "Log-loss", "KSD",
                                        "KSD (thinned)"], control_rows,
                        title=("The CV methods at the polished centre and, as a control, at the unpolished "
                               "SGD estimate (same step, same seed); the centre's distance from the mode in "
                               "posterior standard deviations at the mode's curvature (mode_distance) and its "
                               "Newton decrement, which uses the curvature at the centre (sgmc.optimize.mode_gap); "
                               "and the KSD of independent draws from the Laplace approximation."))
    if advi_rows:
        ctx.write_table("advi_control", ["d", "sample", "KSD", "median marginal sd / sqrt(1 / P_ii)"], advi_rows,
                        title=(f"ADVI's KSD ({cfg['keep']} draws) beside independent draws from the mean-field "
                               "Gaussian closest to the Laplace approximation and from the Laplace "
                               "approximation itself; the last column compares marginal spreads."))
    ctx.notes["settings"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.items()}
    return {"table": rows, "columns": COLUMNS, "markdown": md, "results": by_dim}


EXPERIMENT = Experiment(
    name="logistic-table2",
    title="Table 2: logistic regression, N = 10^5, d = 10, 50, 100 (time, log-loss, KSD)",
    run=run,
    paper="Nemeth & Fearnhead (2021), section 6.1, Table 2",
)

__all__ = ["EXPERIMENT", "FULL", "QUICK", "EXTRA"]
