"""Gradient estimators: unbiased estimates of grad log pi(theta) for every chain at once.

An estimator is a callable ``estimate(rng, position) -> (grad, info)`` where ``position`` is
``(chains, dim)``, ``grad`` has the same shape and estimates the full-data gradient of the log
posterior (the ascent direction), and ``info.n_evals`` counts the per-datum gradient evaluations made
per chain. ``prepare(rng, position)`` runs once before sampling (control variates find their centre
there) and may return a better starting position.
"""

from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple

from .._array_api import Array
from ..models.base import Model

__all__ = ["EstimateInfo", "GradientEstimator", "FullGradient", "Minibatch", "NoisyGradient", "check_batch_size"]


class EstimateInfo(NamedTuple):
    """What one call of an estimator cost.

    Attributes
    ----------
    n_evals : int
        Per-datum gradient evaluations per chain (N for a full pass, n for a minibatch).
    """

    n_evals: int


def check_model(model: Any) -> Model:
    """Check that ``model`` has the protocol's methods."""
    needed = ("grad_log_prior", "grad_log_lik_sum", "n_data", "dim", "xp")
    missing = [m for m in needed if not hasattr(model, m)]
    if missing:
        msg = f"`model` must follow the sgmc model protocol (sgmc.models.Model); it lacks {missing}"
        raise TypeError(msg)
    return model


def check_batch_size(batch_size: Any, n_data: int, name: str = "batch_size") -> int:
    """A batch size as an int in [1, n_data]; a float in (0, 1) is a fraction of n_data."""
    if isinstance(batch_size, float) and 0.0 < batch_size < 1.0:
        batch_size = max(1, int(round(batch_size * n_data)))
    try:
        n = operator.index(batch_size)
    except TypeError:
        msg = f"`{name}` must be a positive int (or a fraction in (0, 1)); got {batch_size!r}"
        raise TypeError(msg) from None
    if n < 1:
        msg = f"`{name}` must be at least 1; got {n}"
        raise ValueError(msg)
    if n > n_data:
        msg = f"`{name}`={n} is larger than the number of data n_data={n_data}"
        raise ValueError(msg)
    return n


class GradientEstimator:
    """Base class; subclasses implement :meth:`__call__`."""

    name = "estimator"
    #: per-datum gradient evaluations per chain and call, when it is constant
    evals_per_call: int = 0

    def __init__(self, model: Model):
        self.model = check_model(model)

    def prepare(self, rng: Any, position: Array) -> Array | None:
        """Called once by :func:`sgmc.sample` before the first iteration; may return a start position."""
        return None

    def __call__(self, rng: Any, position: Array) -> tuple[Array, EstimateInfo]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"


class FullGradient(GradientEstimator):
    """The exact full-data gradient (O(N) per call): turns SGLD into ULA."""

    name = "full"

    def __init__(self, model: Model):
        super().__init__(model)
        self.evals_per_call = model.n_data
        self._info = EstimateInfo(model.n_data)

    def __call__(self, rng, position):
        m = self.model
        g = m.grad_log_prior(position)
        if m.has_data:
            g = g + m.grad_log_lik_sum(position)
        return g, self._info


class Minibatch(GradientEstimator):
    """Simple subsampling estimator (review eq. 4): grad log p + (N/n) sum_{i in S} grad log f_i.

    Parameters
    ----------
    model : Model
    batch_size : int or float
        n; a float in (0, 1) is a fraction of N.
    replace : bool, default False
        Draw the n indices with replacement (i.i.d.) instead of a uniform subset.

    Notes
    -----
    Each chain draws its own subset, so chains stay independent.
    """

    name = "minibatch"

    def __init__(self, model: Model, batch_size: Any, replace: bool = False):
        super().__init__(model)
        if not getattr(model, "has_data", True):
            msg = f"{type(model).__name__} has no data to subsample; use estimator='full' or NoisyGradient"
            raise ValueError(msg)
        self.batch_size = check_batch_size(batch_size, model.n_data)
        self.replace = bool(replace)
        self.scale = model.n_data / self.batch_size
        self.evals_per_call = self.batch_size
        self._info = EstimateInfo(self.batch_size)

    def indices(self, rng: Any, chains: int) -> Array:
        """Draw the minibatch indices, shape (chains, batch_size)."""
        return rng.subsample(self.model.n_data, self.batch_size, chains, replace=self.replace)

    def __call__(self, rng, position):
        m = self.model
        idx = self.indices(rng, position.shape[0])
        g = m.grad_log_prior(position) + self.scale * m.grad_log_lik_sum(position, idx)
        return g, self._info


class NoisyGradient(GradientEstimator):
    """Exact gradient plus N(0, noise_sd^2 I) noise: the review's section 2.5 gradient model.

    Parameters
    ----------
    model : Model
        Usually a :class:`sgmc.models.GaussianTarget`.
    noise_sd : float
        Standard deviation s of the added noise (the review's Figure 1 uses s^2 = 0.01).
    """

    name = "noisy"

    def __init__(self, model: Model, noise_sd: float):
        super().__init__(model)
        try:
            s = float(noise_sd)
        except (TypeError, ValueError):
            s = math.nan
        if not (math.isfinite(s) and s >= 0):
            msg = f"`noise_sd` must be a non-negative number; got {noise_sd!r}"
            raise ValueError(msg)
        self.noise_sd = s
        self._exact = FullGradient(model)
        self.evals_per_call = model.n_data
        self._info = EstimateInfo(max(model.n_data, 1))

    def __call__(self, rng, position):
        g, _ = self._exact(rng, position)
        if self.noise_sd > 0:
            g = g + self.noise_sd * rng.normal(tuple(position.shape), dtype=position.dtype)
        return g, self._info
