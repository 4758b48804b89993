"""Gradient estimators for stochastic gradient MCMC.

Every estimator follows one contract (:class:`GradientEstimator`): ``init(rng, position) ->
est_state`` and ``estimate(rng, est_state, position) -> (grad, est_state, EstimateInfo)``, with no
state on the estimator object. Names accepted by :func:`sgmc.sample`: ``"full"``, ``"minibatch"``,
``"cv"``, ``"svrg"`` (and ``"noisy"`` with ``noise_sd=``), and for state space models
``"buffered"`` (:class:`sgmc.ssm.Buffered`, registered when :mod:`sgmc.ssm` is imported, which
``import sgmc`` does). The subset and categorical draws that
estimators build on (:func:`subsample`, :func:`categorical`) are here for custom estimators.
"""

from typing import Any

from .._sampling import categorical, subsample
from .base import (
    EstimateInfo,
    Estimator,
    FullGradient,
    GradientEstimator,
    Minibatch,
    NoisyGradient,
    Prepared,
    SupportsPrepare,
)
from .control_variates import SVRG, ControlVariate, ControlVariateState, SVRGState

__all__ = [
    "EstimateInfo",
    "Prepared",
    "GradientEstimator",
    "SupportsPrepare",
    "Estimator",
    "FullGradient",
    "Minibatch",
    "NoisyGradient",
    "ControlVariate",
    "ControlVariateState",
    "SVRG",
    "SVRGState",
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
}

_NO_BATCH = ("full", "noisy")
# estimators that choose their own default when batch_size is not given
_OWN_DEFAULT_BATCH = ("buffered",)


def make_estimator(name: Any, model: Any, batch_size: Any = None, **options: Any) -> GradientEstimator:
    """Build an estimator from its registry name (or return a configured one unchanged)."""
    if not isinstance(name, str):
        if not isinstance(name, GradientEstimator):
            msg = (
                f"`estimator` must be a name in {sorted(ESTIMATORS)} or an object with init(rng, position) "
                f"and estimate(rng, est_state, position) (sgmc.estimators.GradientEstimator); got {name!r}"
            )
            raise TypeError(msg)
        return name
    key = name.lower().replace("-", "_")
    if key not in ESTIMATORS:
        msg = f"unknown estimator {name!r}; choose one of {sorted(ESTIMATORS)}"
        raise ValueError(msg)
    cls = ESTIMATORS[key]
    if key in _NO_BATCH:
        return cls(model, **options)
    if key in _OWN_DEFAULT_BATCH:
        return cls(model, batch_size, **options)
    if batch_size is None:
        batch_size = max(1, model.n_data // 100)
    return cls(model, batch_size, **options)
