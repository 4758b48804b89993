"""GARCH(1,1), with or without observation noise and a mean (Aicher 2020, thesis section 3.4.5).

    sigma_t^2 = alpha + beta x_{t-1}^2 + gamma sigma_{t-1}^2,   x_t ~ N(0, sigma_t^2),   y_t = m + x_t + tau d_t.

Parameterisation (thesis Eq. 3.97): ``theta = (log mu, logit phi, logit lambda[, tau][, m])`` with
``alpha = mu (1 - phi)``, ``beta = phi lambda``, ``gamma = phi (1 - lambda)``: ``mu`` is the
stationary variance, ``phi = beta + gamma`` the persistence and ``lambda = beta / (beta + gamma)``.
``tau`` is present with observation noise (``noise=True``, the thesis's model; a real number whose
sign the likelihood ignores), the mean ``m`` with ``mean=True`` (default ``m = 0``).

With noise (the default) the latent path is ``x_{0:T}``, ``x_0 ~ N(0, mu)`` and ``sigma_0^2 = mu``,
the likelihood is intractable and the score comes from a particle smoother
(:mod:`sgmc.ssm.garch_kernel`): by default the exact gradient of ``log p(y | theta)``, which carries
``d sigma_t^2 / d theta`` through the recursion per particle, or, with ``score="partial"``, the
thesis's partial derivative, a different target kept to reproduce the thesis.

Without noise (``noise=False``) the model is the textbook GARCH(1,1) on returns ``y_t = m + x_t``:
``x_t`` is observed, ``sigma_1^2`` is the stationary ``mu`` (or the number ``init_var``, as a
conditioning value), and the log-likelihood and its gradient are exact recursions over time
(``log_lik``, ``grad_log_lik``; buffered windows restart the recursion at ``mu``, not
differentiated, where they start after the first observation).

Priors (the papers do not state them): ``log mu ~ N(0, prior_var)``, ``phi`` and ``lambda``
uniform on (0, 1) (in logit coordinates ``log p = log u (1 - u)``), ``1/tau^2 ~
Gamma(prior_shape, prior_rate)`` carried to ``tau`` (``log p = -(2 a + 1) log|tau| - b / tau^2``) and
``m ~ N(0, mean_prior_var)``.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .._array_api import Array, array_namespace, is_array
from .._validation import check_choice, check_int, check_positive
from .base import StateSpaceModel, _absent, check_theta
from .garch_kernel import SCORES, GARCHKernel
from .particle_kernel import _LOG_2PI

__all__ = ["GARCH", "GARCHParams", "GARCHKernel"]


class GARCHParams(NamedTuple):
    """Natural parameters with the leading axes of ``theta`` (``tau = 0`` without noise, ``mean = 0`` without a mean)."""

    alpha: Array
    beta: Array
    gamma: Array
    tau: Array
    mean: Array


def _sigmoid(xp: Any, z: Array) -> Array:
    return 1.0 / (1.0 + xp.exp(-z))


class GARCH(StateSpaceModel):
    """GARCH(1,1) over ``theta = (log mu, logit phi, logit lambda[, tau][, m])``.

    Parameters
    ----------
    y : array (T,) or (T, 1)
    mean : bool, default False
        Add the mean ``m`` of the observations as the last coordinate of ``theta``.
    noise : bool, default True
        Observation noise ``tau`` (the thesis's model, scored by particles). ``False`` gives the plain
        GARCH(1,1), whose likelihood is exact.
    score : {"exact", "partial"}
        With noise: the particle estimate of the gradient of the log-likelihood (default), or the
        thesis's partial derivative, which holds ``sigma_{t-1}^2`` fixed and is *not* that gradient
        (it is kept to reproduce the thesis; a sampler driven by it targets another law).
    proposal : {"optimal", "bootstrap"}
        Particle proposal (default the fully adapted one, as in the thesis).
    init_var : float, optional
        Without noise: ``sigma_1^2`` as a fixed number; default the stationary variance ``mu``.
    prior_var : float
        Variance of the normal prior of ``log mu``.
    prior_shape, prior_rate : float
        Gamma prior of ``1 / tau^2``.
    mean_prior_var : float
        Variance of the normal prior of ``m``.

    Examples
    --------
    >>> from sgmc import backends
    >>> from sgmc.ssm import GARCH
    >>> theta = GARCH.theta_from(alpha=0.1, beta=0.8, gamma=0.05, tau=0.3)
    >>> x, y = GARCH.simulate_data(backends.default_rng(0), 100, theta)
    >>> model = GARCH(y)
    >>> [round(float(v), 3) for v in model.constrain(theta)]
    [0.1, 0.8, 0.05, 0.3, 0.0]
    >>> plain = GARCH(y, noise=False, mean=True)            # the textbook model, exact likelihood
    >>> plain.param_names
    ('log_mu', 'logit_phi', 'logit_lambda', 'mean')
    >>> plain.log_lik(GARCH.theta_from(0.1, 0.8, 0.05, mean=0.0)[None, :]).shape
    (1,)
    """

    def __init__(
        self,
        y: Any,
        *,
        mean: bool = False,
        noise: bool = True,
        score: str = "exact",
        proposal: str = "optimal",
        init_var: float | None = None,
        prior_var: float = 100.0,
        prior_shape: float = 1.0,
        prior_rate: float = 0.01,
        mean_prior_var: float = 100.0,
    ):
        for name, v in (("mean", mean), ("noise", noise)):
            if not isinstance(v, bool):
                msg = f"`{name}` must be True or False; got {v!r}"
                raise TypeError(msg)
        dim = 3 + int(noise) + int(mean)
        super().__init__(y, dim=dim, state_dim=6 if noise else 1, obs_dim=1)
        self.has_mean, self.noise = mean, noise
        self.score = check_choice(score, "score", SCORES)
        self.proposal = check_choice(proposal, "proposal", ("optimal", "bootstrap"))
        if not noise and score != "exact":
            msg = "`score`='partial' needs noise=True (without noise the likelihood and its gradient are exact)"
            raise ValueError(msg)
        self.init_var = None if init_var is None else check_positive(init_var, "init_var")
        if init_var is not None and noise:
            msg = "`init_var` applies to noise=False only (with noise x_0 ~ N(0, mu))"
            raise ValueError(msg)
        self.prior_var = check_positive(prior_var, "prior_var")
        self.prior_shape = check_positive(prior_shape, "prior_shape")
        self.prior_rate = check_positive(prior_rate, "prior_rate")
        self.mean_prior_var = check_positive(mean_prior_var, "mean_prior_var")
        if noise:
            self.state_dim = 6 if score == "exact" else 2
        self.param_names = ("log_mu", "logit_phi", "logit_lambda") + ("tau",) * noise + ("mean",) * mean
        self.score_methods = ("particle",) if noise else ("exact",)

    # -- parameters ---------------------------------------------------------------------------------
    def _natural(self, theta: Array) -> tuple[Array, Array, Array, Array, Array]:
        """``(mu, phi, lambda, tau, m)`` with the leading axes of ``theta``."""
        xp = self.xp
        mu, phi, lam = xp.exp(theta[..., 0]), _sigmoid(xp, theta[..., 1]), _sigmoid(xp, theta[..., 2])
        zero = theta[..., 0] * 0.0
        tau = theta[..., 3] if self.noise else zero
        m = theta[..., -1] if self.has_mean else zero
        return mu, phi, lam, tau, m

    def constrain(self, theta: Any) -> GARCHParams:
        theta = theta if is_array(theta) else self.xp.asarray(theta, dtype=self.dtype, device=self.device)
        mu, phi, lam, tau, m = self._natural(theta)
        return GARCHParams(mu * (1.0 - phi), phi * lam, phi * (1.0 - lam), tau, m)

    def unconstrain(self, params: Any) -> Array:
        xp = self.xp
        a, b, g = (xp.asarray(p, dtype=self.dtype, device=self.device) for p in tuple(params)[:3])
        phi = b + g
        mu = a / (1.0 - phi)
        lam = b / phi
        cols = [xp.log(mu), xp.log(phi / (1.0 - phi)), xp.log(lam / (1.0 - lam))]
        if self.noise:
            cols.append(xp.asarray(params[3], dtype=self.dtype, device=self.device))
        if self.has_mean:
            cols.append(xp.asarray(params[4], dtype=self.dtype, device=self.device))
        return xp.stack(cols, axis=-1)

    @staticmethod
    def theta_from(
        alpha: float, beta: float, gamma: float, tau: float | None = None, mean: float | None = None,
        backend: str = "numpy",
    ) -> Array:
        """``theta`` for natural parameters given as numbers (``beta + gamma < 1``).

        ``tau`` (noise) and ``mean`` are included when given, in the order of :class:`GARCH`'s ``theta``.
        """
        from .. import backends

        phi = beta + gamma
        if not (0.0 < phi < 1.0 and alpha > 0 and beta > 0 and gamma > 0):
            msg = f"need alpha, beta, gamma > 0 and beta + gamma < 1; got {alpha}, {beta}, {gamma}"
            raise ValueError(msg)
        mu = alpha / (1.0 - phi)
        lam = beta / phi
        vals = [math.log(mu), math.log(phi / (1.0 - phi)), math.log(lam / (1.0 - lam))]
        vals += [float(v) for v in (tau, mean) if v is not None]
        return backends.asarray(vals, backend=backend)

    def log_prior(self, theta: Array) -> Array:
        theta, single = self._theta(theta)
        xp = self.xp
        lm = theta[:, 0]

        def log_u1u(z):  # log(u (1 - u)) for u = sigmoid(z)
            return -(xp.logaddexp(0.0, z) + xp.logaddexp(0.0, -z))

        out = -0.5 * lm * lm / self.prior_var + log_u1u(theta[:, 1]) + log_u1u(theta[:, 2])
        if self.noise:
            a, b = self.prior_shape, self.prior_rate
            tau = theta[:, 3]
            out = out - (2.0 * a + 1.0) * xp.log(xp.abs(tau)) - b / (tau * tau)
        if self.has_mean:
            out = out - 0.5 * theta[:, -1] ** 2 / self.mean_prior_var
        return out[0] if single else out

    def grad_log_prior(self, theta: Array) -> Array:
        theta, single = self._theta(theta)
        xp = self.xp
        parts = [-theta[:, :1] / self.prior_var, 1.0 - 2.0 * _sigmoid(xp, theta[:, 1:3])]
        if self.noise:
            a, b = self.prior_shape, self.prior_rate
            tau = theta[:, 3:4]
            parts.append(-(2.0 * a + 1.0) / tau + 2.0 * b / (tau * tau * tau))
        if self.has_mean:
            parts.append(-theta[:, -1:] / self.mean_prior_var)
        out = xp.concat(parts, axis=1)
        return out[0] if single else out

    # -- with noise: particles ----------------------------------------------------------------------
    def particle_kernel(self, theta_batch: Array) -> GARCHKernel:
        """The kernel (``proposal`` and ``score`` of the model) at each row of ``theta_batch`` (Bt, dim)."""
        if not self.noise:
            msg = "GARCH(noise=False) has an exact likelihood and no particle kernel; use method='exact'"
            raise TypeError(msg)
        theta_batch, _ = self._theta(theta_batch)
        mu, phi, lam, tau, m = self._natural(theta_batch)
        return GARCHKernel(mu, phi, lam, tau, self.proposal, m=m, score=self.score, with_mean=self.has_mean)

    # -- without noise: exact recursions ------------------------------------------------------------
    def _recursion(self, theta: Array, y: Array, first: Array, mask: Array | None, weight: Array | None):
        """Log-likelihood (b,) and weighted score (b, dim) of rows ``y`` (b, L) from their first step."""
        xp = self.xp
        mu, phi, lam, _, m = self._natural(theta)
        alpha, beta, gamma = mu * (1.0 - phi), phi * lam, phi * (1.0 - lam)
        b, L = y.shape
        x = y - m[:, None]
        zero = mu * 0.0
        fixed = self.init_var is not None
        s = xp.full_like(mu, self.init_var) if fixed else mu
        f = xp.astype(first, mu.dtype)
        D = [zero if fixed else f * mu, zero, zero, zero]  # d sigma^2 / d (log mu, logit phi, logit lambda, m)
        ll, g = zero, [zero, zero, zero, zero]
        for t in range(L):
            xt = x[:, t]
            if t > 0:
                xq, xq2 = x[:, t - 1], x[:, t - 1] ** 2
                D = [
                    mu * (1.0 - phi) + gamma * D[0],
                    phi * (1.0 - phi) * (lam * xq2 + (1.0 - lam) * s - mu) + gamma * D[1],
                    phi * lam * (1.0 - lam) * (xq2 - s) + gamma * D[2],
                    -2.0 * beta * xq + gamma * D[3],
                ]
                s = alpha + beta * xq2 + gamma * s
            w = 1.0 if weight is None else weight[:, t]
            c = (xt * xt - s) / (2.0 * s * s)
            term = -0.5 * (_LOG_2PI + xp.log(s)) - 0.5 * xt * xt / s
            if mask is not None:
                w = xp.where(mask[:, t], w, zero)
                term = xp.where(mask[:, t], term, zero)
            ll = ll + term
            g = [g[i] + w * c * D[i] for i in range(3)] + [g[3] + w * (c * D[3] + xt / s)]
        cols = g[:3] + ([g[3]] if self.has_mean else [])
        return ll, xp.stack(cols, axis=-1)

    @property
    def log_lik(self) -> Any:  # type: ignore[override]
        """``log_lik(theta)``: exact log-likelihood ``(chains,)`` (``noise=False`` only)."""
        return self._exact_log_lik if not self.noise else _absent(type(self).__name__, "log_lik")

    @property
    def grad_log_lik(self) -> Any:  # type: ignore[override]
        """``grad_log_lik(theta)``: its exact gradient ``(chains, dim)`` (``noise=False`` only)."""
        return self._exact_grad_log_lik if not self.noise else _absent(type(self).__name__, "grad_log_lik")

    def _full(self, theta: Any) -> tuple[Array, Array]:
        theta, _ = self._theta(theta)
        xp = self.xp
        check_theta(xp, theta)
        c = theta.shape[0]
        y = xp.broadcast_to(self.y[None, :, 0], (c, self.T))
        return self._recursion(theta, y, xp.ones((c,), dtype=xp.bool, device=self.device), None, None)

    def _exact_log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        if idx is not None:
            self._not_iid()
        return self._full(theta)[0]

    def _exact_grad_log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        if idx is not None:
            self._not_iid()
        return self._full(theta)[1]

    def log_lik_and_grad(self, theta: Array) -> tuple[Array, Array]:
        if self.noise:
            return _absent(type(self).__name__, "log_lik_and_grad")()
        return self._full(theta)

    def exact_window_score(self, theta: Array, windows: Any, y_windows: Array) -> Array:
        """Weighted score over buffered windows by the exact recursion (``noise=False``), batched."""
        if self.noise:
            return _absent(type(self).__name__, "exact_window_score")()
        xp = self.xp
        th, c, M = self._per_window(theta, windows)
        b, L = c * M, windows.L
        first = xp.reshape(windows.start == 0, (b,))
        y = xp.reshape(y_windows, (b, L))
        mask = xp.reshape(windows.mask, (b, L))
        w = xp.astype(xp.reshape(windows.weight, (b, L)), th.dtype)
        _, g = self._recursion(th, y, first, mask, w)
        return xp.sum(xp.reshape(g, (c, M, self.dim)), axis=1)

    # -- simulation ---------------------------------------------------------------------------------
    def simulate(self, rng: Any, T: int, theta: Any) -> tuple[Array, Array]:
        """Draw states ``(T, 2)`` (``x_t``, ``sigma_t^2``) and observations ``(T, 1)`` at ``theta`` (dim,)."""
        from .. import backends

        theta, _ = self._theta(theta)
        vals = backends.to_numpy(self.xp.stack(self._natural(theta[0]))).tolist()
        x, s2, y = _simulate(rng, T, *vals, first_var=self.init_var if not self.noise else None,
                             start_at_first=not self.noise)
        xp = array_namespace(x)
        return xp.stack([x, s2], axis=1), y[:, None]

    @staticmethod
    def simulate_data(rng: Any, T: int, theta: Any) -> tuple[Array, Array]:
        """Draw ``x`` and ``y``, each ``(T,)``, for a noisy model without a mean at ``theta`` (4,)."""
        from .. import backends

        vals = backends.to_numpy(theta).tolist() if is_array(theta) else [float(v) for v in theta]
        if len(vals) != 4:
            msg = f"`theta` must have 4 entries (log mu, logit phi, logit lambda, tau); got {len(vals)}"
            raise ValueError(msg)
        sig = lambda z: 1.0 / (1.0 + math.exp(-z))  # noqa: E731
        x, _, y = _simulate(rng, T, math.exp(vals[0]), sig(vals[1]), sig(vals[2]), vals[3], 0.0)
        return x, y


def _simulate(rng, T, mu, phi, lam, tau, m, first_var=None, start_at_first=False):
    """``x``, ``sigma^2`` and ``y`` (T,) each; ``x_0 ~ N(0, mu)``, ``sigma_0^2 = mu``, or ``sigma_1^2``
    given (``first_var``, default ``mu``) when ``start_at_first``."""
    from .. import backends
    from ..backends import default_rng

    rng = default_rng(rng) if not hasattr(rng, "normal") else rng
    T = check_int(T, "T")
    xp = rng.backend.xp
    dt = xp.float64
    tau = abs(tau)
    alpha, beta, gamma = mu * (1.0 - phi), phi * lam, phi * (1.0 - lam)
    e = backends.to_numpy(rng.normal((2 * T + 1,), dtype=dt)).tolist()
    # The variance recursion is nonlinear: a loop over time on host numbers (the I/O edge of a
    # simulator), then one conversion to the backend.
    xs, ss, ys = [], [], []
    if start_at_first:
        s2 = mu if first_var is None else first_var
        x_prev = None
    else:
        x_prev, s_prev = math.sqrt(mu) * e[0], mu
    for t in range(T):
        if x_prev is not None:
            s2 = alpha + beta * x_prev * x_prev + gamma * s_prev
        x_t = math.sqrt(s2) * e[1 + t]
        xs.append(x_t)
        ss.append(s2)
        ys.append(m + x_t + tau * e[1 + T + t])
        x_prev, s_prev = x_t, s2
    dev = rng.device
    return (
        xp.asarray(xs, dtype=dt, device=dev),
        xp.asarray(ss, dtype=dt, device=dev),
        xp.asarray(ys, dtype=dt, device=dev),
    )
