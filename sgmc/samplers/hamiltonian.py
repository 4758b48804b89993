"""Momentum samplers from the general SGMCMC recipe: SGHMC and SGNHT.

Both are Euler discretisations of d zeta = (1/2) b(zeta) dt + sqrt(D) dW with
b = -(D + Q) grad H + Gamma (Ma et al. 2015; review eqs. 9-11 and Table 1, with the sign of Gamma as in
eq. 10). In the review's units, with g the estimate of grad log pi:

* SGHMC (Chen et al. 2014), D = diag(0, C), Q = [[0, -I], [I, 0]]:
  rho <- rho + (h/2)(g - C rho) + N(0, h (C - (h/4) V_hat));  theta <- theta + (h/2) rho.
* SGNHT (Ding et al. 2014), thermostat xi with H containing (d/2)(xi - A)^2:
  rho <- rho + (h/2)(g - xi rho) + sqrt(h A) Z;  theta <- theta + (h/2) rho;
  xi <- xi + (h/2)(rho.rho / d - 1).

Momentum is updated before position (semi-implicit), as in the papers and the sgmcmc R package.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

from .._array_api import Array, array_namespace
from .base import Sampler

__all__ = ["SGHMC", "SGNHT", "SGHMCState", "SGNHTState"]


class SGHMCState(NamedTuple):
    position: Array
    momentum: Array
    grad: Array


class SGHMC(Sampler):
    """Stochastic gradient Hamiltonian Monte Carlo with friction C (Chen et al. 2014).

    Parameters
    ----------
    friction : float, default 1.0
        C. The sgmcmc R package's alpha is ``h C / 2``.
    n_leapfrog : int, default 5
        L inner steps per iteration, each with a fresh gradient estimate (the review's Section 6 uses 5);
        one draw is kept per iteration, so an iteration costs L gradient estimates.
    noise_estimate : float or array (dim,), optional
        V_hat, an estimate of the variance of the gradient estimator per coordinate. The injected noise
        becomes N(0, h (C - (h/4) V_hat)), which must stay positive.
    resample_momentum : bool, default True
        Draw rho ~ N(0, I) at the start of every iteration. The first kick after a refresh is a half
        step, as in leapfrog; with a full first kick (the sgmcmc R package's scheme) the position
        update carries half the noise it needs and the chain under-disperses by O(1/L).
    """

    name = "sghmc"

    def __init__(self, friction: float = 1.0, n_leapfrog: int = 5, noise_estimate: Any = None,
                 resample_momentum: bool = True):
        if not (math.isfinite(friction) and friction > 0):
            msg = f"`friction` must be positive; got {friction}"
            raise ValueError(msg)
        if isinstance(n_leapfrog, bool) or not isinstance(n_leapfrog, numbers.Integral) or n_leapfrog < 1:
            msg = f"`n_leapfrog` must be an integer of at least 1; got {n_leapfrog!r}"
            raise ValueError(msg)
        self.friction = float(friction)
        self.n_leapfrog = int(n_leapfrog)
        self.noise_estimate = float(noise_estimate) if isinstance(noise_estimate, (int, float)) else noise_estimate
        self.resample_momentum = bool(resample_momentum)
        self.grads_per_step = self.n_leapfrog

    def init(self, rng, position, grad_fn):
        g, _ = grad_fn(rng, position)
        rho = rng.normal(tuple(position.shape), dtype=position.dtype)
        return SGHMCState(position, rho, g)

    def _noise_sd(self, xp, h):
        """Standard deviation of the injected momentum noise, sqrt(h (C - (h/4) V_hat))."""
        C = self.friction
        v_hat = self.noise_estimate
        if v_hat is None:
            return math.sqrt(h * C)
        var = C - 0.25 * h * v_hat
        ok = var > 0 if isinstance(var, float) else bool(xp.all(var > 0))
        if not ok:
            msg = (
                f"SGHMC noise correction needs friction C > (h/4) V_hat; with step_size={h} and "
                f"friction={C} it is not positive: lower the step size or raise the friction"
            )
            raise ValueError(msg)
        return math.sqrt(h * var) if isinstance(var, float) else xp.sqrt(h * var)

    def step(self, rng, state, grad_fn, step_size):
        x, rho, g = state.position, state.momentum, state.grad
        xp = array_namespace(x)
        h = step_size
        sd = self._noise_sd(xp, h)
        damp = 1.0 - 0.5 * h * self.friction
        if self.resample_momentum:
            # Fresh momentum lives at an integer time; the kicks below move it to half-integer
            # times (symplectic Euler). As in leapfrog, the first kick after a refresh is a half step,
            # otherwise the position update has half the noise it needs (for L = 1 the chain targets
            # a covariance half the right size).
            rho = rng.normal(tuple(x.shape), dtype=x.dtype)
            z = rng.normal(tuple(x.shape), dtype=x.dtype)
            half_sd = sd * math.sqrt(0.5)
            rho = (1.0 - 0.25 * h * self.friction) * rho + (0.25 * h) * g + half_sd * z
            x = x + (0.5 * h) * rho
            g, _ = grad_fn(rng, x)
            remaining = self.n_leapfrog - 1
        else:
            remaining = self.n_leapfrog
        for _ in range(remaining):
            z = rng.normal(tuple(x.shape), dtype=x.dtype)
            rho = damp * rho + (0.5 * h) * g + sd * z
            x = x + (0.5 * h) * rho
            g, _ = grad_fn(rng, x)
        return SGHMCState(x, rho, g)


class SGNHTState(NamedTuple):
    position: Array
    momentum: Array
    thermostat: Array
    grad: Array


class SGNHT(Sampler):
    """Stochastic gradient Nose-Hoover thermostat (Ding et al. 2014), one thermostat per chain.

    Parameters
    ----------
    diffusion : float, default 1.0
        A, the injected noise level; the thermostat starts at A and its stationary law is N(A, 1/d).

    Notes
    -----
    The thermostat absorbs unknown gradient noise: it settles where the kinetic energy per coordinate is
    1, raising the friction when the stochastic gradient heats the system.
    """

    name = "sgnht"

    def __init__(self, diffusion: float = 1.0):
        if not (math.isfinite(diffusion) and diffusion > 0):
            msg = f"`diffusion` must be positive; got {diffusion}"
            raise ValueError(msg)
        self.diffusion = float(diffusion)

    def init(self, rng, position, grad_fn):
        xp = array_namespace(position)
        g, _ = grad_fn(rng, position)
        rho = rng.normal(tuple(position.shape), dtype=position.dtype)
        xi = xp.full((position.shape[0],), self.diffusion, dtype=position.dtype, device=_dev(position))
        return SGNHTState(position, rho, xi, g)

    def step(self, rng, state, grad_fn, step_size):
        x, rho, xi, g = state
        xp = array_namespace(x)
        h = step_size
        d = x.shape[-1]
        z = rng.normal(tuple(x.shape), dtype=x.dtype)
        rho = rho + (0.5 * h) * (g - xi[:, None] * rho) + math.sqrt(h * self.diffusion) * z
        x = x + (0.5 * h) * rho
        xi = xi + (0.5 * h) * (xp.sum(rho * rho, axis=-1) / d - 1.0)
        g, _ = grad_fn(rng, x)
        return SGNHTState(x, rho, xi, g)

    def state_stats(self, state):
        return {"thermostat": state.thermostat}


def _dev(x):
    from .._array_api import device_of

    return device_of(x)
