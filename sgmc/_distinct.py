"""The first distinct values of rows of integer draws: the arithmetic of subsets without replacement.

A subset of ``size`` of ``range(n_data)`` drawn without replacement is the first ``size`` distinct
values of i.i.d. uniform integer draws (sequential sampling; :mod:`sgmc._sampling` explains the
law). This module holds the pieces that every implementation of that draw shares: how many draws
to make per row (:func:`oversample`), the array-API selection of the first distinct values
(:func:`first_distinct`) and the continuation of the rare rows that fall short
(:func:`complete_rows`, with the counter-based stream of :mod:`sgmc._draw_continuation`). It
imports no dispatch and no backend, so the backends' native draws use it as the twin does.
"""

from __future__ import annotations

import math
from typing import Any

from ._array_api import Array, array_namespace, device_of
from ._draw_continuation import continuation, row_keys

__all__ = ["oversample", "first_distinct", "first_distinct_all", "complete_rows", "complete_fixed"]


def oversample(size: int, n_data: int) -> int:
    """Draws per row for a ``size``-subset of ``range(n_data)``: ``size`` plus a margin for repeats.

    About ``size**2 / (2 n_data)`` draws repeat an earlier one; the margin is twice that plus eight
    standard deviations, so a row falls short with negligible probability.
    """
    dups = size * size / (2.0 * n_data)
    return size + int(math.ceil(2.0 * dups + 8.0 * math.sqrt(dups + 1.0) + 4.0))


def first_distinct(draws: Array, size: int, xp: Any = None) -> tuple[Array, Array]:
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
    rows, ok = first_distinct_all(draws, size, xp)
    return rows[ok], ok


def first_distinct_all(draws: Array, size: int, xp: Any = None) -> tuple[Array, Array]:
    """:func:`first_distinct` with a fixed shape: a row for every input row, and ``ok``.

    A row short of ``size`` distinct values holds its distinct values followed by repeats; ``ok``
    marks it false. No value decides a shape, so the draw traces under ``jax.jit``. ``xp``, the
    draws' namespace, saves looking it up (the sampling loop knows it).
    """
    xp = array_namespace(draws) if xp is None else xp
    dev = device_of(draws)
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
    return rows, ok


def complete_rows(draws: Array, size: int, n_data: int, xp: Any = None) -> Array:
    """The first ``size`` distinct values of each row of ``draws`` (k, m) continued past its ``m`` draws.

    For rows with fewer than ``size`` distinct values: each row's draws go on with the counter-based
    stream of :mod:`sgmc._draw_continuation` keyed by the row itself, until ``size`` distinct values
    are found. Returns int64 (k, size). Every backend's native subset draw completes short rows alike.
    """
    xp = array_namespace(draws) if xp is None else xp
    draws = xp.astype(draws, xp.int64)
    keys = row_keys(xp, draws)
    m = draws.shape[1]
    extra = max(m, 16)
    while True:
        full = xp.concat([draws, continuation(xp, keys, m, extra, n_data)], axis=1)
        rows, ok = first_distinct(full, size, xp)
        if rows.shape[0] == draws.shape[0]:
            return rows
        extra *= 2


def complete_fixed(draws: Array, size: int, n_data: int, xp: Any = None) -> Array:
    """:func:`complete_rows` for every row, in one round of ``max(m, 16)`` continued draws (fixed shape).

    Its rows equal :func:`complete_rows`'s whenever one round suffices: the continuation's draw ``j``
    depends on ``j`` and the row's key only, so a longer continuation extends a shorter one. A row
    that reaches this (``m`` draws with a margin of eight standard deviations fell short) finds its
    missing values among ``m`` more draws except with a probability far below any floating-point
    resolution; such a row would keep repeats.
    """
    xp = array_namespace(draws) if xp is None else xp
    draws = xp.astype(draws, xp.int64)
    m = draws.shape[1]
    full = xp.concat([draws, continuation(xp, row_keys(xp, draws), m, max(m, 16), n_data)], axis=1)
    return first_distinct_all(full, size, xp)[0]
