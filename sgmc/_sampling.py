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

from typing import Any

from ._array_api import Array, array_namespace, device_of
from ._dispatch import dispatch, native
from ._distinct import complete_fixed, complete_rows, first_distinct, first_distinct_all, oversample

__all__ = ["oversample", "subsample", "subsample_twin", "first_distinct", "complete_rows", "categorical"]


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
    if rng.backend.numpy_arrays:
        rows, ok = first_distinct(draws, size, xp)
        if rows.shape[0] == batch:
            return rows
        # Rows short of `size` distinct values (vanishingly rare) continue their own sequence of
        # draws without the generator (sgmc._draw_continuation), which is consumed alike either way.
        where = xp.arange(batch, dtype=xp.int64, device=device_of(rows))
        short = where[~ok]
        more = complete_rows(xp.take(draws, short, axis=0), size, n_data, xp)
        allrows = xp.concat([rows, more], axis=0)
        return xp.take(allrows, xp.argsort(xp.concat([where[ok], short], axis=0)), axis=0)
    # Other libraries: the same rows without asking the device which rows fell short (no host
    # synchronisation, and a fixed shape that traces under jax.jit).
    rows, ok = first_distinct_all(draws, size, xp)
    return _complete_on_device(rng.backend, rows, ok, draws, size, n_data)


def _complete_on_device(backend: Any, rows: Array, ok: Array, draws: Array, size: int, n_data: int) -> Array:
    xp = backend.xp
    complete = native(xp, "complete_rows")
    if complete is not None:  # JAX: the continuation only when a row fell short, chosen on the device
        return complete(rows, ok, draws, size, n_data)
    return xp.where(ok[:, None], rows, complete_fixed(draws, size, n_data, xp))


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
    return dispatch(rng.backend.xp, "subsample", subsample_twin)(rng, n_data, size, batch, replace)


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
    offset = xp.arange(rows, dtype=xp.float64, device=device_of(cdf))[:, None]
    flat = xp.reshape(c64 / c64[:, -1:] + offset, (-1,))
    idx = xp.searchsorted(flat, xp.astype(u, xp.float64) + offset, side="right")
    idx = idx - xp.astype(offset, idx.dtype) * k
    last = xp.sum(xp.astype(c64 < c64[:, -1:], idx.dtype), axis=1)[:, None]
    idx = xp.where(idx >= k, last, idx)
    return xp.astype(idx, xp.int64)
