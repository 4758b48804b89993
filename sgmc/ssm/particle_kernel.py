"""Particle kernels: how a state space model describes itself to the particle filters.

A kernel is a batch of ``Bt`` independent filtering problems (one per chain and subsequence), each
with its own parameter, with particles stored as arrays of shape ``(Bt, N, state_dim)``: initial
draws, a proposal, incremental weights, and for the smoothers the transition density and the score
terms ``grad log p(y_t, x_t | x_{t-1}, theta)`` (Fisher's identity, Aicher thesis Eq. 2.24).
:class:`ParticleKernel` is the contract, :class:`KernelBase` the shared plumbing of the kernels in
:mod:`sgmc.ssm` (per-row parameters, row subsets for PaRIS's exact fallback draws).
"""

from __future__ import annotations

import math
from typing import Any, Protocol, runtime_checkable

from .._array_api import Array, array_namespace

__all__ = ["ParticleKernel", "AdaptedKernel", "KernelBase"]

_LOG_2PI = math.log(2.0 * math.pi)


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
    take_rows(idx) -> kernel
        The kernel of the rows ``idx`` (PaRIS's exact fallback draws use it).
    log_joint(x_prev, x, y_t) -> broadcast shape
        Optional: ``log p(y_t, x | x_prev)``, whose gradient ``score_terms`` is (tests check one
        against the other by finite differences).
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


def _y_like(y_t: Array, ndim: int) -> Array:
    """Observations ``(Bt, obs_dim)`` shaped to broadcast against particles ``(Bt, ..., state_dim)``."""
    if ndim == 3:
        return y_t[:, None, :]
    xp = array_namespace(y_t)
    return xp.reshape(y_t, (y_t.shape[0],) + (1,) * (ndim - 2) + (y_t.shape[-1],))


def _stack_terms(xp: Any, parts: tuple) -> Array:
    """Concatenate per-coordinate score terms ``(..., 1)`` along the last axis after broadcasting."""
    nd = max(len(g.shape) for g in parts)
    shapes = [(1,) * (nd - len(g.shape)) + tuple(g.shape) for g in parts]
    shape = tuple(max(dims) for dims in zip(*shapes))
    return xp.concat([xp.broadcast_to(g, shape) for g in parts], axis=-1)


class KernelBase:
    """Shared plumbing of the kernels in :mod:`sgmc.ssm`: per-row parameters of shape ``(Bt,)``.

    Subclasses list their parameter names in ``_names`` and keep extra constructor options in
    ``_options``; :meth:`take_rows` gives the kernel of a subset of rows (used by PaRIS's exact
    fallback draws).
    """

    _names: tuple = ()
    adapted: bool = False
    state_dim: int = 1

    def _setup(self, params: dict, options: dict) -> None:
        first = next(iter(params.values()))
        xp = array_namespace(*params.values())
        self.xp = xp
        self.dtype = first.dtype
        self.device = first.device
        self._params = {k: xp.reshape(v, (-1,)) for k, v in params.items()}
        self._options = options
        self.batch = int(self._params[self._names[0]].shape[0])
        for k, v in self._params.items():
            if int(v.shape[0]) != self.batch:
                msg = f"kernel parameter `{k}` must have shape ({self.batch},) like `{self._names[0]}`; got {tuple(v.shape)}"
                raise ValueError(msg)

    def take_rows(self, idx: Array) -> "KernelBase":
        """The kernel of rows ``idx`` (an int64 array; rows may repeat)."""
        xp = self.xp
        params = {k: xp.take(v, idx, axis=0) for k, v in self._params.items()}
        return type(self)(**params, **self._options)

    def p(self, name: str, ndim: int) -> Array:
        """Parameter ``name`` shaped to broadcast against an array with ``ndim`` axes (cached)."""
        key = (name, ndim)
        cache = self.__dict__.setdefault("_shaped", {})
        hit = cache.get(key)
        if hit is None:
            v = self._params[name]
            hit = cache[key] = self.xp.reshape(v, (v.shape[0],) + (1,) * (ndim - 1))
        return hit

    def _normal(self, rng: Any, shape: tuple) -> Array:
        return rng.normal(shape, dtype=self.dtype)
