"""A Langevin step size for a run of known length: the one that minimises the predicted error of the sds.

On a Gaussian target with unit variances (a posterior in coordinates where the Laplace covariance
is the identity), SGLD with step h and gradient-estimate noise of variance v per coordinate is an
autoregression whose stationary variance is (1 + h v / 4) / (1 - h / 4) (Nemeth and Fearnhead 2021,
section 3.1, with their nu the half of the gradient error): the posterior sds it reports are
inflated by that factor's square root. The sample sds of K kept draws (all chains) have a Monte
Carlo relative error of about sqrt((1 + rho^2) / (2 (1 - rho^2) K)), with rho = 1 - h / 2 the
autocorrelation. The bias grows with h and the noise falls with it (the review's O(h^2 + 1 / (h K))
trade-off, Vollmer et al. 2016); :func:`sd_error_step` takes the h on a geometric grid below a
stability cap that minimises the sum of their squares. :func:`gradient_noise` measures v with the
estimator itself, at draws of the Laplace approximation.
"""

from __future__ import annotations

import math
from typing import Any

from ._array_api import Array, is_array
from .estimators import SupportsPrepare

__all__ = ["gradient_noise", "predicted_sd_error", "sd_error_step"]

#: Points of the Laplace approximation and repeated estimates at each that :func:`gradient_noise` uses.
NOISE_POINTS, NOISE_REPEATS = 32, 16


def gradient_noise(estimator: Any, rng: Any, mode: Array, points: int = NOISE_POINTS,
                   repeats: int = NOISE_REPEATS) -> tuple[float, float]:
    """The largest per-coordinate variance of the estimator's gradient, averaged over N(mode, I) draws.

    ``mode`` is the mode in coordinates where the Laplace covariance is the identity. The estimator
    is prepared and initialised with the ``points`` draws as its chains, then asked ``repeats``
    times; the sample variance across repeats at each point, averaged over the points, is the noise
    variance per coordinate, and its largest entry is returned with the per-datum evaluations spent
    (per chain, as the estimators count them, summed over the points).
    """
    xp = estimator.model.xp
    dim = int(mode.shape[-1])
    z = rng.normal((points, dim), dtype=mode.dtype)
    position = xp.reshape(mode, (1, dim)) + z
    evals = 0.0
    est = estimator
    if isinstance(est, SupportsPrepare):
        prepared = est.prepare(rng, position)
        est = prepared.estimator
        evals += float(prepared.n_evals)
    state = est.init(rng, position)
    evals += float(getattr(est, "init_cost", 0.0))
    s1 = xp.zeros((points, dim), dtype=mode.dtype)
    s2 = xp.zeros((points, dim), dtype=mode.dtype)
    for _ in range(repeats):
        g, state, info = est.estimate(rng, state, position)
        s1, s2 = s1 + g, s2 + g * g
        n = info.n_evals
        evals += float(xp.sum(n)) if is_array(n) else float(n) * points
    var = (s2 - s1 * s1 / repeats) / (repeats - 1)
    per_coord = xp.mean(var, axis=0)
    return max(float(xp.max(per_coord)), 0.0), evals


def predicted_sd_error(h: float, noise: float, kept: int) -> tuple[float, float]:
    """Relative bias and Monte Carlo error of SGLD's sds on a unit Gaussian: step ``h``, noise ``noise``, ``kept`` draws."""
    bias = math.sqrt((1.0 + h * noise / 4.0) / (1.0 - h / 4.0)) - 1.0
    rho = 1.0 - h / 2.0
    mc = math.sqrt((1.0 + rho * rho) / (2.0 * (1.0 - rho * rho) * kept))
    return bias, mc


def sd_error_step(noise: float, kept: int, h_max: float, points: int = 200) -> float:
    """The h in (h_max / 10^4, h_max] (geometric grid) minimising bias^2 + MC error^2 of the sds.

    Examples
    --------
    >>> h = sd_error_step(noise=100.0, kept=40_000, h_max=0.1)
    >>> round(h, 4)
    0.0048
    >>> sd_error_step(noise=0.0, kept=10**9, h_max=0.5) < 0.5   # a long exact-gradient run: smaller h
    True
    """
    best, best_err = h_max, math.inf
    for k in range(points + 1):
        h = h_max * 10.0 ** (-4.0 * k / points)
        bias, mc = predicted_sd_error(h, noise, kept)
        err = bias * bias + mc * mc
        if err < best_err:
            best, best_err = h, err
    return best
