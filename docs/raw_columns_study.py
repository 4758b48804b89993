"""``sgmc run --data`` on columns in their natural units: each default method's means and sds against exact ones.

The three simulated data sets of tests/test_raw_columns.py (patients: age in years, income in
currency units and a 0/1 flag, logistic; clinic visits: a count target for the linear model with
covariates in raw units; a wide table of 12 columns from 1e-3 to thousands, logistic), 3,000 rows
each, go through the command exactly as a user would type it::

    sgmc run --data FILE.csv --target y --intercept --chains 4 [--model linear]

and each default method's posterior means and sds are compared with the exact reference of the
test (the conjugate closed form for the linear model; importance sampling from a multivariate t
around the mode for the logistic ones, with its own standard errors), in units of the combined
Monte Carlo standard error (ArviZ's ESS-based mcse of the chains' mean and sd, and the
reference's). For contrast, the same posterior sampled on the raw columns with the step sizes the
command used to choose (0.1 / lambda_max for SGLD, 0.5 / lambda_max for SGLD-CV, lambda_max the
largest curvature at the raw mode) and otherwise the same settings.

Run from the repository root (about a CPU minute)::

    python docs/raw_columns_study.py

It writes docs/results/raw_columns.json (docs/models.md names it).
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from docs._results import write_results  # noqa: E402  (imported first: the load at start)
from docs._cli import run_cli  # noqa: E402

import numpy as np  # noqa: E402

import sgmc  # noqa: E402
from sgmc import Trace  # noqa: E402
from sgmc.models import LinearRegression, LogisticRegression  # noqa: E402
from sgmc.optimize import laplace  # noqa: E402

import test_raw_columns as raw  # noqa: E402  (the data sets and exact references of the test)

CHAINS, ITERS, BURN = 4, 20_000, 10_000  # sgmc run's defaults with --chains 4


def command_run(folder: Path, name: str, X, y, names, model: str) -> tuple:
    csv = folder / f"{name}.csv"
    raw.write_csv(csv, X, y, names)
    argv = ["run", "--data", str(csv), "--target", "y", "--intercept", "--chains", str(CHAINS), "--no-progress",
            "--output", str(folder / f"{name}.npz")]
    if model == "linear":
        argv += ["--model", "linear"]
    printed = run_cli(argv)
    traces = {label: Trace.load(folder / f"{name}-{label}.npz") for label in ("SGLD", "SGLD-CV")}
    return traces, printed


def raw_runs(Xi, yi, model: str) -> dict:
    """The posterior sampled on the raw columns with the former default steps (no conditioning)."""
    glm = LinearRegression(Xi, yi) if model == "linear" else LogisticRegression(Xi, yi)
    fit = laplace(glm, 0, batch_size=max(1, int(0.01 * len(yi))), n_steps=1000, progress=False)
    lam = float(np.linalg.eigvalsh(fit.precision)[-1])
    out = {}
    for label, est, factor in (("SGLD", "minibatch", 0.1), ("SGLD-CV", "cv", 0.5)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the run-away and mixing warnings are what this row shows
            init = np.random.default_rng(0).standard_normal((CHAINS, glm.dim)) if est == "minibatch" else None
            n_iter, burn = (ITERS, BURN) if est == "minibatch" else (ITERS - BURN, 0)
            trace = sgmc.sample(glm, "sgld", est, step_size=factor / lam, batch_size=0.01, n_iter=n_iter,
                                burn_in=burn, chains=CHAINS, init=init, rng=1, progress=False)
        out[label] = (trace, factor / lam)
    return out, lam


def compare(draws: np.ndarray, ref: tuple) -> tuple:
    mean_ref, sd_ref, mean_se_ref, sd_se_ref = ref
    mcse_mean, mcse_sd = raw.mcse_mean_sd(draws)
    flat = draws.reshape(-1, draws.shape[-1])
    mean, sd = flat.mean(axis=0), flat.std(axis=0, ddof=1)
    z_mean = (mean - mean_ref) / np.sqrt(mcse_mean**2 + mean_se_ref**2)
    z_sd = (sd - sd_ref) / np.sqrt(mcse_sd**2 + sd_se_ref**2)
    return mean, sd, z_mean, z_sd


def main_study() -> None:
    tables, extra = {}, {"chains": CHAINS, "iters": ITERS, "burn_in": BURN, "z_tol": raw.Z_TOL, "data": {}}
    columns = ["coefficient", "reference mean", "reference sd", "method", "h", "subsample n", "mean",
               "sd", "sd / reference sd", "mean error / se", "sd error / se"]
    summary_rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, (simulate, model) in raw.CASES.items():
            X, y, names = simulate()
            rows_idx = raw.training_rows(len(y))
            Xi = np.column_stack([np.ones(len(rows_idx)), X[rows_idx]])
            yi = y[rows_idx]
            ref = raw.linear_reference(Xi, yi) if model == "linear" else raw.logistic_reference(Xi, yi)
            traces, printed = command_run(folder, name, X, y, names, model)
            before, lam = raw_runs(Xi, yi, model)
            coef = ["intercept", *names]
            rows = []
            for label, trace in traces.items():
                row = trace.info["command"]["row"]
                n_sub = int(trace.stats["batch_size"][0, 0])
                mean, sd, z_mean, z_sd = compare(np.asarray(trace.draws, dtype=np.float64), ref)
                for j, c in enumerate(coef):
                    rows.append([c, ref[0][j], ref[1][j], f"{label} (sgmc run)", row["h"], n_sub, mean[j], sd[j],
                                 sd[j] / ref[1][j], z_mean[j], z_sd[j]])
                summary_rows.append([name, f"{label} (sgmc run)", "result" if "mean_error" in row else "no result",
                                     row["h"], n_sub, row.get("passes"),
                                     float(np.max(np.abs(z_mean))), float(np.max(np.abs(z_sd))),
                                     float(np.min(sd / ref[1])), float(np.max(sd / ref[1]))])
            for label, (trace, h) in before.items():
                draws = np.asarray(trace.draws, dtype=np.float64)
                finite = bool(np.all(np.isfinite(draws)))
                mean, sd, z_mean, z_sd = compare(draws, ref) if finite else (None,) * 4
                for j, c in enumerate(coef):
                    rows.append([c, ref[0][j], ref[1][j], f"{label} (raw columns, former steps)", h, None,
                                 None if mean is None else mean[j], None if sd is None else sd[j],
                                 None if sd is None else sd[j] / ref[1][j],
                                 None if z_mean is None else z_mean[j], None if z_sd is None else z_sd[j]])
                passes = float(trace.info["setup_data_passes"]) + float(np.mean(trace.stats["data_passes"][:, -1]))
                summary_rows.append([name, f"{label} (raw columns, former steps)", "finite" if finite else "not finite",
                                     h, int(trace.stats["batch_size"][0, 0]), passes,
                                     None if z_mean is None else float(np.max(np.abs(z_mean))),
                                     None if z_sd is None else float(np.max(np.abs(z_sd))),
                                     None if sd is None else float(np.min(sd / ref[1])),
                                     None if sd is None else float(np.max(sd / ref[1]))])
            tables[name] = {"columns": columns, "rows": rows,
                            "notes": f"{name}: {model} regression, {len(yi)} training rows; lambda_max at the raw "
                                     f"mode {lam:.3g}; reference: "
                                     f"{'closed form' if model == 'linear' else 'importance sampling (t, 100,000 draws)'}"}
            extra["data"][name] = {"model": model, "lambda_max_raw": lam, "report": printed.splitlines()[-12:]}
    tables["summary"] = {
        "columns": ["data", "method", "outcome", "h", "subsample n", "data passes", "max |mean error| / se",
                    "max |sd error| / se",
                    "min sd / reference sd", "max sd / reference sd"],
        "rows": summary_rows,
        "notes": f"errors in combined standard errors (chains' ESS-based mcse and the reference's); the test "
                 f"(tests/test_raw_columns.py) requires every 'sgmc run' row within {raw.Z_TOL} of them",
    }
    path = write_results("raw_columns", tables, command="python docs/raw_columns_study.py", extra=extra,
                         packages=("arviz", "statsmodels"))
    print(f"wrote {path.relative_to(ROOT)}")
    for r in summary_rows:
        print(r)


if __name__ == "__main__":
    main_study()
