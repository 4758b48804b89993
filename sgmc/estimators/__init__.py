"""Gradient estimators for stochastic gradient MCMC.

Every estimator follows one contract (:class:`GradientEstimator`): ``init(rng, position) ->
est_state`` and ``estimate(rng, est_state, position) -> (grad, est_state, EstimateInfo)``, with no
state on the estimator object. Names accepted by :func:`sgmc.sample`: ``"full"``, ``"minibatch"``,
``"cv"``, ``"svrg"``, the preferential and adaptive estimators of Putcha et al. (2023) ``"ps"``,
``"cv-ps"`` (:mod:`.preferential`), ``"adaptive-cv"``, ``"adaptive-cv-ps"`` (:mod:`.adaptive`), ``"saga"`` and ``"dpp"``
``"minibatch-noise"`` (with an estimate of its own error covariance), ``"cv-switch"`` (the control
variate within ``radius=`` of its centre), ``"noisy"`` with ``noise_sd=``, ``"chunked"`` (whole storage
chunks of zarr or Dask data, :mod:`.chunked`), and for state space models
``"buffered"`` (:class:`sgmc.ssm.Buffered`, registered when :mod:`sgmc.ssm` is imported, which ``import
sgmc`` does). Names may use ``-`` or ``_``. The subset and categorical draws that
estimators build on (:func:`subsample`, :func:`categorical`) are here for custom estimators.
"""

import inspect
from typing import Any

from .._sampling import categorical, subsample
from .._names import build, registry_key
from . import base as _base
from .base import (EstimateInfo, Estimator, FullGradient, GradientEstimator, Minibatch, NoisyGradient, Prepared,
                   SupportsPrepare)
from .control_variates import SVRG, ControlVariate, ControlVariateState, SVRGState
from .dpp import KDPP, DPPSubsampling, linear_kernel
from .adaptive import AdaptiveControlVariate, AdaptiveControlVariatePS
from .alias import alias_draw, alias_table
from .preferential import ControlVariatePS, PreferentialSubsampling
from .weights import cv_ps_weights, ps_weights
from .v0 import calibrate_v0, laplace_v0, pilot_distances
from .saga import SAGA, SAGAState
from .noise import MinibatchNoise, NoiseState, SwitchingControlVariate
from .chunked import ChunkedMinibatch

__all__ = [
    *_base.__all__,
    "ControlVariate",
    "ControlVariateState",
    "SVRG",
    "SVRGState",
    "PreferentialSubsampling",
    "ControlVariatePS",
    "AdaptiveControlVariate",
    "AdaptiveControlVariatePS",
    "SAGA",
    "SAGAState",
    "KDPP",
    "DPPSubsampling",
    "alias_table",
    "alias_draw",
    "ps_weights",
    "cv_ps_weights",
    "calibrate_v0",
    "laplace_v0",
    "pilot_distances",
    "linear_kernel",
    "MinibatchNoise",
    "NoiseState",
    "SwitchingControlVariate",
    "ChunkedMinibatch",
    "make_estimator",
    "ESTIMATORS",
    "subsample",
    "categorical",
]

ESTIMATORS = {
    "full": FullGradient,
    "minibatch": Minibatch,
    "cv": ControlVariate,
    "svrg": SVRG,
    "noisy": NoisyGradient,
    "ps": PreferentialSubsampling,
    "cv-ps": ControlVariatePS,
    "adaptive-cv": AdaptiveControlVariate,
    "adaptive-cv-ps": AdaptiveControlVariatePS,
    "saga": SAGA,
    "dpp": DPPSubsampling,
    "minibatch-noise": MinibatchNoise,
    "cv-switch": SwitchingControlVariate,
    "chunked": ChunkedMinibatch,
}

_NO_BATCH = ("full", "noisy")
# estimators that choose their own default when batch_size is not given
_OWN_DEFAULT_BATCH = ("buffered",)


def make_estimator(name: Any, model: Any, batch_size: Any = None, *, _checked: Any = None,
                   **options: Any) -> GradientEstimator:
    """Build an estimator from its registry name (or return a configured one unchanged).

    Names ignore case, and ``-`` and ``_`` are the same (``"cv_ps"``). An option the estimator does
    not take raises ``TypeError`` naming it and the closest option the estimator takes. ``_checked``
    (the :class:`~sgmc.models.base.ModelFacts` of a model already checked) goes to estimators that
    take it, which then do not check the model again.
    """
    key = registry_key(name, ESTIMATORS, GradientEstimator, "estimator",
                       "init(rng, position) and estimate(rng, est_state, position) (sgmc.estimators.GradientEstimator)")
    if key is None:
        return name
    cls = ESTIMATORS[key]
    what = f"estimator {key!r}"
    fixed = ("model", "batch_size", "_checked")
    if _checked is not None and "_checked" in inspect.signature(cls).parameters:
        options = dict(options, _checked=_checked)
    if key in _NO_BATCH:
        return build(cls, (model,), options, what, "estimator_options", fixed)
    if key in _OWN_DEFAULT_BATCH:
        return build(cls, (model, batch_size), options, what, "estimator_options", fixed)
    if batch_size is None:
        batch_size = max(1, model.n_data // 100)
    return build(cls, (model, batch_size), options, what, "estimator_options", fixed)
