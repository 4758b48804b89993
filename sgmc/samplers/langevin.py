"""Langevin samplers: SGLD, ULA, preconditioned SGLD and MALA.

All discretise the Langevin diffusion d theta = (1/2) grad log pi dt + dW (review eq. 2). SGLD
(Welling and Teh 2011; review Algorithm 1) uses a stochastic gradient; ULA is the same step with the
exact gradient; MALA adds a Metropolis-Hastings correction and is exact. pSGLD (Li et al. 2016)
preconditions with an RMSprop estimate of the gradient's scale.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .._array_api import Array, array_namespace
from .._validation import check_positive
from .base import SamplerBase, StepInfo, _preconditioned_lambda_max
from .integrators import langevin

__all__ = ["SGLD", "ULA", "PSGLD", "MALA", "LangevinState", "PSGLDState", "MALAState"]


class LangevinState(NamedTuple):
    """Position ``(chains, dim)``, the gradient estimate there, and the estimator's state."""

    position: Array
    grad: Array
    est_state: Any


# Its docstring example repeats the other samplers' set-up: each class's help runs on its own.
class SGLD(SamplerBase):
    """Stochastic gradient Langevin dynamics: theta' = theta + (h/2) g + sqrt(h) Z.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.models import GaussianTarget
    >>> from sgmc.estimators import NoisyGradient
    >>> from sgmc.samplers import SGLD
    >>> target = GaussianTarget.review_example()
    >>> grad = NoisyGradient(target, noise_sd=0.1)
    >>> rng = backends.default_rng(0)
    >>> sgld = SGLD()
    >>> state = sgld.init(rng, np.zeros((4, 2)), grad)      # 4 chains
    >>> state, info = sgld.step(rng, state, grad, 0.1)
    >>> state.position.shape, info.estimate.batch_size
    ((4, 2), 0)
    """

    name = "sgld"

    def init(self, rng, position, estimator, est_state=None):
        g, est_state, _ = self.start(rng, position, estimator, est_state)
        return LangevinState(position, g, est_state)

    def step(self, rng, state, estimator, step_size):
        x = state.position
        x = langevin(x, state.grad, step_size, rng.normal(tuple(x.shape), dtype=x.dtype))
        g, est_state, info = estimator.estimate(rng, state.est_state, x)
        return LangevinState(x, g, est_state), StepInfo(info)


class ULA(SGLD):
    """Unadjusted Langevin algorithm: SGLD with the exact full-data gradient (biased by O(h))."""

    name = "ula"
    exact = True


class PSGLDState(NamedTuple):
    position: Array
    grad: Array
    est_state: Any
    second_moment: Array


class PSGLD(SamplerBase):
    """Preconditioned SGLD with an RMSprop preconditioner (Li et al. 2016).

    V <- alpha V + (1 - alpha) gbar^2 with gbar = g / N (per-datum scale), G = 1 / (lam + sqrt(V)), and
    theta' = theta + (h/2) G g + N(0, h G). The small Gamma correction term is omitted, as in the
    paper's experiments. V starts at gbar^2 at the initial position (not 0, which would give G = 1/lam).

    Parameters
    ----------
    alpha : float, default 0.99
    lam : float, default 1e-5
    n_data : int, optional
        N for the per-datum scaling; :func:`sgmc.sample` sets it from the model.

    Notes
    -----
    **The step size is on pSGLD's own scale.** The preconditioner G = 1 / (lam + sqrt(V)) is about
    the inverse size of a per-datum gradient, so the effective step is h G, not h: at the step size
    that suits SGLD on the same posterior, pSGLD's steps are larger by that factor (tens to hundreds for
    minibatch gradients) and the chain over-disperses (on a well-conditioned logistic posterior, sd tens
    of times too large) without diverging. Use :meth:`step_unit` (what :func:`sgmc.tune_step_size`
    and the command line do): h = factor / lambda_max(G^{1/2} H G^{1/2}).
    """

    name = "psgld"
    step_note = (
        "; pSGLD's step size is on its own scale (the effective step is h / (lam + sqrt(V)), about h over "
        "the size of a per-datum gradient): use sgmc.tune_step_size(..., sampler='psgld') or "
        "PSGLD.step_unit to pick one"
    )

    def preconditioner(self, estimator, position, rng, draws: int = 32, spread=None):
        """The preconditioner 1 / (lam + sqrt(E[gbar^2])) near ``position`` (dim,), from ``draws`` estimates.

        ``spread``, a (dim, dim) covariance (the inverse Hessian at the mode), places the draws at
        ``position + N(0, spread)``, where the chain spends its time, rather than at ``position``
        itself (at the mode a control variate's noise vanishes, which would overstate G).
        """
        xp = array_namespace(position)
        x = xp.broadcast_to(xp.reshape(position, (1, -1)), (draws, position.shape[-1]))
        if spread is not None:
            chol = xp.linalg.cholesky(spread)
            x = x + rng.normal(tuple(x.shape), dtype=x.dtype) @ xp.matrix_transpose(chol)
        est_state = estimator.init(rng, x)
        g, _, _ = estimator.estimate(rng, est_state, x)
        gb = g * self._scale
        return 1.0 / (self.lam + xp.sqrt(xp.mean(gb * gb, axis=0)))

    def step_unit(self, model, curvature, position=None, estimator=None, rng=None):
        """1 / lambda_max(G^{1/2} H G^{1/2}) with G the preconditioner at ``position`` (needs ``estimator``)."""
        if estimator is None:
            msg = "PSGLD.step_unit needs the gradient estimator (the preconditioner depends on its noise)"
            raise ValueError(msg)
        if position is None:
            position = model.zeros(1)[0, ...]
        from ..backends import default_rng, get_backend

        rng = default_rng(0 if rng is None else rng, backend=get_backend(model.xp), device=model.device)
        spread = None
        if not isinstance(curvature, (int, float)):
            xp = array_namespace(curvature)
            spread = xp.linalg.inv(curvature)
            spread = 0.5 * (spread + xp.matrix_transpose(spread))
        g = self.preconditioner(estimator, position, rng, spread=spread)
        return 1.0 / _preconditioned_lambda_max(curvature, g)

    def __init__(self, alpha: float = 0.99, lam: float = 1e-5, n_data: int | None = None):
        if not (0.0 <= alpha < 1.0):
            msg = f"`alpha` must be in [0, 1); got {alpha}"
            raise ValueError(msg)
        self.alpha = float(alpha)
        self.lam = check_positive(lam, "lam")
        self.n_data = n_data
        self._scale = 1.0 / max(int(n_data or 1), 1)

    def init(self, rng, position, estimator, est_state=None):
        g, est_state, _ = self.start(rng, position, estimator, est_state)
        gb = g * self._scale
        return PSGLDState(position, g, est_state, gb * gb)

    def step(self, rng, state, estimator, step_size):
        x = state.position
        sqrt = array_namespace(x).sqrt
        gb = state.grad * self._scale
        v = self.alpha * state.second_moment + (1.0 - self.alpha) * gb * gb
        precond = 1.0 / (self.lam + sqrt(v))
        z = rng.normal(tuple(x.shape), dtype=x.dtype)
        x = langevin(x, state.grad, step_size, z, precond=precond, sqrt=sqrt)
        g, est_state, info = estimator.estimate(rng, state.est_state, x)
        return PSGLDState(x, g, est_state, v), StepInfo(info)


_NO_LOG_DENSITY = (
    "MALA needs the exact log density from its estimator, and {} does not report it; use "
    "sgmc.estimators.FullGradient(model, log_density=True)"
)


class MALAState(NamedTuple):
    position: Array
    grad: Array
    est_state: Any
    log_density: Array


# Its docstring example repeats the other samplers' set-up: each class's help runs on its own.
class MALA(SamplerBase):
    """Metropolis-adjusted Langevin algorithm: an exact reference sampler.

    Proposal y = theta + (h/2) grad log pi(theta) + sqrt(h) Z, accepted with probability
    min(1, pi(y) q(theta | y) / (pi(theta) q(y | theta))). The log density comes from the estimator's
    info, so MALA needs an exact estimator that reports it:
    ``FullGradient(model, log_density=True)`` (what :func:`sgmc.sample` builds for ``"mala"``).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.models import GaussianTarget
    >>> from sgmc.estimators import FullGradient
    >>> from sgmc.samplers import MALA
    >>> target = GaussianTarget.review_example()
    >>> exact = FullGradient(target, log_density=True)
    >>> rng = backends.default_rng(0)
    >>> state = MALA().init(rng, np.zeros((3, 2)), exact)
    >>> state, info = MALA().step(rng, state, exact, 0.5)
    >>> info.accepted.shape
    (3,)
    """

    name = "mala"
    exact = True
    needs_log_density = True

    def init(self, rng, position, estimator, est_state=None):
        g, est_state, info = self.start(rng, position, estimator, est_state)
        if info.log_density is None:
            raise TypeError(_NO_LOG_DENSITY.format(type(estimator).__name__))
        return MALAState(position, g, est_state, info.log_density)

    def step(self, rng, state, estimator, step_size):
        x, g = state.position, state.grad
        xp = array_namespace(x)
        h = step_size
        z = rng.normal(tuple(x.shape), dtype=x.dtype)
        y = langevin(x, g, h, z)
        gy, est_state, info = estimator.estimate(rng, state.est_state, y)
        logp_y = info.log_density
        if logp_y is None:
            raise TypeError(_NO_LOG_DENSITY.format(type(estimator).__name__))
        back = x - y - (0.5 * h) * gy
        log_q_back = -xp.sum(back * back, axis=-1) / (2.0 * h)
        log_q_fwd = -0.5 * xp.sum(z * z, axis=-1)
        log_ratio = logp_y - state.log_density + log_q_back - log_q_fwd
        u = rng.uniform(tuple(log_ratio.shape), dtype=x.dtype)
        accept = xp.log(u) < log_ratio
        prob = xp.exp(xp.minimum(log_ratio, xp.zeros_like(log_ratio)))
        acc2 = accept[:, None]
        new = MALAState(
            xp.where(acc2, y, x),
            xp.where(acc2, gy, g),
            est_state,
            xp.where(accept, logp_y, state.log_density),
        )
        return new, StepInfo(info, accepted=accept, accept_prob=prob)


