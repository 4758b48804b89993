"""Autoregressive hidden Markov model (Aicher 2020, thesis section 3.4.2, Eqs. 3.46-3.51).

    z_t | z_{t-1} ~ Pi[z_{t-1}, :],   y_t | z_t = k, y_{<t} ~ N(A_k ybar_t, Q_k),   k = 1..K,

with ``y_t`` in R^m and ``ybar_t = (y_{t-1}, ..., y_{t-p})`` the ``p`` lagged observations, so each
``A_k`` is ``m x mp``. The likelihood is that of ``y_{p+1..T}`` given the first ``p`` observations.
Given the lags the model is a discrete HMM with emission densities ``N(y_t | A_k ybar_t, Q_k)``
(thesis Eq. 3.48), so the exact likelihood and its gradient (Fisher's identity, Eqs. 3.49-3.51) come
from the normalised forward-backward of :func:`sgmc.ssm.forward_backward`, batched over chains and
buffered windows.

Parameterisation: ``theta`` stacks ``eta`` (K x K, row-major; ``Pi`` is its row-wise softmax, the
log expanded means of thesis section 3.4.1), ``A`` (K x m x mp, row-major) and ``psi`` (the lower
triangle, row-major, of a Cholesky factor of each precision, ``psi_k psi_k^T = Q_k^{-1}``). Priors:
:mod:`sgmc.ssm.switching_params`. ``z_0`` (the state before the first modelled observation) is
uniform; buffered windows that start later start from the stationary law of ``Pi`` (treated as
fixed).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .._array_api import Array, is_array
from .._blocks import LaggedRows, is_reader
from .._sampling import categorical
from .._validation import check_int, check_positive
from .base import StateSpaceModel, as_series, check_theta
from .fisher import SSMFisherMetric
from .hmm import _second_moments, forward_backward, stationary_distribution
from .lgssm import _selector
from .subsequence import Windows
from .switching_params import (
    dirichlet_grad,
    dirichlet_terms,
    lower_positions,
    regime_prior,
    regime_prior_grads,
    row_softmax,
)

__all__ = ["ARHMM", "ARHMMParams"]

_LOG_2PI = math.log(2.0 * math.pi)


class ARHMMParams(NamedTuple):
    """Natural parameters: ``Pi`` (..., K, K), ``A`` (..., K, m, m p), ``Q`` (..., K, m, m)."""

    Pi: Array
    A: Array
    Q: Array


def lagged(xp: Any, y: Array, p: int) -> Array:
    """Rows ``(y_t, y_{t-1}, ..., y_{t-p})`` for ``t = p..T-1`` (0-based): shape ``(T - p, m (p + 1))``."""
    if is_reader(y):  # a series on disk: the lagged rows are made when read
        return LaggedRows(y, p)
    T = y.shape[0]
    return xp.concat([y[p - j : T - j, :] for j in range(p + 1)], axis=-1)


class ARHMM(StateSpaceModel):
    """Autoregressive HMM with ``K`` regimes of order ``p`` over ``theta = (eta, A, psi)``.

    Parameters
    ----------
    y : array (T,) or (T, m)
        Observations; the first ``order`` are conditioned on.
    n_states : int
        ``K`` (at least 1, at most ``T - order``).
    order : int, default 1
        ``p`` (at least 1, below ``T``).
    prior_var : float, default 100
        Column variance ``v`` of the matrix-normal prior of each ``A_k``.
    transition_prior : float, default 1
        Dirichlet concentration of each row of ``Pi`` (1: flat).

    Attributes
    ----------
    series : array (T, m)
        The observations.
    y : array (T - p, m (p + 1))
        The modelled observations with their lags, ``(y_t, ybar_t)``: what buffered windows cut.
    T : int
        ``T - p``, the number of modelled observations.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.ssm import ARHMM, ARHMMParams
    >>> params = ARHMMParams(Pi=np.array([[0.9, 0.1], [0.2, 0.8]]),
    ...                      A=np.array([[[0.9]], [[-0.5]]]), Q=np.array([[[0.1]], [[0.2]]]))
    >>> model = ARHMM(np.zeros(10), n_states=2, order=1)
    >>> theta = model.unconstrain(params)
    >>> theta.shape                           # eta (2 x 2), A (2 x 1 x 1), psi (2 x 1)
    (8,)
    >>> z, y = model.simulate(backends.default_rng(0), 200, theta)
    >>> ARHMM(y, n_states=2).grad_log_posterior(theta).shape
    (8,)
    """

    score_methods = ("exact",)
    #: the exact gradient comes with the likelihood, from one pass of :meth:`log_lik_and_grad`
    grad_log_lik = StateSpaceModel._grad_from_pair

    def __init__(self, y: Any, n_states: int, order: int = 1, *, prior_var: float = 100.0, transition_prior: float = 1.0):
        xp, series, _ = as_series(y, "y")
        T, m = int(series.shape[0]), int(series.shape[1])
        p = check_int(order, "order")
        if p >= T:
            msg = f"`order` must be below the series length T={T} (p lags leave T - p observations to model); got {p}"
            raise ValueError(msg)
        K = check_int(n_states, "n_states")
        if K > T - p:
            msg = f"`n_states` must be at most T - order = {T - p} (the modelled observations); got {K}"
            raise ValueError(msg)
        tri = lower_positions(m)
        dim = K * K + K * m * m * p + K * len(tri)
        super().__init__(lagged(xp, series, p), dim, 1)
        self.series, self.K, self.m, self.p = series, K, m, p
        self.obs_dim = m
        self.prior_var = check_positive(prior_var, "prior_var")
        self.transition_prior = check_positive(transition_prior, "transition_prior")
        self._ntri = len(tri)
        self._E = _selector(xp, m * m, tri, self.dtype, self.device)
        names = [f"eta[{i},{j}]" for i in range(K) for j in range(K)]
        names += [f"A[{k}][{i},{j}]" for k in range(K) for i in range(m) for j in range(m * p)]
        names += [f"psi[{k}][{q // m},{q % m}]" for k in range(K) for q in tri]
        self.param_names = tuple(names)

    # -- parameters -------------------------------------------------------------------------------
    def _split(self, theta: Array):
        xp = self.xp
        K, m, mp = self.K, self.m, self.m * self.p
        lead = tuple(theta.shape[:-1])
        eta = xp.reshape(theta[..., : K * K], lead + (K, K))
        o = K * K + K * m * mp
        A = xp.reshape(theta[..., K * K : o], lead + (K, m, mp))
        packed = xp.reshape(theta[..., o:], lead + (K, self._ntri))
        psi = xp.reshape(packed @ xp.matrix_transpose(self._E), lead + (K, m, m))
        return eta, A, psi

    def _pack(self, geta, gA, gpsi):
        xp = self.xp
        lead = tuple(geta.shape[:-2])
        gpsi = xp.reshape(gpsi, lead + (self.K, self.m * self.m)) @ self._E
        return xp.concat([xp.reshape(g, lead + (-1,)) for g in (geta, gA, gpsi)], axis=-1)

    def fisher_metric(self, **options: Any) -> SSMFisherMetric:
        """The block-diagonal complete-data Fisher metric for SGRLD (:class:`sgmc.ssm.fisher.SSMFisherMetric`)."""
        return SSMFisherMetric(self, **options)

    def constrain(self, theta: Any) -> ARHMMParams:
        """``(Pi, A, Q)`` of ``theta`` (..., dim)."""
        theta = theta if is_array(theta) else self.xp.asarray(theta, dtype=self.dtype, device=self.device)
        xp = self.xp
        eta, A, psi = self._split(theta)
        Q = xp.linalg.inv(psi @ xp.matrix_transpose(psi))
        return ARHMMParams(row_softmax(xp, eta), A, 0.5 * (Q + xp.matrix_transpose(Q)))

    def unconstrain(self, params: ARHMMParams) -> Array:
        """``theta`` of ``(Pi, A, Q)`` (``eta = log Pi``; ``psi`` with a positive diagonal)."""
        xp = self.xp
        Pi, A, Q = (xp.asarray(a, dtype=self.dtype, device=self.device) for a in params)
        psi = xp.linalg.cholesky(xp.linalg.inv(Q))
        return self._pack(xp.log(Pi), A, psi)

    # -- prior ----------------------------------------------------------------------------------------
    def log_prior(self, theta: Array) -> Array:
        """Log prior density (up to a constant); see :mod:`sgmc.ssm.switching_params`."""
        xp = self.xp
        eta, A, psi = self._split(theta)
        lp = dirichlet_terms(xp, self.transition_prior, eta)
        return lp + xp.sum(regime_prior(xp, A, psi, self.prior_var), axis=-1)

    def grad_log_prior(self, theta: Array) -> Array:
        xp = self.xp
        eta, A, psi = self._split(theta)
        gA, gpsi = regime_prior_grads(xp, A, psi, self.prior_var)
        return self._pack(dirichlet_grad(xp, self.transition_prior, eta), gA, gpsi)

    # -- smoothing ------------------------------------------------------------------------------------
    def log_emission(self, A: Array, psi: Array, Z: Array) -> Array:
        """``log N(y_t | A_k ybar_t, Q_k)`` for ``Z = (y_t, ybar_t)`` rows (b, L, m (p + 1)): (b, L, K)."""
        xp = self.xp
        m = self.m
        r = Z[:, None, :, :m] - Z[:, None, :, m:] @ xp.matrix_transpose(A)  # (b, K, L, m)
        u = r @ psi
        quad = xp.sum(u * u, axis=-1)  # (b, K, L)
        logdet = xp.sum(xp.log(xp.abs(xp.linalg.diagonal(psi))), axis=-1)  # (b, K)
        return xp.permute_dims(logdet[..., None] - 0.5 * m * _LOG_2PI - 0.5 * quad, (0, 2, 1))

    def _stats(self, theta_b, Z, p0, mask, weight):
        """Forward-backward on (b, L, m (p + 1)) rows; returns the log-likelihood and its gradient (b, dim)."""
        xp = self.xp
        m = self.m
        mT = xp.matrix_transpose
        eta, A, psi = self._split(theta_b)
        Pi = row_softmax(xp, eta)
        ll, gamma, N, G = forward_backward(Pi, self.log_emission(A, psi, Z), p0, mask, weight, xp=xp)
        wg = gamma if weight is None else gamma * weight[..., None]
        S = _second_moments(xp, wg, Z)  # (b, K, d, d)
        Syy, Syx, Sxx = S[..., :m, :m], S[..., :m, m:], S[..., m:, m:]
        Lam = psi @ mT(psi)
        Q = xp.linalg.inv(Lam)
        gA = Lam @ (Syx - A @ Sxx)
        E = Syy - A @ mT(Syx) - Syx @ mT(A) + A @ Sxx @ mT(A)
        gpsi = (G[..., None, None] * Q - E) @ psi
        geta = N - xp.sum(N, axis=-1, keepdims=True) * Pi
        return ll, self._pack(geta, gA, gpsi)

    def _checked(self, theta: Any) -> Array:
        xp = self.xp
        theta, _ = self._theta(theta)
        psi = self._split(theta)[2]
        if check_theta(xp, theta) and not bool(xp.all(xp.linalg.diagonal(psi) != 0)):
            msg = "`theta` holds a singular precision factor (a zero diagonal entry of psi): the likelihood is not defined there"
            raise ValueError(msg)
        return theta

    def _uniform(self, b):
        return self.xp.full((b, self.K), 1.0 / self.K, dtype=self.dtype, device=self.device)

    def log_lik_and_grad(self, theta: Array) -> tuple[Array, Array]:
        """Exact log-likelihood ``(chains,)`` of ``y_{p+1..T}`` given ``y_{1..p}``, and its gradient."""
        xp = self.xp
        theta = self._checked(theta)
        c = theta.shape[0]
        # the lagged rows once, shape (1, T, m (p + 1)): broadcast against the chains inside the products
        return self._stats(theta, self.y[None, ...], self._uniform(c), None, None)

    def log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        """Exact log-likelihood by the forward algorithm, ``(chains,)``."""
        if idx is not None:
            self._not_iid()
        return self.log_lik_and_grad(theta)[0]

    def exact_window_score(self, theta: Array, windows: Windows, y_windows: Array) -> Array:
        """Weighted score over buffered windows by forward-backward, batched over chains x M."""
        xp = self.xp
        th, c, M = self._per_window(theta, windows)
        b, L = c * M, windows.L
        Pi = row_softmax(xp, self._split(th)[0])
        first = xp.reshape(windows.start == 0, (b,))
        p0 = xp.where(first[:, None], self._uniform(b), stationary_distribution(Pi))
        Z = xp.reshape(y_windows, (b, L, self.y.shape[-1]))
        _, g = self._stats(th, Z, p0, xp.reshape(windows.mask, (b, L)), xp.reshape(windows.weight, (b, L)))
        return xp.sum(xp.reshape(g, (c, M, self.dim)), axis=1)

    # -- simulation -----------------------------------------------------------------------------------
    def simulate(self, rng: Any, T: int, theta: Any) -> tuple[Array, Array]:
        """Draw ``(z, y)`` of shapes (T,) and (T, m) at ``theta`` (dim,): ``p`` zero lags before ``y_1``,
        ``z_0`` uniform."""
        xp = self.xp
        T = check_int(T, "T")
        theta = theta if is_array(theta) else xp.asarray(theta, dtype=self.dtype, device=self.device)
        Pi, A, Q = (a[0, ...] for a in self.constrain(theta[None, :]))
        cdf = xp.cumulative_sum(Pi, axis=-1)
        Lc = xp.linalg.cholesky(Q)
        u = rng.uniform((T,), dtype=self.dtype)
        eps = rng.normal((T, self.m), dtype=self.dtype)
        z = xp.astype(rng.integers(self.K, (1,)), xp.int64)
        lags = [xp.zeros((self.m,), dtype=self.dtype, device=self.device)] * self.p
        zs, ys = [], []
        for t in range(T):
            z = categorical(u[t : t + 1][None, :], xp.take(cdf, z, axis=0))[0]
            k = int(z[0])
            yt = A[k] @ xp.concat(lags) + Lc[k] @ eps[t]
            lags = [yt] + lags[:-1]
            zs.append(z)
            ys.append(yt)
        return xp.concat(zs), xp.stack(ys)
