"""The gradient-estimator contract, and the plain estimators: exact, subsampled, noisy.

An estimator keeps no state on itself. ``init(rng, position) -> est_state`` builds whatever it carries
from one iteration to the next (a control-variate centre and the full gradient there, an SVRG
snapshot, preferential weights, ...), and ``estimate(rng, est_state, position)`` returns
``(grad, est_state, info)``: an estimate of grad log pi at every chain's position (``(chains, dim)``,
the ascent direction), the next state, and an :class:`EstimateInfo` saying what the call cost. The
same estimator object called twice with the same inputs gives the same outputs, so one object can
serve many runs, and it pickles to worker processes.

Set-up that chooses the estimator itself (finding a control-variate centre) is a separate, explicit
step: ``prepare(rng, position)`` returns a :class:`Prepared` with the configured estimator, a
suggested start and the cost, and :func:`sgmc.sample` calls it once before sampling.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

from .._array_api import Array
from .._dispatch import dispatch
from .._keys import accept_keys
from .._sampling import subsample_twin
from .._validation import check_batch_size, check_nonnegative
from ..models.base import Model, ModelFacts, model_facts
from ..models.transforms import Affine

__all__ = [
    "EstimateInfo",
    "Prepared",
    "GradientEstimator",
    "SupportsPrepare",
    "Estimator",
    "FullGradient",
    "Minibatch",
    "NoisyGradient",
]


class EstimateInfo(NamedTuple):
    """What one call of an estimator did.

    Attributes
    ----------
    n_evals : number or array (chains,)
        Per-datum gradient evaluations per chain made by this call (N for a full pass, n for a
        minibatch, 2n for a control variate), including any refresh it triggered.
    batch_size : number or array (chains,)
        Data points the estimate is built from (N for exact estimators).
    log_density : array (chains,) or None
        The exact log posterior at the position, from estimators that compute it anyway (or are
        asked to: ``FullGradient(model, log_density=True)``); Metropolis corrections use it.
    """

    n_evals: Any
    batch_size: Any
    log_density: Array | None = None


class Prepared(NamedTuple):
    """What :meth:`Estimator.prepare` returns.

    Attributes
    ----------
    estimator : GradientEstimator
        The estimator to sample with (a new, configured object when preparing chose something,
        such as a control-variate centre).
    start : array (chains, dim) or None
        A suggested starting position (the control-variate centre), or ``None``.
    n_evals : float
        Per-datum gradient evaluations the preparation used (per chain).
    """

    estimator: Any
    start: Array | None
    n_evals: float


@runtime_checkable
class GradientEstimator(Protocol):
    """The estimator contract that samplers and the runner rely on.

    Attributes
    ----------
    name : str
    init_cost : float
        Per-datum gradient evaluations per chain that :meth:`init` makes (N when it computes a full
        gradient, 0 otherwise); the runner counts them as set-up cost.
    """

    name: str
    init_cost: float

    def init(self, rng: Any, position: Array) -> Any:
        """The estimator state for chains at ``position`` (chains, dim); ``None`` if it has none."""

    def estimate(self, rng: Any, est_state: Any, position: Array) -> tuple[Array, Any, EstimateInfo]:
        """``(grad, est_state, info)`` at ``position`` (chains, dim)."""


@runtime_checkable
class SupportsPrepare(Protocol):
    """Estimators with a set-up step that runs once before sampling."""

    def prepare(self, rng: Any, position: Array) -> Prepared:
        """Configure the estimator for chains starting at ``position``."""


class Estimator:
    """Base class: keeps the model, and provides a no-op :meth:`prepare` and a stateless :meth:`init`.

    Subclasses implement :meth:`estimate`; they set every attribute in ``__init__`` and never after.
    ``init``, ``estimate`` and ``prepare`` of every subclass take a JAX key as ``rng`` too
    (:mod:`sgmc._keys`).
    """

    name = "estimator"
    init_cost: float = 0.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        accept_keys(cls, ("init", "estimate", "prepare"))

    def __init__(self, model: Any, *, _checked: ModelFacts | None = None):
        # ``_checked``: the facts of a model already checked (sgmc.sample checks it once, in
        # sgmc._inputs); anything else is checked here
        self._facts = _checked if isinstance(_checked, ModelFacts) else model_facts(model)
        self.model = model

    def prepare(self, rng: Any, position: Array) -> Prepared:
        """Nothing to set up: this estimator, no suggested start, no cost."""
        return Prepared(self, None, 0.0)

    def init(self, rng: Any, position: Array) -> Any:
        """No state."""
        return None

    def estimate(self, rng: Any, est_state: Any, position: Array) -> tuple[Array, Any, EstimateInfo]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"


class FullGradient(Estimator):
    """The exact full-data gradient (O(N) per call): turns SGLD into ULA.

    Parameters
    ----------
    model : Model
    log_density : bool, default False
        Also return the exact log posterior in the info (for Metropolis corrections); models that
        share work between the two (GLMs) compute both in one pass.
    """

    name = "full"

    def __init__(self, model: Any, log_density: bool = False, *, _checked: ModelFacts | None = None):
        super().__init__(model, _checked=_checked)
        facts = self._facts
        if log_density:
            facts.require(("log_posterior_and_grad",), "FullGradient(log_density=True)")
        elif model.n_data > 0:
            facts.require(("grad_log_prior", "grad_log_lik_sum"), "the exact gradient")
        else:
            facts.require(("grad_log_prior",), "the exact gradient")
        self.log_density = bool(log_density)
        self._info = EstimateInfo(model.n_data, model.n_data)
        # the log density with the gradient: one pass where the model shares the work (GLMs), two
        # with the base class's log_posterior_and_grad (log_lik, then grad_log_lik_sum)
        self._density_evals = model.n_data * (2 if log_density and _two_passes(model) else 1)

    def estimate(self, rng, est_state, position):
        m = self.model
        if self.log_density:
            logp, g = m.log_posterior_and_grad(position)
            return g, est_state, EstimateInfo(self._density_evals, m.n_data, logp)
        g = m.grad_log_prior(position)
        if m.n_data > 0:
            g = g + m.grad_log_lik_sum(position)
        return g, est_state, self._info


def _two_passes(model: Any) -> bool:
    """Whether ``model.log_posterior_and_grad`` is :class:`~sgmc.models.Model`'s two-pass default."""
    while isinstance(model, Affine):
        model = model.base
    return type(model).log_posterior_and_grad is Model.log_posterior_and_grad


def diff_sum(model: Any, theta: Array, centre: Array, idx: Array, weights: Array | None = None) -> Array:
    """``sum_i w_i [grad log f_i(theta) - grad log f_i(centre)]`` over ``idx``: the control-variate term.

    Calls ``model.grad_log_lik_diff_sum`` (one gather of the rows for both points in the GLMs); a model
    that does not have it (any object following the protocol) gets two ``grad_log_lik_sum`` calls.
    """
    fused = getattr(model, "grad_log_lik_diff_sum", None)
    if fused is not None:
        return fused(theta, centre, idx, weights)
    return model.grad_log_lik_sum(theta, idx, weights) - model.grad_log_lik_sum(centre, idx, weights)


def _check_subsampling(model: Any, purpose: str) -> None:
    _can_subsample(model_facts(model, names=False), purpose)


def _can_subsample(facts: ModelFacts, purpose: str) -> None:
    """Raise unless the checked model has data and the methods that subsampling calls."""
    if int(facts.n_data) < 1:
        msg = f"{facts.kind} has no data to subsample ({purpose}); use estimator='full' or NoisyGradient"
        raise ValueError(msg)
    facts.require(("grad_log_prior", "grad_log_lik_sum"), purpose)


class Minibatch(Estimator):
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

    def __init__(self, model: Any, batch_size: Any, replace: bool = False, *, _checked: ModelFacts | None = None):
        super().__init__(model, _checked=_checked)
        _can_subsample(self._facts, "the minibatch estimator")
        self.batch_size = check_batch_size(batch_size, model.n_data)
        self.replace = bool(replace)
        self.scale = model.n_data / self.batch_size
        self._info = EstimateInfo(self.batch_size, self.batch_size)
        # sgmc._sampling.subsample, resolved once: the backend's native draw or the array-API twin
        self._draw = dispatch(model.xp, "subsample", subsample_twin)

    def __getstate__(self) -> dict:
        # the resolved draw does not pickle (process pools, Dask): it is resolved again on unpickling
        state = dict(self.__dict__)
        state.pop("_draw", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._draw = dispatch(self.model.xp, "subsample", subsample_twin)

    def indices(self, rng: Any, chains: int) -> Array:
        """Draw the minibatch indices, shape (chains, batch_size)."""
        return self._draw(rng, self.model.n_data, self.batch_size, chains, self.replace)

    def estimate(self, rng, est_state, position):
        m = self.model
        idx = self.indices(rng, position.shape[0])
        g = m.grad_log_prior(position) + self.scale * m.grad_log_lik_sum(position, idx)
        return g, est_state, self._info


class NoisyGradient(Estimator):
    """Exact gradient plus N(0, noise_sd^2 I) noise: the review's section 2.5 gradient model.

    Parameters
    ----------
    model : Model
        Usually a :class:`sgmc.models.GaussianTarget`.
    noise_sd : float
        Standard deviation s of the added noise (the review's Figure 1 uses s^2 = 0.01).
    """

    name = "noisy"

    def __init__(self, model: Any, noise_sd: float, *, _checked: ModelFacts | None = None):
        super().__init__(model, _checked=_checked)
        self.noise_sd = check_nonnegative(noise_sd, "noise_sd")
        self._exact = FullGradient(model, _checked=self._facts)
        self._info = EstimateInfo(max(model.n_data, 1), model.n_data)

    def estimate(self, rng, est_state, position):
        g, _, _ = self._exact.estimate(rng, None, position)
        if self.noise_sd > 0:
            g = g + self.noise_sd * rng.normal(tuple(position.shape), dtype=position.dtype)
        return g, est_state, self._info
