"""Langevin samplers: SGLD, ULA, preconditioned SGLD and MALA.

All discretise the Langevin diffusion d theta = (1/2) grad log pi dt + dW (review eq. 2). SGLD
(Welling and Teh 2011; review Algorithm 1) uses a stochastic gradient; ULA is the same step with the
exact gradient; MALA adds a Metropolis-Hastings correction and is exact. pSGLD (Li et al. 2016)
preconditions with an RMSprop estimate of the gradient's scale.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .._array_api import Array
from .base import Sampler

__all__ = ["SGLD", "ULA", "PSGLD", "MALA", "LangevinState", "PSGLDState", "MALAState"]


class LangevinState(NamedTuple):
    """Position ``(chains, dim)`` and the gradient estimate there."""

    position: Array
    grad: Array


class SGLD(Sampler):
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
    >>> state = sgld.step(rng, state, grad, 0.1)
    >>> state.position.shape
    (4, 2)
    """

    name = "sgld"

    def init(self, rng, position, grad_fn):
        g, _ = grad_fn(rng, position)
        return LangevinState(position, g)

    def step(self, rng, state, grad_fn, step_size):
        x = state.position
        noise = rng.normal(tuple(x.shape), dtype=x.dtype)
        x = x + (0.5 * step_size) * state.grad + math.sqrt(step_size) * noise
        g, _ = grad_fn(rng, x)
        return LangevinState(x, g)


class ULA(SGLD):
    """Unadjusted Langevin algorithm: SGLD with the exact full-data gradient (biased by O(h))."""

    name = "ula"
    requires_exact_gradient = True


class PSGLDState(NamedTuple):
    position: Array
    grad: Array
    second_moment: Array


class PSGLD(Sampler):
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
    """

    name = "psgld"

    def __init__(self, alpha: float = 0.99, lam: float = 1e-5, n_data: int | None = None):
        if not (0.0 <= alpha < 1.0):
            msg = f"`alpha` must be in [0, 1); got {alpha}"
            raise ValueError(msg)
        if not (lam > 0):
            msg = f"`lam` must be positive; got {lam}"
            raise ValueError(msg)
        self.alpha = float(alpha)
        self.lam = float(lam)
        self.n_data = n_data

    def _scale(self) -> float:
        return 1.0 / max(int(self.n_data or 1), 1)

    def init(self, rng, position, grad_fn):
        g, _ = grad_fn(rng, position)
        gb = g * self._scale()
        return PSGLDState(position, g, gb * gb)

    def step(self, rng, state, grad_fn, step_size):
        xp_sqrt = _sqrt_of(state.position)
        gb = state.grad * self._scale()
        v = self.alpha * state.second_moment + (1.0 - self.alpha) * gb * gb
        precond = 1.0 / (self.lam + xp_sqrt(v))
        x = state.position
        noise = rng.normal(tuple(x.shape), dtype=x.dtype)
        x = x + (0.5 * step_size) * precond * state.grad + xp_sqrt(step_size * precond) * noise
        g, _ = grad_fn(rng, x)
        return PSGLDState(x, g, v)


def _sqrt_of(x: Array):
    from .._array_api import array_namespace

    return array_namespace(x).sqrt


class MALAState(NamedTuple):
    position: Array
    grad: Array
    log_density: Array
    n_accepted: Array


class MALA(Sampler):
    """Metropolis-adjusted Langevin algorithm: an exact reference sampler.

    Proposal y = theta + (h/2) grad log pi(theta) + sqrt(h) Z, accepted with probability
    min(1, pi(y) q(theta | y) / (pi(theta) q(y | theta))). Needs the model's full log posterior.

    Parameters
    ----------
    model : Model
    """

    name = "mala"
    requires_exact_gradient = True

    def __init__(self, model: Any):
        if not (hasattr(model, "log_posterior") and hasattr(model, "xp")):
            msg = f"`model` for MALA must be an sgmc model with a full log posterior; got {type(model).__name__}"
            raise TypeError(msg)
        self.model = model

    def init(self, rng, position, grad_fn):
        xp = self.model.xp
        g, _ = grad_fn(rng, position)
        logp = self.model.log_posterior(position)
        return MALAState(position, g, logp, xp.zeros(logp.shape, dtype=xp.int64, device=self.model.device))

    def step(self, rng, state, grad_fn, step_size):
        xp = self.model.xp
        x, g = state.position, state.grad
        h = step_size
        z = rng.normal(tuple(x.shape), dtype=x.dtype)
        y = x + (0.5 * h) * g + math.sqrt(h) * z
        gy, _ = grad_fn(rng, y)
        logp_y = self.model.log_posterior(y)
        back = x - y - (0.5 * h) * gy
        log_q_back = -xp.sum(back * back, axis=-1) / (2.0 * h)
        log_q_fwd = -0.5 * xp.sum(z * z, axis=-1)
        log_ratio = logp_y - state.log_density + log_q_back - log_q_fwd
        u = rng.uniform(tuple(log_ratio.shape), dtype=x.dtype)
        accept = xp.log(u) < log_ratio
        acc2 = accept[:, None]
        return MALAState(
            xp.where(acc2, y, x),
            xp.where(acc2, gy, g),
            xp.where(accept, logp_y, state.log_density),
            state.n_accepted + xp.astype(accept, xp.int64),
        )

    def state_stats(self, state):
        return {"n_accepted": state.n_accepted}
