"""Run one of the review's experiments and write its tables to ``docs/results/<results>.json``.

The reproduction pages (docs/reproductions.md, docs/reproduce-bnn.md, docs/reproduce-bpmf.md) render
their tables from these files with ``python docs/render_tables.py``. This script runs
``sgmc.experiments.reproduce`` (the same function as ``python -m sgmc reproduce``), writes the
experiment's usual outputs under ``--out`` and then the results file, with the experiment's
``meta.json`` (seed, size, options, wall time, notes) and the process's cost (wall and CPU seconds,
peak memory) under ``extra``::

    python docs/reproduce_results.py logistic-table2 --results repro-table2 --out t2 --option dims=10,50

Cells that are not finite numbers (a column that was not run, a run that diverged) are written as
words: "not run" for NaN, "diverged" for infinity.
"""

from __future__ import annotations

import argparse
import math
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from docs._results import write_results  # noqa: E402  (imported first: it records the load at start)


def _cell(value):
    if isinstance(value, float) and not math.isfinite(value):
        return "not run" if math.isnan(value) else "diverged"
    try:  # NumPy scalars
        value = value.item()
    except AttributeError:
        return value
    return _cell(value) if isinstance(value, float) else value


def tables_of(result: dict) -> dict:
    """The experiment's tables in the results-file layout, their titles as notes."""
    out = {}
    for stem, table in result["tables"].items():
        rows = [[_cell(v) for v in row] for row in table["rows"]]
        entry = {"columns": list(table["columns"]), "rows": rows}
        if table.get("title"):
            entry["notes"] = table["title"]
        out[stem] = entry
    return out


def main(argv=None) -> int:
    from sgmc import experiments
    from sgmc.cli.parsing import _experiment_option

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=sorted(experiments.EXPERIMENTS))
    parser.add_argument("--results", required=True, help="name of the results file (docs/results/NAME.json)")
    parser.add_argument("--out", required=True, help="folder for the experiment's own outputs")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--option", action="append", type=_experiment_option, default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    wall = time.perf_counter()
    result = experiments.reproduce(args.name, args.out, quick=args.quick, seed=args.seed, progress=True,
                                   **dict(args.option))
    use = resource.getrusage(resource.RUSAGE_SELF)
    cost = {"wall_s": round(time.perf_counter() - wall, 1), "cpu_user_s": round(use.ru_utime, 1),
            "cpu_system_s": round(use.ru_stime, 1), "max_rss_mib": round(use.ru_maxrss / 1024, 1)}
    path = write_results(args.results, tables_of(result),
                         extra={"experiment": args.name, "meta": result["meta"], "cost": cost})
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
