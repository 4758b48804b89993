"""Fused particle-filter steps: propagate, weight and normalise in one call.

A bootstrap particle filter spends its time in one step repeated T times: move every particle through
the transition, weight it by the observation density, normalise the weights and record the
log-likelihood increment. For the stochastic volatility model of the Aicher thesis (Eq. 3.88),

    x_t = phi x_{t-1} + sigma eps_t,   eps_t ~ N(0, 1),      y_t | x_t ~ N(0, tau^2 exp(x_t)),

the step is :func:`sv_bootstrap_step`, with the formulas of :class:`sgmc.ssm.stochvol.SVKernel`
(``sigma`` and ``tau`` may carry a sign: the transition uses ``|sigma|``, the weight ``tau^2``). It is written against the array API and defines the result;
on CuPy the backend runs it as one CUDA kernel (:func:`sgmc._dispatch.native` name
``"stochvol_step"``) that touches every particle once per pass. The random numbers ``eps`` are
drawn by the caller, so both paths are deterministic functions of their inputs.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .._array_api import Array, array_namespace
from .._dispatch import native

__all__ = ["SVStep", "sv_bootstrap_step", "sv_bootstrap_step_twin"]

_LOG_2PI = math.log(2.0 * math.pi)


class SVStep(NamedTuple):
    """Result of one fused step for ``batch`` filters of ``N`` particles."""

    x: Array  # (batch, N) propagated particles
    log_weight: Array  # (batch, N) incremental log-weights log N(y; 0, tau^2 exp(x))
    weights: Array  # (batch, N) normalised weights W_i proportional to W_prev_i exp(log_weight_i)
    loglik: Array  # (batch,) float64: log sum_i W_prev_i exp(log_weight_i)


def sv_bootstrap_step_twin(
    x_prev: Array, eps: Array, y: Array, phi: Array, sigma: Array, tau: Array, w_prev: Array | None = None
) -> SVStep:
    """The array-API evaluation of :func:`sv_bootstrap_step`, which defines its result."""
    xp = array_namespace(x_prev, eps, y, phi, sigma, tau, w_prev)
    n = x_prev.shape[-1]
    x = phi[:, None] * x_prev + xp.abs(sigma)[:, None] * eps
    r = tau * tau
    const = -0.5 * (_LOG_2PI + xp.log(r))
    log_w = const[:, None] - 0.5 * x - (y * y)[:, None] * (0.5 / r)[:, None] * xp.exp(-x)
    if w_prev is None:
        a = log_w - math.log(n)
    else:
        # a particle of weight 0 keeps weight 0 (log 0 = -inf) without a floating-point warning
        pos = w_prev > 0
        a = xp.where(pos, xp.log(xp.where(pos, w_prev, 1.0)) + log_w, -math.inf)
    top = xp.max(a, axis=1, keepdims=True)
    e = xp.exp(a - top)
    total = xp.sum(xp.astype(e, xp.float64), axis=1, keepdims=True)
    w = xp.astype(xp.astype(e, xp.float64) / total, x.dtype)
    loglik = (xp.astype(top, xp.float64) + xp.log(total))[:, 0]
    return SVStep(x, log_w, w, loglik)


def sv_bootstrap_step(
    x_prev: Array, eps: Array, y: Array, phi: Array, sigma: Array, tau: Array, w_prev: Array | None = None
) -> SVStep:
    """One bootstrap particle filter step of the stochastic volatility model, for a batch of filters.

    Parameters
    ----------
    x_prev, eps : float arrays (batch, N)
        Particles at t - 1 and standard normal draws for the transition.
    y : float array (batch,)
        The observation y_t of each filter.
    phi, sigma, tau : float arrays (batch,)
        Each filter's parameters: persistence, state noise and observation scale (standard
        deviations up to sign, as in :class:`~sgmc.ssm.stochvol.SVKernel`).
    w_prev : float array (batch, N), optional
        Normalised weights carried from t - 1; ``None`` after resampling (equal weights 1/N).

    Returns
    -------
    SVStep
        Particles, incremental log-weights, normalised weights and the log-likelihood increment
        ``log sum_i W_prev_i N(y_t; 0, tau^2 exp(x_i))`` of each filter (float64).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.ssm.fused import sv_bootstrap_step
    >>> rng = np.random.default_rng(0)
    >>> x0, eps = rng.normal(size=(2, 100)), rng.normal(size=(2, 100))
    >>> par = np.array([0.9, 0.95])
    >>> step = sv_bootstrap_step(x0, eps, np.array([0.3, -1.0]), par, np.array([0.5, 0.4]), np.array([0.5, 1.0]))
    >>> step.weights.sum(axis=1).round(12).tolist()
    [1.0, 1.0]
    """
    xp = array_namespace(x_prev, eps, y, phi, sigma, tau, w_prev)
    fast = native(xp, "stochvol_step")
    if fast is not None:
        out = fast(x_prev, eps, y, phi, sigma, tau, w_prev)
        if out is not NotImplemented:  # a native may leave shapes it does not suit to the twin
            return SVStep(*out)
    return sv_bootstrap_step_twin(x_prev, eps, y, phi, sigma, tau, w_prev)
