"""Arrays of parameter values given to functions that take a model: converted, shaped and checked once.

``theta`` (or a centre, a mode) for a model of dimension ``dim`` is ``(dim,)`` or ``(k, dim)``;
lists and tuples become arrays of the model's namespace, dtype and device. Anything else (``None``,
a string, a ragged list, complex or half-precision values, the wrong last axis, NaN or inf) raises
``TypeError`` or ``ValueError`` naming the argument, what it must be and what was given.
"""

from __future__ import annotations

from typing import Any

from . import backends
from ._array_api import Array, check_finite, check_real_dtype, is_array
from ._validation import describe

__all__ = ["model_points", "model_array"]


def model_array(model: Any, value: Any, name: str, expected: str, refuse: tuple = (str, bytes, dict, set)) -> Any:
    """``value`` as an array of ``model``'s namespace, dtype and device, if it is not one already.

    ``None``, instances of ``refuse`` and what the namespace cannot convert raise ``TypeError``:
    "`name` must be EXPECTED; got ...". Shapes and values are the caller's to check.
    """
    if is_array(value):
        return value
    try:
        if value is None or isinstance(value, refuse):
            raise TypeError
        return model.xp.asarray(value, dtype=model.dtype, device=model.device)
    except (TypeError, ValueError):
        msg = f"`{name}` must be {expected}; got {describe(value)}"
        raise TypeError(msg) from None


def model_points(model: Any, value: Any, name: str, *, batched: bool = True, with_rank: bool = False) -> Any:
    """``value`` as a finite ``(k, dim)`` array of ``model``'s dtype (``k = 1`` unless ``batched``).

    With ``with_rank``, returns ``(array, was_1d)``: whether ``value`` was a single ``(dim,)`` point.
    """
    xp, dim = model.xp, int(model.dim)
    shapes = f"({dim},) or (k, {dim})" if batched else f"({dim},) or (1, {dim})"
    if not is_array(value):
        try:
            if value is None or isinstance(value, (str, bytes, dict, set)):
                raise TypeError
            value = backends.asarray(value, backend=backends.get_backend(xp), dtype=model.dtype, device=model.device)
        except (TypeError, ValueError):
            msg = f"`{name}` must be an array of numbers of shape {shapes}; got {describe(value)}"
            raise TypeError(msg) from None
    check_real_dtype(xp, value.dtype, name)
    ok = value.ndim == 1 and value.shape[0] == dim
    ok = ok or (value.ndim == 2 and value.shape[1] == dim and (value.shape[0] >= 1 if batched else value.shape[0] == 1))
    if not ok:
        msg = f"`{name}` must have shape {shapes}; got {tuple(value.shape)}"
        raise ValueError(msg)
    was_1d = value.ndim == 1
    value = xp.reshape(value, (-1, dim))
    if value.dtype != model.dtype:
        value = xp.astype(value, model.dtype)
    check_finite(xp, value, name)
    return (value, was_1d) if with_rank else value
