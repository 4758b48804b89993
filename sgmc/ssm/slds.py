"""Switching linear dynamical system (Aicher 2020, thesis section 3.4.6, Eqs. 3.98-3.111).

    z_t ~ Pi[z_{t-1}, :],   x_t = A_{z_t} x_{t-1} + N(0, Q_{z_t}),   y_t = C x_t + N(0, R),

with ``x_t`` in R^n, ``y_t`` in R^m and ``K`` regimes. The smoothing distribution of ``(x, z)`` has no
closed form, so the buffered gradient (thesis Alg. 5) runs a blocked Gibbs sampler on each buffered
window (:mod:`sgmc.ssm.slds_gibbs`: ``x | y, z`` by a time-varying Kalman filter and backward
sampling, ``z | x, y`` by HMM messages) and averages, over its ``n_samples`` draws after
``burn_in`` sweeps, one of three Monte Carlo forms of Fisher's identity:

* ``"xz"`` (Eq. 3.100): the complete-data score at the drawn ``(x, z)``;
* ``"z"`` (Eq. 3.101): its expectation over ``x | y, z`` (RTS smoother), lowest variance for
  ``A``, ``Q``, ``C``, ``R`` (the default);
* ``"x"`` (Eq. 3.102): its expectation over ``z | y, x`` (forward-backward), lower variance for ``Pi``.

Parameterisation: ``theta`` stacks ``eta`` (K x K; ``Pi`` its row-wise softmax), ``A`` (K x n x n), the
free entries of ``C`` (as :class:`~sgmc.ssm.LGSSM`: the leading ``min(n, m)`` block is the identity),
``psi_Q`` (lower triangles of Cholesky factors of each ``Q_k^{-1}``) and ``psi_R``. With ``K = 1``
the model, its prior and its ``"z"`` gradient are those of :class:`~sgmc.ssm.LGSSM` (plus a
constant ``eta``). Priors: :mod:`sgmc.ssm.switching_params`; free ``C`` entries N(0, v). ``z_0`` is
uniform and ``x_0 ~ N(m0, P0)``; windows that start later start from the stationary law of ``Pi`` and
``x_0 ~ N(0, sum_k pi_k P_k)``, ``P_k`` the stationary covariance of regime ``k`` (both fixed).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import backends
from .._array_api import Array, is_array
from .._sampling import categorical
from .._validation import check_choice, check_int, check_positive
from .base import StateSpaceModel, as_series, check_theta
from .fisher import SSMFisherMetric
from .hmm import forward_backward, stationary_distribution
from .kalman import KalmanStats, precision_grads, stationary_covariance
from .lgssm import _selector
from .slds_gibbs import filtered_init, onehot, sample_x, sample_z, select, smooth_x, transition_log_density
from .subsequence import Windows, gather_windows
from .switching_params import (
    dirichlet_grad,
    dirichlet_terms,
    lower_positions,
    regime_prior,
    regime_prior_grads,
    row_softmax,
)

__all__ = ["SLDS", "SLDSParams"]


class SLDSParams(NamedTuple):
    """Natural parameters: ``Pi`` (..., K, K), ``A`` and ``Q`` (..., K, n, n), ``C`` (..., m, n), ``R`` (..., m, m)."""

    Pi: Array
    A: Array
    Q: Array
    C: Array
    R: Array


class SLDS(StateSpaceModel):
    """Switching linear dynamical system with buffered gradients by blocked Gibbs.

    Parameters
    ----------
    y : array (T,) or (T, m)
    n_states : int
        ``K`` (at least 1, at most ``T``).
    state_dim : int, optional
        ``n`` (default ``m``).
    gradient : {"z", "x", "xz"}, default "z"
        Monte Carlo form of Fisher's identity (thesis Eqs. 3.101, 3.102, 3.100).
    n_samples : int, default 5
        Gibbs draws averaged per window.
    burn_in : int, default 5
        Gibbs sweeps discarded after the filtered initialisation (thesis Eq. 3.106).
    m0, P0 : array, optional
        Mean (default 0) and covariance (default ``I``) of ``x_0``.
    prior_var : float, default 100
        ``v``: column variance of the matrix-normal prior of each ``A_k``, variance of free ``C`` entries.
    transition_prior : float, default 1
        Dirichlet concentration of each row of ``Pi``.

    Notes
    -----
    The model has no tractable likelihood: use ``sgmc.sample(model, sampler, "buffered", ...)``; its
    gradient is stochastic even when the buffer covers the series (then it is unbiased for the exact
    gradient, up to the Gibbs chain's distance from stationarity after ``burn_in`` sweeps).

    Examples
    --------
    >>> import numpy as np
    >>> import sgmc
    >>> from sgmc.ssm import SLDS, SLDSParams
    >>> proto = SLDS(np.zeros(5), n_states=2)
    >>> theta = proto.unconstrain(SLDSParams(Pi=np.array([[0.9, 0.1], [0.1, 0.9]]),
    ...     A=np.array([[[0.9]], [[-0.5]]]), Q=np.array([[[0.1]], [[0.3]]]), C=np.ones((1, 1)), R=np.full((1, 1), 0.1)))
    >>> z, x, y = proto.simulate(sgmc.backends.default_rng(0), 300, theta)
    >>> trace = sgmc.sample(SLDS(y, n_states=2), "sgld", "buffered", step_size=1e-4, batch_size=10,
    ...                     n_iter=20, init=theta, rng=0, progress=False, estimator_options={"buffer": 5})
    >>> trace.draws.shape
    (1, 20, 9)
    """

    score_methods = ("gibbs",)

    def __init__(
        self,
        y: Any,
        n_states: int,
        state_dim: int | None = None,
        *,
        gradient: str = "z",
        n_samples: int = 5,
        burn_in: int = 5,
        m0: Any = None,
        P0: Any = None,
        prior_var: float = 100.0,
        transition_prior: float = 1.0,
    ):
        xp, series, _ = as_series(y, "y")
        T, m = int(series.shape[0]), int(series.shape[1])
        K = check_int(n_states, "n_states")
        if K > T:
            msg = f"`n_states` must be at most the series length T={T}; got {K}"
            raise ValueError(msg)
        n = m if state_dim is None else check_int(state_dim, "state_dim")
        k = min(n, m)
        c_free = [i * n + j for i in range(m) for j in range(n) if not (i < k and j < k)]
        tq, tr = lower_positions(n), lower_positions(m)
        self._sizes = (K * K, K * n * n, len(c_free), K * len(tq), len(tr))
        super().__init__(series, sum(self._sizes), n, m)
        dt, dev = self.dtype, self.device
        self.K, self.n, self.m = K, n, m
        self.gradient = check_choice(gradient, "gradient", ("z", "x", "xz"))
        self.n_samples = check_int(n_samples, "n_samples")
        self.burn_in = check_int(burn_in, "burn_in", minimum=0)
        self.prior_var = check_positive(prior_var, "prior_var")
        self.transition_prior = check_positive(transition_prior, "transition_prior")
        self._E_C = _selector(xp, m * n, c_free, dt, dev)
        self._E_Q = _selector(xp, n * n, tq, dt, dev)
        self._E_R = _selector(xp, m * m, tr, dt, dev)
        C0 = [1.0 if (i < k and j < k and i == j) else 0.0 for i in range(m) for j in range(n)]
        self._C0 = xp.reshape(xp.asarray(C0, dtype=dt, device=dev), (m, n))
        self.m0 = self._as(xp.zeros((n,), dtype=dt, device=dev) if m0 is None else m0, (n,), "m0")
        self.P0 = self._as(xp.eye(n, dtype=dt, device=dev) if P0 is None else P0, (n, n), "P0")
        names = [f"eta[{i},{j}]" for i in range(K) for j in range(K)]
        names += [f"A[{r}][{i},{j}]" for r in range(K) for i in range(n) for j in range(n)]
        names += [f"C[{q // n},{q % n}]" for q in c_free]
        names += [f"psi_Q[{r}][{q // n},{q % n}]" for r in range(K) for q in tq]
        names += [f"psi_R[{q // m},{q % m}]" for q in tr]
        self.param_names = tuple(names)

    def _as(self, a, shape, name):
        xp = self.xp
        a = a if is_array(a) else backends.asarray(a, backend=backends.get_backend(xp), dtype=self.dtype, device=self.device)
        a = xp.astype(a, self.dtype)
        if tuple(a.shape) != shape or not bool(xp.all(xp.isfinite(a))):
            msg = f"`{name}` must be a finite array of shape {shape}; got shape {tuple(a.shape)}"
            raise ValueError(msg)
        return a

    # -- parameters -------------------------------------------------------------------------------
    def _split(self, theta: Array):
        """``eta, A, C, psi_Q, psi_R`` with the leading axes of ``theta``."""
        xp = self.xp
        K, n, m = self.K, self.n, self.m
        lead = tuple(theta.shape[:-1])
        parts, o = [], 0
        for s in self._sizes:
            parts.append(theta[..., o : o + s])
            o += s
        eta = xp.reshape(parts[0], lead + (K, K))
        A = xp.reshape(parts[1], lead + (K, n, n))
        C = self._C0 + xp.reshape(parts[2] @ xp.matrix_transpose(self._E_C), lead + (m, n))
        psiQ = xp.reshape(xp.reshape(parts[3], lead + (K, -1)) @ xp.matrix_transpose(self._E_Q), lead + (K, n, n))
        psiR = xp.reshape(parts[4] @ xp.matrix_transpose(self._E_R), lead + (m, m))
        return eta, A, C, psiQ, psiR

    def _pack(self, geta, gA, gC, gpsiQ, gpsiR):
        xp = self.xp
        lead = tuple(geta.shape[:-2])
        K, n, m = self.K, self.n, self.m
        parts = [
            xp.reshape(geta, lead + (-1,)),
            xp.reshape(gA, lead + (-1,)),
            xp.reshape(gC, lead + (m * n,)) @ self._E_C,
            xp.reshape(xp.reshape(gpsiQ, lead + (K, n * n)) @ self._E_Q, lead + (-1,)),
            xp.reshape(gpsiR, lead + (m * m,)) @ self._E_R,
        ]
        return xp.concat(parts, axis=-1)

    def _inv_sym(self, psi):
        xp = self.xp
        S = xp.linalg.inv(psi @ xp.matrix_transpose(psi))
        return 0.5 * (S + xp.matrix_transpose(S))

    def fisher_metric(self, **options: Any) -> SSMFisherMetric:
        """The block-diagonal complete-data Fisher metric for SGRLD (:class:`sgmc.ssm.fisher.SSMFisherMetric`)."""
        return SSMFisherMetric(self, **options)

    def constrain(self, theta: Any) -> SLDSParams:
        """``(Pi, A, Q, C, R)`` of ``theta`` (..., dim)."""
        theta = theta if is_array(theta) else self.xp.asarray(theta, dtype=self.dtype, device=self.device)
        eta, A, C, psiQ, psiR = self._split(theta)
        return SLDSParams(row_softmax(self.xp, eta), A, self._inv_sym(psiQ), C, self._inv_sym(psiR))

    def unconstrain(self, params: SLDSParams) -> Array:
        """``theta`` of natural parameters (``eta = log Pi``; Cholesky factors with a positive diagonal)."""
        xp = self.xp
        Pi, A, Q, C, R = (xp.asarray(a, dtype=self.dtype, device=self.device) for a in params)
        chol = lambda S: xp.linalg.cholesky(xp.linalg.inv(S))  # noqa: E731
        return self._pack(xp.log(Pi), A, C - self._C0, chol(Q), chol(R))

    # -- prior ----------------------------------------------------------------------------------------
    def _zero_map(self, psiR):
        return self.xp.zeros(tuple(psiR.shape[:-1]) + (0,), dtype=self.dtype, device=self.device)

    def log_prior(self, theta: Array) -> Array:
        """Log prior density (up to a constant); see :mod:`sgmc.ssm.switching_params`."""
        xp = self.xp
        v = self.prior_var
        eta, A, C, psiQ, psiR = self._split(theta)
        lp = dirichlet_terms(xp, self.transition_prior, eta) + xp.sum(regime_prior(xp, A, psiQ, v), axis=-1)
        lp = lp + regime_prior(xp, self._zero_map(psiR), psiR, v)
        return lp - xp.sum((C - self._C0) ** 2, axis=(-2, -1)) / (2.0 * v)

    def grad_log_prior(self, theta: Array) -> Array:
        xp = self.xp
        v = self.prior_var
        eta, A, C, psiQ, psiR = self._split(theta)
        gA, gpsiQ = regime_prior_grads(xp, A, psiQ, v)
        _, gpsiR = regime_prior_grads(xp, self._zero_map(psiR), psiR, v)
        return self._pack(dirichlet_grad(xp, self.transition_prior, eta), gA, -(C - self._C0) / v, gpsiQ, gpsiR)

    # -- buffered gradient by blocked Gibbs -------------------------------------------------------------
    def window_score(self, rng: Any, theta: Array, windows: Windows, method: str = "gibbs", **options: Any):
        """Weighted score over buffered windows by blocked Gibbs (thesis Alg. 5), ``(chains, dim)``.

        See :meth:`sgmc.ssm.StateSpaceModel.window_score`; the Monte Carlo form is the model's
        ``gradient`` and the Gibbs chain's length ``burn_in + n_samples``.
        """
        check_choice(method, "method", self.score_methods)
        if options:
            msg = f"method='gibbs' takes no options (set gradient, n_samples, burn_in on the model); got {sorted(options)}"
            raise TypeError(msg)
        xp = self.xp
        theta, _ = self._theta(theta)
        check_theta(xp, theta)
        rng = backends.default_rng(rng, backend=backends.get_backend(xp))
        c, M = windows.start.shape
        b, L, K, n, m = c * M, windows.L, self.K, self.n, self.m
        th = xp.reshape(xp.broadcast_to(theta[:, None, :], (c, M, self.dim)), (b, self.dim))
        eta, A, C, psiQ, psiR = self._split(th)
        Pi, Q, R = row_softmax(xp, eta), self._inv_sym(psiQ), self._inv_sym(psiR)
        y = xp.reshape(gather_windows(xp, self.y, windows), (b, L, m))
        mask = xp.reshape(windows.mask, (b, L))
        w = xp.reshape(windows.weight, (b, L))
        first = xp.reshape(windows.start == 0, (b,))
        pi = stationary_distribution(Pi)
        p0 = xp.where(first[:, None], xp.full((b, K), 1.0 / K, dtype=self.dtype, device=self.device), pi)
        P0 = xp.broadcast_to(self.P0[None, ...], (b, n, n))
        Pk = stationary_covariance(xp.reshape(A, (b * K, n, n)), xp.reshape(Q, (b * K, n, n)),
                                   fallback=xp.reshape(xp.broadcast_to(P0[:, None, ...], (b, K, n, n)), (b * K, n, n)))
        Pstat = select(xp, pi, xp.reshape(Pk, (b, K, n, n)))
        P0 = xp.where(first[:, None, None], P0, Pstat)
        m0 = xp.where(first[:, None], xp.broadcast_to(self.m0[None, :], (b, n)), xp.zeros((b, n), dtype=self.dtype, device=self.device))
        z = filtered_init(xp, rng, Pi, A, Q, C, R, y, mask, m0, P0, p0)
        acc = None
        for sweep in range(self.burn_in + self.n_samples):
            h = onehot(xp, z, K, self.dtype)
            x = sample_x(xp, rng, select(xp, h, A), select(xp, h, Q), C, R, y, mask, m0, P0)
            logp = transition_log_density(xp, A, psiQ, x)
            keep = sweep >= self.burn_in
            if keep and self.gradient == "x":
                _, gamma, N, _ = forward_backward(Pi, logp, p0, None, w, xp=xp)
                acc = _add(acc, self._sample_stats(w[..., None] * gamma, N, _path_moments(xp, x), y))
            zz = sample_z(xp, rng, Pi, logp, p0)
            z = zz[:, 1:]
            if keep and self.gradient != "x":
                hz = onehot(xp, zz, K, self.dtype)
                N = xp.matrix_transpose(hz[:, :-1, :] * w[..., None]) @ hz[:, 1:, :]
                if self.gradient == "xz":
                    mom = _path_moments(xp, x)
                else:
                    h = hz[:, 1:, :]
                    mom = _smoothed_moments(xp, *smooth_x(xp, select(xp, h, A), select(xp, h, Q), C, R, y, mask, m0, P0))
                acc = _add(acc, self._sample_stats(w[..., None] * hz[:, 1:, :], N, mom, y))
        stats = [a / self.n_samples for a in acc]
        g = self._grad(Pi, A, Q, C, R, psiQ, psiR, *stats)
        return xp.sum(xp.reshape(g, (c, M, self.dim)), axis=1), xp.sum(windows.length, axis=-1)

    def _sample_stats(self, Om, N, moments, y):
        """Per-regime sums ``sum_s Om[s, k] M_s`` of the moments (b, L, ...) and the transition counts."""
        xp = self.xp
        b, L, K = Om.shape
        M00, M10, M11, Ex = moments
        Ot = xp.matrix_transpose(Om)  # (b, K, L)
        flat = lambda X: xp.reshape(X, (b, L, -1))  # noqa: E731
        yx = y[..., :, None] * Ex[..., None, :]
        yy = y[..., :, None] * y[..., None, :]
        return [N] + [xp.reshape(Ot @ flat(X), (b, K) + tuple(X.shape[2:])) for X in (M00, M10, M11, yx, yy)] + [xp.sum(Om, axis=1)]

    def _grad(self, Pi, A, Q, C, R, psiQ, psiR, N, S00, S10, S11, Syx, Syy, W):
        """The gradient (b, dim) from averaged per-regime statistics (thesis Eqs. 3.49-3.51, 3.64-3.72)."""
        xp = self.xp
        b, K, n, m = A.shape[0], self.K, self.n, self.m
        rep = lambda X: xp.reshape(xp.broadcast_to(X[:, None, ...], (b, K) + tuple(X.shape[1:])), (b * K,) + tuple(X.shape[1:]))  # noqa: E731
        flat = lambda X: xp.reshape(X, (b * K,) + tuple(X.shape[2:]))  # noqa: E731
        stats = KalmanStats(flat(S00), flat(S10), flat(S11), flat(Syx), flat(Syy), flat(W))
        gA, gLq, gC, gLr = precision_grads(flat(A), flat(Q), rep(C), rep(R), stats)
        gA = xp.reshape(gA, (b, K, n, n))
        gpsiQ = 2.0 * xp.reshape(gLq, (b, K, n, n)) @ psiQ
        gC = xp.sum(xp.reshape(gC, (b, K, m, n)), axis=1)
        gpsiR = 2.0 * xp.sum(xp.reshape(gLr, (b, K, m, m)), axis=1) @ psiR
        geta = N - xp.sum(N, axis=-1, keepdims=True) * Pi
        return self._pack(geta, gA, gC, gpsiQ, gpsiR)

    # -- simulation -----------------------------------------------------------------------------------
    def simulate(self, rng: Any, T: int, theta: Any) -> tuple[Array, Array, Array]:
        """Draw ``(z, x, y)`` of shapes (T,), (T, n), (T, m) at ``theta`` (dim,): ``z_0`` uniform, ``x_0 ~ N(m0, P0)``."""
        xp = self.xp
        T = check_int(T, "T")
        theta = theta if is_array(theta) else xp.asarray(theta, dtype=self.dtype, device=self.device)
        Pi, A, Q, C, R = (a[0, ...] for a in self.constrain(theta[None, :]))
        cdf = xp.cumulative_sum(Pi, axis=-1)
        LQ, LR = xp.linalg.cholesky(Q), xp.linalg.cholesky(R)
        u = rng.uniform((T,), dtype=self.dtype)
        e = rng.normal((T + 1, self.n + self.m), dtype=self.dtype)
        z = xp.astype(rng.integers(self.K, (1,)), xp.int64)
        x = self.m0 + xp.linalg.cholesky(self.P0) @ e[0, : self.n]
        zs, xs, ys = [], [], []
        for t in range(T):
            z = categorical(u[t : t + 1][None, :], xp.take(cdf, z, axis=0))[0]
            k = int(z[0])
            x = A[k] @ x + LQ[k] @ e[t + 1, : self.n]
            zs.append(z)
            xs.append(x)
            ys.append(C @ x + LR @ e[t + 1, self.n :])
        return xp.concat(zs), xp.stack(xs), xp.stack(ys)


def _add(acc, new):
    return new if acc is None else [a + b for a, b in zip(acc, new)]


def _path_moments(xp, x):
    """Per-position ``x_{s-1} x_{s-1}^T``, ``x_s x_{s-1}^T``, ``x_s x_s^T`` and ``x_s`` of paths (b, L + 1, n)."""
    prev, cur = x[:, :-1, :], x[:, 1:, :]
    outer = lambda a, c: a[..., :, None] * c[..., None, :]  # noqa: E731
    return outer(prev, prev), outer(cur, prev), outer(cur, cur), cur


def _smoothed_moments(xp, ms, Ps, cross):
    """The same moments in expectation under the smoother: means (b, L + 1, n), covariances, cross-covariances."""
    prev, cur = ms[:, :-1, :], ms[:, 1:, :]
    outer = lambda a, c: a[..., :, None] * c[..., None, :]  # noqa: E731
    return Ps[:, :-1, ...] + outer(prev, prev), cross + outer(cur, prev), Ps[:, 1:, ...] + outer(cur, cur), cur
