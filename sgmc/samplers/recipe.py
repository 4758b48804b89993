"""The general SGMCMC recipe (Ma et al. 2015; review section 3, eqs. 9-11): any D, Q give a sampler.

For a state zeta with energy H(zeta), a positive semi-definite diffusion matrix D(zeta) and a
skew-symmetric curl matrix Q(zeta), the diffusion d zeta = (1/2) b dt + sqrt(D) dW with
b = -(D + Q) grad H + Gamma, Gamma_i = sum_j d/d zeta_j (D_ij + Q_ij), leaves exp(-H) invariant. Its
Euler step, with the sign of Gamma as in eq. (10) (eq. 11 prints it with a minus), is

    zeta' = zeta + (h/2)[-(D + Q) grad H + Gamma] + sqrt(h) N(0, D).

:class:`Recipe` takes zeta = theta (H = -log pi) or, with ``momentum=True``, zeta = (theta, rho) with
H = -log pi(theta) + rho.rho / 2, and D, Q as functions of zeta or constant arrays. Gamma comes from
the user: a function, or the derivatives of D + Q (never finite differences); for constant D and Q
it is zero. With momentum the noise enters the momentum block only (every momentum row of the
review's Table 1 has D_theta,theta = 0), and ``scheme="momentum_first"`` updates the momentum block and
then the position block with the new momentum, the semi-implicit order of SGHMC.

SGLD is D = I, Q = 0; SGRLD is D = G^{-1}, Q = 0 with Gamma from the metric; SGHMC is momentum with
D = diag(0, C I), Q = [[0, -I], [I, 0]] and the momentum-first scheme. Each reproduces the dedicated
sampler's draws for the same seed (:class:`~sgmc.samplers.SGHMC` with ``n_leapfrog=1`` and
``resample_momentum=False``).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .._array_api import Array, array_namespace, device_of, is_array
from .._validation import check_choice
from .base import SamplerBase, StepInfo, _lambda_max, _preconditioned_lambda_max
from .integrators import root
from .metrics import matvec, sym_sqrt

__all__ = ["Recipe", "RecipeState"]


class RecipeState(NamedTuple):
    position: Array
    momentum: Array | None
    grad: Array
    est_state: Any


def _check_matrix(value: Any, name: str) -> Any:
    if value is None or callable(value) and not is_array(value):
        return value
    if not is_array(value) or value.ndim != 2 or value.shape[0] != value.shape[1]:
        msg = f"`{name}` must be a callable of zeta or a square array; got {type(value).__name__}"
        raise TypeError(msg)
    return value


# Its docstring example repeats the other samplers' set-up: each class's help runs on its own.
class Recipe(SamplerBase):
    """A sampler from user-supplied D(zeta) and Q(zeta) (the complete recipe of Ma et al. 2015).

    Parameters
    ----------
    D : callable or array
        Diffusion matrix: ``D(zeta)`` with ``zeta`` (chains, m) returns (chains, m, m), or a constant
        (m, m) array. Positive semi-definite. m = d, or 2 d with ``momentum=True``.
    Q : callable or array, optional
        Skew-symmetric curl matrix, same form (default 0).
    gamma : callable, optional
        ``gamma(zeta)`` -> (chains, m): Gamma_i = sum_j d/d zeta_j (D_ij + Q_ij).
    grad : callable, optional
        Instead of ``gamma``: ``grad(zeta)`` -> (chains, m, m, m) with ``[c, i, j, k]`` the derivative
        of (D + Q)_ij in zeta_k; Gamma is its trace over (j, k). One of ``gamma``/``grad`` is required
        when D or Q is a callable, unless ``constant=True`` (Gamma = 0).
    momentum : bool, default False
        zeta = (theta, rho) with a standard normal momentum; D's position rows must vanish.
    scheme : {"euler", "momentum_first"}, default "euler"
        ``"momentum_first"`` (momentum only): the semi-implicit order of SGHMC.
    constant : bool, default False
        Declare callables D, Q independent of zeta.

    Notes
    -----
    The step size is that of the review's SGLD when D ~ I; in general h multiplies D, so it is on
    D's scale.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc import backends
    >>> from sgmc.models import GaussianTarget
    >>> from sgmc.estimators import FullGradient
    >>> from sgmc.samplers import Recipe
    >>> target = GaussianTarget(np.zeros(2), np.eye(2))
    >>> skew = np.array([[0.0, 1.0], [-1.0, 0.0]])       # a non-reversible sampler
    >>> sampler = Recipe(D=np.eye(2), Q=skew)
    >>> grad = FullGradient(target)
    >>> rng = backends.default_rng(0)
    >>> state = sampler.init(rng, np.zeros((1000, 2)), grad)
    >>> for _ in range(100):
    ...     state, _ = sampler.step(rng, state, grad, 0.1)
    >>> bool(np.all(np.abs(np.cov(state.position.T) - np.eye(2)) < 0.15))
    True
    """

    name = "recipe"
    step_note = "; the recipe sampler's step multiplies D(zeta), so it is on D's scale: tune it with sgmc.tune_step_size"

    def step_unit(self, model, curvature, position=None, estimator=None, rng=None):
        """1 / lambda_max(D^{1/2} H D^{1/2}) at ``position``; with momentum, 1 / sqrt(lambda_max(H))."""
        if self.momentum:
            return 1.0 / math.sqrt(_lambda_max(curvature))
        if position is None:
            position = model.zeros(1)[0, ...]
        xp = array_namespace(position)
        d = self._mat(self.D, xp.reshape(position, (1, -1)))[0, ...]
        return 1.0 / _preconditioned_lambda_max(curvature, 0.5 * (d + xp.matrix_transpose(d)))

    def __init__(self, D: Any, Q: Any = None, *, gamma: Any = None, grad: Any = None, momentum: bool = False,
                 scheme: str = "euler", constant: bool = False):
        self.D = _check_matrix(D, "D")
        if self.D is None:
            msg = "`D` is required: a callable of zeta returning (chains, m, m) or a constant (m, m) array"
            raise ValueError(msg)
        self.Q = _check_matrix(Q, "Q")
        self.momentum = bool(momentum)
        self.scheme = check_choice(scheme, "scheme", ("euler", "momentum_first"))
        if self.scheme == "momentum_first" and not self.momentum:
            msg = "`scheme='momentum_first'` needs momentum=True (a state zeta = (theta, rho))"
            raise ValueError(msg)
        for value, name in ((gamma, "gamma"), (grad, "grad")):
            if value is not None and not callable(value):
                msg = f"`{name}` must be a callable of zeta; got {type(value).__name__}"
                raise TypeError(msg)
        varying = any(callable(v) and not is_array(v) for v in (self.D, self.Q))
        if varying and gamma is None and grad is None and not constant:
            msg = (
                "D or Q depends on zeta, so the sampler needs Gamma_i = sum_j d(D + Q)_ij / d zeta_j: pass "
                "`gamma=` (a function of zeta) or `grad=` (the derivatives of D + Q), or constant=True when "
                "they do not depend on zeta"
            )
            raise ValueError(msg)
        self.gamma = gamma
        self.grad = grad
        self.constant = not varying or bool(constant)

    # -- pieces ---------------------------------------------------------------------------------
    def _mat(self, value: Any, zeta: Array) -> Array | None:
        if value is None:
            return None
        if is_array(value):
            xp = array_namespace(zeta)
            return xp.broadcast_to(value[None, ...], (zeta.shape[0], *value.shape))
        return value(zeta)

    def _gamma(self, zeta: Array) -> Array | None:
        if self.constant:
            return None
        if self.gamma is not None:
            return self.gamma(zeta)
        xp = array_namespace(zeta)
        t = self.grad(zeta)
        eye = xp.eye(zeta.shape[-1], dtype=zeta.dtype, device=device_of(zeta))
        return xp.sum(xp.sum(t * eye[None, None, :, :], axis=-1), axis=-1)

    def _drift(self, zeta: Array, grad_h: Array) -> tuple[Array, Array]:
        """(-(D + Q) grad H + Gamma, D) at ``zeta``."""
        d = self._mat(self.D, zeta)
        q = self._mat(self.Q, zeta)
        dq = d if q is None else d + q
        b = -matvec(dq, grad_h)
        gam = self._gamma(zeta)
        return (b if gam is None else b + gam), d

    # -- contract -------------------------------------------------------------------------------
    def init(self, rng, position, estimator, est_state=None):
        g, est_state, _ = self.start(rng, position, estimator, est_state)
        rho = rng.normal(tuple(position.shape), dtype=position.dtype) if self.momentum else None
        return RecipeState(position, rho, g, est_state)

    def step(self, rng, state, estimator, step_size):
        x, rho, g = state.position, state.momentum, state.grad
        xp = array_namespace(x)
        h = step_size
        sh = root(h)
        z = rng.normal(tuple(x.shape), dtype=x.dtype)
        if not self.momentum:
            b, dmat = self._drift(x, -g)
            x = x + (0.5 * h) * b + sh * matvec(sym_sqrt(xp, dmat), z)
        else:
            k = x.shape[-1]
            zeta = xp.concat([x, rho], axis=-1)
            b, dmat = self._drift(zeta, xp.concat([-g, rho], axis=-1))
            noise = sh * matvec(sym_sqrt(xp, dmat[:, k:, k:]), z)
            rho_new = rho + (0.5 * h) * b[:, k:] + noise
            if self.scheme == "momentum_first":
                b, _ = self._drift(xp.concat([x, rho_new], axis=-1), xp.concat([-g, rho_new], axis=-1))
            x = x + (0.5 * h) * b[:, :k]
            rho = rho_new
        g, es, info = estimator.estimate(rng, state.est_state, x)
        return RecipeState(x, rho, g, es), StepInfo(info)
