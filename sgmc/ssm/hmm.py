"""Gaussian hidden Markov model (Aicher 2020, thesis section 3.4.1, Eqs. 3.35-3.39).

    z_0 ~ p0,   z_t | z_{t-1} ~ Pi[z_{t-1}, :],   y_t | z_t = k ~ N(mu_k, Sigma_k),   k = 1..K,

with ``y_t`` in R^m. The exact likelihood and its gradient (Fisher's identity) come from the
forward-backward algorithm with normalised messages (each ``alpha_t`` and ``beta_t`` scaled to sum
to one, emission densities shifted by their maximum in log space), batched over chains and
windows.

Parameterisation: ``theta`` stacks

* ``eta`` (K x K, row-major): the logarithm of the *expanded mean* parameters of Pi (thesis
  section 3.4.1, after Patterson and Teh 2013), ``Pi[k, :] = exp(eta[k, :]) / sum exp(eta[k, :])``;
* ``mu`` (K x m, row-major);
* ``psi_k``: the lower triangle (row-major) of a Cholesky factor of each precision,
  ``psi_k psi_k^T = Sigma_k^{-1}``, for k = 1..K; absent when the covariances are fixed
  (``emission_cov``).

Priors (thesis appendix A.2.1; :mod:`sgmc.ssm.hmm_params`), by default: the flat Dirichlet on each
row of Pi, as normalised independent Gamma(1, 1) expanded means (log density in ``eta``: ``eta -
exp(eta)``); ``mu_k`` ~ N(0, 100 I); ``Sigma_k^{-1}`` Wishart with ``m + 1`` degrees of freedom and
mean ``I``, with the Cholesky Jacobian. Each can be set (``transition_prior``, ``mean_prior``,
``precision_prior``). ``p0`` is uniform (thesis: ``alpha = 1/K`` at the start) or ``initial_probs``,
the law of ``z_0`` or, with ``initial="z1"``, of ``z_1``; windows that start later use the
stationary distribution of Pi.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .. import backends
from .._array_api import Array, device_of, is_array
from .._blocks import is_out_of_core
from .._dispatch import native
from .._sampling import categorical
from .._validation import check_alloc, check_choice, check_int, check_positive, describe
from .base import StateSpaceModel, as_series, check_theta
from .fisher import SSMFisherMetric
from .hmm_scan import messages_scan
from .hmm_params import first_state_smoother, fixed_precision_factor, make_prior, prior_grads, prior_terms
from .kalman_paths import HMM_COSTS, chain_groups, prefer_scan
from .lgssm import _BYTES_PER_PARAM, _selector, simulation_theta
from .subsequence import Windows

__all__ = ["GaussianHMM", "HMMParams", "forward_backward"]

_LOG_2PI = math.log(2.0 * math.pi)


class HMMParams(NamedTuple):
    """Natural parameters: ``Pi`` (..., K, K), ``mu`` (..., K, m), ``Sigma`` (..., K, m, m)."""

    Pi: Array
    mu: Array
    Sigma: Array


class HMMStats(NamedTuple):
    """Weighted smoothed statistics: transitions (b, K, K), occupancies (b, K), sum y (b, K, m), sum y y^T (b, K, m, m)."""

    N: Array
    G: Array
    Y1: Array
    Y2: Array


def _log_emission(xp, y, mu, psi):
    """log N(y_t | mu_k, Sigma_k) for y (b, L, m), mu (b, K, m), psi (b, K, m, m): (b, L, K)."""
    m = y.shape[-1]
    # coordinate by coordinate on (b, L, K) arrays (m is small): d_i = y_i - mu_{k,i}, z_j = sum_i d_i psi_k[i, j]
    d = [y[:, :, i : i + 1] - mu[:, None, :, i] for i in range(m)]
    quad = None
    for j in range(m):
        z = d[0] * psi[:, None, :, 0, j]
        for i in range(1, m):
            z = z + d[i] * psi[:, None, :, i, j]
        quad = z * z if quad is None else quad + z * z
    logdet = xp.sum(xp.log(xp.abs(xp.linalg.diagonal(psi))), axis=-1)  # (b, K)
    return (logdet[:, None, :] - 0.5 * m * _LOG_2PI) - 0.5 * quad


def _second_moments(xp, wg, y):
    """``sum_t wg[:, t, k] y_t y_t^T`` for wg (b, L, K), y (b, L, m) or (1, L, m): (b, K, m, m), one matrix product.

    A series shared by every row of ``wg`` is passed once, as ``(1, L, m)``: its outer products are then
    formed once, not once per chain.
    """
    yb, L, m = y.shape
    yy = xp.reshape(y[..., :, None] * y[..., None, :], (yb, L, m * m))
    return xp.reshape(xp.matrix_transpose(wg) @ yy, (wg.shape[0], wg.shape[-1], m, m))


def stationary_distribution(Pi: Array, iters: int = 40) -> Array:
    """Stationary distribution of row-stochastic ``Pi`` (b, K, K) by repeated squaring: (b, K)."""
    from .._array_api import array_namespace

    xp = array_namespace(Pi)
    P = Pi
    for _ in range(iters):
        P = P @ P
        P = P / xp.sum(P, axis=-1, keepdims=True)
    return P[:, 0, :]


def forward_backward(
    Pi: Array, logp: Array, p0: Array, mask: Array | None = None, weight: Array | None = None, xp: Any = None
) -> tuple[Array, Array, Array, Array]:
    """Normalised forward-backward on a batch of chains.

    Parameters
    ----------
    Pi : array (b, K, K)
        Transition matrices.
    logp : array (b, L, K)
        Log emission densities (0 where ``mask`` is False).
    p0 : array (b, K)
        Distribution of ``z_0`` (the state before the first observation).
    mask : bool array (b, L), optional
    weight : array (b, L), optional
        Weights of the smoothed statistics (default 1).

    Returns
    -------
    loglik : array (b,)
    gamma : array (b, L, K)
        Smoothed marginals.
    N : array (b, K, K)
        Weighted expected transition counts ``sum_t w_t P(z_{t-1} = j, z_t = k | y)``.
    G : array (b, K)
        Weighted occupancies ``sum_t w_t P(z_t = k | y)``.
    """
    from .._array_api import array_namespace

    xp = array_namespace(Pi, logp, p0) if xp is None else xp
    if mask is not None:
        logp = xp.where(mask[..., None], logp, xp.zeros_like(logp))
    shift = xp.max(logp, axis=-1, keepdims=True)
    p = xp.exp(logp - shift)  # (b, L, K)
    logc, gamma, N, G = messages(xp, Pi, p, p0, weight)
    return xp.sum(shift[..., 0], axis=-1) + logc, gamma, N, G


#: Where the backend has no compiled recursion, the parallel-in-time scan (:mod:`sgmc.ssm.hmm_scan`)
#: replaces the sequential loop for series of ``SCAN_MIN_LENGTH`` or more positions where its modelled
#: work is the smaller (:func:`sgmc.ssm.kalman_paths.prefer_scan` with ``HMM_COSTS``): few or long
#: series take the scan, many short windows the loop, series longer than ``LOOP_MAX_LENGTH`` the scan.
SCAN_MIN_LENGTH = 16


def messages(xp: Any, Pi: Array, p: Array, p0: Array, weight: Array | None) -> tuple[Array, Array, Array, Array]:
    """The normalised messages' outputs ``(logc, gamma, N, G)`` (see :func:`_messages_twin`).

    The backend's compiled recursion where it has one (``native(xp, "hmm_messages")``), else the
    parallel-in-time scan where its modelled work is the smaller (``SCAN_MIN_LENGTH``,
    :mod:`sgmc.ssm.kalman_paths`), else the sequential twin.
    """
    fast = native(xp, "hmm_messages")
    if fast is not None:
        out = fast(Pi, p, p0, weight)
        if out is not NotImplemented:
            return out
    b, L = p.shape[0], p.shape[1]
    if prefer_scan(HMM_COSTS, b, L, min_length=SCAN_MIN_LENGTH):
        groups = chain_groups(b, L)  # bounded memory on long series with many chains
        if len(groups) == 1:
            return messages_scan(Pi, p, p0, weight)
        parts = [messages_scan(Pi[g], p[g], p0[g], None if weight is None else weight[g]) for g in groups]
        return tuple(xp.concat([part[i] for part in parts]) for i in range(4))
    return _messages_twin(xp, Pi, p, p0, weight)


def _messages_twin(xp, Pi, p, p0, weight):
    """Sequential normalised forward-backward on positive densities ``p`` (b, L, K); defines the result.

    Returns ``logc`` (b,), the sum of the forward normalisers' logarithms (``log p(y)`` less the
    scaling of ``p``), the smoothed marginals ``gamma`` (b, L, K), and the weighted expected
    transition counts ``N`` (b, K, K) and occupancies ``G`` (b, K).
    """
    b, L, K = p.shape
    ll = xp.zeros((b,), dtype=p.dtype, device=device_of(p))
    alphas = []
    a = p0
    for t in range(L):
        pred = (a[:, None, :] @ Pi)[:, 0, :]
        a = pred * p[:, t, :]
        c = xp.sum(a, axis=-1)
        ll = ll + xp.log(c)
        a = a / c[:, None]
        alphas.append(a)
    if weight is None:
        weight = xp.ones((b, L), dtype=p.dtype, device=device_of(p))
    beta = xp.ones_like(p0) / K
    gammas = [None] * L
    N = xp.zeros_like(Pi)
    G = xp.zeros_like(p0)
    for t in range(L - 1, -1, -1):
        a_prev = alphas[t - 1] if t > 0 else p0
        pb = p[:, t, :] * beta  # (b, K)
        xi = a_prev[:, :, None] * Pi * pb[:, None, :]
        xi = xi / xp.sum(xi, axis=(-2, -1), keepdims=True)
        g = alphas[t] * beta
        g = g / xp.sum(g, axis=-1, keepdims=True)
        gammas[t] = g
        w = weight[:, t]
        N = N + w[:, None, None] * xi
        G = G + w[:, None] * g
        beta = (Pi @ pb[:, :, None])[..., 0]
        beta = beta / xp.sum(beta, axis=-1, keepdims=True)
    return ll, xp.stack(gammas, axis=1), N, G


def _check_numbers(value: Any, name: str, pair: bool) -> None:
    """``value`` is None, numbers or an array (``pair``: two such); else a TypeError naming ``name``."""
    if value is None:
        return
    what = "a pair (of numbers or arrays)" if pair else "a number or an array"
    parts = value if pair and isinstance(value, (tuple, list)) and len(value) == 2 else None
    if pair and parts is None:
        msg = f"`{name}` must be {what}; got {describe(value)}"
        raise TypeError(msg)
    for part in parts if pair else (value,):
        if is_array(part):
            continue
        try:
            if part is None or isinstance(part, (str, bytes, dict, bool)):
                raise TypeError
            backends.asarray(part, backend="numpy", dtype="float64")
        except (TypeError, ValueError):
            msg = f"`{name}` must be {what}; got {describe(value)}"
            raise TypeError(msg) from None


class GaussianHMM(StateSpaceModel):
    """Gaussian HMM with ``K`` states over ``theta = (eta, mu[, psi])``.

    Parameters
    ----------
    y : array (T,) or (T, m)
    n_states : int
        ``K`` (at least 2).
    prior_var : float, default 100
        Variance of the normal prior on the means (used when ``mean_prior`` is not given).
    mean_prior : pair (loc, var), optional
        ``mu_k ~ N(loc_k, diag(var_k))``; each a number or an array of shape (K,) or (K, m).
        Default ``(0, prior_var)``.
    precision_prior : pair (df, scale), optional
        ``Sigma_k^{-1} ~ Wishart(df_k, scale_k)``; ``df`` a number or (K,) (above ``m - 1``), ``scale``
        a number (times the identity), (m, m) or (K, m, m). Default ``(m + 1, I / (m + 1))`` (mean
        ``I``). For ``m = 1``, ``(2 a, 1 / (2 b))`` is the Gamma(a, b) prior of ``1 / sigma^2``.
    transition_prior : number or array (K, K), default 1
        Dirichlet concentrations of the rows of ``Pi`` (1: flat).
    emission_cov : number or array, optional
        Fixed emission covariances (a number times the identity, (K,) numbers, (m, m) or (K, m, m));
        ``theta`` is then ``(eta, mu)``. Default: sampled, with ``psi`` in ``theta``.
    initial : {"z0", "z1"}, default "z0"
        Which state ``initial_probs`` is the law of: ``z_0``, one step before the first observation
        (thesis Eq. 3.35), so that ``z_1 ~ initial_probs @ Pi``; or ``z_1``, the state of the first
        observation (the textbook HMM).
    initial_probs : array (K,), optional
        The initial law (default uniform).

    Notes
    -----
    Buffered windows that start after the first observation start from the stationary law of
    ``Pi`` (treated as fixed) whatever ``initial`` is; see :mod:`sgmc.ssm.hmm_params` for the priors.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.ssm import GaussianHMM
    >>> rng = backends.default_rng(0)
    >>> from sgmc.ssm import HMMParams
    >>> params = HMMParams(Pi=np.array([[0.9, 0.1], [0.2, 0.8]]), mu=np.array([[-1.0], [1.0]]),
    ...                    Sigma=np.array([[[0.5]], [[0.5]]]))
    >>> theta = GaussianHMM(np.zeros(5), n_states=2).unconstrain(params)
    >>> theta.shape                                   # eta (2 x 2), mu (2 x 1), psi (2 x 1)
    (8,)
    >>> z, y = GaussianHMM(np.zeros(5), n_states=2).simulate(rng, 100, theta)
    >>> model = GaussianHMM(y, n_states=2)
    >>> model.grad_log_posterior(theta).shape
    (8,)
    >>> textbook = GaussianHMM(y, n_states=2, emission_cov=1.0, initial="z1",
    ...                        mean_prior=([3.0, 10.0], 1.0))      # theta = (eta, mu)
    >>> textbook.param_names
    ('eta[0,0]', 'eta[0,1]', 'eta[1,0]', 'eta[1,1]', 'mu[0,0]', 'mu[1,0]')
    """

    #: the exact gradient comes with the likelihood, from one pass of :meth:`log_lik_and_grad`
    grad_log_lik = StateSpaceModel._grad_from_pair

    def __init__(
        self,
        y: Any,
        n_states: int,
        *,
        prior_var: float = 100.0,
        mean_prior: Any = None,
        precision_prior: Any = None,
        transition_prior: Any = None,
        emission_cov: Any = None,
        initial: str = "z0",
        initial_probs: Any = None,
    ):
        if not (is_array(y) or is_out_of_core(y)):
            try:
                if y is None or isinstance(y, (str, bytes, dict)):
                    raise TypeError
                y = backends.asarray(y, backend="numpy")
            except (TypeError, ValueError):
                msg = f"`y` must be an array of observations of shape (T,) or (T, obs_dim); got {describe(y)}"
                raise TypeError(msg) from None
        y_arr = as_series(y, "y")[1]  # (T, m), finite, real: checked before its shape is read
        for name, value, pair in (("mean_prior", mean_prior, True), ("precision_prior", precision_prior, True),
                                  ("transition_prior", transition_prior, False), ("emission_cov", emission_cov, False)):
            _check_numbers(value, name, pair)
        m = int(y_arr.shape[-1])
        K = check_int(n_states, "n_states", minimum=2)
        fixed = emission_cov is not None
        dim = K * K + K * m + (0 if fixed else K * (m * (m + 1) // 2))
        T_len = int(y_arr.shape[0])
        check_alloc(dim * _BYTES_PER_PARAM + 8 * T_len * K * (2 + K), "n_states", n_states,
                    "the parameter table and the (T, K) messages with their (T, K, K) pair terms")
        tri = [i * m + j for i in range(m) for j in range(i + 1)]
        super().__init__(y_arr, dim, 1, m)
        self.K, self.m = K, m
        xp, dt, dev = self.xp, self.dtype, self.device
        self.prior_var = check_positive(prior_var, "prior_var")
        self.prior = make_prior(xp, K, m, dt, dev, prior_var=self.prior_var, mean_prior=mean_prior,
                                precision_prior=precision_prior, transition_prior=transition_prior)
        self.initial = check_choice(initial, "initial", ("z0", "z1"))
        self._uniform_init = initial_probs is None
        if initial_probs is None:
            self._init = xp.ones((K,), dtype=dt, device=dev) / K
        else:
            try:
                if isinstance(initial_probs, (str, bytes, dict)):
                    raise TypeError
                p = xp.asarray(initial_probs, dtype=dt, device=dev)
            except (TypeError, ValueError):
                msg = f"`initial_probs` must be a probability vector of shape ({K},); got {describe(initial_probs)}"
                raise TypeError(msg) from None
            if tuple(p.shape) != (K,) or not bool(xp.all(p >= 0)) or abs(float(xp.sum(p)) - 1.0) > 1e-8:
                msg = f"`initial_probs` must be a probability vector of shape ({K},); got {initial_probs!r}"
                raise ValueError(msg)
            self._init = p
        self._fixed_psi = fixed_precision_factor(xp, emission_cov, K, m, dt, dev) if fixed else None
        self._ntri = len(tri)
        self._E = _selector(self.xp, m * m, tri, self.dtype, self.device)
        names = [f"eta[{i},{j}]" for i in range(K) for j in range(K)]
        names += [f"mu[{k},{i}]" for k in range(K) for i in range(m)]
        if not fixed:
            names += [f"psi[{k}][{p // m},{p % m}]" for k in range(K) for p in tri]
        self.param_names = tuple(names)

    # -- parameters -------------------------------------------------------------------------------
    def _split(self, theta: Array):
        xp = self.xp
        K, m = self.K, self.m
        lead = tuple(theta.shape[:-1])
        eta = xp.reshape(theta[..., : K * K], lead + (K, K))
        mu = xp.reshape(theta[..., K * K : K * K + K * m], lead + (K, m))
        if self._fixed_psi is not None:
            return eta, mu, xp.broadcast_to(self._fixed_psi, lead + (K, m, m))
        packed = xp.reshape(theta[..., K * K + K * m :], lead + (K, self._ntri))
        psi = xp.reshape(packed @ xp.matrix_transpose(self._E), lead + (K, m, m))
        return eta, mu, psi

    def _Pi(self, eta):
        xp = self.xp
        e = xp.exp(eta - xp.max(eta, axis=-1, keepdims=True))
        return e / xp.sum(e, axis=-1, keepdims=True)

    def constrain(self, theta: Any) -> HMMParams:
        """``(Pi, mu, Sigma)`` of ``theta`` (..., dim)."""
        theta = theta if is_array(theta) else self.xp.asarray(theta, dtype=self.dtype, device=self.device)
        xp = self.xp
        eta, mu, psi = self._split(theta)
        Sigma = xp.linalg.inv(psi @ xp.matrix_transpose(psi))
        return HMMParams(self._Pi(eta), mu, 0.5 * (Sigma + xp.matrix_transpose(Sigma)))

    def unconstrain(self, params: HMMParams) -> Array:
        """``theta`` of ``(Pi, mu, Sigma)`` (``eta = log Pi``, ``psi`` with a positive diagonal;
        ``Sigma`` is ignored when the covariances are fixed)."""
        xp = self.xp
        Pi, mu, Sigma = params
        Pi, mu = (xp.asarray(a, dtype=self.dtype, device=self.device) for a in (Pi, mu))
        lead = tuple(Pi.shape[:-2])
        parts = [xp.reshape(xp.log(Pi), lead + (-1,)), xp.reshape(mu, lead + (-1,))]
        if self._fixed_psi is None:
            Sigma = xp.asarray(Sigma, dtype=self.dtype, device=self.device)
            psi = xp.linalg.cholesky(xp.linalg.inv(Sigma))
            parts.append(xp.reshape(xp.reshape(psi, lead + (self.K, self.m * self.m)) @ self._E, lead + (-1,)))
        return xp.concat(parts, axis=-1)

    def _pack(self, geta, gmu, gpsi):
        xp = self.xp
        lead = tuple(geta.shape[:-2])
        parts = [xp.reshape(geta, lead + (-1,)), xp.reshape(gmu, lead + (-1,))]
        if self._fixed_psi is None:
            parts.append(xp.reshape(xp.reshape(gpsi, lead + (self.K, self.m * self.m)) @ self._E, lead + (-1,)))
        return xp.concat(parts, axis=-1)

    # -- prior ----------------------------------------------------------------------------------------
    def _jac(self):
        m = self.m
        return self.xp.asarray([float(m - i) for i in range(m)], dtype=self.dtype, device=self.device)

    def _free_psi(self, psi):
        return None if self._fixed_psi is not None else psi

    def log_prior(self, theta: Array) -> Array:
        """Log prior density (up to a constant) of ``theta`` (..., dim); see :mod:`sgmc.ssm.hmm_params`."""
        eta, mu, psi = self._split(theta)
        return prior_terms(self.xp, self.prior, eta, mu, self._free_psi(psi), self._jac())

    def grad_log_prior(self, theta: Array) -> Array:
        eta, mu, psi = self._split(theta)
        return self._pack(*prior_grads(self.xp, self.prior, eta, mu, self._free_psi(psi), self._jac()))

    # -- smoothing ------------------------------------------------------------------------------------
    def _stats(self, theta_b, y, p0, mask, weight):
        """Forward-backward on (b, L, m) observations; returns loglik and the gradient (b, dim)."""
        xp = self.xp
        eta, mu, psi = self._split(theta_b)
        Pi = self._Pi(eta)
        logp = _log_emission(xp, y, mu, psi)
        ll, gamma, N, G = self._smooth(Pi, logp, p0, mask, weight)
        wg = gamma if weight is None else gamma * weight[..., None]  # (b, L, K)
        Y1 = xp.matrix_transpose(wg) @ y  # (b, K, m)
        Y2 = _second_moments(xp, wg, y)  # (b, K, m, m)
        geta = N - xp.sum(N, axis=-1, keepdims=True) * Pi
        Lam = psi @ xp.matrix_transpose(psi)
        Sigma = xp.linalg.inv(Lam)
        Gk = G[..., None]
        gmu = (Lam @ (Y1 - Gk * mu)[..., None])[..., 0]
        outer = lambda a, c: a[..., :, None] * c[..., None, :]  # noqa: E731
        E = Y2 - outer(mu, Y1) - outer(Y1, mu) + Gk[..., None] * outer(mu, mu)
        gpsi = None if self._fixed_psi is not None else (Gk[..., None] * Sigma - E) @ psi
        return ll, self._pack(geta, gmu, gpsi)

    def _smooth(self, Pi, logp, p0, mask, weight):
        """Forward-backward with ``p0`` the law of ``z_0`` (``initial="z0"``) or of ``z_1`` (``"z1"``)."""
        xp = self.xp
        if self.initial == "z0":
            return forward_backward(Pi, logp, p0, mask, weight, xp=xp)
        fb = lambda *a: forward_backward(*a, xp=xp)  # noqa: E731
        return first_state_smoother(xp, fb, Pi, logp, p0, mask, weight)

    def _p0_uniform(self, b):
        """The initial law (``initial_probs``, default uniform) for ``b`` rows."""
        return self.xp.broadcast_to(self._init[None, :], (b, self.K))

    def _checked(self, theta: Any) -> tuple[Array, bool]:
        """``theta`` as (chains, dim), finite, or ``ValueError`` naming it."""
        theta, single = self._theta(theta)
        check_theta(self.xp, theta)
        return theta, single

    def log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        """Exact log-likelihood by the forward algorithm, ``(chains,)``."""
        if idx is not None:
            self._not_iid()
        xp = self.xp
        theta, _ = self._checked(theta)
        eta, mu, psi = self._split(theta)
        c = theta.shape[0]
        y = xp.broadcast_to(self.y[None, ...], (c,) + tuple(self.y.shape))
        logp = _log_emission(xp, y, mu, psi)
        Pi = self._Pi(eta)
        return self._smooth(Pi, logp, self._p0_uniform(c), None, None)[0]

    def log_lik_and_grad(self, theta: Array) -> tuple[Array, Array]:
        xp = self.xp
        theta, _ = self._checked(theta)
        c = theta.shape[0]
        # the series once, shape (1, T, m): broadcast against the chains inside the products
        return self._stats(theta, self.y[None, ...], self._p0_uniform(c), None, None)

    def exact_window_score(self, theta: Array, windows: Windows, y_windows: Array) -> Array:
        """Weighted score over buffered windows by forward-backward, batched over chains x M."""
        xp = self.xp
        th, c, M = self._per_window(theta, windows)
        b, L = c * M, windows.L
        Pi = self._Pi(self._split(th)[0])
        first = xp.reshape(windows.start == 0, (b,))
        p0 = xp.where(first[:, None], self._p0_uniform(b), stationary_distribution(Pi))
        y = xp.reshape(y_windows, (b, L, self.m))
        mask = xp.reshape(windows.mask, (b, L))
        w = xp.reshape(windows.weight, (b, L))
        _, g = self._stats(th, y, p0, mask, w)
        return xp.sum(xp.reshape(g, (c, M, self.dim)), axis=1)

    # -- simulation -----------------------------------------------------------------------------------
    def fisher_metric(self, **options: Any) -> SSMFisherMetric:
        """The block-diagonal complete-data Fisher metric for SGRLD (:class:`sgmc.ssm.fisher.SSMFisherMetric`).

        ``sgmc.sample(model, "sgrld", ...)`` uses it as the default metric; ``options`` go to
        :class:`~sgmc.ssm.fisher.SSMFisherMetric`.
        """
        return SSMFisherMetric(self, **options)

    def simulate(self, rng: Any, T: int, theta: Any) -> tuple[Array, Array]:
        """Draw ``(z, y)``: states (T,) int64 and observations (T, m) at ``theta`` (dim,)."""
        xp = self.xp
        T = check_int(T, "T")
        check_alloc(T * (160 + 8 * self.m * (self.m + 3)), "T", T, "T steps of states and observations")
        theta = simulation_theta(self, theta)[0]
        Pi, mu, Sigma = self.constrain(theta[None, :])
        cdf = xp.cumulative_sum(Pi[0], axis=-1)  # (K, K)
        u = rng.uniform((T + 1,), dtype=self.dtype)
        if self._uniform_init:
            z = xp.astype(rng.integers(self.K, (1,)), xp.int64)
        else:
            z = categorical(u[:1][None, :], xp.cumulative_sum(self._init, axis=-1)[None, :])[0]
        states = [z] if self.initial == "z1" else []
        for t in range(len(states), T):
            row = xp.take(cdf, z, axis=0)  # (1, K)
            z = categorical(u[t + 1 : t + 2][None, :], row)[0]
            states.append(z)
        zs = xp.concat(states)
        Lc = xp.linalg.cholesky(Sigma[0])  # (K, m, m)
        eps = rng.normal((T, self.m), dtype=self.dtype)
        mu_z = xp.take(mu[0], zs, axis=0)
        L_z = xp.take(Lc, zs, axis=0)
        y = mu_z + (L_z @ eps[..., None])[..., 0]
        return zs, y
