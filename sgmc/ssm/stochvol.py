"""Stochastic volatility model (Aicher 2020, thesis section 3.4.4, Eqs. 3.85-3.90).

    x_0 ~ N(0, sigma^2 / (1 - phi^2)),   x_t = phi x_{t-1} + sigma e_t,   y_t = tau exp(x_t / 2) d_t,

with ``e_t, d_t`` standard normal: ``x_t`` is the log-volatility (an AR(1) process), ``y_t`` a return.
The complete-data log-likelihood of one step is (thesis Eq. 3.87)

    log p(y_t, x_t | x_{t-1}) = -log 2 pi - log sigma - log tau - (x_t - phi x_{t-1})^2 / (2 sigma^2)
                                - x_t / 2 - y_t^2 exp(-x_t) / (2 tau^2).

Parameterisation. ``theta = (atanh phi, psi_sigma, psi_tau)`` with ``psi_sigma = 1 / sigma`` and
``psi_tau = 1 / tau``: the precision roots are the thesis's coordinates (Eq. 3.90; their sign is not
identified, the likelihood depends on ``psi^2`` only); ``phi`` goes through ``tanh`` so that every
``theta`` in R^3 is a stationary model (the authors' code projects ``|phi| < 1`` instead, which is
not a smooth reparameterisation). The score terms in these coordinates are

    d/d atanh(phi) = (x_t - phi x_{t-1}) x_{t-1} (1 - phi^2) / sigma^2,
    d/d psi_sigma  = (sigma^2 - (x_t - phi x_{t-1})^2) / sigma,
    d/d psi_tau    = (tau^2 - y_t^2 exp(-x_t)) / tau.

Priors (the papers do not state them for this model): ``phi`` uniform on (-1, 1) and the precisions
``psi^2`` Gamma(``prior_shape``, ``prior_rate``), carried to ``theta`` with their Jacobians:
``log p(theta) = log(1 - phi^2) + sum (2 a - 1) log|psi| - b psi^2``.

Particle methods use the bootstrap kernel of the thesis (Eq. 3.88, with the ``-x_t / 2`` term of the
exact emission density); there is no exact smoother, so :meth:`window_score` takes
``method="particle"`` only.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .._array_api import Array, is_array
from .._validation import check_int, check_positive
from .base import StateSpaceModel
from .particle_kernel import _LOG_2PI, KernelBase, _stack_terms, _y_like

__all__ = ["StochasticVolatility", "SVParams", "SVKernel"]


class SVParams(NamedTuple):
    """Natural parameters with the leading axes of ``theta``."""

    phi: Array
    sigma: Array
    tau: Array


class SVKernel(KernelBase):
    """Bootstrap particle kernel of the stochastic volatility model for a batch of parameters.

    Parameters
    ----------
    phi, sigma, tau : arrays (Bt,)
        ``sigma`` and ``tau`` may be negative: they are ``1 / psi`` and carry its sign.
    """

    _names = ("phi", "sigma", "tau")
    dim = 3

    def __init__(self, phi: Array, sigma: Array, tau: Array):
        self._setup({"phi": phi, "sigma": sigma, "tau": tau}, {})
        xp = self.xp
        q = self._params["sigma"] ** 2
        r = self._params["tau"] ** 2
        self._params["q"] = q
        self._params["sd"] = xp.abs(self._params["sigma"])
        self._params["inv_2r"] = 0.5 / r
        self._params["v0_sd"] = xp.sqrt(q / (1.0 - self._params["phi"] ** 2))
        self._params["const"] = -0.5 * (_LOG_2PI + xp.log(r))

    def take_rows(self, idx: Array) -> "SVKernel":
        xp = self.xp
        return SVKernel(*(xp.take(self._params[k], idx, axis=0) for k in self._names))

    def sample_initial(self, rng: Any, n: int) -> Array:
        return self._normal(rng, (self.batch, n, 1)) * self.p("v0_sd", 3)

    def propagate(self, rng: Any, x_prev: Array, y_t: Array) -> Array:
        nd = x_prev.ndim
        return self.p("phi", nd) * x_prev + self.p("sd", nd) * self._normal(rng, tuple(x_prev.shape))

    def log_weight(self, x_prev: Array, x: Array, y_t: Array) -> Array:
        # log N(y | 0, tau^2 e^x): one exponential per particle.
        nd = x.ndim
        y = _y_like(y_t, nd)
        lw = self.p("const", nd) - 0.5 * x - (y * y) * self.p("inv_2r", nd) * self.xp.exp(-x)
        return lw[..., 0]

    def log_transition(self, x_prev: Array, x: Array) -> Array:
        nd = max(x_prev.ndim, x.ndim)
        q = self.p("q", nd)
        d = x - self.p("phi", nd) * x_prev
        return (-0.5 * (_LOG_2PI + self.xp.log(q)) - 0.5 * d * d / q)[..., 0]

    def log_transition_bound(self) -> Array:
        return -0.5 * (_LOG_2PI + self.xp.log(self._params["q"]))

    def log_joint(self, x_prev: Array, x: Array, y_t: Array) -> Array:
        """``log p(y_t, x_t | x_{t-1})`` (thesis Eq. 3.87)."""
        return self.log_transition(x_prev, x) + self.log_weight(x_prev, x, y_t)

    def score_terms(self, x_prev: Array, x: Array, y_t: Array) -> Array:
        xp = self.xp
        nd = max(x_prev.ndim, x.ndim)
        phi, s, tau, q = self.p("phi", nd), self.p("sigma", nd), self.p("tau", nd), self.p("q", nd)
        y = _y_like(y_t, nd)
        d = x - phi * x_prev
        g_phi = d * x_prev * (1.0 - phi * phi) / q
        g_ps = (q - d * d) / s
        g_pt = (tau * tau - y * y * xp.exp(-x)) / tau
        return _stack_terms(xp, (g_phi, g_ps, g_pt))


def ar1_scan(xp: Any, phi: Array, w: Array) -> Array:
    """``x_t = phi x_{t-1} + w_t`` (``x_{-1} = 0``) for ``w`` of shape (T,), in log2(T) array passes."""
    x = w
    T = int(w.shape[0])
    k = 1
    pk = phi
    while k < T:
        head = x[:k]
        tail = x[k:] + pk * x[: T - k]
        x = xp.concat([head, tail])
        pk = pk * pk
        k *= 2
    return x


class StochasticVolatility(StateSpaceModel):
    """Stochastic volatility model over ``theta = (atanh phi, 1/sigma, 1/tau)`` (see the module docstring).

    Parameters
    ----------
    y : array (T,) or (T, 1)
        Returns (demeaned).
    prior_shape, prior_rate : float
        Gamma prior of the precisions ``1/sigma^2`` and ``1/tau^2`` (defaults 1 and 0.01: mean 100,
        weak for daily returns on the scale of 0.01).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.ssm import StochasticVolatility
    >>> theta = StochasticVolatility.theta_from(phi=0.9, sigma=0.5, tau=0.5)
    >>> x, y = StochasticVolatility.simulate_data(backends.default_rng(0), 200, theta)
    >>> model = StochasticVolatility(y)
    >>> model.dim, model.constrain(theta).phi.round(3)
    (3, np.float64(0.9))
    """

    param_names = ("atanh_phi", "psi_sigma", "psi_tau")
    score_methods = ("particle",)

    def __init__(self, y: Any, *, prior_shape: float = 1.0, prior_rate: float = 0.01):
        super().__init__(y, dim=3, state_dim=1, obs_dim=1)
        self.prior_shape = check_positive(prior_shape, "prior_shape")
        self.prior_rate = check_positive(prior_rate, "prior_rate")

    # -- parameters ---------------------------------------------------------------------------------
    def constrain(self, theta: Any) -> SVParams:
        theta = theta if is_array(theta) else self.xp.asarray(theta, dtype=self.dtype, device=self.device)
        xp = self.xp
        return SVParams(xp.tanh(theta[..., 0]), 1.0 / theta[..., 1], 1.0 / theta[..., 2])

    def unconstrain(self, params: SVParams) -> Array:
        xp = self.xp
        phi, sigma, tau = (xp.asarray(p, dtype=self.dtype, device=self.device) for p in params)
        return xp.stack([xp.atanh(phi), 1.0 / sigma, 1.0 / tau], axis=-1)

    @staticmethod
    def theta_from(phi: float, sigma: float, tau: float, backend: str = "numpy") -> Array:
        """``theta`` (3,) for natural parameters given as numbers."""
        from .. import backends

        return backends.asarray([math.atanh(phi), 1.0 / sigma, 1.0 / tau], backend=backend)

    def log_prior(self, theta: Array) -> Array:
        theta, single = self._theta(theta)
        xp = self.xp
        phi = xp.tanh(theta[:, 0])
        a, b = self.prior_shape, self.prior_rate
        psi = theta[:, 1:]
        out = xp.log1p(-phi * phi) + xp.sum((2.0 * a - 1.0) * xp.log(xp.abs(psi)) - b * psi * psi, axis=1)
        return out[0] if single else out

    def grad_log_prior(self, theta: Array) -> Array:
        theta, single = self._theta(theta)
        xp = self.xp
        phi = xp.tanh(theta[:, :1])
        a, b = self.prior_shape, self.prior_rate
        psi = theta[:, 1:]
        out = xp.concat([-2.0 * phi, (2.0 * a - 1.0) / psi - 2.0 * b * psi], axis=1)
        return out[0] if single else out

    # -- particles ----------------------------------------------------------------------------------
    def particle_kernel(self, theta_batch: Array) -> SVKernel:
        """The bootstrap kernel at each row of ``theta_batch`` (Bt, 3)."""
        p = self.constrain(theta_batch)
        return SVKernel(p.phi, p.sigma, p.tau)

    # -- simulation ---------------------------------------------------------------------------------
    def simulate(self, rng: Any, T: int, theta: Any) -> tuple[Array, Array]:
        """Draw ``(x, y)`` of shapes ``(T, 1)`` at ``theta`` (3,), ``x_0`` stationary."""
        x, y = self.simulate_data(rng, T, theta)
        return x[:, None], y[:, None]

    @staticmethod
    def simulate_data(rng: Any, T: int, theta: Any) -> tuple[Array, Array]:
        """Draw log-volatilities ``x`` and returns ``y``, each of shape ``(T,)``, in ``rng``'s backend."""
        from ..backends import default_rng

        rng = default_rng(rng) if not hasattr(rng, "normal") else rng
        T = check_int(T, "T")
        xp = rng.backend.xp
        dt = xp.float64
        th = theta if is_array(theta) else xp.asarray([float(v) for v in theta], dtype=dt, device=rng.device)
        th = xp.asarray(th, dtype=dt, device=rng.device)
        phi, sigma, tau = xp.tanh(th[0]), 1.0 / xp.abs(th[1]), 1.0 / xp.abs(th[2])
        e = rng.normal((T + 1,), dtype=dt)
        x0 = e[0] * sigma / xp.sqrt(1.0 - phi * phi)
        w = sigma * e[1:]
        w = xp.concat([w[:1] + phi * x0, w[1:]])
        x = ar1_scan(xp, phi, w)
        y = tau * xp.exp(0.5 * x) * rng.normal((T,), dtype=dt)
        return x, y
