"""Posterior models with analytic per-datum gradients.

See :mod:`sgmc.models.base` for the protocol and a worked example of a user-defined model.
"""

from .base import Model, check_compatible, take_rows
from .gaussian import Gaussian, GaussianTarget
from .glm import LinearRegression, LogisticRegression

__all__ = ["Model", "check_compatible", "take_rows", "Gaussian", "GaussianTarget", "LinearRegression", "LogisticRegression"]
