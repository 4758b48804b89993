"""Posterior state estimates and forecasts of a state space model, averaged over posterior draws.

For each draw ``theta^(s)`` the exact filter gives ``p(x_t | y_1..t, theta)`` (filtered),
``p(x_t | y_1..T, theta)`` (smoothed), the one-step predictive ``p(y_t | y_1..t-1, theta)`` and the
k-step forecast ``p(y_T+k | y_1..T, theta)``; the posterior predictive is their mixture over the
draws, whose mean is the average of the means and whose covariance is the average covariance plus
the covariance of the means (the law of total variance). All draws run as one batch.

Supported: :class:`sgmc.ssm.LGSSM` (Kalman filter / smoother) and :class:`sgmc.ssm.GaussianHMM`
(forward filter, forward-backward; the "state" summary is the vector of state probabilities).

>>> import numpy as np
>>> from sgmc import backends
>>> from sgmc.ssm import LGSSM, forecast
>>> x, y = LGSSM.simulate_scalar(backends.default_rng(0), 100, [0.9, 2.0, 2.0])
>>> draws = np.array([[0.9, 2.0, 2.0], [0.85, 2.1, 1.9]])
>>> fc = forecast(LGSSM(y), draws, steps=5)
>>> fc.mean.shape, fc.cov.shape
((5, 1), (5, 1, 1))
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import backends
from .._array_api import Array, device_of, is_array
from .._validation import check_int
from .hmm import GaussianHMM, _log_emission, forward_backward
from .kalman import kalman_filter, kalman_smoother
from .lgssm import LGSSM

__all__ = ["Prediction", "filtered_states", "smoothed_states", "one_step_predictions", "forecast"]


class Prediction(NamedTuple):
    """Posterior mean ``(steps, d)`` and covariance ``(steps, d, d)`` (mixture over the draws)."""

    mean: Array
    cov: Array


def _draws(model: Any, draws: Any) -> Array:
    """Posterior draws as a ``(n_draws, dim)`` array of the model's namespace (a Trace is flattened)."""
    if hasattr(draws, "flat_draws"):
        draws = draws.flat_draws()
    xp = model.xp
    if not is_array(draws):
        draws = backends.asarray(draws, backend=backends.get_backend(xp), dtype=model.dtype, device=model.device)
    if draws.ndim == 1:
        draws = xp.reshape(draws, (1, -1))
    if draws.ndim != 2 or draws.shape[1] != model.dim:
        msg = f"`draws` must have shape (n_draws, {model.dim}) or be a Trace; got {tuple(draws.shape)}"
        raise ValueError(msg)
    return draws


def _mixture(xp, means: Array, covs: Array) -> Prediction:
    """Moments of the equal-weight mixture over axis 0: means (S, L, d), covs (S, L, d, d)."""
    mean = xp.mean(means, axis=0)
    dev = means - mean
    cov = xp.mean(covs, axis=0) + xp.mean(dev[..., :, None] * dev[..., None, :], axis=0)
    return Prediction(mean, cov)


def _check(model: Any) -> None:
    if not isinstance(model, (LGSSM, GaussianHMM)):
        msg = f"`model` must be an LGSSM or a GaussianHMM; got {type(model).__name__}"
        raise TypeError(msg)


def _start(model: Any, draws: Any) -> tuple[Any, Array]:
    """The model checked; its namespace and the draws as (S, dim)."""
    _check(model)
    return model.xp, _draws(model, draws)


def _lgssm(model: LGSSM, th: Array):
    xp = model.xp
    A, Q, C, R, _, _ = model._matrices(th)
    S = th.shape[0]
    m0 = xp.broadcast_to(model.m0[None, :], (S, model.n))
    P0 = xp.broadcast_to(model.P0[None, ...], (S, model.n, model.n))
    return A, Q, C, R, m0, P0


def _lgssm_filter(model: LGSSM, th: Array):
    """The model's matrices at every draw and the Kalman filter of its series: A, Q, C, R, filter."""
    A, Q, C, R, m0, P0 = _lgssm(model, th)
    return A, Q, C, R, kalman_filter(A, Q, C, R, model.y, m0, P0)


def _hmm_emissions(model: GaussianHMM, th: Array):
    """Transition matrices, emission means and log emission densities (S, T, K) at every draw."""
    xp = model.xp
    eta, mu, psi = model._split(th)
    Pi = model._Pi(eta)
    S = th.shape[0]
    y = xp.broadcast_to(model.y[None, ...], (S,) + tuple(model.y.shape))
    return Pi, mu, _log_emission(xp, y, mu, psi)


def _hmm_filter(model: GaussianHMM, th: Array):
    xp = model.xp
    Pi, mu, logp = _hmm_emissions(model, th)
    S = th.shape[0]
    shift = xp.max(logp, axis=-1, keepdims=True)
    p = xp.exp(logp - shift)
    a = model._p0_uniform(S)
    preds, filts = [], []
    for t in range(model.T):
        pred = (a[:, None, :] @ Pi)[:, 0, :]
        a = pred * p[:, t, :]
        a = a / xp.sum(a, axis=-1, keepdims=True)
        preds.append(pred)
        filts.append(a)
    return Pi, mu, xp.stack(preds, axis=1), xp.stack(filts, axis=1), logp


def _probs_summary(xp, probs: Array) -> Prediction:
    """Mixture moments of one-hot state indicators with probabilities (S, L, K)."""
    mean = xp.mean(probs, axis=0)
    eye = xp.eye(probs.shape[-1], dtype=probs.dtype, device=device_of(probs))
    return Prediction(mean, eye * mean[..., None, :] - mean[..., :, None] * mean[..., None, :])


def _hmm_y_moments(xp, probs: Array, mu: Array, Sigma: Array) -> tuple[Array, Array]:
    """Mean and covariance of y under state probabilities probs (S, L, K): (S, L, m), (S, L, m, m)."""
    mean = probs @ mu  # (S, L, m)
    second = xp.sum(probs[..., None, None] * (Sigma + mu[..., :, None] * mu[..., None, :])[:, None, ...], axis=2)
    return mean, second - mean[..., :, None] * mean[..., None, :]


def filtered_states(model: Any, draws: Any) -> Prediction:
    """Posterior filtered state estimates ``E[x_t | y_1..t]`` (mixture over the draws), shape (T, n).

    For the HMM the "state" is the one-hot indicator of ``z_t``: the mean is the vector of filtered
    state probabilities.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.ssm import LGSSM, filtered_states
    >>> filtered_states(LGSSM(np.zeros(10)), np.array([0.5, 1.0, 1.0])).mean.shape
    (10, 1)
    """
    xp, th = _start(model, draws)
    if isinstance(model, LGSSM):
        f = _lgssm_filter(model, th)[-1]
        return _mixture(xp, f.mean, f.cov)
    _, _, _, filt, _ = _hmm_filter(model, th)
    return _probs_summary(xp, filt)


def smoothed_states(model: Any, draws: Any) -> Prediction:
    """Posterior smoothed state estimates ``E[x_t | y_1..T]`` (mixture over the draws), shape (T, n).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.ssm import LGSSM, smoothed_states
    >>> smoothed_states(LGSSM(np.zeros(10)), np.array([0.5, 1.0, 1.0])).cov.shape
    (10, 1, 1)
    """
    xp, th = _start(model, draws)
    if isinstance(model, LGSSM):
        A, Q, C, R, m0, P0 = _lgssm(model, th)
        s = kalman_smoother(A, Q, C, R, model.y, m0, P0)
        return _mixture(xp, s.mean, s.cov)
    Pi, _, logp = _hmm_emissions(model, th)
    _, gamma, _, _ = forward_backward(Pi, logp, model._p0_uniform(th.shape[0]), xp=xp)
    return _probs_summary(xp, gamma)


def one_step_predictions(model: Any, draws: Any) -> Prediction:
    """Posterior one-step-ahead predictive of each observation, ``p(y_t | y_1..t-1)``: (T, m).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.ssm import LGSSM, one_step_predictions
    >>> one_step_predictions(LGSSM(np.zeros(10)), np.array([0.5, 1.0, 1.0])).mean.shape
    (10, 1)
    """
    xp, th = _start(model, draws)
    if isinstance(model, LGSSM):
        _, _, C, R, f = _lgssm_filter(model, th)
        Cb = C[:, None, ...]
        mean = (Cb @ f.mean_pred[..., None])[..., 0]
        cov = Cb @ f.cov_pred @ xp.matrix_transpose(Cb) + R[:, None, ...]
        return _mixture(xp, mean, cov)
    Pi, mu, pred, _, _ = _hmm_filter(model, th)
    Sigma = model.constrain(th).Sigma
    mean, cov = _hmm_y_moments(xp, pred, mu, Sigma)
    return _mixture(xp, mean, cov)


def forecast(model: Any, draws: Any, steps: int = 1) -> Prediction:
    """Posterior k-step forecasts ``p(y_T+k | y_1..T)`` for ``k = 1..steps``: (steps, m).

    Parameters
    ----------
    model : LGSSM or GaussianHMM
    draws : array (n_draws, dim) or Trace
        Posterior draws of ``theta``.
    steps : int
        Forecast horizon.

    Returns
    -------
    Prediction
        Mean ``(steps, m)`` and covariance ``(steps, m, m)`` of the posterior predictive.
    """
    _check(model)
    steps = check_int(steps, "steps")
    th = _draws(model, draws)
    xp = model.xp
    means, covs = [], []
    if isinstance(model, LGSSM):
        A, Q, C, R, f = _lgssm_filter(model, th)
        m, P = f.mean[:, -1, :], f.cov[:, -1, ...]
        mT = xp.matrix_transpose
        for _ in range(steps):
            m = (A @ m[..., None])[..., 0]
            P = A @ P @ mT(A) + Q
            means.append((C @ m[..., None])[..., 0])
            covs.append(C @ P @ mT(C) + R)
        return _mixture(xp, xp.stack(means, axis=1), xp.stack(covs, axis=1))
    Pi, mu, _, filt, _ = _hmm_filter(model, th)
    Sigma = model.constrain(th).Sigma
    p = filt[:, -1, :]
    probs = []
    for _ in range(steps):
        p = (p[:, None, :] @ Pi)[:, 0, :]
        probs.append(p)
    mean, cov = _hmm_y_moments(xp, xp.stack(probs, axis=1), mu, Sigma)
    return _mixture(xp, mean, cov)
