"""Sampler contract and step-size schedules.

A sampler advances all chains at once, as a pair of pure functions in the shape of blackjax's kernels:

* ``init(rng, position, estimator, est_state=None) -> state`` builds the state at ``position``
  ``(chains, dim)``: it initialises the estimator (unless ``est_state`` is given) and estimates the
  gradient there.
* ``step(rng, state, estimator, step_size) -> (state, info)`` makes one iteration and says what
  happened in a :class:`StepInfo`: the cost of its gradient estimates (the estimator's
  :class:`~sgmc.estimators.EstimateInfo`, summed over its calls), the passes through the data it
  made itself (``own_evals``: a metric computed from every datum) and its own quantities (MALA's
  acceptance, SGNHT's thermostat).

States are NamedTuples that always carry ``position``, ``grad`` (the estimate of grad log pi *at that
position*, so a trace can store the score paired with each draw at no extra cost) and ``est_state``
(the estimator's state, threaded through every call). Nothing is kept on the sampler object, so one
object serves any number of runs and pickles to worker processes.

Step sizes follow the review's convention (Nemeth and Fearnhead 2021, eq. 3): SGLD is
theta' = theta + (h/2) g + N(0, h I). Papers that write epsilon for h/2 (chapter 3 of the Putcha thesis;
Chen et al. 2014 for SGHMC) map by ``h = 2 epsilon``; the sgmcmc R package's SGHMC/SGNHT learning rate
eta maps by ``h = 2 sqrt(eta)`` (see :func:`from_learning_rate`).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple, Protocol, Sequence, runtime_checkable

from .._array_api import Array
from .._keys import accept_keys
from .._validation import check_step_size

__all__ = [
    "Sampler",
    "SamplerBase",
    "StepInfo",
    "add_costs",
    "Schedule",
    "constant",
    "polynomial",
    "step_sizes",
    "from_learning_rate",
    "to_epsilon",
]


class StepInfo(NamedTuple):
    """What one sampler step did.

    Attributes
    ----------
    estimate : EstimateInfo
        The step's gradient estimates: ``n_evals`` summed over the estimator calls of the step (L for
        SGHMC), ``batch_size`` and ``log_density`` from the last call.
    accepted : array (chains,) of bool, or None
        Whether each chain's proposal was accepted (Metropolis-adjusted samplers only).
    accept_prob : array (chains,), or None
        The Metropolis-Hastings acceptance probability min(1, ratio) of each chain's proposal.
    extras : dict or None
        The sampler's own per-chain quantities after the step, by name (SGNHT: ``"thermostat"``);
        the runner records each per iteration.
    own_evals : number or array (chains,)
        Per-datum evaluations per chain that the sampler made itself, outside its estimator (SGRLD's
        Fisher metric: one full pass, N, per step). The runner's ``n_evals`` and ``data_passes``
        count them with the estimator's (:attr:`n_evals`).
    """

    estimate: Any
    accepted: Array | None = None
    accept_prob: Array | None = None
    extras: dict | None = None
    own_evals: Any = 0

    @property
    def n_evals(self) -> Any:
        """Every per-datum evaluation of the step: the estimator's and the sampler's own."""
        own = self.own_evals
        if isinstance(own, (int, float)) and own == 0:
            return self.estimate.n_evals
        return self.estimate.n_evals + own


def noise_estimate_of(est_state, sampler: str):
    """``est_state.v_hat``, or a TypeError naming the estimator that provides it."""
    v = getattr(est_state, "v_hat", None)
    if v is None:
        msg = (
            f"{sampler} needs an estimate of the gradient noise in the estimator state (est_state.v_hat); "
            "use sgmc.estimators.MinibatchNoise (estimator='minibatch-noise')"
        )
        raise TypeError(msg)
    return v


def add_costs(first: Any, second: Any) -> Any:
    """Two estimator calls as one: ``n_evals`` added, the rest from the second call."""
    return second._replace(n_evals=first.n_evals + second.n_evals)


@runtime_checkable
class Sampler(Protocol):
    """The sampler contract that the runner relies on.

    Attributes
    ----------
    name : str
    exact : bool
        True for samplers that need the exact full-data gradient (ULA, MALA).
    needs_log_density : bool
        True for samplers that need ``EstimateInfo.log_density`` (MALA).
    """

    name: str
    exact: bool
    needs_log_density: bool

    def init(self, rng: Any, position: Array, estimator: Any, est_state: Any = None) -> Any:
        """The state at ``position`` (chains, dim)."""

    def step(self, rng: Any, state: Any, estimator: Any, step_size: float) -> tuple[Any, StepInfo]:
        """One iteration for every chain."""


class SamplerBase:
    """Base class: default contract attributes, and the start every sampler shares.

    ``init`` and ``step`` of every subclass take a JAX key as ``rng`` too (:mod:`sgmc._keys`).
    """

    name = "sampler"
    exact = False
    needs_log_density = False
    #: Appended to divergence errors by samplers whose step size is on their own scale.
    step_note = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        accept_keys(cls, ("init", "step"))

    def step_unit(self, model: Any, curvature: Any, position: Any = None, estimator: Any = None,
                  rng: Any = None) -> float:
        """The sampler's natural step size on ``model``: its step sizes are multiples of this unit.

        ``curvature`` is the negative Hessian of log pi (dim, dim) at a representative ``position``
        (the mode), or a scalar bound M on its largest eigenvalue. Langevin samplers: 1 / lambda_max
        (SGLD is stable for h < 4 / lambda_max on a Gaussian). :func:`sgmc.tune_step_size` centres its
        default grid on this unit, and the command line scales its default factors by it.
        """
        return 1.0 / _lambda_max(curvature)

    @staticmethod
    def start(rng: Any, position: Array, estimator: Any, est_state: Any) -> tuple[Array, Any, Any]:
        """Initialise the estimator (unless ``est_state`` is given) and estimate the gradient at ``position``.

        Returns ``(grad, est_state, info)``.
        """
        if est_state is None:
            est_state = estimator.init(rng, position)
        return estimator.estimate(rng, est_state, position)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


def _lambda_max(curvature: Any) -> float:
    """Largest eigenvalue of a (dim, dim) curvature matrix, or the scalar bound itself."""
    if isinstance(curvature, (int, float)):
        return max(float(curvature), 1e-300)
    from .._array_api import array_namespace

    xp = array_namespace(curvature)
    return max(float(xp.max(xp.linalg.eigvalsh(curvature))), 1e-300)


def _preconditioned_lambda_max(curvature: Any, scale: Any) -> float:
    """lambda_max(S^{1/2} H S^{1/2}) for a (dim,) diagonal or (dim, dim) PSD ``scale`` S.

    With a scalar curvature bound M, M lambda_max(S) (an upper bound).
    """
    from .._array_api import array_namespace

    xp = array_namespace(scale)
    if isinstance(curvature, (int, float)):
        top = float(xp.max(scale)) if scale.ndim == 1 else float(xp.max(xp.linalg.eigvalsh(scale)))
        return max(float(curvature) * top, 1e-300)
    if scale.ndim == 1:
        r = xp.sqrt(scale)
        m = r[:, None] * curvature * r[None, :]
    else:
        from .metrics import sym_sqrt

        r = sym_sqrt(xp, scale)
        m = r @ curvature @ r
    return max(float(xp.max(xp.linalg.eigvalsh(0.5 * (m + xp.matrix_transpose(m))))), 1e-300)


class Schedule:
    """A step-size schedule: ``schedule(k)`` is the step size at iteration ``k`` (0-based)."""

    def __call__(self, k: int) -> float:
        raise NotImplementedError


class constant(Schedule):  # noqa: N801 - reads as a function
    """Constant step size ``h``."""

    def __init__(self, h: float):
        self.h = check_step_size(h)

    def __call__(self, k: int) -> float:
        return self.h

    def __repr__(self) -> str:
        return f"constant({self.h})"


class polynomial(Schedule):  # noqa: N801
    """Polynomially decaying step size ``h_k = a (b + k)^(-gamma)`` (Welling and Teh 2011).

    ``gamma`` in (0.5, 1] satisfies the Robbins-Monro conditions; ``gamma = 1/3`` is the MSE-optimal
    decay for a fixed budget (Teh et al. 2016).
    """

    def __init__(self, a: float, b: float = 1.0, gamma: float = 0.55):
        self.a = check_step_size(a, "a")
        if not (math.isfinite(b) and b > 0):
            msg = f"`b` must be positive; got {b}"
            raise ValueError(msg)
        if not (math.isfinite(gamma) and gamma >= 0):
            msg = f"`gamma` must be non-negative; got {gamma}"
            raise ValueError(msg)
        self.b = float(b)
        self.gamma = float(gamma)

    def __call__(self, k: int) -> float:
        return self.a * (self.b + k) ** (-self.gamma)

    def __repr__(self) -> str:
        return f"polynomial(a={self.a}, b={self.b}, gamma={self.gamma})"


def step_sizes(step_size: Any, n_iter: int) -> list[float]:
    """Expand a scalar, a schedule (callable of k) or a sequence into ``n_iter`` validated floats."""
    scalar = isinstance(step_size, numbers.Real) or getattr(step_size, "ndim", None) == 0
    if scalar and not isinstance(step_size, bool):
        h = check_step_size(step_size)
        return [h] * n_iter
    if callable(step_size):
        out = [step_size(k) for k in range(n_iter)]
    elif not isinstance(step_size, (str, bytes)) and (isinstance(step_size, Sequence) or hasattr(step_size, "__len__")):
        out = list(step_size)
        if len(out) != n_iter:
            msg = f"`step_size` as a sequence must have n_iter={n_iter} entries; got {len(out)}"
            raise ValueError(msg)
    else:
        msg = f"`step_size` must be a positive number, a schedule or a sequence; got {type(step_size).__name__}"
        raise TypeError(msg)
    values = []
    for k, h in enumerate(out):
        try:
            v = float(h) if not isinstance(h, (bool, str, bytes)) else math.nan
        except (TypeError, ValueError):
            v = math.nan
        if not (math.isfinite(v) and v > 0):
            msg = f"`step_size` must be positive and finite at every iteration; got {h!r} at iteration {k}"
            raise ValueError(msg)
        values.append(v)
    return values


def to_epsilon(h: float) -> float:
    """Step size in the epsilon = h/2 convention (dtheta = grad log pi dt + sqrt(2) dW)."""
    return 0.5 * float(h)


def from_learning_rate(eta: float) -> float:
    """Review step size h from the sgmcmc R package's SGHMC/SGNHT learning rate eta = h^2 / 4."""
    return 2.0 * math.sqrt(float(eta))
