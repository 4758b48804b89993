"""The sequential Kalman filter and RTS smoother, batched: the twin that defines the exact results.

One time step at a time over a leading batch axis ``b`` (chains, or chains times buffered windows),
for the model of :mod:`sgmc.ssm.kalman`: the filter in moment form with Joseph-form, symmetrised
covariance updates, and the Rauch-Tung-Striebel smoother that also returns the lag-one
cross-covariance ``Cov(x_t, x_{t-1} | y)`` (Aicher 2020, thesis Eqs. 3.56-3.63 in moment form).
Long series are smoothed in segments re-filtered from checkpoints (memory O(b (segment + L /
segment) n^2)). The scalar model (``n = m = 1``) runs on elementwise operations. The compiled
recursion (``native(xp, "kalman_stats")``) and the parallel-in-time scan of
:mod:`sgmc.ssm.kalman_scan` reproduce these results to rounding.

>>> import numpy as np
>>> from sgmc.ssm.kalman_loop import run
>>> one = np.ones((1, 1, 1))
>>> ll, _ = run(np, False, 0.5 * one, one, one, one, np.zeros((1, 3, 1)), np.zeros((1, 1)), one, None, None, 2048, None)
>>> ll.shape
(1,)
"""

from __future__ import annotations

import math

from .._array_api import device_of

__all__ = ["filter_step", "smooth_step", "forward", "run"]

_LOG_2PI = math.log(2.0 * math.pi)


# ----------------------------------------------------------------------------------------------------
# one time step, matrix form


def filter_step(xp, m, P, A, Q, C, R, Ct, y_t, obs, eye):
    mT = xp.matrix_transpose
    mp = (A @ m[..., None])[..., 0]
    Pp = A @ P @ mT(A) + Q
    Pp = 0.5 * (Pp + mT(Pp))
    v = y_t - (C @ mp[..., None])[..., 0]
    CP = C @ Pp
    S = CP @ Ct + R
    S = 0.5 * (S + mT(S))
    sol = xp.linalg.solve(S, xp.concat([CP, v[..., None]], axis=-1))
    Kt = sol[..., :-1]  # K^T = S^{-1} C Pp
    Sv = sol[..., -1]
    K = mT(Kt)
    mf = mp + (K @ v[..., None])[..., 0]
    IKC = eye - K @ C
    Pf = IKC @ Pp @ mT(IKC) + K @ R @ Kt
    Pf = 0.5 * (Pf + mT(Pf))
    _, logdet = xp.linalg.slogdet(S)
    ll = -0.5 * (C.shape[-2] * _LOG_2PI + logdet + xp.sum(v * Sv, axis=-1))
    if obs is not None:
        mf = xp.where(obs[:, None], mf, mp)
        Pf = xp.where(obs[:, None, None], Pf, Pp)
        ll = xp.where(obs, ll, xp.zeros_like(ll))
    return mp, Pp, mf, Pf, ll


def smooth_step(xp, ms, Ps, mf_prev, Pf_prev, mp, Pp, A):
    """RTS step: smoothed at t -> smoothed at t-1 and Cov(x_t, x_{t-1} | y)."""
    mT = xp.matrix_transpose
    Jt = xp.linalg.solve(Pp, A @ Pf_prev)  # J^T = Pp^{-1} A P_{t-1}
    J = mT(Jt)
    ms_prev = mf_prev + (J @ (ms - mp)[..., None])[..., 0]
    Ps_prev = Pf_prev + J @ (Ps - Pp) @ Jt
    Ps_prev = 0.5 * (Ps_prev + mT(Ps_prev))
    cross = Ps @ Jt
    return ms_prev, Ps_prev, cross


# one time step, scalar form (n = m = 1; all arrays (b,))


def _filter_step_1(xp, m, P, a, q, c, r, y_t, obs):
    mp = a * m
    Pp = a * a * P + q
    v = y_t - c * mp
    S = c * c * Pp + r
    K = Pp * c / S
    mf = mp + K * v
    ikc = 1.0 - K * c
    Pf = ikc * ikc * Pp + K * K * r
    ll = -0.5 * (_LOG_2PI + xp.log(S) + v * v / S)
    if obs is not None:
        mf = xp.where(obs, mf, mp)
        Pf = xp.where(obs, Pf, Pp)
        ll = xp.where(obs, ll, xp.zeros_like(ll))
    return mp, Pp, mf, Pf, ll


def _smooth_step_1(xp, ms, Ps, mf_prev, Pf_prev, mp, Pp, a):
    J = Pf_prev * a / Pp
    ms_prev = mf_prev + J * (ms - mp)
    Ps_prev = Pf_prev + J * J * (Ps - Pp)
    return ms_prev, Ps_prev, Ps * J


# ----------------------------------------------------------------------------------------------------
# passes


def forward(xp, scalar, A, Q, C, R, y, m0, P0, mask, lo, hi, keep):
    """Filter over positions lo..hi-1 from the filtered state (m0, P0) before lo."""
    m, P = m0, P0
    out = []
    ll = None
    if not scalar:
        Ct = xp.matrix_transpose(C)
        eye = xp.eye(A.shape[-1], dtype=A.dtype, device=device_of(A))
    for t in range(lo, hi):
        obs = None if mask is None else mask[:, t]
        if scalar:
            mp, Pp, m, P, llt = _filter_step_1(xp, m, P, A, Q, C, R, y[:, t], obs)
        else:
            mp, Pp, m, P, llt = filter_step(xp, m, P, A, Q, C, R, Ct, y[:, t, :], obs, eye)
        ll = llt if ll is None else ll + llt
        if keep:
            out.append((mp, Pp, m, P))
    return m, P, ll, out


def _segments(L: int, segment: int) -> list:
    return [(a, min(a + segment, L)) for a in range(0, L, segment)]


def run(xp, scalar, A, Q, C, R, y, m0, P0, mask, weight, segment, visit):
    """Forward filter, then backward smoother segment by segment; ``visit`` sees each smoothed pair.

    Returns the log-likelihood ``(b,)`` and the smoothed ``(mean, cov)`` of ``x_0``.
    """
    L = y.shape[1]
    segs = _segments(L, segment)
    checkpoints = []
    m, P = m0, P0
    ll = xp.zeros((A.shape[0],), dtype=A.dtype, device=device_of(A))
    last = None
    for k, (a, b) in enumerate(segs):
        checkpoints.append((m, P))
        keep = k == len(segs) - 1
        m, P, llk, out = forward(xp, scalar, A, Q, C, R, y, m, P, mask, a, b, keep)
        ll = ll + llk
        if keep:
            last = out
    if visit is None:
        return ll, None
    ms, Ps = m, P  # smoothed = filtered at the last position
    for k in range(len(segs) - 1, -1, -1):
        a, b = segs[k]
        out = last if k == len(segs) - 1 else forward(xp, scalar, A, Q, C, R, y, *checkpoints[k], mask, a, b, True)[3]
        for t in range(b - 1, a - 1, -1):
            mp, Pp, _, _ = out[t - a]
            if t > a:
                mf_prev, Pf_prev = out[t - a - 1][2], out[t - a - 1][3]
            else:
                mf_prev, Pf_prev = checkpoints[k]
            if scalar:
                ms_prev, Ps_prev, cross = _smooth_step_1(xp, ms, Ps, mf_prev, Pf_prev, mp, Pp, A)
            else:
                ms_prev, Ps_prev, cross = smooth_step(xp, ms, Ps, mf_prev, Pf_prev, mp, Pp, A)
            visit(t, ms, Ps, ms_prev, Ps_prev, cross)
            ms, Ps = ms_prev, Ps_prev
    return ll, (ms, Ps)
