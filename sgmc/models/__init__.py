"""Posterior models with analytic per-datum gradients.

See :mod:`sgmc.models.base` for the protocol (:class:`Target`, :class:`IIDData`) and a worked example
of a user-defined model, and :mod:`sgmc.models.transforms` for reparametrisations.
"""

from .autodiff import TorchModel, from_torch
from .autodiff_jax import JaxModel, from_jax
from .bpmf import BPMF
from .bnn import BayesianNeuralNetwork
from .base import IIDData, Model, Target, check_compatible, check_target, provides, require, take_rows
from .gaussian import Gaussian, GaussianTarget
from .glm import LinearRegression, LogisticRegression
from .simplex import DirichletCategorical
from .transforms import Affine
from .coordinates import conditioned, laplace_factor, standardising_factor

__all__ = [
    "Target",
    "IIDData",
    "Model",
    "check_compatible",
    "check_target",
    "provides",
    "require",
    "take_rows",
    "Gaussian",
    "GaussianTarget",
    "LinearRegression",
    "LogisticRegression",
    "Affine",
    "conditioned",
    "laplace_factor",
    "standardising_factor",
    "DirichletCategorical",
    "BPMF",
    "BayesianNeuralNetwork",
    "from_torch",
    "TorchModel",
    "from_jax",
    "JaxModel",
]
