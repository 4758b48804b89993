"""Names of the coordinates of ``theta``: checked once, carried by models and traces, stored as text.

A model's ``param_names`` is a tuple of ``dim`` distinct strings, one per coordinate of the flat
parameter vector. Models built from a table take them from its columns (a CSV file's header, a data
frame's ``columns``); models with a block layout (a neural network's weight matrices, matrix factors)
name each coordinate by its block and index (``B[0,3]``); otherwise a coordinate is ``prefix[j]``.
Names are plain strings, so traces and checkpoints store them as data.
"""

from __future__ import annotations

import operator
from typing import Any, Iterable, Sequence

__all__ = ["default_names", "check_param_names", "block_names", "column_names", "model_param_names", "names_given"]


def default_names(dim: int, prefix: str = "theta") -> tuple:
    """``(prefix[0], ..., prefix[dim-1])``.

    Examples
    --------
    >>> default_names(3, "beta")
    ('beta[0]', 'beta[1]', 'beta[2]')
    """
    return tuple(f"{prefix}[{j}]" for j in range(int(dim)))


def check_param_names(names: Any, dim: int, *, prefix: str = "theta", what: str = "param_names") -> tuple:
    """``names`` as a tuple of ``dim`` distinct strings; ``None`` gives :func:`default_names`.

    Entries may be strings or integers (a data frame's default column labels); integers become their
    decimal text.

    Raises
    ------
    TypeError
        Naming ``what`` when ``names`` is a single string or not a sequence, or an entry is neither a
        string nor an integer.
    ValueError
        Naming ``what`` and the expected length when there are not ``dim`` names, or when a name
        repeats or is empty.

    Examples
    --------
    >>> check_param_names(["age", "dose"], 2)
    ('age', 'dose')
    >>> check_param_names(None, 2, prefix="beta")
    ('beta[0]', 'beta[1]')
    """
    dim = int(dim)
    if names is None:
        return default_names(dim, prefix)
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        msg = f"`{what}` must be a sequence of {dim} strings, one per coordinate of theta; got {type(names).__name__}"
        raise TypeError(msg)
    out = []
    for name in names:
        if isinstance(name, str):
            out.append(str(name))
        elif not isinstance(name, bool) and _as_int(name) is not None:
            out.append(str(_as_int(name)))
        else:
            msg = f"`{what}` must hold strings (one per coordinate of theta); got an entry of type {type(name).__name__}: {name!r}"
            raise TypeError(msg)
    if len(out) != dim:
        msg = f"`{what}` must have {dim} entries, one per coordinate of theta (dim = {dim}); got {len(out)}"
        raise ValueError(msg)
    if any(not n for n in out):
        msg = f"`{what}` must not hold empty names; entry {out.index('')} is empty"
        raise ValueError(msg)
    if len(set(out)) != len(out):
        seen: set = set()
        dup = next(n for n in out if n in seen or seen.add(n))
        msg = f"`{what}` must hold distinct names; {dup!r} appears more than once"
        raise ValueError(msg)
    return tuple(out)


def _as_int(value: Any) -> int | None:
    """An integer label (Python or NumPy integer) as int, else None."""
    try:
        return operator.index(value)
    except TypeError:
        return None


def block_names(blocks: Sequence[tuple]) -> tuple:
    """Names for a flat vector made of row-major blocks: ``[(name, shape), ...]`` in order.

    A block of shape ``()`` is one name; ``(n,)`` gives ``name[i]``; ``(n, m)`` gives ``name[i,j]``.

    Examples
    --------
    >>> block_names([("W", (2, 2)), ("b", (2,)), ("s", ())])
    ('W[0,0]', 'W[0,1]', 'W[1,0]', 'W[1,1]', 'b[0]', 'b[1]', 's')
    """
    out: list = []
    for name, shape in blocks:
        shape = tuple(int(s) for s in shape)
        if not shape:
            out.append(str(name))
            continue
        total = 1
        for s in shape:
            total *= s
        for flat in range(total):
            idx, rest = [], flat
            for s in reversed(shape):
                idx.append(rest % s)
                rest //= s
            out.append(f"{name}[{','.join(str(i) for i in reversed(idx))}]")
    return tuple(out)


def column_names(table: Any) -> list | None:
    """The column labels of a data frame (pandas, polars ...; anything with ``columns``), else None."""
    cols = getattr(table, "columns", None)
    if cols is None or isinstance(cols, (str, bytes)) or callable(cols):
        return None
    try:
        return list(cols)
    except TypeError:
        return None


def model_param_names(model: Any) -> tuple | None:
    """A model's ``param_names`` when it has non-empty ones, else None (the trace then uses ``theta[j]``)."""
    return names_given(getattr(model, "param_names", None))


def names_given(names: Any) -> tuple | None:
    """A ``param_names`` value as a non-empty tuple, else None (unchecked: see :func:`check_param_names`)."""
    if names is None or isinstance(names, (str, bytes)):
        return None
    try:
        names = tuple(names)
    except TypeError:
        return None
    return names or None
