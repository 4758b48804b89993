"""The updates that the samplers share: Euler-Maruyama for Langevin dynamics, kicks and drifts for
momentum dynamics.

In the review's units (Nemeth and Fearnhead 2021, eqs. 3 and 9-11), with g the estimate of
grad log pi, a step of size h is

* Langevin (SGLD, ULA, MALA's proposal, pSGLD with a diagonal preconditioner P):
  theta' = theta + (h/2) P g + sqrt(h P) z;
* a momentum kick with friction F (SGHMC: the constant C; SGNHT: the thermostat xi):
  rho' = (1 - (h/2) F) rho + (h/2) g + s z, with s the injected noise's standard deviation;
* a drift: theta' = theta + (h/2) rho.

Each takes the standard normal draws ``z`` as an argument, so the functions are deterministic and
the samplers decide how many draws a step uses.
"""

from __future__ import annotations

import math
from typing import Any

from .._array_api import Array, array_namespace, device_of

__all__ = ["langevin", "kick", "drift", "thermostat_start", "root", "expo"]


def root(h: Any) -> Any:
    """sqrt(h) of a step size: :func:`math.sqrt` of a number, ``h ** 0.5`` of a traced JAX value."""
    return math.sqrt(h) if isinstance(h, (int, float)) else h ** 0.5


def expo(t: Any) -> Any:
    """exp(t) of a scalar: :func:`math.exp` of a number, the array's own of a traced JAX value."""
    if isinstance(t, (int, float)):
        return math.exp(t)
    return array_namespace(t).exp(t)


def langevin(x: Array, g: Array, h: float, z: Array, precond: Any = None, sqrt: Any = None) -> Array:
    """Euler-Maruyama step theta + (h/2) P g + sqrt(h P) z (P = I when ``precond`` is None).

    With a preconditioner, ``sqrt`` is the namespace's square root (elementwise on ``h P``).
    """
    if precond is None:
        return x + (0.5 * h) * g + root(h) * z
    return x + (0.5 * h) * precond * g + sqrt(h * precond) * z


def kick(rho: Array, g: Array, h: float, friction: Any, noise_sd: Any, z: Array) -> Array:
    """Momentum update (1 - (h/2) F) rho + (h/2) g + s z; ``friction`` may be a per-chain column."""
    return (1.0 - 0.5 * h * friction) * rho + (0.5 * h) * g + noise_sd * z


def drift(x: Array, rho: Array, h: float) -> Array:
    """Position update theta + (h/2) rho."""
    return x + (0.5 * h) * rho


def thermostat_start(sampler: Any, rng: Any, position: Array, estimator: Any, est_state: Any,
                     diffusion: float) -> tuple:
    """The start of a Nose-Hoover thermostat sampler (SGNHT, BADODAB): the first gradient estimate,
    momenta drawn N(0, I) and one thermostat per chain at ``diffusion``.

    Returns ``(rho, xi, grad, est_state)``.
    """
    xp = array_namespace(position)
    g, est_state, _ = sampler.start(rng, position, estimator, est_state)
    rho = rng.normal(tuple(position.shape), dtype=position.dtype)
    xi = xp.full((position.shape[0],), diffusion, dtype=position.dtype, device=device_of(position))
    return rho, xi, g, est_state
