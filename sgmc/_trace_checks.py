"""The checks of :class:`sgmc.Trace`'s fields, run when a trace is built (by hand, by a run or from a file).

A trace holds ``draws`` of shape ``(chains, n_draws, dim)`` in float32 or float64, optional ``grads``
of the same shape and namespace, the iteration of each kept draw (``iterations``: ints, one per
draw, or none), and two dicts (``stats``, ``info``). Anything else raises ``TypeError`` or
``ValueError`` naming the field, what it must be and what was given, before a method meets it.
"""

from __future__ import annotations

import operator
from typing import Any

from ._array_api import array_namespace, check_real_dtype, is_array
from ._validation import describe

__all__ = ["check_trace_fields"]


def _check_draws_like(value: Any, name: str, shape: tuple | None = None) -> None:
    if not is_array(value):
        msg = f"`{name}` must be an array of shape (chains, n_draws, dim) (NumPy, CuPy, torch ...); got {describe(value)}"
        raise TypeError(msg)
    xp = array_namespace(value, names=(name,))
    check_real_dtype(xp, value.dtype, name)
    if not xp.isdtype(value.dtype, "real floating"):
        msg = f"`{name}` must hold float32 or float64 values; got dtype {value.dtype}"
        raise TypeError(msg)
    if value.ndim != 3:
        msg = f"`{name}` must have shape (chains, n_draws, dim); got shape {tuple(value.shape)}"
        raise ValueError(msg)
    if shape is None and (value.shape[0] < 1 or value.shape[2] < 1):  # no draws yet is a trace (an interrupted run)
        msg = f"`{name}` must hold at least one chain and one coordinate; got shape {tuple(value.shape)}"
        raise ValueError(msg)
    if shape is not None and tuple(value.shape) != shape:
        msg = f"`{name}` must have the shape of `draws` {shape}; got {tuple(value.shape)}"
        raise ValueError(msg)


def check_trace_fields(draws: Any, grads: Any, iterations: Any, stats: Any, info: Any) -> list:
    """Check a trace's fields; return ``iterations`` as a list of ints."""
    _check_draws_like(draws, "draws")
    if grads is not None:
        _check_draws_like(grads, "grads", tuple(draws.shape))
        array_namespace(draws, grads, names=("draws", "grads"))  # one namespace and device
    n = int(draws.shape[1])
    if isinstance(iterations, (str, bytes, dict)) or not hasattr(iterations, "__iter__"):
        msg = f"`iterations` must be a list of ints, one per draw ({n}); got {describe(iterations)}"
        raise TypeError(msg)
    try:
        its = [operator.index(i) for i in iterations]
    except TypeError:
        msg = f"`iterations` must be a list of ints, one per draw ({n}); got {describe(iterations)}"
        raise TypeError(msg) from None
    if its and len(its) != n:
        msg = f"`iterations` must hold one iteration per draw ({n}) or none; got {len(its)}"
        raise ValueError(msg)
    for name, value in (("stats", stats), ("info", info)):
        if not isinstance(value, dict):
            msg = f"`{name}` must be a dict; got {describe(value)}"
            raise TypeError(msg)
    return its
