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
from typing import Any, NamedTuple

from .._array_api import Array, array_namespace, device_of
from .._flow import on_host
from .._keys import tracing
from .._validation import check_int, check_positive
from .base import SamplerBase, StepInfo, _lambda_max, add_costs, noise_estimate_of
from .integrators import drift, kick, root, thermostat_start
from .metrics import sym_sqrt

__all__ = ["SGHMC", "SGNHT", "SGHMCState", "SGNHTState", "NoiseCorrectionError"]


class NoiseCorrectionError(ValueError):
    """A gradient-noise correction that cannot be applied at this step size (the corrected noise
    covariance is not positive semi-definite); :func:`sgmc.tune_step_size` treats it like divergence."""


class SGHMCState(NamedTuple):
    position: Array
    momentum: Array
    grad: Array
    est_state: Any


class SGHMC(SamplerBase):
    """Stochastic gradient Hamiltonian Monte Carlo with friction C (Chen et al. 2014).

    Parameters
    ----------
    friction : float, default 1.0
        C. The sgmcmc R package's alpha is ``h C / 2``.
    n_leapfrog : int, default 5
        L inner steps per iteration, each with a fresh gradient estimate (the review's Section 6 uses 5);
        one draw is kept per iteration, so an iteration costs L gradient estimates.
    noise_estimate : float, array (dim,) or "minibatch", optional
        V_hat, an estimate of the variance of the gradient estimator per coordinate. The injected noise
        becomes N(0, h (C - (h/4) V_hat)), which must stay positive (C >= (h/4) V_hat, the review's
        Table 1 condition C >= h V with V the variance of half the gradient error). ``"minibatch"``
        reads V_hat at every kick from the estimator state (``est_state.v_hat`` of
        :class:`~sgmc.estimators.MinibatchNoise`, per coordinate or a full covariance), registered as
        ``"sghmc_corrected"``.
    resample_momentum : bool, default True
        Draw rho ~ N(0, I) at the start of every iteration. The first kick after a refresh is a half
        step, as in leapfrog; with a full first kick (the sgmcmc R package's scheme) the position
        update carries half the noise it needs and the chain under-disperses by O(1/L).
    """

    name = "sghmc"

    def step_unit(self, model, curvature, position=None, estimator=None, rng=None):
        """1 / sqrt(lambda_max): the momentum samplers' leapfrog-like steps scale with the square root."""
        return 1.0 / math.sqrt(_lambda_max(curvature))

    def __init__(self, friction: float = 1.0, n_leapfrog: int = 5, noise_estimate: Any = None,
                 resample_momentum: bool = True):
        self.friction = check_positive(friction, "friction")
        try:
            self.n_leapfrog = check_int(n_leapfrog, "n_leapfrog")
        except (TypeError, ValueError):
            msg = f"`n_leapfrog` must be an integer of at least 1; got {n_leapfrog!r}"
            raise ValueError(msg) from None
        if isinstance(noise_estimate, str) and noise_estimate != "minibatch":
            msg = f"`noise_estimate` must be a number, an array or 'minibatch'; got {noise_estimate!r}"
            raise ValueError(msg)
        self.noise_estimate = float(noise_estimate) if isinstance(noise_estimate, (int, float)) else noise_estimate
        self.resample_momentum = bool(resample_momentum)

    def init(self, rng, position, estimator, est_state=None):
        g, est_state, _ = self.start(rng, position, estimator, est_state)
        rho = rng.normal(tuple(position.shape), dtype=position.dtype)
        return SGHMCState(position, rho, g, est_state)

    @property
    def step_note(self) -> str:
        if self.noise_estimate is None or isinstance(self.noise_estimate, float):
            return ""
        return ("; on arrays other than NumPy's, a chain whose corrected momentum noise C - (h/4) V_hat is not "
                "positive semi-definite stops there (its position becomes NaN) and is reported at the next check: "
                "lower the step size or raise the friction")

    def _noise_sd(self, xp, h, es=None):
        """Standard deviation of the injected momentum noise, sqrt(h (C - (h/4) V_hat)).

        With ``noise_estimate="minibatch"`` V_hat comes from the estimator state ``es``; a full
        covariance (chains, d, d) gives a (chains, d, d) matrix square root. NumPy arrays are
        checked here (``NoiseCorrectionError``); see :meth:`_noise`.
        """
        return self._noise(xp, h, es)[0]

    def _noise(self, xp, h, es=None):
        """``(sd, bad)``: the noise scale, and on arrays other than NumPy's the chains whose correction failed.

        On NumPy ``bad`` is None and a failed correction raises at once. Elsewhere asking the device
        would synchronise every step, so the scale is clipped at zero, ``bad`` (chains,) marks the
        chains concerned, and the step sets their positions to NaN for the runner's next check.
        """
        C = self.friction
        v_hat = self.noise_estimate
        if isinstance(v_hat, str):
            v_hat = noise_estimate_of(es, "SGHMC(noise_estimate='minibatch')")
            if v_hat.ndim == 3:
                d = v_hat.shape[-1]
                eye = xp.eye(d, dtype=v_hat.dtype, device=device_of(v_hat))
                cov = C * eye[None, :, :] - 0.25 * h * v_hat
                if not on_host(xp):
                    bad = xp.min(xp.linalg.eigvalsh(cov), axis=-1) < -1e-12 * C
                    return root(h) * sym_sqrt(xp, cov), bad
                if not float(xp.min(xp.linalg.eigvalsh(cov))) >= -1e-12 * C:
                    msg = (
                        f"SGHMC noise correction needs friction C I >= (h/4) V_hat; with step_size={h} and "
                        f"friction={C} it is not positive semi-definite: lower the step size or raise the friction"
                    )
                    raise NoiseCorrectionError(msg)
                return root(h) * sym_sqrt(xp, cov), None
        if v_hat is None:
            return root(h * C), None
        var = C - 0.25 * h * v_hat
        # an estimate from the minibatch off NumPy, or any value traced by JAX: checked on the device;
        # a fixed V_hat the user gave is checked here, at once (the check depends on h alone)
        deferred = tracing(var) or (isinstance(self.noise_estimate, str) and not on_host(xp))
        if not isinstance(var, float) and deferred:
            bad = xp.any(var < 0, axis=-1) if var.ndim else var < 0
            return xp.sqrt(h * xp.clip(var, min=0.0)), bad
        ok = var > 0 if isinstance(var, float) else bool(xp.all(var >= 0))
        if not ok:
            msg = (
                f"SGHMC noise correction needs friction C > (h/4) V_hat; with step_size={h} and "
                f"friction={C} it is not positive: lower the step size or raise the friction"
            )
            raise NoiseCorrectionError(msg)
        return (root(h * var) if isinstance(var, float) else xp.sqrt(h * var)), None

    def step(self, rng, state, estimator, step_size):
        x, rho, g, es = state.position, state.momentum, state.grad, state.est_state
        xp = array_namespace(x)
        h = step_size
        C = self.friction
        per_kick = isinstance(self.noise_estimate, str)
        sd, bad = (None, None) if per_kick else self._noise(xp, h)
        shape = tuple(x.shape)
        cost = None
        remaining = self.n_leapfrog
        if self.resample_momentum:
            # Fresh momentum lives at an integer time; the kicks below move it to half-integer
            # times (symplectic Euler). As in leapfrog, the first kick after a refresh is a half
            # step, otherwise the position update has half the noise it needs (for L = 1 the chain
            # targets a covariance half the right size).
            rho = rng.normal(shape, dtype=x.dtype)
            z = rng.normal(shape, dtype=x.dtype)
            if per_kick:
                sd, bad = _either(bad, *self._noise(xp, h, es))
            rho = kick(rho, g, 0.5 * h, C, _scaled(sd, math.sqrt(0.5)), _mat(sd, z))
            x = drift(x, rho, h)
            g, es, cost = estimator.estimate(rng, es, x)
            remaining -= 1
        for _ in range(remaining):
            z = rng.normal(shape, dtype=x.dtype)
            if per_kick:
                sd, bad = _either(bad, *self._noise(xp, h, es))
            rho = kick(rho, g, h, C, _scaled(sd, 1.0), _mat(sd, z))
            x = drift(x, rho, h)
            g, es, info = estimator.estimate(rng, es, x)
            cost = info if cost is None else add_costs(cost, info)
        if bad is not None:  # a failed noise correction off NumPy: the runner's next check reports it
            x = xp.where(xp.reshape(bad, (-1, 1)), xp.nan, x)
        return SGHMCState(x, rho, g, es), StepInfo(cost)


def _either(bad: Any, sd: Any, new: Any) -> tuple:
    """The kick's noise scale, and the chains whose correction failed in any kick so far."""
    if new is None:
        return sd, bad
    return sd, new if bad is None else (bad | new)


def _scaled(sd: Any, factor: float) -> Any:
    """The noise scale for :func:`kick`: ``sd * factor``, or ``factor`` when ``sd`` is a matrix (applied to z)."""
    if getattr(sd, "ndim", 0) == 3:
        return factor
    return sd * factor


def _mat(sd: Any, z: Array) -> Array:
    """``z``, or ``sd @ z`` per chain when the noise scale is a (chains, d, d) matrix."""
    if getattr(sd, "ndim", 0) == 3:
        return (sd @ z[..., None])[..., 0]
    return z


# The fields of BADODABState, a type of its own: an SGNHT state is told apart from a BADODAB one.
class SGNHTState(NamedTuple):
    position: Array
    momentum: Array
    thermostat: Array
    grad: Array
    est_state: Any


class SGNHT(SamplerBase):
    """Stochastic gradient Nose-Hoover thermostat (Ding et al. 2014), one thermostat per chain.

    Parameters
    ----------
    diffusion : float, default 1.0
        A, the injected noise level; the thermostat starts at A and its stationary law is N(A, 1/d).

    Notes
    -----
    The thermostat absorbs unknown gradient noise: it settles where the kinetic energy per coordinate is
    1, raising the friction when the stochastic gradient heats the system. Each step reports it in
    ``StepInfo.extras["thermostat"]``.
    """

    name = "sgnht"

    def step_unit(self, model, curvature, position=None, estimator=None, rng=None):
        """1 / sqrt(lambda_max): the momentum samplers' leapfrog-like steps scale with the square root."""
        return 1.0 / math.sqrt(_lambda_max(curvature))

    def __init__(self, diffusion: float = 1.0):
        self.diffusion = check_positive(diffusion, "diffusion")

    def init(self, rng, position, estimator, est_state=None):
        rho, xi, g, est_state = thermostat_start(self, rng, position, estimator, est_state, self.diffusion)
        return SGNHTState(position, rho, xi, g, est_state)

    def step(self, rng, state, estimator, step_size):
        x, rho, xi, g, es = state
        xp = array_namespace(x)
        h = step_size
        d = x.shape[-1]
        z = rng.normal(tuple(x.shape), dtype=x.dtype)
        rho = kick(rho, g, h, xi[:, None], root(h * self.diffusion), z)
        x = drift(x, rho, h)
        xi = xi + (0.5 * h) * (xp.sum(rho * rho, axis=-1) / d - 1.0)
        g, es, info = estimator.estimate(rng, es, x)
        return SGNHTState(x, rho, xi, g, es), StepInfo(info, extras={"thermostat": xi})
