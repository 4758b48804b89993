"""The scalar Kalman filter and RTS smoother over a long fully observed series, vectorised over time.

For ``n = m = 1`` with no missing values, the filter's variances converge to their steady state within
a few dozen steps, so only those transients are iterated (until they stop changing to ``1e-15``); the
means then obey affine recurrences ``x_t = a_t x_{t-1} + b_t``, each solved by a doubling scan in
``log2 L`` array operations. The result equals the step-by-step recursion of :mod:`sgmc.ssm.kalman`
to rounding. This is the path for backends without a compiled recursion.

>>> import numpy as np
>>> from sgmc.ssm.kalman_scalar import affine_scan
>>> affine_scan(np.full((1, 3), 2.0), np.ones((1, 3)), np.zeros(1)).tolist()
[[1.0, 3.0, 7.0]]
"""

from __future__ import annotations

import math

from .._array_api import Array, array_namespace

__all__ = ["affine_scan", "scalar_long"]

_LOG_2PI = math.log(2.0 * math.pi)

_STEADY_RTOL = 1e-15


def affine_scan(a: Array, b: Array, x0: Array) -> Array:
    """``x_t = a_t x_{t-1} + b_t`` for ``t = 0..L-1`` (axis 1) from ``x_{-1} = x0``, in log2 L rounds.

    Parameters
    ----------
    a, b : arrays (batch, L)
    x0 : array (batch,)

    Returns
    -------
    array (batch, L)
    """
    xp = array_namespace(a, b, x0)
    L = a.shape[1]
    A, Bv = a, b
    d = 1
    while d < L:
        Bv = xp.concat([Bv[:, :d], Bv[:, d:] + A[:, d:] * Bv[:, : L - d]], axis=1)
        A = xp.concat([A[:, :d], A[:, d:] * A[:, : L - d]], axis=1)
        d *= 2
    return Bv + A * x0[:, None]


def _steady_sequence(xp, step, x0, L):
    """Values of ``x_k = step(x_{k-1})`` for k = 0..L-1 (arrays (b,)), stepping until they stop changing."""
    out = []
    x = x0
    for k in range(L):
        nxt = step(x)
        out.append(nxt)
        if k > 0 and bool(xp.all(xp.abs(nxt - x) <= _STEADY_RTOL * xp.abs(nxt))):
            break
        x = nxt
    n = len(out)
    seq = xp.stack(out, axis=1)
    if n < L:
        seq = xp.concat([seq, xp.broadcast_to(seq[:, -1:], (seq.shape[0], L - n))], axis=1)
    return seq


def scalar_long(xp, a, q, c, r, y, m0, p0, weight, moments=False):
    """Scalar Kalman filter and RTS smoother on a fully observed series, vectorised over time.

    Returns the log-likelihood and the weighted statistics (S00, S10, S11, Syx, Syy) as (b,) arrays,
    equal (to rounding) to the step-by-step recursion.
    """
    b, L = y.shape
    # filter covariances: Pp_t = a^2 P_{t-1} + q, P_t = Pp_t r / (c^2 Pp_t + r)
    def filt(P):
        Pp = a * a * P + q
        return Pp * r / (c * c * Pp + r)

    P = _steady_sequence(xp, filt, p0, L)  # filtered P_0..P_{L-1}
    P_prev = xp.concat([p0[:, None], P[:, :-1]], axis=1)
    Pp = a[:, None] ** 2 * P_prev + q[:, None]
    S = c[:, None] ** 2 * Pp + r[:, None]
    K = Pp * c[:, None] / S
    # filter means: m_t = a (1 - K_t c) m_{t-1} + K_t y_t
    m = affine_scan(a[:, None] * (1.0 - K * c[:, None]), K * y, m0)
    m_prev = xp.concat([m0[:, None], m[:, :-1]], axis=1)
    v = y - c[:, None] * a[:, None] * m_prev
    ll = -0.5 * xp.sum(_LOG_2PI + xp.log(S) + v * v / S, axis=1)
    # smoother gains J_t pairs filtered t with predicted t + 1 (t = -1..L-2)
    J = P_prev * a[:, None] / Pp  # J for the pair (t-1, t), t = 0..L-1
    # smoothed covariances, backwards: Ps_{t-1} = P_{t-1} + J_t^2 (Ps_t - Pp_t), Ps_{L-1} = P_{L-1}
    Pr, Jr, Ppr = xp.flip(P_prev, axis=1), xp.flip(J, axis=1), xp.flip(Pp, axis=1)
    Ps_r = affine_scan(Jr * Jr, Pr - Jr * Jr * Ppr, P[:, -1])  # Ps_{L-2}, ..., Ps_{-1}
    Ps_prev = xp.flip(Ps_r, axis=1)  # Ps_{t-1} for t = 0..L-1
    Ps = xp.concat([Ps_prev[:, 1:], P[:, -1:]], axis=1)
    # smoothed means: ms_{t-1} = (1 - J_t a) m_{t-1} + J_t ms_t
    mr = xp.flip(m_prev, axis=1)
    ms_r = affine_scan(Jr, (1.0 - Jr * a[:, None]) * mr, m[:, -1])
    ms_prev = xp.flip(ms_r, axis=1)
    ms = xp.concat([ms_prev[:, 1:], m[:, -1:]], axis=1)
    cross = Ps * J
    w = weight
    stats = (
        xp.sum(w * (Ps_prev + ms_prev * ms_prev), axis=1),
        xp.sum(w * (cross + ms * ms_prev), axis=1),
        xp.sum(w * (Ps + ms * ms), axis=1),
        xp.sum(w * y * ms, axis=1),
        xp.sum(w * y * y, axis=1),
    )
    if moments:
        return ll, stats, (ms, Ps, cross, ms_prev[:, 0], Ps_prev[:, 0])
    return ll, stats
