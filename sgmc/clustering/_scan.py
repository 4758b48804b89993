"""Log-depth prefix scans over the last axis, for the scalar Kalman recursions of the time series model.

A recursion ``x_t = f_t(x_{t-1})`` whose maps compose in closed form is evaluated for all ``t`` at
once by the Hillis-Steele scan: after the round with shift ``s`` entry ``t`` holds the composition of
the maps ``t - 2s + 1 .. t``, so ``ceil(log2 T)`` rounds of whole-array operations replace ``T``
sequential steps. Two families are needed:

* affine maps ``x -> alpha_t x + beta_t`` (the filtered and smoothed means, the smoothed variances);
* linear fractional (Moebius) maps ``x -> (A x + B) / (C x + D)`` (the Riccati recursion of the filtered
  variance), composed as 2 x 2 matrix products and rescaled every round (the map is unchanged by a
  common factor), which keeps the entries in range.

Both are batched over any leading axes and use only array-API operations.
"""

from __future__ import annotations

from typing import Any

from .._array_api import Array

__all__ = ["affine_scan", "mobius_scan"]


def _join(xp: Any, head: Array, tail: Array) -> Array:
    return xp.concat([head, tail], axis=-1)


def affine_scan(xp: Any, alpha: Array, beta: Array, x0: Array) -> Array:
    """``x_t = alpha_t x_{t-1} + beta_t`` for ``t = 1..T`` from ``x0`` (...,): array (..., T)."""
    T = alpha.shape[-1]
    s = 1
    while s < T:
        # compose entries t >= s with the maps s places earlier (the first s are already complete)
        at = alpha[..., s:]
        beta = _join(xp, beta[..., :s], at * beta[..., :-s] + beta[..., s:])
        alpha = _join(xp, alpha[..., :s], at * alpha[..., :-s])
        s *= 2
    return alpha * x0[..., None] + beta


def mobius_scan(xp: Any, A: Array, B: Array, C: Array, D: Array, x0: Array) -> Array:
    """``x_t = (A_t x_{t-1} + B_t) / (C_t x_{t-1} + D_t)`` for ``t = 1..T`` from ``x0`` (...,): array (..., T).

    The maps are the matrices ``[[A, B], [C, D]]``; entries must keep ``C x + D`` away from 0 along the
    way (true for the Kalman variance maps, whose entries are non-negative with ``D > 0``).
    """
    T = A.shape[-1]
    s = 1
    while s < T:
        pA, pB, pC, pD = A[..., :-s], B[..., :-s], C[..., :-s], D[..., :-s]
        tA, tB, tC, tD = A[..., s:], B[..., s:], C[..., s:], D[..., s:]
        nA, nB, nC, nD = tA * pA + tB * pC, tA * pB + tB * pD, tC * pA + tD * pC, tC * pB + tD * pD
        scale = xp.abs(nA) + xp.abs(nB) + xp.abs(nC) + xp.abs(nD)
        A, B, C, D = (_join(xp, old[..., :s], new / scale) for old, new in ((A, nA), (B, nB), (C, nC), (D, nD)))
        s *= 2
    x0 = x0[..., None]
    return (A * x0 + B) / (C * x0 + D)
