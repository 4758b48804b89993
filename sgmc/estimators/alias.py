"""Walker's alias tables: O(1) draws of indices from fixed weights.

A table is built once, without a Python loop (Walker 1977; Vose 1991, in the vectorised sweeping form
of Huebschle-Schneider and Sanders 2019); a draw is then one uniform number and one row of the (N, 4)
table, so a minibatch of n indices costs O(n) whatever N is. Preferential subsampling (Putcha, Nemeth
and Fearnhead 2023; thesis section 4.3) draws its static-weight minibatches this way (:mod:`.preferential`).
"""

from __future__ import annotations

from typing import Any

from .. import backends
from .._array_api import Array, device_of, is_array
from ..models.base import take_rows

__all__ = ["alias_table", "alias_draw"]


def alias_table(weights: Array) -> Array:
    """Walker's alias table for drawing index i with probability ``weights[i] / sum(weights)``.

    Built in the weights' namespace and on their device, in float64, by a vectorised form of the
    sweeping construction (Vose 1991; Huebschle-Schneider and Sanders 2019): with q_i = N p_i, the
    "small" entries (q_i < 1) in index order need deficits 1 - q_i and the "large" ones surpluses
    q_j - 1. Lay both out as cumulative sums; small i takes its deficit from the large j whose surplus
    interval contains the start of its deficit interval, and a large that gives more than its surplus
    becomes small itself, its remainder topped up by the next large. Cumulative sums and sorted
    searches do it in O(N log N) without a Python loop. Row i holds
    ``(threshold_i, alias_i, 1/p_i, 1/p_{alias_i})``, so one gathered row gives both the draw and its
    reweighting factor.

    Parameters
    ----------
    weights : array (N,)
        Non-negative, finite, not all zero.

    Returns
    -------
    float64 array (N, 4)

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.estimators import alias_table, alias_draw
    >>> from sgmc.backends import default_rng
    >>> table = alias_table(np.array([1.0, 2.0, 7.0]))
    >>> idx, inv_p = alias_draw(default_rng(0), table, (1, 100_000))
    >>> np.round(np.bincount(idx[0], minlength=3) / 100_000, 2)
    array([0.1, 0.2, 0.7])
    """
    if not is_array(weights):
        weights = backends.asarray(weights, backend="numpy")
    xp = backends.get_backend(weights).xp
    dev = device_of(weights)
    w = xp.astype(weights, xp.float64)
    n = int(w.shape[0]) if w.ndim == 1 else 0
    if n == 0 or not bool(xp.all(xp.isfinite(w))) or bool(xp.any(w < 0)) or not bool(xp.any(w > 0)):
        msg = "`weights` must be a non-empty 1-D array of finite, non-negative numbers with a positive sum"
        raise ValueError(msg)
    p = w / xp.sum(w)
    q = p * n
    # the largest entry is always "large" (rounding can push every q_i just below 1)
    top = xp.argmax(q)
    small = (q < 1.0) & (xp.arange(n, dtype=xp.int64, device=dev) != xp.astype(top, xp.int64))
    n_small = int(xp.sum(xp.astype(small, xp.int64)))
    order = xp.argsort(xp.astype(~small, xp.int8), stable=True)      # smalls, then larges, in index order
    S, L = order[:n_small], order[n_small:]
    n_large = n - n_small
    zero = xp.zeros((1,), dtype=xp.float64, device=dev)
    D = xp.concat([zero, xp.cumulative_sum(1.0 - xp.take(q, S))])   # deficit boundaries (n_small + 1,)
    E = xp.concat([zero, xp.cumulative_sum(xp.take(q, L) - 1.0)])   # surplus boundaries (n_large + 1,)
    last = xp.asarray(n_large - 1, dtype=xp.int64, device=dev)
    # smalls: the large whose surplus interval holds the start of the deficit interval
    j = xp.astype(xp.searchsorted(E, D[:-1], side="right"), xp.int64) - 1
    j = xp.minimum(xp.maximum(j, xp.zeros_like(j)), last)
    thr_s = xp.take(q, S)
    alias_s = xp.take(L, j)
    # larges: what is left after the smalls that start in its interval (and the previous large's overflow)
    nxt = E[1:]
    pos = xp.astype(xp.searchsorted(D, nxt, side="left"), xp.int64)
    pos = xp.minimum(pos, xp.asarray(n_small, dtype=xp.int64, device=dev))
    covered = xp.take(D, pos)
    thr_l = xp.minimum(1.0 + nxt - covered, xp.ones_like(nxt))
    k = xp.arange(n_large, dtype=xp.int64, device=dev)
    alias_l = xp.take(L, xp.minimum(k + 1, last))
    is_last = k == last
    thr_l = xp.where(is_last, xp.ones_like(thr_l), thr_l)
    # back to index order through the inverse permutation
    inv = xp.argsort(order)
    thresh = xp.take(xp.concat([thr_s, thr_l]), inv)
    alias = xp.take(xp.concat([alias_s, alias_l]), inv)
    pos_p = p > 0
    smallest = xp.min(xp.where(pos_p, p, xp.ones_like(p)))
    inv_p = 1.0 / xp.where(pos_p, p, smallest)
    return xp.stack([thresh, xp.astype(alias, xp.float64), inv_p, xp.take(inv_p, alias)], axis=1)


def alias_draw(rng: Any, table: Array, shape: tuple[int, int]) -> tuple[Array, Array]:
    """Draw indices from an :func:`alias_table`: int64 ``shape`` and their ``1/p_i`` (float64).

    One uniform number per draw: ``u * N`` gives the column ``k`` (integer part) and the coin (the
    fractional part); the draw is ``k`` if the coin falls below ``threshold_k``, else ``alias_k``.
    """
    xp = rng.backend.xp
    n = table.shape[0]
    u = rng.uniform(shape, dtype=xp.float64) * n
    # u >= 0, so the cast truncates to the integer part; the minimum guards u * n rounding up to n
    k = xp.minimum(xp.astype(u, xp.int64), xp.asarray(n - 1, dtype=xp.int64, device=device_of(table)))
    rows = take_rows(xp, table, k)
    keep = (u - xp.astype(k, xp.float64)) < rows[..., 0]
    idx = xp.where(keep, k, xp.astype(rows[..., 1], xp.int64))
    inv_p = xp.where(keep, rows[..., 2], rows[..., 3])
    return idx, inv_p
