"""Posterior state estimates and forecasts (sgmc.ssm.forecast) against the dense joint Gaussian."""

from __future__ import annotations

import numpy as np
import pytest

from sgmc import backends
from sgmc.ssm import (
    LGSSM,
    GaussianHMM,
    HMMParams,
    LGSSMParams,
    filtered_states,
    forecast,
    forecast_plot,
    one_step_predictions,
    smoothed_states,
)


def joint_y(A, Q, C, R, m0, P0, L):
    """Mean and covariance of y_1..L (stacked) of the linear Gaussian model."""
    n, m = A.shape[0], C.shape[0]
    mx, Px = m0, P0
    means, blocks = [], {}
    # state covariances Cov(x_s, x_t) = A^{t-s} Var(x_s), s <= t
    var = []
    for _ in range(L):
        mx = A @ mx
        Px = A @ Px @ A.T + Q
        means.append(C @ mx)
        var.append(Px)
    Sy = np.zeros((L * m, L * m))
    for s in range(L):
        for t in range(s, L):
            cxx = np.linalg.matrix_power(A, t - s) @ var[s]
            blk = C @ cxx @ C.T + (R if s == t else 0)
            Sy[t * m : (t + 1) * m, s * m : (s + 1) * m] = blk
            Sy[s * m : (s + 1) * m, t * m : (t + 1) * m] = blk.T
    return np.concatenate(means), Sy


@pytest.mark.parametrize("n", [1, 2])
def test_lgssm_forecasts_match_gaussian_conditioning(xb, n):
    rng = np.random.default_rng(n)
    T, k = 6, 3
    A = 0.6 * np.eye(n) + 0.1 * rng.normal(size=(n, n))
    Q = 0.5 * np.eye(n)
    C, R = np.eye(n), 0.3 * np.eye(n)
    y = rng.normal(size=(T, n))
    model_np = LGSSM(y)
    theta = model_np.unconstrain(LGSSMParams(A, Q, C, R))
    mu, Sy = joint_y(A, Q, C, R, np.zeros(n), np.eye(n), T + k)
    obs = slice(0, T * n)
    fut = slice(T * n, (T + k) * n)
    K = Sy[fut, obs] @ np.linalg.inv(Sy[obs, obs])
    f_mean = mu[fut] + K @ (y.ravel() - mu[obs])
    f_cov = Sy[fut, fut] - K @ Sy[obs, fut]
    model = LGSSM(xb.asarray(y))
    fc = forecast(model, xb.asarray(theta[None]), steps=k)
    tol = max(1e-9, 1e3 * xb.eps)
    np.testing.assert_allclose(xb.to_numpy(fc.mean).ravel(), f_mean, atol=tol)
    for j in range(k):
        np.testing.assert_allclose(xb.to_numpy(fc.cov)[j], f_cov[j * n : (j + 1) * n, j * n : (j + 1) * n], atol=tol)
    # one-step predictions: y_t | y_1..t-1
    pred = one_step_predictions(model, xb.asarray(theta[None]))
    for t in (0, 3, T - 1):
        past = slice(0, t * n)
        cur = slice(t * n, (t + 1) * n)
        if t == 0:
            m_ref, c_ref = mu[cur], Sy[cur, cur]
        else:
            Kt = Sy[cur, past] @ np.linalg.inv(Sy[past, past])
            m_ref = mu[cur] + Kt @ (y.ravel()[past] - mu[past])
            c_ref = Sy[cur, cur] - Kt @ Sy[past, cur]
        np.testing.assert_allclose(xb.to_numpy(pred.mean)[t], m_ref, atol=tol)
        np.testing.assert_allclose(xb.to_numpy(pred.cov)[t], c_ref, atol=tol)


def test_posterior_mixture_over_draws():
    _, y = LGSSM.simulate_scalar(backends.default_rng(0), 50, [0.9, 2.0, 2.0])
    model = LGSSM(y)
    draws = np.array([[0.9, 2.0, 2.0], [0.5, 1.0, 3.0]])
    both = smoothed_states(model, draws)
    each = [smoothed_states(model, d) for d in draws]
    m = np.stack([e.mean for e in each])
    np.testing.assert_allclose(both.mean, m.mean(axis=0), rtol=1e-12)
    spread = ((m - m.mean(axis=0)) ** 2).mean(axis=0)[..., None]
    np.testing.assert_allclose(both.cov, np.mean([e.cov for e in each], axis=0) + spread, rtol=1e-12)
    f = filtered_states(model, draws)
    # the filtered estimate at the last time is the smoothed one
    np.testing.assert_allclose(f.mean[-1], both.mean[-1], rtol=1e-12)


def test_hmm_forecast_tends_to_the_stationary_mixture(tmp_path):
    proto = GaussianHMM(np.zeros(2), 2)
    Pi = np.array([[0.9, 0.1], [0.3, 0.7]])
    theta = proto.unconstrain(HMMParams(Pi, np.array([[-1.0], [2.0]]), np.array([[[0.5]], [[1.0]]])))
    _, y = proto.simulate(backends.default_rng(1), 60, theta)
    model = GaussianHMM(y, 2)
    fc = forecast(model, theta[None], steps=200)
    pi = np.array([0.75, 0.25])  # stationary distribution of Pi
    mean = pi @ np.array([-1.0, 2.0])
    var = pi @ (np.array([0.5, 1.0]) + np.array([1.0, 4.0])) - mean**2
    np.testing.assert_allclose(fc.mean[-1, 0], mean, atol=1e-10)
    np.testing.assert_allclose(fc.cov[-1, 0, 0], var, atol=1e-10)
    pred = one_step_predictions(model, theta[None])
    first = np.array([0.5, 0.5]) @ Pi  # z_0 uniform
    np.testing.assert_allclose(pred.mean[0, 0], first @ np.array([-1.0, 2.0]), atol=1e-12)
    s = smoothed_states(model, theta[None])
    np.testing.assert_allclose(s.mean.sum(axis=-1), 1.0, atol=1e-12)
    pytest.importorskip("matplotlib")
    out = forecast_plot(y, tmp_path / "fc.png", predictions=pred, forecast=forecast(model, theta[None], steps=10))
    assert (tmp_path / "fc.png").stat().st_size > 0 and out.endswith("fc.png")
