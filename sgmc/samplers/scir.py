"""Stochastic Cox-Ingersoll-Ross (SCIR) sampling on the simplex (Baker, Fearnhead, Fox and Nemeth 2018).

A Dirichlet(a) vector is omega / sum(omega) for independent omega_j ~ Gamma(a_j, 1), and Gamma(a_j, 1)
is the stationary law of the Cox-Ingersoll-Ross diffusion d omega = (a - omega) dt + sqrt(2 omega) dW.
Its transition over time t is known exactly: omega_t = c W with c = (1 - e^{-t}) / 2 and W a noncentral
chi-squared variable with 2a degrees of freedom and noncentrality 2 omega e^{-t} / (1 - e^{-t}). SCIR
replaces a_j = alpha_j + sum_i z_ij by its subsampled estimate alpha_j + (N / n) sum_{i in S} z_ij; the
transition is exact, so there is no discretisation error and no bias at the boundary of the simplex,
where SGRLD's Euler steps (Patterson and Teh 2013) are biased. (The review, section 5, describes
SCIR without equations; these follow Baker et al. 2018.)

Step size: the Euler step of this diffusion with time t = h / 2 is SGRLD's expanded-mean step of size h
in the review's units, so ``step_size=h`` advances the CIR process by time h / 2.

Noncentral chi-squared draws use only normal and uniform numbers: for a >= 1/2,
W = (Z + sqrt(lambda))^2 + 2 Gamma(a - 1/2); for a < 1/2, W = 2 Gamma(a + P) with P ~ Poisson(lambda / 2)
(by inversion, for the small means that small a brings). Gamma draws are Marsaglia and Tsang's (2000)
squeeze method, boosted for shapes below 1.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .._array_api import Array, array_namespace
from .._keys import refuse_tracing
from .base import SamplerBase, StepInfo

__all__ = ["SCIR", "SCIRState", "gamma_draws"]

_POISSON_CAP = 700.0   # exp(-mu) underflows beyond; means this large only occur far from equilibrium


def gamma_draws(rng: Any, k: Array) -> Array:
    """Gamma(k, 1) draws for every entry of ``k`` >= 0 (0 where k = 0), from normal and uniform numbers."""
    xp = array_namespace(k)
    shape, dtype = tuple(k.shape), k.dtype
    boost = k < 1.0
    kk = xp.where(boost, k + 1.0, k)
    d = kk - 1.0 / 3.0
    c = 1.0 / xp.sqrt(9.0 * d)
    out = xp.zeros_like(k)
    pending = xp.ones(shape, dtype=xp.bool, device=getattr(k, "device", None))
    while True:
        z = rng.normal(shape, dtype=dtype)
        u = rng.uniform(shape, dtype=dtype)
        v = 1.0 + c * z
        v3 = v * v * v
        safe = xp.where(v3 > 0, v3, xp.ones_like(v3))
        ok = (v3 > 0) & (xp.log(u) < 0.5 * z * z + d - d * safe + d * xp.log(safe))
        out = xp.where(pending & ok, d * safe, out)
        pending = pending & ~ok
        if not bool(xp.any(pending)):
            break
    u = rng.uniform(shape, dtype=dtype)
    safe_k = xp.where(k > 0, k, xp.ones_like(k))
    out = xp.where(boost, out * u ** (1.0 / safe_k), out)
    return xp.where(k > 0, out, xp.zeros_like(out))


def _poisson(rng: Any, mu: Array) -> Array:
    """Poisson(mu) draws by inversion (mu below the cap; larger means get the normal approximation)."""
    xp = array_namespace(mu)
    shape, dtype = tuple(mu.shape), mu.dtype
    big = mu > _POISSON_CAP
    m = xp.where(big, xp.zeros_like(mu), mu)
    u = rng.uniform(shape, dtype=dtype)
    p = xp.exp(-m)
    cdf = p
    n = xp.zeros_like(mu)
    pending = u > cdf
    k = 0
    while bool(xp.any(pending)):
        k += 1
        p = p * m / k
        cdf = cdf + p
        n = xp.where(pending, n + 1.0, n)
        pending = pending & (u > cdf) & (p > 0)
    z = rng.normal(shape, dtype=dtype)
    approx = xp.clip(xp.round(mu + xp.sqrt(xp.where(big, mu, xp.ones_like(mu))) * z), min=0.0)
    return xp.where(big, approx, n)


def cir_transition(rng: Any, omega: Array, a: Array, t: float) -> Array:
    """Exact CIR transition over time ``t`` of d omega = (a - omega) dt + sqrt(2 omega) dW."""
    xp = array_namespace(omega)
    e = math.exp(-t)
    c = 0.5 * (1.0 - e)
    lam = omega * (2.0 * e / (1.0 - e))
    big = a >= 0.5
    z = rng.normal(tuple(omega.shape), dtype=omega.dtype)
    shift = z + xp.sqrt(lam)
    # a >= 1/2: (Z + sqrt(lam))^2 + chi2(2a - 1); a < 1/2: chi2(2a + 2P), P ~ Poisson(lam / 2)
    pois = _poisson(rng, xp.where(big, xp.zeros_like(lam), 0.5 * lam))
    shape = xp.where(big, a - 0.5, a + pois)
    g = gamma_draws(rng, shape)
    w = xp.where(big, shift * shift + 2.0 * g, 2.0 * g)
    return c * w


class SCIRState(NamedTuple):
    """``position``: theta on the simplex (chains, K); ``omega``: the unnormalised gamma weights;
    ``grad``: the Dirichlet parameters a-hat of the last step (SCIR uses no gradient)."""

    position: Array
    omega: Array
    grad: Array
    est_state: Any


class SCIR(SamplerBase):
    """Stochastic CIR sampler for Dirichlet-type posteriors (a :class:`~sgmc.models.DirichletCategorical`).

    The estimator supplies the data subsample: a :class:`~sgmc.estimators.Minibatch` (its indices and
    N/n scaling give a-hat = alpha + (N/n) sum_S z_i) or :class:`~sgmc.estimators.FullGradient`
    (exact counts: then every step is an exact draw from the CIR transition of the true posterior).

    Notes
    -----
    ``step_size=h`` advances the CIR diffusion by time h / 2 (SGRLD's expanded-mean step of size h is
    the Euler step of the same diffusion). The transition is exact at any h; large steps mix fastest,
    and the only error is from subsampling (a larger h averages over fewer minibatches).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.models import DirichletCategorical
    >>> from sgmc.estimators import Minibatch
    >>> from sgmc.samplers import SCIR
    >>> z = np.eye(3)[np.random.default_rng(0).choice(3, size=500, p=[0.7, 0.3, 0.0])]
    >>> model = DirichletCategorical(z, alpha=0.1)
    >>> rng = backends.default_rng(0)
    >>> est = Minibatch(model, 50)
    >>> state = SCIR().init(rng, np.full((200, 3), 1 / 3), est)
    >>> for _ in range(50):
    ...     state, _ = SCIR().step(rng, state, est, 1.0)
    >>> bool(np.all(state.position.sum(axis=1).round(12) == 1)), bool(state.position[:, 2].mean() < 0.01)
    (True, True)
    """

    name = "scir"

    def step_unit(self, model, curvature=None, position=None, estimator=None, rng=None):
        """1: the CIR transition is exact at any step; h = 1 advances the diffusion by time 1/2."""
        return 1.0

    def _a_hat(self, rng: Any, estimator: Any, chains: int) -> tuple[Array, Any]:
        model = estimator.model
        if not hasattr(model, "count_sum"):
            msg = (
                f"SCIR needs a Dirichlet-type model with count_sum(idx) (sgmc.models.DirichletCategorical); "
                f"got {type(model).__name__}"
            )
            raise TypeError(msg)
        if hasattr(estimator, "indices"):
            idx = estimator.indices(rng, chains)
            counts = estimator.scale * model.count_sum(idx)
            n = estimator.batch_size
        else:
            counts = model.count_sum(None)
            n = model.n_data
        a = model.alpha + counts
        if a.shape[0] != chains:
            a = model.xp.broadcast_to(a, (chains, a.shape[1]))
        from ..estimators.base import EstimateInfo

        return a, EstimateInfo(n, n)

    def init(self, rng, position, estimator, est_state=None):
        xp = array_namespace(position)
        if not bool(xp.all(position > 0)):
            msg = "`position` must lie inside the simplex (every entry positive) for SCIR"
            raise ValueError(msg)
        theta = position / xp.sum(position, axis=-1, keepdims=True)
        a, _ = self._a_hat(rng, estimator, position.shape[0])
        omega = theta * xp.sum(a, axis=-1, keepdims=True)        # start the total at its typical size
        return SCIRState(theta, omega, a, est_state)

    def step(self, rng, state, estimator, step_size):
        refuse_tracing("SCIR", "its CIR transition draws gamma variates by rejection rounds whose number depends "
                       "on the values drawn", state.omega)
        xp = array_namespace(state.omega)
        a, info = self._a_hat(rng, estimator, state.omega.shape[0])
        omega = cir_transition(rng, state.omega, a, 0.5 * step_size)
        # an exact zero (possible for tiny a in floating point) is moved to the smallest positive value
        tiny = xp.finfo(omega.dtype).smallest_normal
        omega = xp.where(omega > 0, omega, xp.full_like(omega, tiny))
        theta = omega / xp.sum(omega, axis=-1, keepdims=True)
        return SCIRState(theta, omega, a, state.est_state), StepInfo(info)
