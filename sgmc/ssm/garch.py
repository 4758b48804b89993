"""GARCH(1,1) with observation noise (Aicher 2020, thesis section 3.4.5, Eqs. 3.91-3.97).

    sigma_t^2 = alpha + beta x_{t-1}^2 + gamma sigma_{t-1}^2,   x_t ~ N(0, sigma_t^2),   y_t ~ N(x_t, tau^2).

The latent state is the pair ``(x_t, sigma_t^2)``: the variance moves deterministically given the
previous pair, so the transition has no density and the smoothers that need one (PaRIS, O(N^2))
do not apply; the path-space smoother does. ``x_0 ~ N(0, mu)`` and ``sigma_0^2 = mu`` with ``mu``
the stationary variance (the thesis leaves the start unstated; this is the recommended choice).

Parameterisation (thesis Eq. 3.97): ``theta = (log mu, logit phi, logit lambda, tau)`` with
``alpha = mu (1 - phi)``, ``beta = phi lambda``, ``gamma = phi (1 - lambda)``: ``mu`` is the stationary
variance, ``phi = beta + gamma`` the persistence and ``lambda = beta / (beta + gamma)``. With
``C_t = (x_t^2 - sigma_t^2) / (2 sigma_t^4)`` the score terms are

    d/d log mu       = C_t (1 - phi) mu,
    d/d logit phi    = C_t (lambda x_{t-1}^2 + (1 - lambda) sigma_{t-1}^2 - mu) phi (1 - phi),
    d/d logit lambda = C_t phi (x_{t-1}^2 - sigma_{t-1}^2) lambda (1 - lambda),
    d/d tau          = ((y_t - x_t)^2 - tau^2) / tau^3,

holding ``sigma_{t-1}^2`` fixed as part of the state (the thesis's partial derivative; the
variance's own dependence on ``theta`` through earlier steps is not propagated). ``tau`` is a real
number whose sign the likelihood ignores.

Proposals: the fully adapted ("optimal instrumental") kernel of Eqs. 3.95-3.96, which the thesis
uses: ancestors are weighted by ``N(y_t | 0, sigma_t^2 + tau^2)`` and moved with
``x_t ~ N(sigma_t^2 y_t / (sigma_t^2 + tau^2), sigma_t^2 tau^2 / (sigma_t^2 + tau^2))``; or the
bootstrap kernel (Eqs. 3.93-3.94).

Priors (the papers do not state them): ``log mu ~ N(0, prior_var)``, ``phi`` and ``lambda``
uniform on (0, 1) (in logit coordinates ``log p = log u (1 - u)``), and ``1/tau^2 ~
Gamma(prior_shape, prior_rate)`` carried to ``tau``: ``log p = -(2 a + 1) log|tau| - b / tau^2``.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .._array_api import Array, array_namespace, is_array
from .._validation import check_choice, check_int, check_positive
from .base import StateSpaceModel
from .particle import _LOG_2PI, KernelBase, _stack_terms, _y_like

__all__ = ["GARCH", "GARCHParams", "GARCHKernel"]


class GARCHParams(NamedTuple):
    """Natural parameters with the leading axes of ``theta``."""

    alpha: Array
    beta: Array
    gamma: Array
    tau: Array


def _sigmoid(xp: Any, z: Array) -> Array:
    return 1.0 / (1.0 + xp.exp(-z))


class GARCHKernel(KernelBase):
    """Particle kernel of GARCH(1,1) with noise; state ``(x_t, sigma_t^2)``.

    Parameters
    ----------
    mu, phi, lam, tau : arrays (Bt,)
        Stationary variance, persistence, ARCH share and noise scale.
    proposal : {"optimal", "bootstrap"}
    """

    _names = ("mu", "phi", "lam", "tau")
    dim = 4
    state_dim = 2

    def __init__(self, mu: Array, phi: Array, lam: Array, tau: Array, proposal: str = "optimal"):
        check_choice(proposal, "proposal", ("optimal", "bootstrap"))
        self._setup({"mu": mu, "phi": phi, "lam": lam, "tau": tau}, {"proposal": proposal})
        self.adapted = proposal == "optimal"
        P = self._params
        P["alpha"] = P["mu"] * (1.0 - P["phi"])
        P["beta"] = P["phi"] * P["lam"]
        P["gamma"] = P["phi"] * (1.0 - P["lam"])
        P["r"] = P["tau"] ** 2

    def take_rows(self, idx: Array) -> "GARCHKernel":
        xp = self.xp
        return GARCHKernel(*(xp.take(self._params[k], idx, axis=0) for k in self._names), **self._options)

    def _var(self, x_prev: Array) -> Array:
        """``sigma_t^2`` from the previous state (shape ``x_prev.shape[:-1] + (1,)``)."""
        nd = x_prev.ndim
        xv = x_prev[..., :1]
        return self.p("alpha", nd) + self.p("beta", nd) * xv * xv + self.p("gamma", nd) * x_prev[..., 1:]

    def sample_initial(self, rng: Any, n: int) -> Array:
        xp = self.xp
        mu = self.p("mu", 3)
        x0 = self._normal(rng, (self.batch, n, 1)) * xp.sqrt(mu)
        return xp.concat([x0, xp.broadcast_to(mu, (self.batch, n, 1))], axis=-1)

    def propagate(self, rng: Any, x_prev: Array, y_t: Array) -> Array:
        xp = self.xp
        nd = x_prev.ndim
        s2 = self._var(x_prev)
        eps = self._normal(rng, tuple(s2.shape))
        if self.adapted:
            r = self.p("r", nd)
            tot = s2 + r
            x = s2 * _y_like(y_t, nd) / tot + xp.sqrt(s2 * r / tot) * eps
        else:
            x = xp.sqrt(s2) * eps
        return xp.concat([x, s2], axis=-1)

    def ancestor_log_weight(self, x_prev: Array, y_t: Array) -> Array:
        nd = x_prev.ndim
        v = self._var(x_prev) + self.p("r", nd)
        y = _y_like(y_t, nd)
        return (-0.5 * (_LOG_2PI + self.xp.log(v)) - 0.5 * y * y / v)[..., 0]

    def log_weight(self, x_prev: Array, x: Array, y_t: Array) -> Array:
        nd = x.ndim
        if self.adapted:
            return self.xp.zeros(tuple(x.shape[:-1]), dtype=x.dtype, device=x.device)
        r = self.p("r", nd)
        e = _y_like(y_t, nd) - x[..., :1]
        return (-0.5 * (_LOG_2PI + self.xp.log(r)) - 0.5 * e * e / r)[..., 0]

    def log_joint(self, x_prev: Array, x: Array, y_t: Array) -> Array:
        """``log p(y_t, x_t | x_{t-1}, sigma_{t-1}^2)`` (thesis Eq. 3.92), ``sigma_t^2`` recomputed."""
        xp = self.xp
        nd = max(x_prev.ndim, x.ndim)
        s2 = self._var(x_prev)
        xv = x[..., :1]
        e = _y_like(y_t, nd) - xv
        r = self.p("r", nd)
        out = -_LOG_2PI - 0.5 * xp.log(s2) - 0.5 * xv * xv / s2 - 0.5 * xp.log(r) - 0.5 * e * e / r
        return out[..., 0]

    def score_terms(self, x_prev: Array, x: Array, y_t: Array) -> Array:
        xp = self.xp
        nd = max(x_prev.ndim, x.ndim)
        mu, phi, lam, tau = (self.p(k, nd) for k in ("mu", "phi", "lam", "tau"))
        s2 = self._var(x_prev)
        xv = x[..., :1]
        xp2 = x_prev[..., :1] * x_prev[..., :1]
        sp = x_prev[..., 1:]
        c = (xv * xv - s2) / (2.0 * s2 * s2)
        g_mu = c * (1.0 - phi) * mu
        g_phi = c * (lam * xp2 + (1.0 - lam) * sp - mu) * phi * (1.0 - phi)
        g_lam = c * phi * (xp2 - sp) * lam * (1.0 - lam)
        e = _y_like(y_t, nd) - xv
        r = self.p("r", nd)
        g_tau = (e * e - r) / (r * tau)
        return _stack_terms(xp, (g_mu, g_phi, g_lam, g_tau))


class GARCH(StateSpaceModel):
    """GARCH(1,1) with observation noise over ``theta = (log mu, logit phi, logit lambda, tau)``.

    Parameters
    ----------
    y : array (T,) or (T, 1)
    proposal : {"optimal", "bootstrap"}
        Particle proposal (default the fully adapted one, as in the thesis).
    prior_var : float
        Variance of the normal prior of ``log mu``.
    prior_shape, prior_rate : float
        Gamma prior of ``1 / tau^2``.

    Examples
    --------
    >>> from sgmc import backends
    >>> from sgmc.ssm import GARCH
    >>> theta = GARCH.theta_from(alpha=0.1, beta=0.8, gamma=0.05, tau=0.3)
    >>> x, y = GARCH.simulate_data(backends.default_rng(0), 100, theta)
    >>> model = GARCH(y)
    >>> [round(float(v), 3) for v in model.constrain(theta)]
    [0.1, 0.8, 0.05, 0.3]
    """

    param_names = ("log_mu", "logit_phi", "logit_lambda", "tau")
    score_methods = ("particle",)

    def __init__(
        self,
        y: Any,
        *,
        proposal: str = "optimal",
        prior_var: float = 100.0,
        prior_shape: float = 1.0,
        prior_rate: float = 0.01,
    ):
        super().__init__(y, dim=4, state_dim=2, obs_dim=1)
        self.proposal = check_choice(proposal, "proposal", ("optimal", "bootstrap"))
        self.prior_var = check_positive(prior_var, "prior_var")
        self.prior_shape = check_positive(prior_shape, "prior_shape")
        self.prior_rate = check_positive(prior_rate, "prior_rate")

    # -- parameters ---------------------------------------------------------------------------------
    def constrain(self, theta: Any) -> GARCHParams:
        theta = theta if is_array(theta) else self.xp.asarray(theta, dtype=self.dtype, device=self.device)
        mu, phi, lam, tau = _natural(self.xp, theta)
        return GARCHParams(mu * (1.0 - phi), phi * lam, phi * (1.0 - lam), tau)

    def unconstrain(self, params: GARCHParams) -> Array:
        xp = self.xp
        a, b, g, tau = (xp.asarray(p, dtype=self.dtype, device=self.device) for p in params)
        phi = b + g
        mu = a / (1.0 - phi)
        lam = b / phi
        return xp.stack([xp.log(mu), xp.log(phi / (1.0 - phi)), xp.log(lam / (1.0 - lam)), tau], axis=-1)

    @staticmethod
    def theta_from(alpha: float, beta: float, gamma: float, tau: float, backend: str = "numpy") -> Array:
        """``theta`` (4,) for natural parameters given as numbers (``beta + gamma < 1``)."""
        from .. import backends

        phi = beta + gamma
        if not (0.0 < phi < 1.0 and alpha > 0 and beta > 0 and gamma > 0):
            msg = f"need alpha, beta, gamma > 0 and beta + gamma < 1; got {alpha}, {beta}, {gamma}"
            raise ValueError(msg)
        mu = alpha / (1.0 - phi)
        lam = beta / phi
        vals = [math.log(mu), math.log(phi / (1.0 - phi)), math.log(lam / (1.0 - lam)), tau]
        return backends.asarray(vals, backend=backend)

    def log_prior(self, theta: Array) -> Array:
        theta, single = self._theta(theta)
        xp = self.xp
        a, b = self.prior_shape, self.prior_rate
        lm, tau = theta[:, 0], theta[:, 3]
        # log(u (1 - u)) for u = sigmoid(z) is -softplus(-z) - softplus(z).
        def log_u1u(z):
            return -(xp.logaddexp(0.0, z) + xp.logaddexp(0.0, -z))

        out = (
            -0.5 * lm * lm / self.prior_var
            + log_u1u(theta[:, 1])
            + log_u1u(theta[:, 2])
            - (2.0 * a + 1.0) * xp.log(xp.abs(tau))
            - b / (tau * tau)
        )
        return out[0] if single else out

    def grad_log_prior(self, theta: Array) -> Array:
        theta, single = self._theta(theta)
        xp = self.xp
        a, b = self.prior_shape, self.prior_rate
        phi = _sigmoid(xp, theta[:, 1:3])
        tau = theta[:, 3:]
        out = xp.concat(
            [-theta[:, :1] / self.prior_var, 1.0 - 2.0 * phi, -(2.0 * a + 1.0) / tau + 2.0 * b / (tau * tau * tau)],
            axis=1,
        )
        return out[0] if single else out

    # -- particles ----------------------------------------------------------------------------------
    def particle_kernel(self, theta_batch: Array) -> GARCHKernel:
        """The kernel (``proposal`` of the model) at each row of ``theta_batch`` (Bt, 4)."""
        mu, phi, lam, tau = _natural(self.xp, theta_batch)
        return GARCHKernel(mu, phi, lam, tau, proposal=self.proposal)

    # -- simulation ---------------------------------------------------------------------------------
    def simulate(self, rng: Any, T: int, theta: Any) -> tuple[Array, Array]:
        """Draw states ``(T, 2)`` (``x_t``, ``sigma_t^2``) and observations ``(T, 1)`` at ``theta`` (4,)."""
        x, s2, y = self._simulate(rng, T, theta)
        xp = array_namespace(x)
        return xp.stack([x, s2], axis=1), y[:, None]

    @staticmethod
    def simulate_data(rng: Any, T: int, theta: Any) -> tuple[Array, Array]:
        """Draw ``x`` and ``y``, each ``(T,)``, in ``rng``'s backend (``x_0 ~ N(0, mu)``, ``sigma_0^2 = mu``)."""
        x, _, y = GARCH._simulate(rng, T, theta)
        return x, y

    @staticmethod
    def _simulate(rng: Any, T: int, theta: Any) -> tuple[Array, Array, Array]:
        from .. import backends
        from ..backends import default_rng

        rng = default_rng(rng) if not hasattr(rng, "normal") else rng
        T = check_int(T, "T")
        xp = rng.backend.xp
        dt = xp.float64
        vals = backends.to_numpy(theta).tolist() if is_array(theta) else [float(v) for v in theta]
        mu = math.exp(vals[0])
        phi = 1.0 / (1.0 + math.exp(-vals[1]))
        lam = 1.0 / (1.0 + math.exp(-vals[2]))
        tau = abs(vals[3])
        alpha, beta, gamma = mu * (1.0 - phi), phi * lam, phi * (1.0 - lam)
        e = backends.to_numpy(rng.normal((2 * T + 1,), dtype=dt)).tolist()
        # The variance recursion is nonlinear: a loop over time on host numbers (the I/O edge of a
        # simulator), then one conversion to the backend.
        x_prev, s_prev = math.sqrt(mu) * e[0], mu
        xs, ss, ys = [], [], []
        for t in range(T):
            s2 = alpha + beta * x_prev * x_prev + gamma * s_prev
            x_t = math.sqrt(s2) * e[1 + t]
            xs.append(x_t)
            ss.append(s2)
            ys.append(x_t + tau * e[1 + T + t])
            x_prev, s_prev = x_t, s2
        dev = rng.device
        return (
            xp.asarray(xs, dtype=dt, device=dev),
            xp.asarray(ss, dtype=dt, device=dev),
            xp.asarray(ys, dtype=dt, device=dev),
        )


def _natural(xp: Any, theta: Array) -> tuple[Array, Array, Array, Array]:
    """``(mu, phi, lambda, tau)`` from ``theta = (log mu, logit phi, logit lambda, tau)``."""
    return xp.exp(theta[..., 0]), _sigmoid(xp, theta[..., 1]), _sigmoid(xp, theta[..., 2]), theta[..., 3]
