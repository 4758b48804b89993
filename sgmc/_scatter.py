"""Scatter-add: sum rows of ``values`` into the rows of a result that ``index`` names.

The array API standard has no scatter-add (no ``index_add``, no ``add.at``), yet a minibatch gradient
of a matrix factorisation model (Salakhutdinov and Mnih 2008, used in section 6.3 of Nemeth and
Fearnhead 2021) adds one row per rating into the rows of the users and items the batch touches.
:func:`scatter_add` is the seam: the array-API twin :func:`scatter_add_twin` defines the result by
sorting the indices and differencing a running sum, and backends list a faster ``"scatter_add"``
under :func:`sgmc._dispatch.native` (NumPy: a flattened ``bincount``; PyTorch: ``index_add_``;
CuPy: ``cupyx.scatter_add``), tested equal to the twin.

Examples
--------
>>> import numpy as np
>>> from sgmc._scatter import scatter_add
>>> scatter_add(np, 3, np.asarray([2, 0, 2]), np.asarray([[1.0], [2.0], [3.0]])).tolist()
[[2.0], [0.0], [4.0]]
"""

from __future__ import annotations


from typing import Any

from ._array_api import device_of

from ._dispatch import native

__all__ = ["scatter_add", "scatter_add_twin"]

Array = Any


def scatter_add_twin(xp: Any, m: int, index: Array, values: Array) -> Array:
    """``out[r] = sum_{j : index[j] = r} values[j]`` for ``r < m``: the array-API definition.

    ``index`` has shape ``(k,)`` (integers in ``[0, m)``) and ``values`` ``(k, d)``; the result is
    ``(m, d)`` in ``values``' dtype. A stable argsort groups equal indices, the cumulative sum of the
    sorted rows (with a leading zero row) is differenced at each row's segment ends, which
    ``searchsorted`` finds, so rows that no index names get zero. Cost O(k log k + m log k + (m + k) d).
    In float32 the differences of a running sum lose about ``eps * |running sum|`` per row.
    """
    k, d = values.shape[0], values.shape[1]
    if k == 0:
        return xp.zeros((m, d), dtype=values.dtype, device=device_of(values))
    order = xp.argsort(index, stable=True)
    si = xp.take(index, order)
    sv = xp.take(values, order, axis=0)
    zero = xp.zeros((1, d), dtype=values.dtype, device=device_of(values))
    cs = xp.concat([zero, xp.cumulative_sum(sv, axis=0)], axis=0)
    rows = xp.arange(m, dtype=si.dtype, device=device_of(si))
    lo = xp.searchsorted(si, rows, side="left")
    hi = xp.searchsorted(si, rows, side="right")
    return xp.take(cs, hi, axis=0) - xp.take(cs, lo, axis=0)


def scatter_add(xp: Any, m: int, index: Array, values: Array) -> Array:
    """Sum the rows of ``values`` into the rows ``index`` of an ``(..., m, d)`` zero array.

    Parameters
    ----------
    xp : namespace
        The arrays' namespace.
    m : int
        Number of rows of the result.
    index : array of int, shape (k,) or (chains, k)
        Target rows, in ``[0, m)``; repeats add up.
    values : array, shape (k, d) or (chains, k, d)
        Rows to add; with a leading chains axis each chain scatters into its own ``(m, d)`` block.

    Returns
    -------
    array, shape (m, d) or (chains, m, d)
        A new array (the inputs are not changed).

    Examples
    --------
    >>> import numpy as np
    >>> idx = np.asarray([[0, 0], [1, 2]])
    >>> vals = np.ones((2, 2, 1))
    >>> scatter_add(np, 3, idx, vals)[..., 0].tolist()
    [[2.0, 0.0, 0.0], [0.0, 1.0, 1.0]]
    """
    m = int(m)
    if index.ndim == 2:
        c, k = index.shape
        d = values.shape[-1]
        offset = xp.reshape(xp.arange(c, dtype=index.dtype, device=device_of(index)) * m, (c, 1))
        flat = scatter_add(xp, c * m, xp.reshape(index + offset, (c * k,)), xp.reshape(values, (c * k, d)))
        return xp.reshape(flat, (c, m, d))
    if index.ndim != 1 or values.ndim != 2 or values.shape[0] != index.shape[0]:
        msg = (f"`index` (k,) and `values` (k, d) (or with a leading chains axis) must agree; got "
               f"{tuple(index.shape)} and {tuple(values.shape)}")
        raise ValueError(msg)
    fast = native(xp, "scatter_add")
    if fast is not None:
        return fast(m, index, values)
    return scatter_add_twin(xp, m, index, values)
