"""Autoregressive model AR(p) with a Gaussian conditional likelihood.

    y_t = c + a_1 y_{t-1} + ... + a_p y_{t-p} + sigma e_t,   e_t ~ N(0, 1),

over ``theta = (c, a_1, ..., a_p, log sigma)``. The likelihood is the textbook *conditional* one,
given the first ``p`` observations (Hamilton 1994, "Time Series Analysis", section 5.3): the terms
``t = p + 1, ..., T``. It has no latent state, so every term's score is exact,

    d/dc = e_t / sigma^2,   d/da_i = e_t y_{t-i} / sigma^2,   d/d log sigma = e_t^2 / sigma^2 - 1,

with ``e_t`` the residual; a buffered window's score is the weighted sum of its terms (the lags may
reach before the window), so buffered gradients are unbiased for the full-data one. The parameters
are not constrained to stationarity.

Priors: ``c ~ N(0, prior_var)``, ``a_i ~ N(0, prior_var)`` and the precision ``1 / sigma^2 ~
Gamma(prior_shape, prior_rate)``, carried to ``log sigma`` (``log p = -2 a log sigma - b / sigma^2``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .._array_api import Array, is_array
from .._validation import check_alloc, check_int, check_positive
from .base import StateSpaceModel, check_theta
from .lgssm import simulation_theta
from .subsequence import Windows

__all__ = ["AR", "ARParams"]


class ARParams(NamedTuple):
    """Natural parameters: intercept ``c``, coefficients ``a`` (..., p) and noise scale ``sigma``."""

    c: Array
    a: Array
    sigma: Array


class AR(StateSpaceModel):
    """AR(p) over ``theta = (c, a_1, ..., a_p, log sigma)``, conditional on the first ``p`` values.

    Parameters
    ----------
    y : array (T,) or (T, 1)
        ``T > p``.
    order : int
        ``p`` (at least 1).
    prior_var : float, default 100
        Variance of the normal priors of ``c`` and the coefficients.
    prior_shape, prior_rate : float, default 1 and 1
        Gamma prior of ``1 / sigma^2``.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.ssm import AR
    >>> theta = np.array([0.5, 0.6, -0.2, np.log(0.3)])
    >>> _, y = AR(np.zeros(3), order=2).simulate(backends.default_rng(0), 500, theta)
    >>> model = AR(y, order=2)
    >>> model.param_names
    ('c', 'a[1]', 'a[2]', 'log_sigma')
    >>> model.grad_log_posterior(theta).shape
    (4,)
    """

    score_methods = ("exact",)
    #: the exact gradient comes with the likelihood, from one pass of :meth:`log_lik_and_grad`
    grad_log_lik = StateSpaceModel._grad_from_pair

    def __init__(self, y: Any, order: int, *, prior_var: float = 100.0, prior_shape: float = 1.0,
                 prior_rate: float = 1.0):
        p = check_int(order, "order")
        super().__init__(y, dim=p + 2, state_dim=1, obs_dim=1)
        if p >= self.T:
            msg = f"`order` ({p}) must be less than the length of the series y (T = {self.T})"
            raise ValueError(msg)
        self.p = p
        self.prior_var = check_positive(prior_var, "prior_var")
        self.prior_shape = check_positive(prior_shape, "prior_shape")
        self.prior_rate = check_positive(prior_rate, "prior_rate")
        self.param_names = ("c",) + tuple(f"a[{i}]" for i in range(1, p + 1)) + ("log_sigma",)
        xp, y1 = self.xp, self.y[:, 0]
        # regressors of the terms t = p..T-1 (0-based): 1, y_{t-1}, ..., y_{t-p}
        self._X = xp.stack([xp.ones_like(y1[p:])] + [y1[p - i : self.T - i] for i in range(1, p + 1)], axis=1)
        self._Y = y1[p:]

    # -- parameters -------------------------------------------------------------------------------
    def constrain(self, theta: Any) -> ARParams:
        theta = theta if is_array(theta) else self.xp.asarray(theta, dtype=self.dtype, device=self.device)
        return ARParams(theta[..., 0], theta[..., 1 : self.p + 1], self.xp.exp(theta[..., -1]))

    def unconstrain(self, params: ARParams) -> Array:
        xp = self.xp
        c, a, s = (xp.asarray(v, dtype=self.dtype, device=self.device) for v in params)
        return xp.concat([c[..., None], a, xp.log(s)[..., None]], axis=-1)

    def log_prior(self, theta: Array) -> Array:
        theta, single = self._theta(theta)
        xp = self.xp
        ls = theta[:, -1]
        out = (-0.5 * xp.sum(theta[:, :-1] ** 2, axis=-1) / self.prior_var
               - 2.0 * self.prior_shape * ls - self.prior_rate * xp.exp(-2.0 * ls))
        return out[0] if single else out

    def grad_log_prior(self, theta: Array) -> Array:
        theta, single = self._theta(theta)
        xp = self.xp
        ls = theta[:, -1:]
        out = xp.concat([-theta[:, :-1] / self.prior_var,
                         -2.0 * self.prior_shape + 2.0 * self.prior_rate * xp.exp(-2.0 * ls)], axis=1)
        return out[0] if single else out

    # -- likelihood -------------------------------------------------------------------------------
    def _terms(self, theta: Array, X: Array, Y: Array):
        """Per-term log densities and scores for regressors X (..., n, p+1) and targets Y (..., n)."""
        xp = self.xp
        beta = theta[..., :-1]  # (..., p+1)
        ls = theta[..., -1:]  # (..., 1)
        prec = xp.exp(-2.0 * ls)
        e = Y - xp.sum(X * beta[..., None, :], axis=-1)  # (..., n)
        logd = -0.5 * 1.8378770664093453 - ls - 0.5 * prec * e * e
        ge = e * prec  # (..., n)
        score = xp.concat([ge[..., None] * X, (e * e * prec - 1.0)[..., None]], axis=-1)  # (..., n, dim)
        return logd, score

    def _checked(self, theta: Any) -> Array:
        theta, _ = self._theta(theta)
        check_theta(self.xp, theta)
        return theta

    def log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        """Conditional log-likelihood of ``y_{p+1..T}`` given ``y_{1..p}``, ``(chains,)``."""
        if idx is not None:
            self._not_iid()
        theta = self._checked(theta)
        return self.xp.sum(self._terms(theta, self._X[None], self._Y[None])[0], axis=-1)

    def log_lik_and_grad(self, theta: Array) -> tuple[Array, Array]:
        theta = self._checked(theta)
        logd, score = self._terms(theta, self._X[None], self._Y[None])
        return self.xp.sum(logd, axis=-1), self.xp.sum(score, axis=-2)

    def exact_window_score(self, theta: Array, windows: Windows, y_windows: Array) -> Array:
        """Weighted sum of the terms' scores over each window (terms ``t < p`` have none)."""
        xp = self.xp
        theta, _ = self._theta(theta)
        c, M = windows.start.shape
        L = windows.L
        t = windows.start[..., None] + xp.arange(L, dtype=windows.start.dtype, device=self.device)  # (c, M, L)
        valid = windows.mask & (t >= self.p)
        row = xp.clip(t - self.p, 0, self.T - self.p - 1)
        X = xp.take(self._X, xp.reshape(row, (-1,)), axis=0)
        X = xp.reshape(X, (c, M, L, self.p + 1))
        Y = xp.reshape(xp.take(self._Y, xp.reshape(row, (-1,)), axis=0), (c, M, L))
        _, score = self._terms(theta[:, None, :], X, Y)  # (c, M, L, dim)
        w = xp.where(valid, xp.astype(windows.weight, theta.dtype), xp.zeros_like(xp.astype(windows.weight, theta.dtype)))
        return xp.sum(w[..., None] * score, axis=(1, 2))

    # -- simulation -------------------------------------------------------------------------------
    def simulate(self, rng: Any, T: int, theta: Any, burn_in: int = 200) -> tuple[Array, Array]:
        """Draw ``(y, y)`` (the model has no latent state), each ``(T, 1)``, after ``burn_in`` steps from 0."""
        from .. import backends

        T = check_int(T, "T")
        burn_in = check_int(burn_in, "burn_in", minimum=0)
        for name, value in (("T", T), ("burn_in", burn_in)):  # host floats: noise, history and output per step
            check_alloc(value * 96, name, value, f"{name} steps of the simulation")
        theta = simulation_theta(self, theta)
        vals = backends.to_numpy(theta[0]).tolist()
        c, a, s = vals[0], vals[1:-1], float(backends.to_numpy(self.xp.exp(theta[0, -1])))
        n = T + burn_in
        e = backends.to_numpy(rng.normal((n,), dtype=self.dtype)).tolist()
        hist = [0.0] * self.p
        out = []
        for k in range(n):  # a loop over time on host numbers (the simulator's I/O edge)
            v = c + sum(a[i] * hist[-1 - i] for i in range(self.p)) + s * e[k]
            hist.append(v)
            out.append(v)
        y = self.xp.asarray(out[n - T :], dtype=self.dtype, device=self.device)[:, None]
        return y, y
