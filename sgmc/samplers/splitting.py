"""Splitting integrators for underdamped Langevin dynamics: BAOAB and BADODAB.

Both split the momentum dynamics into pieces that are each solved exactly and compose them
symmetrically (Strang splitting), with one gradient estimate per step:

* BAOAB (Leimkuhler and Matthews 2013, "Rational construction of stochastic numerical methods for
  molecular sampling", AMRX, eq. 7 and section 4): B is a half kick by the force, A a half drift, O the
  exact Ornstein-Uhlenbeck solve of the friction and noise. For a Gaussian target its position marginal
  is exact at every stable step size (their section 4.1, the harmonic oscillator): the configurational
  bias is zero there and O(dt^2) in general.
* BADODAB (Leimkuhler and Shang 2016, "Adaptive thermostats for noisy gradient systems", SIAM J. Sci.
  Comput. 38(2), section 4, eq. 4.1): the adaptive Langevin (Ad-Langevin) thermostat, whose friction xi
  is itself a variable (D: a half step of xi) that settles where the kinetic energy per coordinate is
  1, so that unknown gradient noise is absorbed as extra friction.

Step size. With the review's h (SGLD is theta' = theta + (h/2) g + N(0, h I), see :mod:`.base`) the
momentum samplers integrate, in time dt = h/2,
d theta = rho dt, d rho = g dt - F rho dt + sqrt(2 F) dW, with unit mass and unit temperature
(SGHMC's kick adds noise of variance h C = 2 C dt). The papers' step (h in both) is dt = h/2; their
gamma (BAOAB's friction) is ``friction`` (SGHMC's C); BADODAB's sigma_A is sqrt(2 A) with A the
``diffusion`` (SGNHT's A), its mu is ``thermostat_mass`` and N_d k_B T is d. A gradient estimate with
error covariance V per coordinate acts as force noise of strength sigma_F^2 = dt V = (h/2) V, so
BADODAB's thermostat settles near A + (h/4) V (the friction that SGHMC's noise correction
C - (h/4) V_hat would need).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .._array_api import Array, array_namespace
from .._validation import check_positive
from .base import SamplerBase, StepInfo, _lambda_max
from .integrators import expo, root, thermostat_start

__all__ = ["BAOAB", "BADODAB", "BAOABState", "BADODABState"]

#: Below this |xi dt| the O step of BADODAB uses the series (1 - exp(-2 xi dt)) / xi = 2 dt (1 - xi dt).
_SMALL_XI_DT = 1e-6


class BAOABState(NamedTuple):
    """Position and momentum ``(chains, dim)``; ``grad``, the gradient estimate at ``position``, is the
    force of the next step's first half kick (B), so a step makes one gradient estimate."""

    position: Array
    momentum: Array
    grad: Array
    est_state: Any


class _Splitting(SamplerBase):
    """What the splitting samplers share: momentum starts N(0, I) and steps scale like 1/sqrt(lambda)."""

    def step_unit(self, model, curvature, position=None, estimator=None, rng=None):
        """1 / sqrt(lambda_max): stable for h < 4 / sqrt(lambda_max) on a Gaussian (dt = h/2 < 2 / omega)."""
        return 1.0 / math.sqrt(_lambda_max(curvature))


# Its docstring example repeats the other samplers' set-up: each class's help runs on its own.
class BAOAB(_Splitting):
    """BAOAB splitting of underdamped Langevin dynamics (Leimkuhler and Matthews 2013).

    One step of size h (dt = h/2, see the module docstring), with g the gradient estimate of log pi:

    * B: rho <- rho + (dt/2) g(theta)
    * A: theta <- theta + (dt/2) rho
    * O: rho <- c rho + sqrt(1 - c^2) Z, with c = exp(-friction dt)
    * A: theta <- theta + (dt/2) rho
    * B: rho <- rho + (dt/2) g(theta), with the one new estimate, which the next step's first B reuses.

    Parameters
    ----------
    friction : float, default 1.0
        gamma, the friction of the Langevin dynamics (SGHMC's C).

    Notes
    -----
    With exact gradients of a Gaussian target the stationary law of the position is the target's at
    any stable step (dt < 2 / omega for every eigenfrequency omega); the momentum after the last kick
    has variance 1 - dt^2 omega^2 / 4 along each eigenvector, not 1. A stochastic gradient heats the
    dynamics as in SGHMC without a noise estimate; :class:`BADODAB` absorbs that heat.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.models import GaussianTarget
    >>> from sgmc.estimators import FullGradient
    >>> from sgmc.samplers import BAOAB
    >>> target = GaussianTarget.review_example()
    >>> grad, rng, baoab = FullGradient(target), backends.default_rng(0), BAOAB(friction=2.0)
    >>> state = baoab.init(rng, np.zeros((4, 2)), grad)
    >>> state, info = baoab.step(rng, state, grad, 0.5)
    >>> state.momentum.shape, int(info.estimate.n_evals)
    ((4, 2), 0)
    """

    name = "baoab"

    def __init__(self, friction: float = 1.0):
        self.friction = check_positive(friction, "friction")

    def init(self, rng, position, estimator, est_state=None):
        g, est_state, _ = self.start(rng, position, estimator, est_state)
        rho = rng.normal(tuple(position.shape), dtype=position.dtype)
        return BAOABState(position, rho, g, est_state)

    def step(self, rng, state, estimator, step_size):
        x, rho, g, es = state
        dt = 0.5 * step_size
        c = expo(-self.friction * dt)
        z = rng.normal(tuple(x.shape), dtype=x.dtype)
        rho = rho + (0.5 * dt) * g
        x = x + (0.5 * dt) * rho
        rho = c * rho + root(1.0 - c * c) * z
        x = x + (0.5 * dt) * rho
        g, es, info = estimator.estimate(rng, es, x)
        rho = rho + (0.5 * dt) * g
        return BAOABState(x, rho, g, es), StepInfo(info)


# The fields of SGNHTState, a type of its own: a BADODAB state is told apart from an SGNHT one.
class BADODABState(NamedTuple):
    """As :class:`BAOABState`, with the per-chain thermostat ``(chains,)``."""

    position: Array
    momentum: Array
    thermostat: Array
    grad: Array
    est_state: Any


# Its docstring example repeats the other samplers' set-up: each class's help runs on its own.
class BADODAB(_Splitting):
    """BADODAB: the adaptive Langevin thermostat for noisy gradients (Leimkuhler and Shang 2016).

    One step of size h (dt = h/2), with A the ``diffusion``, mu the ``thermostat_mass`` and d the
    dimension; each chain has its own thermostat xi:

    * B: rho <- rho + (dt/2) g(theta)
    * A: theta <- theta + (dt/2) rho
    * D: xi <- xi + (dt/2) (rho.rho - d) / mu
    * O: rho <- exp(-xi dt) rho + sqrt(A (1 - exp(-2 xi dt)) / xi) Z (at xi = 0: sqrt(2 A dt) Z)
    * D: xi <- xi + (dt/2) (rho.rho - d) / mu
    * A: theta <- theta + (dt/2) rho
    * B: rho <- rho + (dt/2) g(theta), with the one new estimate, which the next step reuses.

    Parameters
    ----------
    diffusion : float, default 1.0
        A, the injected noise (sigma_A = sqrt(2 A)); the thermostat starts at A, its stationary mean with
        exact gradients.
    thermostat_mass : float, optional
        mu. The default, the dimension d, makes the thermostat's law N(A + (h/4) V, 1/d) and its
        equation SGNHT's, d xi = (rho.rho / d - 1) dt.

    Notes
    -----
    Each step reports the thermostat after the step in ``StepInfo.extras["thermostat"]``.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.models import GaussianTarget
    >>> from sgmc.estimators import NoisyGradient
    >>> from sgmc.samplers import BADODAB
    >>> target = GaussianTarget.review_example()
    >>> grad, rng, badodab = NoisyGradient(target, noise_sd=1.0), backends.default_rng(0), BADODAB()
    >>> state = badodab.init(rng, np.zeros((4, 2)), grad)
    >>> state, info = badodab.step(rng, state, grad, 0.5)
    >>> info.extras["thermostat"].shape
    (4,)
    """

    name = "badodab"

    def __init__(self, diffusion: float = 1.0, thermostat_mass: float | None = None):
        self.diffusion = check_positive(diffusion, "diffusion")
        self.thermostat_mass = None if thermostat_mass is None else check_positive(thermostat_mass, "thermostat_mass")

    def init(self, rng, position, estimator, est_state=None):
        rho, xi, g, est_state = thermostat_start(self, rng, position, estimator, est_state, self.diffusion)
        return BADODABState(position, rho, xi, g, est_state)

    def step(self, rng, state, estimator, step_size):
        x, rho, xi, g, es = state
        xp = array_namespace(x)
        d = x.shape[-1]
        mu = float(d) if self.thermostat_mass is None else self.thermostat_mass
        dt = 0.5 * step_size
        z = rng.normal(tuple(x.shape), dtype=x.dtype)
        rho = rho + (0.5 * dt) * g
        x = x + (0.5 * dt) * rho
        xi = xi + (0.5 * dt / mu) * (xp.sum(rho * rho, axis=-1) - d)
        rho = _ou(xp, rho, xi, dt, self.diffusion, z)
        xi = xi + (0.5 * dt / mu) * (xp.sum(rho * rho, axis=-1) - d)
        x = x + (0.5 * dt) * rho
        g, es, info = estimator.estimate(rng, es, x)
        rho = rho + (0.5 * dt) * g
        return BADODABState(x, rho, xi, g, es), StepInfo(info, extras={"thermostat": xi})


def _ou(xp: Any, rho: Array, xi: Array, dt: float, diffusion: float, z: Array) -> Array:
    """Exact solve over dt of d rho = -xi rho dt + sqrt(2 A) dW, per chain: mean exp(-xi dt) rho,
    variance A (1 - exp(-2 xi dt)) / xi (2 A dt at xi = 0, where the series takes over)."""
    xd = xi * dt
    small = xp.abs(xd) < _SMALL_XI_DT
    safe = xp.where(small, xp.ones_like(xi), xi)
    var = xp.where(small, (2.0 * dt) * (1.0 - xd), -xp.expm1(-2.0 * xd) / safe) * diffusion
    return xp.exp(-xd)[:, None] * rho + xp.sqrt(var)[:, None] * z
