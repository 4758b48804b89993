"""The default ladder of step sizes for a model and a sampler, from its curvature or step unit.

:func:`default_grid` is the grid of :func:`sgmc.tuning.tune_step_size` when none is given, and its
geometric middle is where ``step_size="auto"`` (:mod:`sgmc.adapt`) starts. Both need the same scale:
SGLD's steps are stable below 4 / lambda_max (review section 2.5), so the grid is laid out in units
of 1 / M for a curvature bound M, in the sampler's own step unit for the samplers that define one,
and in the step unit of a state space model (:func:`sgmc.ssm.stepsize.step_unit`).
"""

from __future__ import annotations

from typing import Any

from . import backends
from .estimators import SupportsPrepare, make_estimator
from .models.base import IIDData, provides
from .optimize import curvature_bound, negative_hessian
from .samplers import PSGLD, SamplerBase, make_sampler
from .ssm.base import StateSpaceModel
from .ssm.stepsize import step_unit as ssm_step_unit

__all__ = ["default_grid", "StepSizeEdgeWarning"]


class StepSizeEdgeWarning(UserWarning):
    """A step size chosen at the edge of the steps tried: a better one may lie beyond it.

    :func:`sgmc.tuning.tune_step_size` warns with it when its choice is still the smallest or the
    largest step after extending the grid, and ``step_size="auto"`` when the burn-in ended before its
    ladder bracketed the choice.
    """


def default_grid(model: Any, sampler: Any = None, *, estimator: Any = None, position: Any = None,
                 rng: Any = None) -> list[float]:
    """The grid :func:`tune_step_size` uses when none is given.

    For a sampler whose step size is on its own scale (pSGLD, SGRLD, SGRHMC, the recipe sampler, the
    momentum samplers: those that define ``step_unit``), eleven half-decades from 1e-4 to 10 times its
    unit ``sampler.step_unit(model, H, position, estimator)``, with H the negative Hessian of log pi at
    ``position`` (exact per-datum Hessians where the model has them) or the curvature bound M.
    Otherwise (SGLD, ULA, MALA, and every sampler when ``sampler`` is None) as follows.

    With a curvature bound M from the model (``lipschitz_constant()``, or the sum of the per-datum
    ``lipschitz()`` constants plus ``prior_lipschitz()``), eleven half-decade steps from 1e-4 / M to
    10 / M. SGLD with exact gradients is stable for h < 4 / lambda_max (review section 2.5); M is exact
    for Gaussian targets, where the top point diverges (cheaply: the run stops at the first
    divergence check) and 10^0.5 / M is the largest stable one, but summed per-datum bounds
    overestimate lambda_max by up to a factor of the dimension, so the grid reaches past 4 / M. The
    bottom explores 10^4 times more slowly than 1 / M. For a state space model
    (:class:`sgmc.ssm.StateSpaceModel`), nine half-decades from 1e-3 to 10 times its step unit
    :func:`sgmc.ssm.stepsize.step_unit` at ``position`` (about ``1 / (T lambda_max(I_1))``, with ``I_1``
    the Fisher information per time step). Without a bound, the decades 1e-8, ..., 1e-1.

    Examples
    --------
    >>> from sgmc.models import GaussianTarget
    >>> from sgmc.tuning import default_grid
    >>> [float(f"{h:.3g}") for h in default_grid(GaussianTarget.review_example())][::2]   # M = 1
    [0.0001, 0.001, 0.01, 0.1, 1.0, 10.0]
    """
    bounded = provides(model, "lipschitz_constant") or provides(model, "lipschitz")
    smp = None
    if sampler is not None:
        smp = make_sampler(sampler, model)
        if not isinstance(smp, SamplerBase) or type(smp).step_unit is SamplerBase.step_unit:
            smp = None
    if smp is not None:
        xp = model.xp
        if position is None:
            position = model.zeros(1)[0, ...]
        if provides(model, "hess_log_lik") and isinstance(model, IIDData) and model.n_data > 0:
            curvature = negative_hessian(model, xp.reshape(position, (-1,)))
        elif bounded:
            curvature = curvature_bound(model)
        else:
            curvature = None
        if curvature is not None:
            unit = float(smp.step_unit(model, curvature, position, estimator, rng))
            return [10.0 ** (k / 2.0) * unit for k in range(-8, 3)]
    if smp is None and isinstance(model, StateSpaceModel):  # no per-datum bound: its step unit
        unit = ssm_step_unit(model, position, rng)
        return [10.0 ** (k / 2.0) * unit for k in range(-6, 3)]
    if not bounded:
        return [10.0**k for k in range(-8, 0)]
    m = curvature_bound(model)
    return [10.0 ** (k / 2.0) / m for k in range(-8, 3)]


def _sampler_grid(model, sampler, estimator, batch_size, init, rng, sampler_options, estimator_options):
    """:func:`default_grid` for the sampler and estimator of a tuning run, at the first chain's start."""

    smp = make_sampler(sampler, model, **(sampler_options or {}))
    est = None
    position = None
    if init is not None:
        xp = model.xp
        position = xp.reshape(backends.asarray(init, backend=backends.get_backend(xp), dtype=model.dtype,
                                               device=model.device), (-1, model.dim))[0, ...]
    if isinstance(smp, PSGLD):
        est = make_estimator(estimator, model, batch_size, **(estimator_options or {}))
        start = model.zeros(1) if position is None else model.xp.reshape(position, (1, -1))
        if isinstance(est, SupportsPrepare):
            est = est.prepare(rng, start).estimator
    return default_grid(model, smp, estimator=est, position=position, rng=rng)
