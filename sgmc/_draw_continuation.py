"""Continuing a row of integer draws without the generator: a counter-based stream keyed by the row.

A minibatch without replacement keeps the first ``size`` distinct values of ``m`` i.i.d. integer
draws per row (:mod:`sgmc._sampling`); ``m`` carries a margin of eight standard deviations, so a row
almost never falls short. When one does, its sequence of draws is continued here rather than drawn
again from the generator: the generator is then consumed by exactly ``batch * m`` integers whatever
happens, so a GPU never has to report back to the host whether a row fell short (no
synchronisation per iteration), and every backend gives the same subsets.

The continuation is a SplitMix64-style stream (Steele, Lea and Flood 2014: a Weyl sequence of the
golden-ratio increment through a 64-bit finaliser). The row's key is the finalised sum of the
finalised ``d_j + (j + 1) g`` over its ``m`` draws (a sum, so any order of addition gives it), and
draw ``j >= m`` is ``(mix(key + (j + 1) g) >> 1) mod n_data``. Everything is 64-bit integer arithmetic
that wraps, written once here against the array API (signed int64 with logical shifts) and once in
``kernels/subsample.cu`` (unsigned), bit for bit alike. The modulo's bias is below
``n_data / 2**63``.
"""

from __future__ import annotations


from typing import Any

from ._array_api import device_of

__all__ = ["GOLDEN", "MIX1", "MIX2", "mix", "row_keys", "continuation"]

Array = Any


def _signed(c: int) -> int:
    return c - (1 << 64) if c >= (1 << 63) else c


#: The Weyl increment (2**64 / golden ratio) and the finaliser's multipliers, as signed 64-bit ints.
GOLDEN = _signed(0x9E3779B97F4A7C15)
MIX1 = _signed(0xBF58476D1CE4E5B9)
MIX2 = _signed(0x94D049BB133111EB)


def _srl(x: Array, k: int) -> Array:
    """Logical right shift of int64 values (the sign bit shifted in as zero)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def mix(z: Array) -> Array:
    """The 64-bit finaliser on int64 arrays (wrapping multiplication)."""
    z = (z ^ _srl(z, 30)) * MIX1
    z = (z ^ _srl(z, 27)) * MIX2
    return z ^ _srl(z, 31)


def _weyl(xp: Any, j: Array) -> Array:
    return (j + 1) * GOLDEN


def row_keys(xp: Any, draws: Array) -> Array:
    """The key of each row of int ``draws`` (k, m): ``mix(sum_j mix(d_j + (j + 1) g))``, int64 (k,)."""
    d = xp.astype(draws, xp.int64)
    j = xp.arange(d.shape[1], dtype=xp.int64, device=device_of(d))
    return mix(xp.sum(mix(d + _weyl(xp, j)[None, :]), axis=1, dtype=xp.int64))


def continuation(xp: Any, keys: Array, start: int, count: int, n_data: int) -> Array:
    """Draws ``start .. start + count - 1`` of each row's continuation: int64 (k, count) in ``[0, n_data)``."""
    j = xp.arange(start, start + count, dtype=xp.int64, device=device_of(keys))
    return _srl(mix(keys[:, None] + _weyl(xp, j)[None, :]), 1) % n_data
