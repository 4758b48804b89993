"""Discrete draws built on a generator's uniform and integer draws: subsets and categorical draws.

Minibatches (uniform subsets of the data, with or without replacement), preferential subsampling
(categorical draws with unequal weights) and particle resampling all reduce to these two
operations, so they live here once. Both are written against the array API and are the twins that
define the result; a backend may supply a faster native path through :func:`sgmc._dispatch.native`
(NumPy's packed-integer subset draw, CUDA kernels on CuPy) that returns the same values for the
same generator state.

* **Subsets without replacement.** Draw ``m`` i.i.d. uniform integers per row, slightly more than
  ``size``, and keep the first ``size`` distinct values in draw order. This is exactly sequential
  sampling without replacement, and since the event "at least ``size`` distinct values" is invariant
  under relabelling, each row is a uniformly random subset in uniformly random order. The rare rows
  with too few distinct values continue their own draws with a counter-based stream keyed by the
  row (:func:`complete_rows`), so the generator is consumed alike whether or not a row fell short.
  Dense subsets (``size > n_data / 4``) rank ``n_data`` uniform keys instead.
* **Categorical draws by inverse CDF.** Given pre-drawn uniforms ``u`` and cumulative weights, the
  draw is the first index whose cumulative weight exceeds ``u`` times the total.
"""

from __future__ import annotations

import math
from typing import Any

from ._array_api import Array, array_namespace
from ._dispatch import native
from ._draw_continuation import continuation, row_keys

__all__ = ["oversample", "subsample", "subsample_twin", "first_distinct", "complete_rows", "categorical"]


def oversample(size: int, n_data: int) -> int:
    """Draws per row for a ``size``-subset of ``range(n_data)``: ``size`` plus a margin for repeats.

    About ``size**2 / (2 n_data)`` draws repeat an earlier one; the margin is twice that plus eight
    standard deviations, so a row falls short with negligible probability.
    """
    dups = size * size / (2.0 * n_data)
    return size + int(math.ceil(2.0 * dups + 8.0 * math.sqrt(dups + 1.0) + 4.0))


def first_distinct(draws: Array, size: int) -> tuple[Array, Array]:
    """The first ``size`` distinct values of each row of ``draws``, in draw order.

    Parameters
    ----------
    draws : int array (batch, m)
    size : int

    Returns
    -------
    rows : int64 array (k, size)
        One row for each input row with at least ``size`` distinct values, in input order.
    ok : bool array (batch,)
        Which input rows had enough distinct values.
    """
    xp = array_namespace(draws)
    dev = draws.device
    b, m = draws.shape
    draws = xp.astype(draws, xp.int64)
    pos = xp.arange(m, dtype=xp.int64, device=dev)
    # Sort by (value, position): copies of a value become adjacent, the earliest draw first.
    order = xp.argsort(draws * m + pos, axis=1)
    srt = xp.take_along_axis(draws, order, axis=1)
    first_col = xp.zeros((b, 1), dtype=xp.bool, device=dev)
    repeat_sorted = xp.concat([first_col, srt[:, 1:] == srt[:, :-1]], axis=1)
    # Back to draw order through the inverse permutation.
    repeat = xp.take_along_axis(repeat_sorted, xp.argsort(order, axis=1), axis=1)
    keep = ~repeat
    rank = xp.cumulative_sum(xp.astype(keep, xp.int64), axis=1)
    ok = rank[:, -1] >= size
    chosen = keep & (rank <= size)
    # Chosen positions first, in draw order; then everything else.
    slot = xp.argsort(xp.where(chosen, pos, pos + m), axis=1)[:, :size]
    rows = xp.take_along_axis(draws, slot, axis=1)
    return rows[ok], ok


def subsample_twin(rng: Any, n_data: int, size: int, batch: int, replace: bool) -> Array:
    """The array-API twin of :func:`subsample` (positional ``replace``), which defines its result."""
    xp = rng.backend.xp
    if replace:
        return rng.integers(n_data, (batch, size))
    if size == n_data or size * 4 > n_data:
        keys = rng.uniform((batch, n_data))
        return xp.argsort(keys, axis=1, stable=True)[:, :size]
    m = oversample(size, n_data)
    draws = rng.integers(n_data, (batch, m))
    rows, ok = first_distinct(draws, size)
    if rows.shape[0] == batch:
        return rows
    # Rows short of `size` distinct values (vanishingly rare) continue their own sequence of draws
    # without the generator (sgmc._draw_continuation), which is consumed alike either way.
    where = xp.arange(batch, dtype=xp.int64, device=rows.device)
    short = where[~ok]
    more = complete_rows(xp.take(draws, short, axis=0), size, n_data)
    allrows = xp.concat([rows, more], axis=0)
    return xp.take(allrows, xp.argsort(xp.concat([where[ok], short], axis=0)), axis=0)


def complete_rows(draws: Array, size: int, n_data: int) -> Array:
    """The first ``size`` distinct values of each row of ``draws`` (k, m) continued past its ``m`` draws.

    For rows with fewer than ``size`` distinct values: each row's draws go on with the counter-based
    stream of :mod:`sgmc._draw_continuation` keyed by the row itself, until ``size`` distinct values
    are found. Returns int64 (k, size). Every backend's native subset draw completes short rows alike.
    """
    xp = array_namespace(draws)
    draws = xp.astype(draws, xp.int64)
    keys = row_keys(xp, draws)
    m = draws.shape[1]
    extra = max(m, 16)
    while True:
        full = xp.concat([draws, continuation(xp, keys, m, extra, n_data)], axis=1)
        rows, ok = first_distinct(full, size)
        if rows.shape[0] == draws.shape[0]:
            return rows
        extra *= 2


def subsample(rng: Any, n_data: int, size: int, batch: int, *, replace: bool = False) -> Array:
    """``batch`` independent subsets of ``range(n_data)`` of ``size`` indices each: int64 ``(batch, size)``.

    Parameters
    ----------
    rng : sgmc Generator
        Its backend and device decide where the indices live.
    n_data, size, batch : int
    replace : bool, default False
        With replacement: i.i.d. uniform indices. Without: each row is a uniformly random subset in
        uniformly random order (see the module docstring).

    Examples
    --------
    >>> from sgmc.backends import default_rng
    >>> from sgmc._sampling import subsample
    >>> idx = subsample(default_rng(0), 100, 5, batch=3)
    >>> idx.shape
    (3, 5)
    """
    fast = native(rng.backend.xp, "subsample")
    if fast is not None:
        return fast(rng, n_data, size, batch, replace)
    return subsample_twin(rng, n_data, size, batch, replace)


def categorical(u: Array, cdf: Array) -> Array:
    """Categorical draws by inverse CDF on pre-drawn uniforms.

    Parameters
    ----------
    u : float array
        Uniforms on [0, 1). With a 1-D ``cdf`` any shape; with a 2-D ``cdf`` of shape (rows, K),
        shape (rows, n): row ``r`` of ``u`` draws from row ``r`` of ``cdf``.
    cdf : float array (K,) or (rows, K)
        Non-decreasing cumulative sums of non-negative weights (unnormalised; the last entry is the
        total).

    Returns
    -------
    int64 array of ``u``'s shape
        ``min{k : cdf[k] > u * cdf[-1]}``: index k is drawn with probability ``w_k / sum(w)``.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc._sampling import categorical
    >>> categorical(np.array([0.1, 0.5, 0.9]), np.cumsum(np.array([1.0, 1.0, 2.0])))
    array([0, 2, 2])
    """
    xp = array_namespace(u, cdf, names=("u", "cdf"))
    fast = native(xp, "categorical")
    if fast is not None:
        return fast(u, cdf)
    k = cdf.shape[-1]
    if cdf.ndim == 1:
        idx = xp.searchsorted(cdf, u * cdf[-1], side="right")
        return xp.astype(xp.clip(idx, 0, k - 1), xp.int64)
    # One sorted 1-D array for all rows: row r's normalised CDF shifted into [r, r + 1], in float64
    # (boundaries move by at most one unit in the last place of the row number, 1e-10 for 10^6
    # rows). A draw u so close to 1 that u + r rounds up to r + 1 lands past its row; it belongs
    # to the row's last category of positive weight.
    rows = cdf.shape[0]
    c64 = xp.astype(cdf, xp.float64)
    offset = xp.arange(rows, dtype=xp.float64, device=cdf.device)[:, None]
    flat = xp.reshape(c64 / c64[:, -1:] + offset, (-1,))
    idx = xp.searchsorted(flat, xp.astype(u, xp.float64) + offset, side="right")
    idx = idx - xp.astype(offset, idx.dtype) * k
    last = xp.sum(xp.astype(c64 < c64[:, -1:], idx.dtype), axis=1)[:, None]
    idx = xp.where(idx >= k, last, idx)
    return xp.astype(idx, xp.int64)
