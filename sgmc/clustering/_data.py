"""The data check the clustering models share: ``y`` a finite 2-D floating array, rows by columns."""

from __future__ import annotations

from typing import Any

from .._array_api import Array, Namespace, array_namespace, as_float_array, check_finite, float_dtype

__all__ = ["data_matrix"]


def data_matrix(y: Any, axes: str) -> tuple[Namespace, Array, Any]:
    """``(xp, y, dtype)``: ``y`` checked as a finite 2-D floating array with at least one row and one column.

    ``axes`` names the rows and the columns in the error message (``"N points, d dimensions"``).
    """
    xp = array_namespace(y)
    shape = tuple(getattr(y, "shape", ()))
    if getattr(y, "ndim", None) != 2 or shape[0] < 1 or shape[1] < 1:
        msg = f"`y` must be a 2-D array ({axes}) with at least one of each; got shape {shape}"
        raise ValueError(msg)
    dtype = float_dtype(xp, y, names=("y",))
    y = as_float_array(xp, y, dtype, "y")
    check_finite(xp, y, "y")
    return xp, y, dtype
