"""Parallel-in-time Kalman filter and RTS smoother (Sarkka and Garcia-Fernandez 2021, IEEE TAC 66(1)).

The filter is an associative scan over elements ``(A, b, C, eta, J)`` that stand for the conditional
``p(x_t | x_{t-1}, y_t) = N(A x_{t-1} + b, C)`` and the information-form likelihood
``p(y_t | x_{t-1}) ~ N_I(x_{t-1}; eta, J)`` (the paper's Lemmas 7-8): combining an earlier element
``i`` with a later ``j``,

    A_ij = A_j M^{-1} A_i,    b_ij = A_j M^{-1} (b_i + C_i eta_j) + b_j,
    C_ij = A_j M^{-1} C_i A_j^T + C_j,    M = I + C_i J_j,
    eta_ij = A_i^T M^{-T} (eta_j - J_j b_i) + eta_i,    J_ij = A_i^T M^{-T} J_j A_i + J_i.

The first element carries the prior (its ``A`` is zero), so the prefix products' ``(b, C)`` are the
filtered moments. The smoother scans backwards over ``(E, g, L)`` with ``x_t | x_{t+1}, y ~
N(E_t x_{t+1} + g_t, L_t)`` (Lemmas 9-10): ``E_ij = E_i E_j``, ``g_ij = E_i g_j + g_i``,
``L_ij = E_i L_j E_i^T + L_i``. Log-likelihood and the weighted smoothed statistics then follow
elementwise over time. Each scan is a work-efficient associative scan (:func:`associative_scan`:
about ``2 L`` combines of batched ``n x n`` products and solves in ``2 ceil(log2 L)`` rounds), with
no Python loop over time: the path for GPUs, for JAX (it traces under ``jax.jit``) and for long
series on backends without a compiled recursion. The sequential recursion of
:mod:`sgmc.ssm.kalman_loop` defines the result; the two agree to rounding. Memory is ``O(b L n^2)``.

>>> import numpy as np
>>> from sgmc.ssm.kalman_scan import kalman_stats_scan
>>> one = np.ones((1, 1, 1))
>>> ll, stats = kalman_stats_scan(0.9 * one, one, one, one, np.zeros((1, 4, 1)), np.zeros((1, 1)), one)
>>> ll.shape, stats[0].shape
((1,), (1, 1, 1))
"""

from __future__ import annotations

import math

from .._array_api import Array, array_namespace, device_of

__all__ = ["associative_scan", "kalman_stats_scan"]

_LOG_2PI = math.log(2.0 * math.pi)


def _t(xp, X):
    return xp.matrix_transpose(X)


def _sym(xp, X):
    return 0.5 * (X + xp.matrix_transpose(X))


def _mv(X, v):
    return (X @ v[..., None])[..., 0]


def _filter_combine(xp, eye, i, j):
    Ai, bi, Ci, ei, Ji = i
    Aj, bj, Cj, ej, Jj = j
    M = eye + Ci @ Jj
    AjMinv = _t(xp, xp.linalg.solve(_t(xp, M), _t(xp, Aj)))  # A_j M^{-1}
    AiTMinvT = _t(xp, xp.linalg.solve(M, Ai))  # A_i^T M^{-T}
    return (
        AjMinv @ Ai,
        _mv(AjMinv, bi + _mv(Ci, ej)) + bj,
        _sym(xp, AjMinv @ Ci @ _t(xp, Aj) + Cj),
        _mv(AiTMinvT, ej - _mv(Jj, bi)) + ei,
        _sym(xp, AiTMinvT @ Jj @ Ai + Ji),
    )


def _smoother_combine(xp, eye, i, j):
    Ei, gi, Li = i
    Ej, gj, Lj = j
    return Ei @ Ej, _mv(Ei, gj) + gi, _sym(xp, Ei @ Lj @ _t(xp, Ei) + Li)


def associative_scan(xp, combine, elems: tuple, reverse: bool = False) -> tuple:
    """Inclusive scan along axis 1 of a tuple of arrays (b, L, ...) under an associative ``combine``.

    ``combine(i, j)`` joins an earlier element ``i`` with a later ``j`` (tuples of arrays, batched
    over the leading axes); ``reverse`` scans from the end (element ``t`` becomes ``t (+) ... (+)
    L-1``). Work-efficient odd-even recursion (Ladner and Fischer 1980; Blelloch 1990): pairs are
    combined, the half-length sequence is scanned, and the even positions are filled in, so about
    ``2 L`` combines in ``2 ceil(log2 L)`` rounds of array operations, against ``L log2 L`` for a
    doubling (Hillis and Steele) scan. Shapes are static, so the recursion traces under ``jax.jit``.
    """
    if reverse:
        flipped = tuple(xp.flip(e, axis=1) for e in elems)
        out = associative_scan(xp, lambda i, j: combine(j, i), flipped)
        return tuple(xp.flip(o, axis=1) for o in out)
    L = elems[0].shape[1]
    if L < 2:
        return elems
    half = L // 2
    odd = associative_scan(
        xp, combine, combine(tuple(e[:, 0 : 2 * half : 2, ...] for e in elems), tuple(e[:, 1 : 2 * half : 2, ...] for e in elems))
    )  # the prefixes ending at positions 1, 3, 5, ...
    n_even = L - half  # positions 0, 2, 4, ...
    if n_even > 1:
        filled = combine(tuple(o[:, : n_even - 1, ...] for o in odd), tuple(e[:, 2:L:2, ...] for e in elems))
        even = tuple(xp.concat([e[:, :1, ...], f], axis=1) for e, f in zip(elems, filled))
    else:
        even = tuple(e[:, :1, ...] for e in elems)
    out = []
    for ev, od in zip(even, odd):
        pair = xp.stack([ev[:, :half, ...], od], axis=2)  # (b, half, 2, ...)
        x = xp.reshape(pair, (pair.shape[0], 2 * half) + tuple(pair.shape[3:]))
        out.append(x if n_even == half else xp.concat([x, ev[:, half:, ...]], axis=1))
    return tuple(out)


def _scan(xp, combine, elems, reverse=False):
    """:func:`associative_scan` with a combine of ``(xp, eye, i, j)`` (the Kalman elements)."""
    eye = xp.eye(elems[0].shape[-1], dtype=elems[0].dtype, device=device_of(elems[0]))
    return associative_scan(xp, lambda i, j: combine(xp, eye, i, j), elems, reverse)


def _gain(xp, P, Ct, S):
    """``P C^T S^{-1}`` for symmetric ``S``."""
    return _t(xp, xp.linalg.solve(S, _t(xp, P @ Ct)))


def kalman_stats_scan(
    A: Array, Q: Array, C: Array, R: Array, y: Array, m0: Array, P0: Array,
    mask: Array | None = None, weight: Array | None = None, smooth: bool = True,
) -> tuple[Array, tuple | None]:
    """Log-likelihood and weighted smoothed statistics by two associative scans.

    Parameters
    ----------
    A, Q : arrays (b, n, n)
    C : array (b, m, n)
    R : array (b, m, m)
    y : array (b, L, m)
    m0, P0 : arrays (b, n), (b, n, n)
        Distribution of ``x_0``, the state before ``y_1``.
    mask : bool array (b, L), optional
        False where ``y_t`` is missing.
    weight : array (b, L), optional
        Weights of the statistics (default 1).
    smooth : bool
        False: the log-likelihood only (``None`` for the statistics).

    Returns
    -------
    loglik : array (b,)
    stats : tuple ``(S00, S10, S11, Syx, Syy)`` as in :class:`sgmc.ssm.kalman.KalmanStats`, or None
    """
    xp = array_namespace(A, Q, C, R, y, m0, P0)
    b, L, m = y.shape
    n = A.shape[-1]
    dt, dev = A.dtype, device_of(A)
    eye = xp.eye(n, dtype=dt, device=dev)
    Ct = _t(xp, C)
    # -- filter elements: time-invariant parts once, per-time parts by broadcasting
    S = _sym(xp, C @ Q @ Ct + R)
    K = _gain(xp, Q, Ct, S)  # (b, n, m)
    IKC = eye - K @ C
    HF = C @ A
    J = _sym(xp, _t(xp, HF) @ xp.linalg.solve(S, HF))
    Gt = _t(xp, xp.linalg.solve(S, HF))  # F^T H^T S^{-1}: (b, n, m)
    mp1 = _mv(A, m0)
    Pp1 = _sym(xp, A @ P0 @ _t(xp, A) + Q)
    S1 = _sym(xp, C @ Pp1 @ Ct + R)
    K1 = _gain(xp, Pp1, Ct, S1)
    I1 = eye - K1 @ C
    C1 = _sym(xp, I1 @ Pp1 @ _t(xp, I1) + K1 @ R @ _t(xp, K1))
    b1 = mp1 + _mv(K1, y[:, 0, :] - _mv(C, mp1))

    def over_time(X):
        return xp.broadcast_to(X[:, None, ...], (b, L) + tuple(X.shape[1:]))

    zero_nn = xp.zeros((b, L, n, n), dtype=dt, device=dev)
    Ael = over_time(IKC @ A)
    bel = (y @ _t(xp, K))  # K y_t: (b, L, n)
    Cel = over_time(_sym(xp, IKC @ Q @ _t(xp, IKC) + K @ R @ _t(xp, K)))
    eel = y @ _t(xp, Gt)  # F^T H^T S^{-1} y_t
    Jel = over_time(J)
    if mask is not None:  # missing y_t: the plain transition
        o2, o3 = mask[..., None], mask[..., None, None]
        Ael = xp.where(o3, Ael, over_time(A))
        bel = xp.where(o2, bel, xp.zeros_like(bel))
        Cel = xp.where(o3, Cel, over_time(Q))
        eel = xp.where(o2, eel, xp.zeros_like(eel))
        Jel = xp.where(o3, Jel, zero_nn)
        obs0 = mask[:, 0]
        b1 = xp.where(obs0[:, None], b1, mp1)
        C1 = xp.where(obs0[:, None, None], C1, Pp1)
    first = xp.arange(L, device=dev) == 0
    f2, f3 = first[None, :, None], first[None, :, None, None]
    elems = (
        xp.where(f3, zero_nn, Ael),
        xp.where(f2, over_time(b1), bel),
        xp.where(f3, over_time(C1), Cel),
        xp.where(f2, xp.zeros_like(eel), eel),
        xp.where(f3, zero_nn, Jel),
    )
    _, mf, Pf, _, _ = _scan(xp, _filter_combine, elems)  # filtered moments (b, L, n), (b, L, n, n)
    # -- log-likelihood from the predictions
    m_prev = xp.concat([m0[:, None, :], mf[:, :-1, :]], axis=1)
    P_prev = xp.concat([P0[:, None, ...], Pf[:, :-1, ...]], axis=1)
    A_t = over_time(A)
    mp = m_prev @ _t(xp, A)
    Pp = _sym(xp, A_t @ P_prev @ _t(xp, A_t) + over_time(Q))
    C_t = over_time(C)
    St = _sym(xp, C_t @ Pp @ _t(xp, C_t) + over_time(R))
    v = y - mp @ Ct
    _, logdet = xp.linalg.slogdet(St)
    quad = xp.sum(v * xp.linalg.solve(St, v[..., None])[..., 0], axis=-1)
    llt = -0.5 * (m * _LOG_2PI + logdet + quad)
    if mask is not None:
        llt = xp.where(mask, llt, xp.zeros_like(llt))
    ll = xp.sum(llt, axis=1)
    if not smooth:
        return ll, None
    # -- smoother elements for x_0 .. x_L (b, L + 1, ...): E_k = P_k F^T Pp_{k+1}^{-1}
    E = _t(xp, xp.linalg.solve(Pp, A_t @ P_prev))  # (b, L, n, n) for k = 0 .. L-1 (x_0 .. x_{L-1})
    g = m_prev - _mv(E, mp)
    Lc = _sym(xp, P_prev - E @ A_t @ P_prev)
    sel = (
        xp.concat([E, xp.zeros((b, 1, n, n), dtype=dt, device=dev)], axis=1),
        xp.concat([g, mf[:, -1:, :]], axis=1),
        xp.concat([Lc, Pf[:, -1:, ...]], axis=1),
    )
    _, ms_all, Ps_all = _scan(xp, _smoother_combine, sel, reverse=True)  # smoothed x_0 .. x_L
    ms_prev, Ps_prev = ms_all[:, :-1, :], Ps_all[:, :-1, ...]
    ms, Ps = ms_all[:, 1:, :], Ps_all[:, 1:, ...]
    cross = Ps @ _t(xp, E)  # Cov(x_t, x_{t-1} | y)
    w = xp.ones((b, L), dtype=dt, device=dev) if weight is None else weight
    wm = w[..., None]
    w3 = w[..., None, None]
    mT = xp.matrix_transpose
    S00 = xp.sum(w3 * Ps_prev, axis=1) + mT(wm * ms_prev) @ ms_prev
    S10 = xp.sum(w3 * cross, axis=1) + mT(wm * ms) @ ms_prev
    S11 = xp.sum(w3 * Ps, axis=1) + mT(wm * ms) @ ms
    Syx = mT(wm * y) @ ms
    Syy = mT(wm * y) @ y
    return ll, (S00, S10, S11, Syx, Syy)
