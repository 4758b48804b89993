"""Kalman filter and Rauch-Tung-Striebel smoother, batched: exact log-likelihood and its gradient.

The linear Gaussian state space model (Aicher 2020, thesis Eq. 3.55)

    x_0 ~ N(m0, P0),   x_t = A x_{t-1} + N(0, Q),   y_t = C x_t + N(0, R),   t = 1..L,

has a Gaussian smoothing distribution. The thesis writes the messages in information form (Eqs.
3.56-3.63); this module uses the equivalent moment form, which is easier to keep stable over long
series: the filter updates covariances in Joseph form and symmetrises them, and the RTS smoother
returns the lag-one cross-covariance ``Cov(x_t, x_{t-1} | y)`` the gradient needs.

The gradient follows from Fisher's identity (thesis Eqs. 3.64-3.72): with the smoothed second
moments ``M_{t,t'} = E[x_t x_t'^T | y]`` and per-time weights ``w_t``, the weighted sums

    S00 = sum w_t M_{t-1,t-1},  S10 = sum w_t M_{t,t-1},  S11 = sum w_t M_{t,t},
    Syx = sum w_t y_t E[x_t]^T,  Syy = sum w_t y_t y_t^T,  W = sum w_t

are sufficient, and with the precisions ``Lq = Q^{-1}``, ``Lr = R^{-1}``

    grad_A  = Lq (S10 - A S00)
    grad_Lq = (W Q - E[sum w r r^T]) / 2,  r = x_t - A x_{t-1}
    grad_C  = Lr (Syx - C S11)
    grad_Lr = (W R - E[sum w e e^T]) / 2,  e = y_t - C x_t.

With all ``w_t = 1`` these are the exact gradients of the log-likelihood (``x_0``'s distribution is
fixed); with the buffered weights of :mod:`sgmc.ssm.subsequence` they are the buffered stochastic
gradient (thesis Eq. 3.5). Everything is batched over a leading axis ``b`` (chains, or chains times
subsequences), never looped over. The sequential loop smooths long series in segments with
checkpoints (memory O(b (segment + L / segment) n^2)); the scalar model (``n = m = 1``) runs on
elementwise operations, without linear algebra calls.

The sequential recursion (:mod:`sgmc.ssm.kalman_loop`) defines the results of :func:`kalman_loglik`
and :func:`kalman_stats`; two faster paths reproduce it to rounding. A backend with a compiled
recursion (``native(xp, "kalman_stats")``: a Numba loop on NumPy) runs it; elsewhere the
parallel-in-time scan of :mod:`sgmc.ssm.kalman_scan` runs wherever its modelled work is the smaller
(:mod:`sgmc.ssm.kalman_paths`): always for long series, never for many short windows. The scan has
no Python branching on values, so on JAX the log-likelihood, the statistics and the gradient run
under ``jax.jit`` (and ``jax.grad`` differentiates the log-likelihood).

>>> import numpy as np
>>> from sgmc.ssm import kalman_loglik
>>> A = np.full((1, 1, 1), 0.9); Q = np.full((1, 1, 1), 0.25)
>>> C = np.ones((1, 1, 1)); R = np.ones((1, 1, 1))
>>> y = np.zeros((1, 5, 1))
>>> kalman_loglik(A, Q, C, R, y).shape
(1,)
"""

from __future__ import annotations

from typing import NamedTuple

from .._array_api import Array, array_namespace, device_of
from .._dispatch import native
from .kalman_loop import filter_step as _filter_step  # noqa: F401  (the one-step filter, used by slds_gibbs)
from .kalman_loop import forward, run
from .kalman_loop import smooth_step as _smooth_step  # noqa: F401  (the one-step smoother, used by slds_gibbs)
from .kalman_paths import KALMAN_COSTS, chain_groups, prefer_scan
from .kalman_scalar import affine_scan, scalar_long  # noqa: F401  (affine_scan: kept importable from here)
from .kalman_scan import kalman_stats_scan

__all__ = [
    "KalmanStats",
    "KalmanGrad",
    "FilterResult",
    "SmootherResult",
    "kalman_filter",
    "kalman_smoother",
    "kalman_loglik",
    "kalman_stats",
    "kalman_grad",
    "stationary_covariance",
]

DEFAULT_SEGMENT = 2048


class KalmanStats(NamedTuple):
    """Weighted smoothed sufficient statistics (see the module docstring); leading axis ``b``."""

    S00: Array  # (b, n, n)
    S10: Array  # (b, n, n)
    S11: Array  # (b, n, n)
    Syx: Array  # (b, m, n)
    Syy: Array  # (b, m, m)
    W: Array  # (b,)


class KalmanGrad(NamedTuple):
    """Gradient of the log-likelihood with respect to ``A``, ``Q``, ``C``, ``R`` (entrywise)."""

    A: Array
    Q: Array
    C: Array
    R: Array


class FilterResult(NamedTuple):
    """Predicted and filtered moments ``(b, L, n)`` / ``(b, L, n, n)`` and the log-likelihood ``(b,)``."""

    mean_pred: Array
    cov_pred: Array
    mean: Array
    cov: Array
    loglik: Array


class SmootherResult(NamedTuple):
    """Smoothed moments of ``x_1..L`` and ``x_0``, lag-one cross-covariances, log-likelihood.

    ``cross[:, t] = Cov(x_{t+1}, x_t | y)`` in 1-based time (the state at position ``t`` with the one
    before it; position 0 pairs with ``x_0``).
    """

    mean: Array  # (b, L, n)
    cov: Array  # (b, L, n, n)
    cross: Array  # (b, L, n, n)
    mean0: Array  # (b, n)
    cov0: Array  # (b, n, n)
    loglik: Array  # (b,)


# ----------------------------------------------------------------------------------------------------
# input handling


def _prepare(A, Q, C, R, y, m0, P0, mask):
    xp = array_namespace(A, Q, C, R, y, m0, P0, mask, names=("A", "Q", "C", "R", "y", "m0", "P0", "mask"))
    if A.ndim != 3 or A.shape[-1] != A.shape[-2]:
        msg = f"`A` must have shape (batch, n, n); got {tuple(A.shape)}"
        raise ValueError(msg)
    b, n = A.shape[0], A.shape[-1]
    if C.ndim != 3 or C.shape[0] != b or C.shape[-1] != n:
        msg = f"`C` must have shape ({b}, m, {n}); got {tuple(C.shape)}"
        raise ValueError(msg)
    m = C.shape[1]
    for name, M, shape in (("Q", Q, (b, n, n)), ("R", R, (b, m, m))):
        if tuple(M.shape) != shape:
            msg = f"`{name}` must have shape {shape}; got {tuple(M.shape)}"
            raise ValueError(msg)
    if y.ndim == 2:
        y = xp.broadcast_to(y[None, ...], (b,) + tuple(y.shape))
    if y.ndim != 3 or y.shape[0] != b or y.shape[-1] != m:
        msg = f"`y` must have shape ({b}, L, {m}) or (L, {m}); got {tuple(y.shape)}"
        raise ValueError(msg)
    L = y.shape[1]
    dtype = A.dtype
    dev = device_of(A)
    if m0 is None:
        m0 = xp.zeros((b, n), dtype=dtype, device=dev)
    if P0 is None:
        P0 = stationary_covariance(A, Q)
    if mask is not None and tuple(mask.shape) != (b, L):
        msg = f"`mask` must have shape ({b}, {L}); got {tuple(mask.shape)}"
        raise ValueError(msg)
    return xp, y, m0, P0, mask, (b, L, n, m)


def stationary_covariance(A: Array, Q: Array, fallback: Array | None = None, iters: int = 40) -> Array:
    """Stationary covariance ``P = A P A^T + Q`` of ``x_t = A x_{t-1} + N(0, Q)``, batched.

    Solved by doubling (``P <- P + F P F^T``, ``F <- F F``), which converges when the spectral radius
    of ``A`` is below one. Where it is not (or the iteration overflows), ``fallback`` (default
    ``Q``) is returned for that batch entry.

    Parameters
    ----------
    A, Q : arrays (b, n, n)
    fallback : array (b, n, n), optional
    iters : int
        Doubling steps: covers ``A^(2^iters)``.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.ssm.kalman import stationary_covariance
    >>> float(stationary_covariance(np.full((1, 1, 1), 0.5), np.ones((1, 1, 1)))[0, 0, 0])
    1.3333333333333333
    """
    xp = array_namespace(A, Q)
    fb = Q if fallback is None else fallback
    if A.shape[-1] == 1:  # closed form: Q / (1 - A^2)
        a2 = A * A
        ok = a2 < 1.0
        return xp.where(ok, Q / xp.where(ok, 1.0 - a2, xp.ones_like(a2)), fb)
    mT = xp.matrix_transpose
    P, F = Q, A
    for _ in range(iters):
        P = P + F @ P @ mT(F)
        P = 0.5 * (P + mT(P))
        F = F @ F
        F = xp.where(xp.isfinite(F), F, xp.zeros_like(F))  # no host sync: traceable under jax.jit
    resid = xp.max(xp.abs(F), axis=(-2, -1))
    ok = xp.isfinite(xp.sum(P, axis=(-2, -1))) & (resid < 1e-8)
    return xp.where(ok[:, None, None], P, fb)


# ----------------------------------------------------------------------------------------------------
# choosing the path

#: Fully observed scalar series at least this long take the vectorised scalar path
#: (:mod:`sgmc.ssm.kalman_scalar`: steady-state variances, doubling scans of the means).
FAST_MIN_LENGTH = 256


def _is_scalar(A, C) -> bool:
    return A.shape[-1] == 1 and C.shape[-2] == 1


#: Where the backend has no compiled recursion, the parallel-in-time scan (:mod:`sgmc.ssm.kalman_scan`)
#: replaces the sequential loop for series of ``SCAN_MIN_LENGTH`` or more positions where its modelled
#: work is the smaller (:func:`sgmc.ssm.kalman_paths.prefer_scan`): few or long series take the scan,
#: many short windows the loop, and series longer than ``kalman_paths.LOOP_MAX_LENGTH`` always the scan.
SCAN_MIN_LENGTH = 16


def _use_scan(scalar: bool, mask, b: int, L: int) -> bool:
    if scalar and mask is None and L >= FAST_MIN_LENGTH:
        return False  # the scalar fast path (steady-state covariances) is cheaper still
    return prefer_scan(KALMAN_COSTS, b, L, min_length=SCAN_MIN_LENGTH)


def _scan_grouped(xp, A, Q, C, R, y, m0, P0, mask, weight, smooth=True):
    """:func:`kalman_stats_scan` over groups of series (``kalman_paths.chain_groups``: bounded memory)."""
    groups = chain_groups(A.shape[0], y.shape[1])
    if len(groups) == 1:
        return kalman_stats_scan(A, Q, C, R, y, m0, P0, mask, weight, smooth=smooth)
    parts = [kalman_stats_scan(*(None if a is None else a[g, ...] for a in (A, Q, C, R, y, m0, P0, mask, weight)),
                               smooth=smooth) for g in groups]
    ll = xp.concat([p[0] for p in parts])
    if not smooth:
        return ll, None
    return ll, tuple(xp.concat([p[1][i] for p in parts]) for i in range(5))


def _squeeze(xp, *arrays):
    return tuple(None if a is None else a[:, 0, 0] for a in arrays)


# The Kalman functions repeat one public signature and docstring layout: each takes the model by name.
def kalman_loglik(
    A: Array,
    Q: Array,
    C: Array,
    R: Array,
    y: Array,
    m0: Array | None = None,
    P0: Array | None = None,
    mask: Array | None = None,
) -> Array:
    """Exact log-likelihood ``log p(y_1..L)`` of a batch of linear Gaussian state space models.

    Parameters
    ----------
    A, Q : arrays (b, n, n)
        Transition matrix and transition noise covariance.
    C : array (b, m, n)
        Emission matrix.
    R : array (b, m, m)
        Emission noise covariance.
    y : array (b, L, m) or (L, m)
        Observations (one series per batch entry, or one shared).
    m0, P0 : arrays (b, n), (b, n, n), optional
        Distribution of ``x_0`` (the state before ``y_1``); default mean 0 and the stationary
        covariance (``Q`` where ``A`` is not stable).
    mask : bool array (b, L), optional
        False where ``y_t`` is missing (those times only predict).

    Returns
    -------
    array (b,)

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.ssm import kalman_loglik
    >>> one = np.ones((1, 1, 1))
    >>> ll = kalman_loglik(0.0 * one, one, one, one, np.zeros((1, 1, 1)), P0=one)
    >>> bool(np.isclose(ll[0], -0.5 * np.log(2 * np.pi * 2.0)))
    True
    """
    xp, y, m0, P0, mask, (b, L, n, m) = _prepare(A, Q, C, R, y, m0, P0, mask)
    fast = native(xp, "kalman_stats")
    if fast is not None:  # the backend's compiled filter
        out = fast(A, Q, C, R, y, m0, P0, mask, None, smooth=False)
        if out is not NotImplemented:
            return out[0]
    if _use_scan(_is_scalar(A, C), mask, b, L):
        return _scan_grouped(xp, A, Q, C, R, y, m0, P0, mask, None, smooth=False)[0]
    if _is_scalar(A, C):
        a, q, c, r, p0 = _squeeze(xp, A, Q, C, R, P0)
        if mask is None and L >= FAST_MIN_LENGTH:
            return scalar_long(xp, a, q, c, r, y[..., 0], m0[:, 0], p0, xp.ones((b, L), dtype=A.dtype, device=device_of(A)))[0]
        ll, _ = run(xp, True, a, q, c, r, y[..., 0], m0[:, 0], p0, mask, None, DEFAULT_SEGMENT, None)
        return ll
    ll, _ = run(xp, False, A, Q, C, R, y, m0, P0, mask, None, DEFAULT_SEGMENT, None)
    return ll


# The Kalman functions repeat one public signature and docstring layout: each takes the model by name.
def kalman_filter(A, Q, C, R, y, m0=None, P0=None, mask=None) -> FilterResult:
    """Kalman filter: predicted and filtered moments at every position, and the log-likelihood.

    Arguments as :func:`kalman_loglik`. Keeps all ``L`` moments in memory.

    Returns
    -------
    FilterResult

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.ssm import kalman_filter
    >>> one = np.ones((2, 1, 1))
    >>> f = kalman_filter(0.5 * one, one, one, one, np.zeros((2, 4, 1)))
    >>> f.mean.shape, f.cov.shape
    ((2, 4, 1), (2, 4, 1, 1))
    """
    xp, y, m0, P0, mask, (b, L, n, m) = _prepare(A, Q, C, R, y, m0, P0, mask)
    _, _, ll, out = forward(xp, False, A, Q, C, R, y, m0, P0, mask, 0, L, True)
    if ll is None:
        ll = xp.zeros((b,), dtype=A.dtype, device=device_of(A))
    stack = [xp.stack([o[i] for o in out], axis=1) for i in range(4)]
    return FilterResult(stack[0], stack[1], stack[2], stack[3], ll)


# The Kalman functions repeat one public signature and docstring layout: each takes the model by name.
def kalman_smoother(A, Q, C, R, y, m0=None, P0=None, mask=None) -> SmootherResult:
    """RTS smoother: smoothed means, covariances and lag-one cross-covariances at every position.

    Arguments as :func:`kalman_loglik`. Keeps all ``L`` moments in memory (use
    :func:`kalman_stats` for long series).

    Returns
    -------
    SmootherResult

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.ssm import kalman_smoother
    >>> one = np.ones((1, 1, 1))
    >>> s = kalman_smoother(0.9 * one, one, one, one, np.ones((1, 3, 1)))
    >>> s.mean.shape, s.cross.shape
    ((1, 3, 1), (1, 3, 1, 1))
    """
    xp, y, m0, P0, mask, (b, L, n, m) = _prepare(A, Q, C, R, y, m0, P0, mask)
    if _is_scalar(A, C) and mask is None and L >= FAST_MIN_LENGTH:
        a, q, c, r, p0 = _squeeze(xp, A, Q, C, R, P0)
        ones = xp.ones((b, L), dtype=A.dtype, device=device_of(A))
        ll, _, (ms, Ps, cross, ms0, Ps0) = scalar_long(xp, a, q, c, r, y[..., 0], m0[:, 0], p0, ones, moments=True)
        return SmootherResult(ms[..., None], Ps[..., None, None], cross[..., None, None], ms0[:, None], Ps0[:, None, None], ll)
    means, covs, crosses = [None] * L, [None] * L, [None] * L

    def visit(t, ms, Ps, ms_prev, Ps_prev, cross):
        means[t], covs[t], crosses[t] = ms, Ps, cross

    ll, (m_0, P_0) = run(xp, False, A, Q, C, R, y, m0, P0, mask, None, max(L, 1), visit)
    return SmootherResult(
        xp.stack(means, axis=1), xp.stack(covs, axis=1), xp.stack(crosses, axis=1), m_0, P_0, ll
    )


# The Kalman functions repeat one public signature and docstring layout: each takes the model by name.
def kalman_stats(
    A: Array,
    Q: Array,
    C: Array,
    R: Array,
    y: Array,
    m0: Array | None = None,
    P0: Array | None = None,
    mask: Array | None = None,
    weight: Array | None = None,
    segment: int = DEFAULT_SEGMENT,
) -> tuple[Array, KalmanStats]:
    """Log-likelihood and weighted smoothed sufficient statistics, in O(segment + L / segment) memory.

    Parameters
    ----------
    A, Q, C, R, y, m0, P0, mask
        As :func:`kalman_loglik`.
    weight : array (b, L), optional
        Weight ``w_t`` of each position (default 1: the exact gradient).
    segment : int
        Positions smoothed per segment; longer series are re-filtered from checkpoints.

    Returns
    -------
    loglik : array (b,)
    stats : KalmanStats
    """
    xp, y, m0, P0, mask, (b, L, n, m) = _prepare(A, Q, C, R, y, m0, P0, mask)
    dtype, dev = A.dtype, device_of(A)
    scalar = _is_scalar(A, C)
    W = xp.sum(weight, axis=-1) if weight is not None else xp.full((b,), float(L), dtype=dtype, device=dev)
    fast = native(xp, "kalman_stats")
    if fast is not None:  # the backend's compiled recursion (the code below is its twin)
        out = fast(A, Q, C, R, y, m0, P0, mask, weight)
        if out is not NotImplemented:
            return out[0], KalmanStats(*out[1:], W)
    if _use_scan(scalar, mask, b, L):
        ll, sums = _scan_grouped(xp, A, Q, C, R, y, m0, P0, mask, weight)
        return ll, KalmanStats(*sums, W)
    if weight is None:
        weight = xp.ones((b, L), dtype=dtype, device=dev)
    if scalar:
        ys = y[..., 0]
        acc = [xp.zeros((b,), dtype=dtype, device=dev) for _ in range(5)]

        def visit(t, ms, Ps, ms_prev, Ps_prev, cross):
            w = weight[:, t]
            yt = ys[:, t]
            acc[0] = acc[0] + w * (Ps_prev + ms_prev * ms_prev)
            acc[1] = acc[1] + w * (cross + ms * ms_prev)
            acc[2] = acc[2] + w * (Ps + ms * ms)
            acc[3] = acc[3] + w * yt * ms
            acc[4] = acc[4] + w * yt * yt

        a, q, c, r, p0 = _squeeze(xp, A, Q, C, R, P0)
        if mask is None and L >= FAST_MIN_LENGTH:
            ll, sums = scalar_long(xp, a, q, c, r, ys, m0[:, 0], p0, weight)
            acc[:] = list(sums)
        else:
            ll, _ = run(xp, True, a, q, c, r, ys, m0[:, 0], p0, mask, weight, segment, visit)
        stats = KalmanStats(*[xp.reshape(s, (b, 1, 1)) for s in acc], xp.sum(weight, axis=-1))
        return ll, stats

    S00 = xp.zeros((b, n, n), dtype=dtype, device=dev)
    acc = [S00, S00, S00, xp.zeros((b, m, n), dtype=dtype, device=dev), xp.zeros((b, m, m), dtype=dtype, device=dev)]

    def visit(t, ms, Ps, ms_prev, Ps_prev, cross):
        w = weight[:, t][:, None, None]
        yt = y[:, t, :]
        acc[0] = acc[0] + w * (Ps_prev + ms_prev[:, :, None] * ms_prev[:, None, :])
        acc[1] = acc[1] + w * (cross + ms[:, :, None] * ms_prev[:, None, :])
        acc[2] = acc[2] + w * (Ps + ms[:, :, None] * ms[:, None, :])
        acc[3] = acc[3] + w * (yt[:, :, None] * ms[:, None, :])
        acc[4] = acc[4] + w * (yt[:, :, None] * yt[:, None, :])

    ll, _ = run(xp, False, A, Q, C, R, y, m0, P0, mask, weight, segment, visit)
    return ll, KalmanStats(*acc, xp.sum(weight, axis=-1))


def precision_grads(A: Array, Q: Array, C: Array, R: Array, stats: KalmanStats) -> tuple[Array, Array, Array, Array]:
    """Gradients with respect to ``A``, ``Q^{-1}``, ``C``, ``R^{-1}`` from the statistics (thesis 3.64-3.72).

    The precision gradients are the symmetric matrices ``(W Q - E[sum w r r^T]) / 2`` and
    ``(W R - E[sum w e e^T]) / 2``: the derivative with respect to a symmetric precision, each
    entry counted once per ordered pair (so for ``Lq = psi psi^T`` the gradient with respect to
    ``psi`` is ``2 grad_Lq psi``).
    """
    xp = array_namespace(A)
    mT = xp.matrix_transpose
    S00, S10, S11, Syx, Syy, W = stats
    W = W[:, None, None]
    Lq = xp.linalg.inv(Q)
    Lr = xp.linalg.inv(R)
    gA = Lq @ (S10 - A @ S00)
    ASA = A @ S00 @ mT(A)
    Err = S11 - A @ mT(S10) - S10 @ mT(A) + ASA
    gLq = 0.5 * (W * Q - Err)
    gC = Lr @ (Syx - C @ S11)
    Eee = Syy - C @ mT(Syx) - Syx @ mT(C) + C @ S11 @ mT(C)
    gLr = 0.5 * (W * R - Eee)
    return gA, 0.5 * (gLq + mT(gLq)), gC, 0.5 * (gLr + mT(gLr))


# The Kalman functions repeat one public signature and docstring layout: each takes the model by name.
def kalman_grad(
    A: Array,
    Q: Array,
    C: Array,
    R: Array,
    y: Array,
    m0: Array | None = None,
    P0: Array | None = None,
    mask: Array | None = None,
    weight: Array | None = None,
) -> tuple[Array, KalmanGrad]:
    """Exact log-likelihood and its gradient with respect to ``A``, ``Q``, ``C``, ``R``.

    The gradient holds the fixed ``x_0`` distribution (``m0``, ``P0``) constant; pass ``P0``
    explicitly for a gradient that matches finite differences of :func:`kalman_loglik` (its
    default ``P0`` depends on ``A`` and ``Q``). The covariance gradients are entrywise: for a
    symmetric perturbation ``dQ`` the change is ``sum(grad.Q * dQ)``.

    Parameters
    ----------
    A, Q, C, R, y, m0, P0, mask
        As :func:`kalman_loglik`.
    weight : array (b, L), optional
        Per-position weights of the score terms (default 1).

    Returns
    -------
    loglik : array (b,)
    grad : KalmanGrad

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.ssm import kalman_grad, kalman_loglik
    >>> one = np.ones((1, 1, 1)); y = np.array([[[0.3], [-1.2], [0.8]]])
    >>> ll, g = kalman_grad(0.5 * one, one, one, one, y, P0=one)
    >>> d = 1e-6
    >>> fd = (kalman_loglik((0.5 + d) * one, one, one, one, y, P0=one)
    ...       - kalman_loglik((0.5 - d) * one, one, one, one, y, P0=one)) / (2 * d)
    >>> bool(np.isclose(g.A[0, 0, 0], fd[0]))
    True
    """
    ll, stats = kalman_stats(A, Q, C, R, y, m0, P0, mask, weight)
    xp = array_namespace(A)
    gA, gLq, gC, gLr = precision_grads(A, Q, C, R, stats)
    Lq = xp.linalg.inv(Q)
    Lr = xp.linalg.inv(R)
    return ll, KalmanGrad(gA, -(Lq @ gLq @ Lq), gC, -(Lr @ gLr @ Lr))
