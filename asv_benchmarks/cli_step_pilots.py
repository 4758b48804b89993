"""Pilot runs behind a default step factor of ``sgmc run``: SGRLD with the SVRG and SAGA estimators.

``sgmc run`` picks h = factor x the sampler's ``step_unit`` at the mode for samplers on their own
scale (SGRLD: 1 / lambda_max(G^{-1/2} H G^{-1/2}), about 1 for the Fisher metric). This script runs
the --quick job (logistic regression, N = 5000, d = 10, 2000 iterations) with SGRLD and each of the
two estimators over a grid of factors and seeds, through the command itself, and records each row:
the mean error against the MALA reference, or the mark of a method that diverged or ran away
(:mod:`sgmc.diagnostics.runaway`). The table goes to ``docs/results/cli_step_pilots.json``.

Usage (from the repository root)::

    python asv_benchmarks/cli_step_pilots.py
"""

from __future__ import annotations

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs._results import write_results  # noqa: E402  (imported first: it records the load at start)

FACTORS = (0.05, 0.1, 0.2, 0.3, 0.5)
SEEDS = (0, 1)
ESTIMATORS = ("svrg", "saga")


def run(seed: int, step: str | None) -> str:
    cmd = [sys.executable, "-m", "sgmc", "run", "--quick", "--no-progress", "--sampler", "sgrld",
           "--estimator", ",".join(ESTIMATORS), "--seed", str(seed)]
    if step is not None:
        cmd += ["--step-size", step]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return proc.stdout


def rows(stdout: str) -> dict:
    """{label: (h, mean error or None, mark or None, data passes or None)} from the printed table."""
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["method", "h"])
    out = {}
    for ln in lines[start + 2:]:
        if not ln.strip():
            break
        cells = ln.split()
        if len(cells) == 6:
            out[cells[0]] = (float(cells[1]), float(cells[5]), None, float(cells[3]))
        else:
            h = float(ln.rsplit("h = ", 1)[1].split(";")[0].split(",")[0]) if "h = " in ln else None
            out[cells[0]] = (h, None, " ".join(cells[1:]), None)
    return out


def main() -> None:
    table = []
    for seed in SEEDS:
        default = rows(run(seed, None))
        units = {label: h / 0.1 for label, (h, *_) in default.items()}  # the default factor is 0.1
        for factor in FACTORS:
            hs = [factor * units[f"SGRLD-{e.upper()}"] for e in ESTIMATORS]
            got = rows(run(seed, ",".join(f"{h:.6g}" for h in hs)))
            for e in ESTIMATORS:
                h, err, mark, passes = got[f"SGRLD-{e.upper()}"]
                table.append([e, seed, factor, h, err, "ran away" if mark and "ran away" in mark
                              else "diverged" if mark else "ok", passes])
            print(table[-2:], flush=True)
    write_results(
        "cli_step_pilots",
        {"sgrld_pilots": {
            "columns": ["estimator", "seed", "factor", "h", "mean error", "outcome", "data passes"],
            "rows": table,
            "formats": [None, None, ".2g", ".3g", ".3g", None, ".0f"],
            "notes": ("sgmc run --quick --sampler sgrld --estimator svrg,saga --step-size h, h = factor x "
                      "SGRLD's step_unit at the mode; mean error against the MALA reference (norm of the "
                      "reference mean 6.6 for seed 0)"),
        }},
        command="python asv_benchmarks/cli_step_pilots.py",
    )


if __name__ == "__main__":
    main()
