"""The particle kernel of the scalar linear Gaussian state space model (bootstrap or fully adapted).

Its filter and smoothers can be checked against the Kalman filter's exact likelihood and score
(:mod:`sgmc.ssm.kalman`); the optimal proposal is that of Aicher's thesis, Eqs. 3.83-3.84.
"""

from __future__ import annotations

from typing import Any

from .._array_api import Array
from .._validation import check_choice
from .particle_kernel import _LOG_2PI, KernelBase, _stack_terms, _y_like

__all__ = ["ScalarLGSSMKernel"]


class ScalarLGSSMKernel(KernelBase):
    """Particle kernel of the scalar linear Gaussian model ``x_t = phi x_{t-1} + sigma e_t``, ``y_t = x_t + tau d_t``.

    Score terms are in the coordinates of :class:`sgmc.ssm.LGSSM` for ``n = m = 1``:
    ``theta = (phi, psi_sigma, psi_tau)`` with ``psi_sigma = 1 / sigma`` and ``psi_tau = 1 / tau``
    (thesis Eq. 3.90). ``sigma`` and ``tau`` may be negative: they carry the sign of ``psi``, which
    the likelihood ignores but the score in ``psi`` does not.

    Parameters
    ----------
    phi, sigma, tau : arrays (Bt,)
    proposal : {"bootstrap", "optimal"}
        ``"bootstrap"`` moves particles with the transition and weights them by ``p(y_t | x_t)``;
        ``"optimal"`` is the fully adapted kernel of thesis Eqs. 3.83-3.84: ancestors weighted by
        ``N(y_t | phi x_{t-1}, sigma^2 + tau^2)``, moves from ``p(x_t | x_{t-1}, y_t)``.
    init_var : array (Bt,), optional
        Variance of ``x_0`` (mean 0); default the stationary ``sigma^2 / (1 - phi^2)``.

    Examples
    --------
    >>> import numpy as np
    >>> k = ScalarLGSSMKernel(np.array([0.9, 0.5]), np.array([0.5, 1.0]), np.array([1.0, 1.0]))
    >>> k.batch, k.dim, k.adapted
    (2, 3, False)
    """

    _names = ("phi", "sigma", "tau")
    dim = 3

    def __init__(self, phi: Array, sigma: Array, tau: Array, proposal: str = "bootstrap", init_var: Array | None = None):
        check_choice(proposal, "proposal", ("bootstrap", "optimal"))
        params = {"phi": phi, "sigma": sigma, "tau": tau}
        if init_var is not None:
            params["init_var"] = init_var
        self._setup(params, {"proposal": proposal})
        self.adapted = proposal == "optimal"
        xp = self.xp
        s2 = self._params["sigma"] ** 2
        self._params["q"] = s2
        self._params["r"] = self._params["tau"] ** 2
        if init_var is None:
            self._params["v0"] = s2 / (1.0 - self._params["phi"] ** 2)
        else:
            self._params["v0"] = self._params.pop("init_var")
        del xp

    def take_rows(self, idx: Array) -> "ScalarLGSSMKernel":
        xp = self.xp
        take = lambda k: xp.take(self._params[k], idx, axis=0)  # noqa: E731
        return ScalarLGSSMKernel(take("phi"), take("sigma"), take("tau"), init_var=take("v0"), **self._options)

    def sample_initial(self, rng: Any, n: int) -> Array:
        xp = self.xp
        return self._normal(rng, (self.batch, n, 1)) * xp.sqrt(self.p("v0", 3))

    def propagate(self, rng: Any, x_prev: Array, y_t: Array) -> Array:
        nd = x_prev.ndim
        phi, q, r = self.p("phi", nd), self.p("q", nd), self.p("r", nd)
        eps = self._normal(rng, tuple(x_prev.shape))
        if not self.adapted:
            return phi * x_prev + self.xp.sqrt(q) * eps
        y = _y_like(y_t, nd)
        mean = (r * phi * x_prev + q * y) / (q + r)
        return mean + self.xp.sqrt(q * r / (q + r)) * eps

    def ancestor_log_weight(self, x_prev: Array, y_t: Array) -> Array:
        nd = x_prev.ndim
        phi, v = self.p("phi", nd), self.p("q", nd) + self.p("r", nd)
        d = _y_like(y_t, nd) - phi * x_prev
        return (-0.5 * (_LOG_2PI + self.xp.log(v)) - 0.5 * d * d / v)[..., 0]

    def log_weight(self, x_prev: Array, x: Array, y_t: Array) -> Array:
        nd = x.ndim
        if self.adapted:
            return self.xp.zeros(tuple(x.shape[:-1]), dtype=x.dtype, device=x.device)
        r = self.p("r", nd)
        d = _y_like(y_t, nd) - x
        return (-0.5 * (_LOG_2PI + self.xp.log(r)) - 0.5 * d * d / r)[..., 0]

    def log_transition(self, x_prev: Array, x: Array) -> Array:
        nd = max(x_prev.ndim, x.ndim)
        phi, q = self.p("phi", nd), self.p("q", nd)
        d = x - phi * x_prev
        return (-0.5 * (_LOG_2PI + self.xp.log(q)) - 0.5 * d * d / q)[..., 0]

    def log_transition_bound(self) -> Array:
        return -0.5 * (_LOG_2PI + self.xp.log(self._params["q"]))

    def log_joint(self, x_prev: Array, x: Array, y_t: Array) -> Array:
        """``log p(y_t, x_t | x_{t-1})``."""
        nd = max(x_prev.ndim, x.ndim)
        r = self.p("r", nd)
        e = _y_like(y_t, nd) - x
        return self.log_transition(x_prev, x) + (-0.5 * (_LOG_2PI + self.xp.log(r)) - 0.5 * e * e / r)[..., 0]

    def score_terms(self, x_prev: Array, x: Array, y_t: Array) -> Array:
        xp = self.xp
        nd = max(x_prev.ndim, x.ndim)
        phi, s, tau = self.p("phi", nd), self.p("sigma", nd), self.p("tau", nd)
        q, r = self.p("q", nd), self.p("r", nd)
        d = x - phi * x_prev
        e = _y_like(y_t, nd) - x
        g_phi = d * x_prev / q
        g_ps = (q - d * d) / s
        g_pt = (r - e * e) / tau
        return _stack_terms(xp, (g_phi, g_ps, g_pt))
