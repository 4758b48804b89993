"""Gradient estimators for stochastic gradient MCMC.

Each estimator is a callable ``estimate(rng, position) -> (grad, info)`` returning an unbiased estimate
of grad log pi at every chain's position. Names accepted by :func:`sgmc.sample`: ``"full"``,
``"minibatch"``, ``"cv"``, ``"svrg"`` (and ``"noisy"`` with ``noise_sd=``).
"""

from typing import Any

from .base import EstimateInfo, FullGradient, GradientEstimator, Minibatch, NoisyGradient
from .control_variates import SVRG, ControlVariate, find_mode

__all__ = [
    "EstimateInfo",
    "GradientEstimator",
    "FullGradient",
    "Minibatch",
    "NoisyGradient",
    "ControlVariate",
    "SVRG",
    "find_mode",
    "make_estimator",
    "ESTIMATORS",
]

ESTIMATORS = {
    "full": FullGradient,
    "minibatch": Minibatch,
    "cv": ControlVariate,
    "svrg": SVRG,
    "noisy": NoisyGradient,
}


def make_estimator(name: Any, model: Any, batch_size: Any = None, **options: Any) -> GradientEstimator:
    """Build an estimator from its registry name (or return a configured one unchanged)."""
    if not isinstance(name, str):
        if not callable(name):
            msg = f"`estimator` must be a name in {sorted(ESTIMATORS)} or a callable estimator; got {name!r}"
            raise TypeError(msg)
        return name
    key = name.lower().replace("-", "_")
    if key not in ESTIMATORS:
        msg = f"unknown estimator {name!r}; choose one of {sorted(ESTIMATORS)}"
        raise ValueError(msg)
    cls = ESTIMATORS[key]
    if key in ("full",):
        return cls(model, **options)
    if key == "noisy":
        return cls(model, **options)
    if batch_size is None:
        batch_size = max(1, model.n_data // 100)
    return cls(model, batch_size, **options)
