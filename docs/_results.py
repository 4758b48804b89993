"""Results files for the figures in README.md and docs/: one JSON file per measuring script.

Every script that measures a number shown in the documentation ends with ``write_results``, which
writes ``docs/results/<name>.json`` holding the tables it measured together with what is needed to
judge and repeat them: the exact command, the UTC time, the machine (platform, CPU model, cores,
memory), the load average when the script started and when it wrote the file, and the versions of
Python, NumPy, sgmc and every other package the measurement imported. ``docs/render_tables.py``
writes the pages' tables from these files.

A script imports this module from the repository root::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from docs._results import write_results

and calls ``write_results("peer_sgld", {"sgld": {"columns": [...], "rows": [[...], ...]}})``. The load
at start is taken when this module is first imported, so import it before measuring.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata as _metadata
import json
import math
import os
import platform
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "docs" / "results"

#: Distributions recorded in ``versions`` whenever their module is imported by the measuring process.
KNOWN_PACKAGES = {
    "numpy": "numpy", "scipy": "scipy", "sgmc": "sgmc", "numba": "numba", "jax": "jax", "jaxlib": "jaxlib",
    "blackjax": "blackjax", "sgmcmcjax": "sgmcmcjax", "posteriors": "posteriors", "torch": "torch",
    "particles": "particles", "stein_thinning": "stein-thinning", "threadpoolctl": "threadpoolctl",
    "array_api_strict": "array-api-strict", "array_api_compat": "array-api-compat", "cupy": "cupy",
    "numpyro": "numpyro", "arviz": "arviz", "sklearn": "scikit-learn", "pandas": "pandas",
}

_LOAD_AT_IMPORT = os.getloadavg()
_TIME_AT_IMPORT = _dt.datetime.now(_dt.timezone.utc)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None


def machine() -> dict:
    """The machine the measurement ran on: platform, CPU model, cores (all and usable), memory."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": usable,
        "memory_gib": _memory_gib(),
    }


def _version(dist: str) -> str | None:
    try:
        return _metadata.version(dist)
    except _metadata.PackageNotFoundError:
        return None


def versions(packages=()) -> dict:
    """Python's version and those of NumPy, sgmc, every known package imported, and ``packages``."""
    out = {"python": platform.python_version()}
    names = {"numpy": "numpy", "sgmc": "sgmc"}
    names.update({mod: dist for mod, dist in KNOWN_PACKAGES.items() if mod in sys.modules})
    names.update({dist: dist for dist in packages})
    for dist in sorted(set(names.values())):
        v = _version(dist)
        if v is not None:
            out[dist] = v
    return out


def source_state() -> dict:
    """The git commit of the tree the measurement ran in, and whether ``sgmc/`` differed from it."""
    import subprocess

    out = {}
    try:
        out["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                       timeout=10).stdout.strip() or None
        status = subprocess.run(["git", "status", "--porcelain", "--", "sgmc"], cwd=ROOT, capture_output=True,
                                text=True, timeout=10).stdout
        out["sgmc_modified"] = bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        out["commit"] = None
    return out


def _from_root(word: str) -> str:
    """``word`` as a path relative to the repository root when it names a path inside the repository.

    An absolute path inside the repository becomes relative to it; a relative path is read from the
    current folder (which may not be the root) and rewritten relative to the root. Anything else (an
    option, a number, a path outside the repository) is returned as it is.
    """
    if not word or word.startswith("-"):
        return word
    p = Path(word).expanduser()
    if not p.is_absolute():
        if Path.cwd().resolve() == ROOT or not p.exists():
            return word
        p = Path.cwd() / p
    try:
        rel = p.resolve().relative_to(ROOT)
    except (ValueError, OSError):
        return word
    return str(rel) if str(rel) != "." else "."


def relative_command(argv) -> str:
    """The command line ``python ARGV...`` to be run from the repository root.

    Paths inside the repository (the script, and option values such as ``--out=DIR`` or ``--tree DIR``)
    are written relative to the root, so the command runs from a fresh clone as written.
    """
    words = []
    for a in argv:
        key, eq, value = a.partition("=") if a.startswith("--") else ("", "", a)
        words.append(key + eq + _from_root(value) if eq or not key else a)
    return " ".join(["python"] + [shlex.quote(w) for w in words])


def default_command() -> str:
    """The command line of this process, with paths inside the repository relative to its root."""
    return relative_command(sys.argv)


def absolute_paths(command: str) -> list:
    """The absolute paths (``/...``, ``~...``, ``C:\\...``) a recorded command names, in order.

    Words are split as a shell does; an option's value after ``=`` (``--out=/tmp/x``,
    ``--option out=/tmp/x``) and each item of a comma-separated list is looked at too.
    """
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    found = []
    for w in words:
        for part in w.replace("=", ",").split(","):
            part = part.strip().strip("'\"()[]{}")
            if part.startswith(("/", "~")) or (len(part) > 2 and part[1] == ":" and part[2] in "\\/"):
                found.append(part)
    return found


def _check_cell(value, where: str):
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            msg = f"{where}: a cell is {value!r}; write a string saying why (e.g. 'failed') instead"
            raise ValueError(msg)
        return value
    try:  # NumPy scalars
        item = value.item()
    except AttributeError:
        item = None
    if isinstance(item, (bool, int, float)):
        return _check_cell(item, where)
    msg = f"{where}: a cell must be a string, a number or None, got {type(value).__name__}"
    raise TypeError(msg)


def check_tables(tables) -> dict:
    """Validate ``tables``: ``{table_id: {"columns": [...], "rows": [[...], ...], ...}}``."""
    if not isinstance(tables, dict) or not tables:
        msg = f"tables must be a non-empty dict {{table_id: {{'columns', 'rows'}}}}, got {tables!r:.80}"
        raise TypeError(msg)
    out = {}
    for tid, table in tables.items():
        if not isinstance(tid, str) or not tid or "#" in tid or any(c.isspace() for c in tid):
            msg = f"tables: a table id must be a non-empty string without '#' or spaces, got {tid!r}"
            raise ValueError(msg)
        if not isinstance(table, dict) or "columns" not in table or "rows" not in table:
            msg = f"tables[{tid!r}] must be a dict with 'columns' and 'rows'"
            raise TypeError(msg)
        columns = [str(c) for c in table["columns"]]
        rows = []
        for i, row in enumerate(table["rows"]):
            row = list(row)
            if len(row) != len(columns):
                msg = f"tables[{tid!r}] row {i} has {len(row)} cells, expected {len(columns)} (the columns)"
                raise ValueError(msg)
            rows.append([_check_cell(v, f"tables[{tid!r}] row {i}") for v in row])
        fmt = table.get("formats")
        if fmt is not None and len(fmt) != len(columns):
            msg = f"tables[{tid!r}]['formats'] has {len(fmt)} entries, expected {len(columns)}"
            raise ValueError(msg)
        entry = dict(table)
        entry.update(columns=columns, rows=rows)
        out[tid] = entry
    return out


def write_results(name, tables, command=None, extra=None, *, packages=(), directory=None) -> Path:
    """Write ``docs/results/<name>.json`` with ``tables`` and the measurement's provenance.

    Parameters
    ----------
    name : str
        File stem (letters, digits, ``_`` and ``-``).
    tables : dict
        ``{table_id: {"columns": [...], "rows": [[...], ...], "notes": str, "formats": [...]}}``;
        cells are strings, numbers or None. ``formats`` (optional) holds one Python format spec per
        column used by the renderer for numbers (``".3g"`` by default for floats).
    command : str, optional
        The exact command that produced the file; default: this process's command line.
    extra : dict, optional
        Further fields (settings, raw timings, the peers' thread counts, ...), stored under ``extra``.
    packages : sequence of str, optional
        Distributions to record in ``versions`` beyond the ones imported by this process (e.g. those a
        child process used).
    directory : path-like, optional
        Where to write; default ``docs/results`` in the repository.

    Returns
    -------
    pathlib.Path
        The file written.
    """
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-" for c in name):
        msg = f"name must be a non-empty string of letters, digits, '_' or '-', got {name!r}"
        raise ValueError(msg)
    if extra is not None and not isinstance(extra, dict):
        msg = f"extra must be a dict or None, got {type(extra).__name__}"
        raise TypeError(msg)
    command = command if command is not None else default_command()
    if absolute_paths(command):
        import warnings

        msg = (f"the recorded command names absolute paths {absolute_paths(command)}: it will not run from a "
               "fresh clone as written; give paths relative to the repository root (e.g. --out build/NAME)")
        warnings.warn(msg, stacklevel=2)
    record = {
        "command": command,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "started": _TIME_AT_IMPORT.isoformat(timespec="seconds"),
        "machine": machine(),
        "load": {"start": list(_LOAD_AT_IMPORT), "end": list(os.getloadavg())},
        "versions": versions(packages),
        "source": source_state(),
        "tables": check_tables(tables),
    }
    if extra:
        record["extra"] = extra
    folder = Path(directory) if directory is not None else RESULTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path
