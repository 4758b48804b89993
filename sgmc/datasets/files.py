"""A user's own numeric table: :func:`load_csv` reads a CSV file into a design matrix and a target vector."""

from __future__ import annotations

import csv
import math
import operator
import os
from typing import Any, NamedTuple

import numpy as np

from .._validation import check_file
from .common import _on_backend


class CSVData(NamedTuple):
    """A numeric table read by :func:`load_csv`.

    Attributes
    ----------
    X : ndarray, shape (n, p)
        Feature columns (with a leading column of ones when ``intercept=True``).
    y : ndarray, shape (n,)
        The target column.
    feature_names : list of str
        Names of the columns of ``X`` (``"intercept"`` first when added; ``"x0"``, ``"x1"``, ... for
        a file without a header).
    target_name : str
        Name of the target column.
    """

    X: np.ndarray
    y: np.ndarray
    feature_names: list
    target_name: str


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _resolve_target(target: Any, names: list, has_header: bool) -> int:
    p = len(names)
    if isinstance(target, str):
        if target in names:
            return names.index(target)
        stripped = target.strip()
        if stripped.lstrip("-").isdigit():
            return _resolve_target(int(stripped), names, has_header)
        if not has_header:
            msg = (
                f"`target`={target!r} is a column name but the file has no header row; give the "
                f"target column's index (0 to {p - 1}, or -1 for the last)"
            )
        else:
            msg = f"`target`={target!r} is not a column of the file; its columns are {names}"
        raise ValueError(msg)
    try:
        k = operator.index(target)
    except TypeError:
        msg = f"`target` must be a column name or an integer index; got {target!r}"
        raise TypeError(msg) from None
    if not -p <= k < p:
        msg = f"`target` index must be in [{-p}, {p - 1}] for a file with {p} columns; got {k}"
        raise ValueError(msg)
    return k % p


def load_csv(
    path: str | os.PathLike,
    target: Any = -1,
    *,
    header: bool | None = None,
    delimiter: str = ",",
    intercept: bool = False,
    backend: Any = None,
) -> CSVData:
    """Read a numeric CSV file into a design matrix and a target vector.

    Parameters
    ----------
    path : str or path-like
    target : str or int, default -1
        The target column, by header name or by index (negative counts from the end). A string of
        digits such as ``"3"`` is read as an index when no column has that name.
    header : bool, optional
        Whether the first row holds column names. By default it does when any of its cells is not a
        number.
    delimiter : str, default ","
    intercept : bool, default False
        Prepend a column of ones to ``X`` (named ``"intercept"``).
    backend : str or Backend, optional
        Return ``X`` and ``y`` on this backend (e.g. ``"cupy"``); NumPy by default.

    Returns
    -------
    CSVData
        ``(X, y, feature_names, target_name)`` with float64 arrays.

    Raises
    ------
    ValueError
        For a missing or empty file, rows of the wrong length, an unknown target, or a cell that is
        empty, not a number, or not finite; the message names the line and the column.

    Examples
    --------
    >>> import os, tempfile
    >>> from sgmc.datasets import load_csv
    >>> path = os.path.join(tempfile.mkdtemp(), "toy.csv")
    >>> with open(path, "w") as fh:
    ...     _ = fh.write("age,dose,outcome\\n30,1.5,1\\n41,0.5,0\\n")
    >>> data = load_csv(path, target="outcome", intercept=True)
    >>> data.X.shape, data.feature_names, data.y.tolist()
    ((2, 3), ['intercept', 'age', 'dose'], [1.0, 0.0])
    """
    path = check_file(path, "path", "CSV file")
    if not isinstance(delimiter, str) or len(delimiter) != 1:
        msg = f"`delimiter` must be a single character; got {delimiter!r}"
        raise ValueError(msg)
    try:
        fh = open(path, newline="", encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as exc:
        msg = f"cannot read CSV file {path!r}: `path` must be the path of a readable CSV file; {exc.strerror or exc}"
        raise ValueError(msg) from None
    with fh:
        try:
            rows = [(k + 1, r) for k, r in enumerate(csv.reader(fh, delimiter=delimiter))]
        except (UnicodeDecodeError, csv.Error) as exc:
            what = "is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else f"cannot be parsed ({exc})"
            msg = f"{path!r} is not a text CSV file: it {what}; save the data as comma-separated UTF-8 text"
            raise ValueError(msg) from None
    if any("\x00" in c for _, r in rows for c in r):
        msg = f"{path!r} is not a text CSV file: it holds NUL bytes (a binary file?); save the data as comma-separated text"
        raise ValueError(msg)
    rows = [(line, [c.strip() for c in r]) for line, r in rows if any(c.strip() for c in r)]
    if not rows:
        msg = f"CSV file {path!r} is empty"
        raise ValueError(msg)
    first_line, first = rows[0]
    if header is None:
        header = not all(_is_number(c) for c in first)
    p = len(first)
    if header:
        names = [c if c else f"x{k}" for k, c in enumerate(first)]
        body = rows[1:]
    else:
        names = [f"x{k}" for k in range(p)]
        body = rows
    if p < 2:
        msg = f"CSV file {path!r} needs at least 2 columns (features and a target); it has {p}"
        raise ValueError(msg)
    if not body:
        msg = f"CSV file {path!r} has a header but no data rows"
        raise ValueError(msg)
    t = _resolve_target(target, names, bool(header))
    values = np.empty((len(body), p), dtype=np.float64)
    for r, (line, cells) in enumerate(body):
        if len(cells) != p:
            msg = f"{path}: line {line} has {len(cells)} fields; expected {p} (as on line {first_line})"
            raise ValueError(msg)
        for c, cell in enumerate(cells):
            try:
                v = float(cell)
            except ValueError:
                what = "is empty" if cell == "" else f"is not a number: {cell!r}"
                msg = f"{path}: line {line}, column {names[c]!r} {what}"
                raise ValueError(msg) from None
            if not math.isfinite(v):
                msg = f"{path}: line {line}, column {names[c]!r} is not finite: {cell!r}"
                raise ValueError(msg)
            values[r, c] = v
    keep = [k for k in range(p) if k != t]
    X = values[:, keep]
    y = values[:, t].copy()
    feature_names = [names[k] for k in keep]
    if intercept:
        X = np.concatenate([np.ones((X.shape[0], 1)), X], axis=1)
        feature_names = ["intercept", *feature_names]
    return _on_backend(CSVData(np.ascontiguousarray(X), y, feature_names, names[t]), backend)
