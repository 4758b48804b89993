"""The worked example of docs/plots.md: named coefficients, their posterior table, and the plots.

Fits a Bayesian linear regression to a simulated table with named columns (age, dose, weight) by SGLD
and SGLD-CV, writes the figures of ``sgmc.plot`` to ``docs/figures/plots-*.png``, runs
``sgmc run --data`` on the same table saved as a CSV file, and writes both posterior tables to
``docs/results/plots-example.json`` (with the command, machine, load and versions).

Run from the repository root::

    python docs/plots_example.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from docs._results import write_results  # noqa: E402  (imported before measuring: the load at start)
from docs._cli import run_cli  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import sgmc  # noqa: E402
from sgmc import plot  # noqa: E402
from sgmc.models import LinearRegression  # noqa: E402

FIGURES = Path(__file__).resolve().parent / "figures"


def data(n: int = 10_000, seed: int = 0) -> pd.DataFrame:
    """A table of three standardised covariates and an outcome, y = 1 + 0.8 age - 1.5 dose + 0.3 weight + noise."""
    r = np.random.default_rng(seed)
    age, dose = r.normal(size=n), r.normal(size=n)
    weight = 0.6 * age + 0.8 * r.normal(size=n)  # correlated with age: the pair plot shows it
    y = 1.0 + 0.8 * age - 1.5 * dose + 0.3 * weight + r.normal(size=n)
    return pd.DataFrame({"intercept": np.ones(n), "age": age, "dose": dose, "weight": weight, "y": y})


def _table(summary) -> dict:
    cols = summary.columns
    rows = [[name] + [float(summary[c][i]) for c in cols] for i, name in enumerate(summary.index)]
    return {"columns": ["parameter", *cols], "rows": rows,
            "formats": [None] + [".0f" if c.startswith("ess") else ".4g" for c in cols]}


def main_example() -> None:
    frame = data()
    model = LinearRegression(frame[["intercept", "age", "dose", "weight"]], frame["y"].to_numpy())
    exact = np.asarray(model.posterior()[0])
    runs = {
        "SGLD": sgmc.sample(model, "sgld", step_size=2e-5, batch_size=100, n_iter=4000, burn_in=1000, chains=4,
                            rng=1, progress=False),
        "SGLD-CV": sgmc.sample(model, "sgld", "cv", step_size=2e-5, batch_size=100, n_iter=4000, burn_in=1000,
                               chains=4, rng=1, progress=False),
    }
    cv = runs["SGLD-CV"]
    FIGURES.mkdir(exist_ok=True)
    plot.plot_trace(cv, reference=exact).savefig(FIGURES / "plots-trace.png", dpi=80)
    plot.plot_density(cv).savefig(FIGURES / "plots-density.png", dpi=80)
    plot.plot_autocorr(cv, max_lag=50).savefig(FIGURES / "plots-autocorr.png", dpi=80)
    plot.plot_pair(cv, ["age", "dose", "weight"]).savefig(FIGURES / "plots-pair.png", dpi=80)
    plot.plot_convergence(runs, reference=exact).savefig(FIGURES / "plots-convergence.png", dpi=80)

    with tempfile.TemporaryDirectory() as tmp:
        csv = os.path.join(tmp, "mine.csv")
        frame.drop(columns="intercept").to_csv(csv, index=False)
        argv = ["run", "--quick", "--no-progress", "--data", csv, "--model", "linear", "--intercept",
                "--chains", "4", "--sampler", "sgld", "--estimator", "cv"]
        printed = run_cli(argv)
    lines = printed.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("posterior of the coefficients"))
    head = lines[start + 1].split()
    body = []
    for ln in lines[start + 2:]:
        if not ln.strip():
            break
        cells = ln.split()
        body.append([cells[0]] + [float(c) for c in cells[1:]])
    cli = {"columns": ["coefficient", *head[1:]], "rows": body,
           "formats": [None] + [".0f" if c.startswith("ess") else ".4g" for c in head[1:]],
           "notes": f"as printed by: sgmc {' '.join(argv[:4])} mine.csv {' '.join(argv[5:])}"}
    exact_rows = [[n, float(v)] for n, v in zip(model.param_names, exact)]
    write_results("plots-example", {
        "summary": _table(cv.summary()),
        "cli": cli,
        "exact": {"columns": ["parameter", "exact posterior mean"], "rows": exact_rows, "formats": [None, ".4g"]},
    }, command="python docs/plots_example.py", extra={
        "figures": sorted(str(p.relative_to(FIGURES.parent.parent)) for p in FIGURES.glob("plots-*.png")),
        "sampling_time": {k: v.info["sampling_time"] for k, v in runs.items()},
    }, packages=("matplotlib",))


if __name__ == "__main__":
    main_example()
