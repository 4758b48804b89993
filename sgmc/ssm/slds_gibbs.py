"""Blocked Gibbs sampling of a switching linear dynamical system's latent paths (thesis Alg. 5).

For the SLDS ``z_s ~ Pi[z_{s-1}, :]``, ``x_s ~ N(A_{z_s} x_{s-1}, Q_{z_s})``, ``y_s ~ N(C x_s, R)``
on a window of ``L`` positions (``x_0``, ``z_0`` the states before it), the two blocks are

* ``x | y, z``: a linear Gaussian model with time-varying ``A_s = A_{z_s}``, ``Q_s = Q_{z_s}``: Kalman
  filter (:func:`sgmc.ssm.kalman._filter_step`), then backward sampling (thesis Eq. 3.103) or the RTS
  smoother (:func:`sgmc.ssm.kalman._smooth_step`) for ``E_{x | y, z}``;
* ``z | x, y``: a discrete HMM with emission densities ``N(x_s | A_k x_{s-1}, Q_k)``: forward
  messages, then sampling (thesis Eq. 3.104, here in the equivalent filter-forward, sample-backward
  order), or :func:`sgmc.ssm.forward_backward` for ``E_{z | y, x}``.

The chain starts from the filtered draw of ``z`` (thesis Eq. 3.106). Everything is batched over a
leading axis ``b`` (chains times windows); the only Python loops are over positions.
"""

from __future__ import annotations

import math
from typing import Any

from .._array_api import Array, device_of
from .._sampling import categorical
from .kalman import _filter_step, _smooth_step

__all__ = ["onehot", "select", "filtered_init", "sample_x", "smooth_x", "sample_z", "transition_log_density"]

_LOG_2PI = math.log(2.0 * math.pi)


def onehot(xp: Any, z: Array, K: int, dtype: Any) -> Array:
    """Indicator array (..., K) of integer states ``z`` (...)."""
    return xp.astype(z[..., None] == xp.arange(K, device=device_of(z)), dtype)


def select(xp: Any, w: Array, M: Array) -> Array:
    """``sum_k w[..., k] M[:, k]`` for weights (b, ..., K) and per-regime arrays ``M`` (b, K, *shape)."""
    b, K = M.shape[0], M.shape[1]
    shape = tuple(M.shape[2:])
    flat = xp.reshape(M, (b, K, -1))
    lead = tuple(w.shape[1:-1])
    out = xp.reshape(w, (b, -1, K)) @ flat
    return xp.reshape(out, (b,) + lead + shape)


def _sym(xp, P):
    return 0.5 * (P + xp.matrix_transpose(P))


def _gauss(xp, rng, mean, cov):
    Lc = xp.linalg.cholesky(_sym(xp, cov))
    eps = rng.normal(tuple(mean.shape), dtype=mean.dtype)
    return mean + (Lc @ eps[..., None])[..., 0]


def _draw(xp, rng, prob):
    """One categorical draw per row of unnormalised probabilities (b, K)."""
    u = rng.uniform((prob.shape[0], 1), dtype=prob.dtype)
    return categorical(u, xp.cumulative_sum(prob, axis=-1))[:, 0]


def filtered_init(xp, rng, Pi, A, Q, C, R, y, mask, m0, P0, p0) -> Array:
    """Draw ``z_1..L`` (b, L) from the filtered process (thesis Eq. 3.106)."""
    b, L, m = y.shape
    K, n = A.shape[1], A.shape[-1]
    eye = xp.eye(n, dtype=y.dtype, device=device_of(y))
    rep = lambda X: xp.reshape(xp.broadcast_to(X[:, None, ...], (b, K) + tuple(X.shape[1:])), (b * K,) + tuple(X.shape[1:]))  # noqa: E731
    Ak, Qk = xp.reshape(A, (b * K, n, n)), xp.reshape(Q, (b * K, n, n))
    Ck, Rk = rep(C), rep(R)
    mean, cov, prev = m0, P0, p0
    zs = []
    for s in range(L):
        obs = None if mask is None else rep(mask[:, s : s + 1])[:, 0]
        _, _, mf, Pf, ll = _filter_step(xp, rep(mean), rep(cov), Ak, Qk, Ck, Rk, xp.matrix_transpose(Ck),
                                        rep(y[:, s, :]), obs, eye)
        ll = xp.reshape(ll, (b, K))
        prob = (prev[:, None, :] @ Pi)[:, 0, :] * xp.exp(ll - xp.max(ll, axis=-1, keepdims=True))
        z = _draw(xp, rng, prob)
        h = onehot(xp, z, K, y.dtype)
        mean = select(xp, h, xp.reshape(mf, (b, K, n)))
        cov = select(xp, h, xp.reshape(Pf, (b, K, n, n)))
        prev = h
        zs.append(z)
    return xp.stack(zs, axis=1)


def _forward_x(xp, A_s, Q_s, C, R, y, mask, m0, P0):
    """Time-varying Kalman filter; lists of predicted and filtered moments, position 0 = ``x_0``."""
    L = y.shape[1]
    n = A_s.shape[-1]
    eye = xp.eye(n, dtype=y.dtype, device=device_of(y))
    Ct = xp.matrix_transpose(C)
    mf, Pf, mp, Pp = [m0], [P0], [None], [None]
    for s in range(L):
        obs = None if mask is None else mask[:, s]
        a, q = A_s[:, s, ...], Q_s[:, s, ...]
        mps, Pps, mfs, Pfs, _ = _filter_step(xp, mf[-1], Pf[-1], a, q, C, R, Ct, y[:, s, :], obs, eye)
        mp.append(mps)
        Pp.append(Pps)
        mf.append(mfs)
        Pf.append(Pfs)
    return mp, Pp, mf, Pf


def sample_x(xp, rng, A_s, Q_s, C, R, y, mask, m0, P0) -> Array:
    """Draw ``x_0..L`` (b, L + 1, n) given ``z`` (through ``A_s``, ``Q_s`` (b, L, n, n)) by FFBS (Eq. 3.103)."""
    mp, Pp, mf, Pf = _forward_x(xp, A_s, Q_s, C, R, y, mask, m0, P0)
    L = y.shape[1]
    x = _gauss(xp, rng, mf[L], Pf[L])
    xs = [x]
    for s in range(L - 1, -1, -1):
        a = A_s[:, s, ...]  # the transition into position s + 1
        Jt = xp.linalg.solve(Pp[s + 1], a @ Pf[s])  # J^T = Pp^{-1} A Pf
        J = xp.matrix_transpose(Jt)
        mean = mf[s] + (J @ (x - mp[s + 1])[..., None])[..., 0]
        cov = Pf[s] - J @ a @ Pf[s]
        x = _gauss(xp, rng, mean, cov)
        xs.append(x)
    return xp.stack(xs[::-1], axis=1)


def smooth_x(xp, A_s, Q_s, C, R, y, mask, m0, P0) -> tuple[Array, Array, Array]:
    """RTS smoother of ``x_0..L`` given ``z``: means (b, L + 1, n), covariances (b, L + 1, n, n) and
    ``Cov(x_s, x_{s-1})`` for s = 1..L (b, L, n, n)."""
    mp, Pp, mf, Pf = _forward_x(xp, A_s, Q_s, C, R, y, mask, m0, P0)
    L = y.shape[1]
    ms, Ps = [mf[L]], [Pf[L]]
    crosses = []
    for s in range(L, 0, -1):
        m_prev, P_prev, cross = _smooth_step(xp, ms[-1], Ps[-1], mf[s - 1], Pf[s - 1], mp[s], Pp[s], A_s[:, s - 1, ...])
        ms.append(m_prev)
        Ps.append(P_prev)
        crosses.append(cross)
    return xp.stack(ms[::-1], axis=1), xp.stack(Ps[::-1], axis=1), xp.stack(crosses[::-1], axis=1)


def transition_log_density(xp, A, psi, x) -> Array:
    """``log N(x_s | A_k x_{s-1}, Q_k)`` for paths ``x`` (b, L + 1, n): (b, L, K)."""
    n = x.shape[-1]
    r = x[:, None, 1:, :] - x[:, None, :-1, :] @ xp.matrix_transpose(A)  # (b, K, L, n)
    u = r @ psi
    logdet = xp.sum(xp.log(xp.abs(xp.linalg.diagonal(psi))), axis=-1)  # (b, K)
    out = logdet[..., None] - 0.5 * n * _LOG_2PI - 0.5 * xp.sum(u * u, axis=-1)
    return xp.permute_dims(out, (0, 2, 1))


def sample_z(xp, rng, Pi, logp, p0) -> Array:
    """Draw ``z_0..L`` (b, L + 1) given emission log densities (b, L, K): filter forward, sample backward."""
    b, L, K = logp.shape
    p = xp.exp(logp - xp.max(logp, axis=-1, keepdims=True))
    alphas = [p0]
    a = p0
    for s in range(L):
        a = (a[:, None, :] @ Pi)[:, 0, :] * p[:, s, :]
        a = a / xp.sum(a, axis=-1, keepdims=True)
        alphas.append(a)
    z = _draw(xp, rng, alphas[L])
    zs = [z]
    PiT = xp.matrix_transpose(Pi)
    for s in range(L - 1, -1, -1):
        col = select(xp, onehot(xp, z, K, p.dtype), PiT[:, :, :])  # Pi[:, z_{s+1}] as rows (b, K)
        z = _draw(xp, rng, alphas[s] * col)
        zs.append(z)
    return xp.stack(zs[::-1], axis=1)
