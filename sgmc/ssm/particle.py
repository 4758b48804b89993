"""Particle filters and particle score estimators for state space models.

A particle filter approximates the filtering distributions p(x_t | y_{1:t}) of a state space model by
``N`` weighted samples and gives an unbiased estimate of the likelihood p(y_{1:T}) as the product of
the mean incremental weights. Smoothed additive functionals such as the score (Fisher's identity,
Aicher thesis Eq. 2.24) are accumulated forward in time without storing the particle history:

* **path** (Poyiadjis, Doucet and Singh 2011, the O(N) "path space" estimator; thesis Alg. 2, paper
  Alg. 1): every particle carries the running sum of the statistic along its ancestral line. Cheap, but
  its variance grows like T^2 / N because the ancestral lines coalesce.
* **paris** (Olsson and Westerborn 2017, PaRIS): every particle carries an estimate of the smoothed
  statistic given its own value, refreshed with ``n_backward`` draws from the backward kernel
  ``p(x_{t-1} = j | x_t) ~ W_{t-1}^j p(x_t | x_{t-1}^j)``. The variance grows like T / N.
* **poyiadjis_n2** (Poyiadjis et al. 2011, O(N^2)): the backward kernel is integrated exactly.

Models describe themselves to these algorithms through a :class:`ParticleKernel`: a batch of ``Bt``
independent filtering problems (one per chain and subsequence), each with its own parameter, run side
by side with particles stored as arrays of shape ``(Bt, N, state_dim)``. Python loops run over time
only.

Conventions. The state before the first observation, ``x_0``, is drawn from the model's initial
(stationary) distribution and carries no observation; observation ``y[t]`` (0-based) is emitted by
``x_{t+1}`` (1-based), which moves from ``x_t``. So every observation contributes one complete term
``grad log p(y_t, x_t | x_{t-1})`` and there is no separate initial term (thesis Alg. 2: ``u_0 ~ nu``,
then ``t = 1..T``).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

from .._array_api import Array

__all__ = [
    "ParticleKernel",
    "AdaptedKernel",
    "FilterResult",
    "particle_filter",
    "particle_window_score",
]


@runtime_checkable
class ParticleKernel(Protocol):
    """What a model provides to run particle filters and smoothers on a batch of problems.

    A kernel is built by ``model.particle_kernel(theta_batch)`` for parameters ``theta_batch`` of shape
    ``(Bt, dim)``; row ``b`` of every particle array belongs to problem ``b``. Particles ``x`` have
    shape ``(Bt, N, state_dim)``, observations at one time ``y_t`` shape ``(Bt, obs_dim)``.

    Attributes
    ----------
    xp : namespace
    dtype : floating dtype of the particles
    batch : int
        ``Bt``.
    state_dim : int
    dim : int
        Dimension of ``theta`` (the length of a score term).
    adapted : bool
        False for a bootstrap-type proposal (``log_weight`` carries the whole incremental weight).
        True for a fully adapted proposal: ``propagate`` draws from ``p(x_t | x_{t-1}, y_t)`` and the
        kernel also has ``ancestor_log_weight(x_prev, y_t) = log p(y_t | x_{t-1})``; the filter then
        selects ancestors with those weights and the new particles carry equal weights.

    Methods
    -------
    sample_initial(rng, n) -> (Bt, n, state_dim)
        Draws from the initial (stationary) distribution p0.
    propagate(rng, x_prev, y_t) -> (Bt, N, state_dim)
        Draws from the proposal (the transition for a bootstrap kernel).
    log_weight(x_prev, x, y_t) -> (Bt, N)
        Incremental log-weight ``log p(y_t, x | x_prev) - log q(x | x_prev, y_t)`` up to a constant
        that is the same for every particle of a row *only if* the kernel is adapted; bootstrap
        kernels return the full ``log p(y_t | x)`` (the likelihood estimate uses it).
    log_transition(x_prev, x) -> broadcast shape
        ``log p(x | x_prev)`` over the broadcast of the leading axes of both arguments (for example
        ``x_prev[:, None, :, :]`` against ``x[:, :, None, :]`` gives ``(Bt, N, N)``). Needed by the
        PaRIS and O(N^2) smoothers; a kernel whose transition has no density (GARCH's deterministic
        variance) leaves it out.
    log_transition_bound() -> (Bt,)
        An upper bound on ``log_transition`` for each row (accept-reject backward draws in PaRIS).
    score_terms(x_prev, x, y_t) -> (..., dim)
        ``grad_theta log p(y_t, x | x_prev, theta)`` over the broadcast leading axes of the inputs;
        ``y_t`` is ``(Bt, obs_dim)`` and is broadcast against the particle axes.
    """

    xp: Any
    dtype: Any
    batch: int
    state_dim: int
    dim: int
    adapted: bool

    def sample_initial(self, rng: Any, n: int) -> Array: ...

    def propagate(self, rng: Any, x_prev: Array, y_t: Array) -> Array: ...

    def log_weight(self, x_prev: Array, x: Array, y_t: Array) -> Array: ...

    def score_terms(self, x_prev: Array, x: Array, y_t: Array) -> Array: ...


@runtime_checkable
class AdaptedKernel(ParticleKernel, Protocol):
    """A fully adapted kernel: also gives the predictive weight of each ancestor."""

    def ancestor_log_weight(self, x_prev: Array, y_t: Array) -> Array: ...


class FilterResult(NamedTuple):
    """What :func:`particle_filter` returns.

    Attributes
    ----------
    log_lik : (Bt,) estimate of ``log p(y_{1:T})`` (its exponential is unbiased).
    particles : (Bt, N, state_dim) final particles.
    weights : (Bt, N) final normalised weights.
    score : (Bt, dim) or None
        The smoothed additive statistic ``sum_t c_t E[score_terms]`` when a statistic was asked for.
    n_resampled : (Bt,) int64, how many steps resampled in each row.
    """

    log_lik: Array
    particles: Array
    weights: Array
    score: Array | None
    n_resampled: Array


def particle_filter(*args, **kwargs):  # pragma: no cover - replaced below in this module
    raise NotImplementedError


def particle_window_score(
    rng: Any,
    model: Any,
    theta: Array,
    windows: Any,
    y_windows: Array,
    n_particles: int = 1000,
    *,
    smoother: str = "path",
    resampling: str = "systematic",
    ess_threshold: float | None = None,
    n_backward: int = 2,
) -> tuple[Array, Array]:
    """Particle estimate of the buffered subsequence score for a batch of chains and windows.

    Parameters
    ----------
    rng : sgmc Generator
    model : StateSpaceModel with ``particle_kernel(theta_batch)``
    theta : (chains, dim)
    windows : sgmc.ssm.subsequence.Windows
        ``weight`` (chains, M, L), ``mask`` (chains, M, L), ``length`` (chains, M).
    y_windows : (chains, M, L, obs_dim)
        Observations of each window (left-aligned, trailing padding masked).
    n_particles : int
    smoother : {"path", "paris", "poyiadjis_n2"}
    resampling : {"systematic", "stratified", "residual", "multinomial"}
    ess_threshold : float in (0, 1] or None
        None resamples at every step; otherwise a row resamples when its ESS < threshold * N.
    n_backward : int
        Backward draws per particle for PaRIS.

    Returns
    -------
    score : (chains, dim)
        ``sum_m sum_t weight[c, m, t] E[grad log p(y_t, x_t | x_{t-1})]`` over each window, the left
        end of each window started from the model's initial distribution.
    n_evals : (chains,) int64
        Time steps processed (sum of the window lengths).
    """
    raise NotImplementedError
