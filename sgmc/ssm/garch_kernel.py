"""Particle kernel of GARCH(1,1) with observation noise (Aicher 2020, thesis section 3.4.5).

    sigma_t^2 = alpha + beta x_{t-1}^2 + gamma sigma_{t-1}^2,   x_t ~ N(0, sigma_t^2),
    y_t ~ N(m + x_t, tau^2),

with ``x_0 ~ N(0, mu)``, ``sigma_0^2 = mu`` (``mu`` the stationary variance) and ``theta = (log mu,
logit phi, logit lambda, tau[, m])``, ``alpha = mu (1 - phi)``, ``beta = phi lambda``, ``gamma = phi
(1 - lambda)`` (thesis Eq. 3.97). The latent path is ``x_{0:T}``; ``sigma_t^2`` is a deterministic
function of it and of ``theta``.

Two score targets, chosen by ``score``:

* ``"exact"``: the gradient of ``log p(y | theta)``. By Fisher's identity it is the smoothed
  expectation of ``d/dtheta log p(x_{0:T}, y | theta)`` with the path ``x`` held fixed, so
  ``sigma_t^2`` is differentiated through the whole recursion: each particle carries the total
  derivative ``D_t = d sigma_t^2 / d theta``, updated by ``D_t = partial sigma_t^2 + gamma D_{t-1}``
  (``D_0 = (mu, 0, 0)``), and the score term of step ``t`` is ``C_t D_t`` with ``C_t = (x_t^2 -
  sigma_t^2) / (2 sigma_t^4)``. The score of the initial law ``log N(x_0 | 0, mu)`` enters with the
  first step. The particle state is ``(x_t, sigma_t^2, D_t (3), first)``.
* ``"partial"``: the thesis's terms, which hold ``sigma_{t-1}^2`` fixed as part of the state (only
  the last step of the recursion is differentiated). This is *not* the gradient of the
  log-likelihood, so a sampler driven by it has a different stationary law; it is kept to
  reproduce the thesis. The particle state is ``(x_t, sigma_t^2)``.

Proposals: the fully adapted kernel of thesis Eqs. 3.95-3.96 (ancestors weighted by ``N(y_t - m | 0,
sigma_t^2 + tau^2)``) or the bootstrap kernel (Eqs. 3.93-3.94).
"""

from __future__ import annotations

from typing import Any

from .._array_api import Array, device_of
from .._validation import check_choice
from .particle_kernel import _LOG_2PI, KernelBase, _stack_terms, _y_like

__all__ = ["GARCHKernel"]

SCORES = ("exact", "partial")


class GARCHKernel(KernelBase):
    """Particle kernel of GARCH(1,1) with noise.

    Parameters
    ----------
    mu, phi, lam, tau : arrays (Bt,)
        Stationary variance, persistence, ARCH share and noise scale.
    proposal : {"optimal", "bootstrap"}
    m : array (Bt,), optional
        Mean of the observations (default 0).
    score : {"exact", "partial"}
        The gradient of the log-likelihood (default), or the thesis's partial derivative (see the
        module docstring).
    with_mean : bool
        Append the score of ``m`` (the kernel's ``dim`` is then 5).

    Examples
    --------
    >>> import numpy as np
    >>> k = GARCHKernel(*(np.full(2, v) for v in (0.5, 0.8, 0.5, 0.3)))
    >>> k.dim, k.state_dim
    (4, 6)
    """

    _names = ("mu", "phi", "lam", "tau", "m")

    def __init__(
        self,
        mu: Array,
        phi: Array,
        lam: Array,
        tau: Array,
        proposal: str = "optimal",
        *,
        m: Array | None = None,
        score: str = "exact",
        with_mean: bool = False,
    ):
        check_choice(proposal, "proposal", ("optimal", "bootstrap"))
        check_choice(score, "score", SCORES)
        if m is None:
            m = mu * 0.0
        self._setup(
            {"mu": mu, "phi": phi, "lam": lam, "tau": tau, "m": m},
            {"proposal": proposal, "score": score, "with_mean": bool(with_mean)},
        )
        self.adapted = proposal == "optimal"
        self.exact = score == "exact"
        self.state_dim = 6 if self.exact else 2
        self.dim = 5 if with_mean else 4
        P = self._params
        P["alpha"] = P["mu"] * (1.0 - P["phi"])
        P["beta"] = P["phi"] * P["lam"]
        P["gamma"] = P["phi"] * (1.0 - P["lam"])
        P["r"] = P["tau"] ** 2

    def take_rows(self, idx: Array) -> "GARCHKernel":
        xp = self.xp
        mu, phi, lam, tau, m = (xp.take(self._params[k], idx, axis=0) for k in self._names)
        return GARCHKernel(mu, phi, lam, tau, m=m, **self._options)

    def _var(self, x_prev: Array) -> Array:
        """``sigma_t^2`` from the previous state (shape ``x_prev.shape[:-1] + (1,)``)."""
        nd = x_prev.ndim
        xv = x_prev[..., :1]
        return self.p("alpha", nd) + self.p("beta", nd) * xv * xv + self.p("gamma", nd) * x_prev[..., 1:2]

    def _dvar(self, x_prev: Array) -> Array:
        """``D_t = d sigma_t^2 / d(log mu, logit phi, logit lambda)`` from the previous state: (..., 3)."""
        nd = x_prev.ndim
        mu, phi, lam, gamma = (self.p(k, nd) for k in ("mu", "phi", "lam", "gamma"))
        x2 = x_prev[..., :1] * x_prev[..., :1]
        sp = x_prev[..., 1:2]
        d_lm = mu * (1.0 - phi) + gamma * x_prev[..., 2:3]
        d_zp = phi * (1.0 - phi) * (lam * x2 + (1.0 - lam) * sp - mu) + gamma * x_prev[..., 3:4]
        d_zl = phi * lam * (1.0 - lam) * (x2 - sp) + gamma * x_prev[..., 4:5]
        return self.xp.concat([d_lm, d_zp, d_zl], axis=-1)

    def _centred(self, y_t: Array, nd: int) -> Array:
        return _y_like(y_t, nd) - self.p("m", nd)

    def sample_initial(self, rng: Any, n: int) -> Array:
        xp = self.xp
        mu = self.p("mu", 3)
        shape = (self.batch, n, 1)
        x0 = self._normal(rng, shape) * xp.sqrt(mu)
        s0 = xp.broadcast_to(mu, shape)
        if not self.exact:
            return xp.concat([x0, s0], axis=-1)
        zero = xp.zeros(shape, dtype=self.dtype, device=self.device)
        return xp.concat([x0, s0, s0, zero, zero, zero + 1.0], axis=-1)

    def propagate(self, rng: Any, x_prev: Array, y_t: Array) -> Array:
        xp = self.xp
        nd = x_prev.ndim
        s2 = self._var(x_prev)
        eps = self._normal(rng, tuple(s2.shape))
        if self.adapted:
            r = self.p("r", nd)
            tot = s2 + r
            x = s2 * self._centred(y_t, nd) / tot + xp.sqrt(s2 * r / tot) * eps
        else:
            x = xp.sqrt(s2) * eps
        if not self.exact:
            return xp.concat([x, s2], axis=-1)
        return xp.concat([x, s2, self._dvar(x_prev), xp.zeros_like(x)], axis=-1)

    def ancestor_log_weight(self, x_prev: Array, y_t: Array) -> Array:
        nd = x_prev.ndim
        v = self._var(x_prev) + self.p("r", nd)
        y = self._centred(y_t, nd)
        return (-0.5 * (_LOG_2PI + self.xp.log(v)) - 0.5 * y * y / v)[..., 0]

    def log_weight(self, x_prev: Array, x: Array, y_t: Array) -> Array:
        nd = x.ndim
        if self.adapted:
            return self.xp.zeros(tuple(x.shape[:-1]), dtype=x.dtype, device=device_of(x))
        r = self.p("r", nd)
        e = self._centred(y_t, nd) - x[..., :1]
        return (-0.5 * (_LOG_2PI + self.xp.log(r)) - 0.5 * e * e / r)[..., 0]

    def log_joint(self, x_prev: Array, x: Array, y_t: Array) -> Array:
        """``log p(y_t, x_t | x_{t-1}, sigma_{t-1}^2)`` (thesis Eq. 3.92), ``sigma_t^2`` recomputed."""
        xp = self.xp
        nd = max(x_prev.ndim, x.ndim)
        s2 = self._var(x_prev)
        xv = x[..., :1]
        e = self._centred(y_t, nd) - xv
        r = self.p("r", nd)
        out = -_LOG_2PI - 0.5 * xp.log(s2) - 0.5 * xv * xv / s2 - 0.5 * xp.log(r) - 0.5 * e * e / r
        return out[..., 0]

    def score_terms(self, x_prev: Array, x: Array, y_t: Array) -> Array:
        xp = self.xp
        nd = max(x_prev.ndim, x.ndim)
        mu, phi, lam, tau = (self.p(k, nd) for k in ("mu", "phi", "lam", "tau"))
        xv = x[..., :1]
        if self.exact:
            s2 = x[..., 1:2]
            c = (xv * xv - s2) / (2.0 * s2 * s2)
            D = c * x[..., 2:5]
            x0 = x_prev[..., :1]
            # the initial law N(x_0 | 0, mu) enters once, with the first step
            g_mu = D[..., :1] + x_prev[..., 5:6] * 0.5 * (x0 * x0 / mu - 1.0)
            g_phi, g_lam = D[..., 1:2], D[..., 2:3]
        else:
            s2 = self._var(x_prev)
            xp2 = x_prev[..., :1] * x_prev[..., :1]
            sp = x_prev[..., 1:2]
            c = (xv * xv - s2) / (2.0 * s2 * s2)
            g_mu = c * (1.0 - phi) * mu
            g_phi = c * (lam * xp2 + (1.0 - lam) * sp - mu) * phi * (1.0 - phi)
            g_lam = c * phi * (xp2 - sp) * lam * (1.0 - lam)
        e = self._centred(y_t, nd) - xv
        r = self.p("r", nd)
        terms = [g_mu, g_phi, g_lam, (e * e - r) / (r * tau)]
        if self._options["with_mean"]:
            terms.append(e / r)
        return _stack_terms(xp, tuple(terms))
