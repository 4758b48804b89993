"""SLDS: blocked-Gibbs buffered gradients against an exact gradient computed by enumeration.

The reference below is written independently of sgmc: for a short series it enumerates every
regime path ``z_0..z_T``, computes ``log p(y | z)`` with a plain time-varying Kalman filter, sums the
paths (log-sum-exp) and differentiates by central finite differences. With ``K = 1`` the SLDS is the
LGSSM, whose exact gradient is sgmc's Kalman smoother (itself checked in test_ssm_exact.py).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.special import logsumexp

import sgmc
from sgmc import backends
from sgmc.ssm import LGSSM, SLDS, SLDSParams, all_windows

from _helpers import Z_TOL, fd_jacobian, replicate_mean


def kalman_loglik_tv(As, Qs, C, R, y, m0, P0):
    """log p(y | A_t, Q_t) of x_t = A_t x_{t-1} + N(0, Q_t), y_t = C x_t + N(0, R), x_0 ~ N(m0, P0)."""
    m, P, ll = m0, P0, 0.0
    for t in range(y.shape[0]):
        m = As[t] @ m
        P = As[t] @ P @ As[t].T + Qs[t]
        S = C @ P @ C.T + R
        v = y[t] - C @ m
        ll += -0.5 * (len(v) * np.log(2 * np.pi) + np.linalg.slogdet(S)[1] + v @ np.linalg.solve(S, v))
        K = P @ C.T @ np.linalg.inv(S)
        m = m + K @ v
        P = P - K @ S @ K.T
    return ll


def natural(model, theta):
    """(Pi, A, Q, C, R) from theta, independently of the model's code (n = m = 1, C fixed to 1)."""
    K = model.K
    eta = theta[: K * K].reshape(K, K)
    Pi = np.exp(eta) / np.exp(eta).sum(axis=1, keepdims=True)
    A = theta[K * K : K * K + K].reshape(K, 1, 1)
    Q = (1.0 / theta[K * K + K : K * K + 2 * K] ** 2).reshape(K, 1, 1)
    R = np.array([[1.0 / theta[-1] ** 2]])
    return Pi, A, Q, np.ones((1, 1)), R


def brute_loglik(model, theta, y):
    Pi, A, Q, C, R = natural(model, theta)
    K, T = model.K, y.shape[0]
    terms = []
    for path in itertools.product(range(K), repeat=T + 1):
        lp = -np.log(K) + sum(np.log(Pi[path[t], path[t + 1]]) for t in range(T))
        z = path[1:]
        terms.append(lp + kalman_loglik_tv(A[list(z)], Q[list(z)], C, R, y, np.zeros(1), np.eye(1)))
    return logsumexp(terms)


@pytest.fixture(scope="module")
def small():
    y = np.array([[0.8], [-0.3], [1.1], [0.2]])
    model = SLDS(y, n_states=2)
    theta = np.asarray(model.unconstrain(SLDSParams(
        Pi=np.array([[0.7, 0.3], [0.4, 0.6]]), A=np.array([[[0.8]], [[-0.4]]]), Q=np.array([[[0.5]], [[0.3]]]),
        C=np.ones((1, 1)), R=np.full((1, 1), 0.5))))
    fd = fd_jacobian(lambda th: np.array([brute_loglik(model, t, y) for t in th]), theta[None, :])[0]
    return y, theta, fd


@pytest.mark.parametrize("gradient", ["z", "x", "xz"])
def test_each_gradient_is_unbiased_when_the_buffer_covers_the_series(small, gradient):
    y, theta, exact = small
    chains = 3000
    model = SLDS(y, n_states=2, gradient=gradient, n_samples=2, burn_in=15)
    w = all_windows(4, 4, 0, np)
    w = w._replace(**{f: np.broadcast_to(getattr(w, f), (chains,) + getattr(w, f).shape[1:]) for f in ("start", "length", "weight", "mask")})
    score, n_evals = model.window_score(backends.default_rng(11), np.broadcast_to(theta, (chains, theta.size)), w)
    mean, se = replicate_mean(np.asarray(score))
    assert np.all(np.asarray(n_evals) == 4)
    assert np.all(se > 0)
    np.testing.assert_array_less(np.abs(mean - exact), Z_TOL * se + 1e-6)


def test_the_check_above_detects_a_biased_gradient(small):
    """Dropping the transition out of z_0 (a plausible slip) shifts the eta gradient beyond the tolerance."""
    y, theta, exact = small
    chains = 3000
    model = SLDS(y, n_states=2, gradient="z", n_samples=2, burn_in=15)
    w = all_windows(4, 4, 0, np)
    w = w._replace(**{f: np.broadcast_to(getattr(w, f), (chains,) + getattr(w, f).shape[1:]) for f in ("start", "length", "weight", "mask")})
    weight = np.array(w.weight)
    weight[..., 0] = 0.0  # no score for the first position: a different target
    score, _ = model.window_score(backends.default_rng(11), np.broadcast_to(theta, (chains, theta.size)), w._replace(weight=weight))
    mean, se = replicate_mean(np.asarray(score))
    assert np.any(np.abs(mean - exact) > Z_TOL * se + 1e-6)


@pytest.mark.parametrize("n, m", [(1, 1), (2, 2), (2, 3)])
def test_one_regime_is_the_lgssm(n, m):
    rng = np.random.default_rng(n + m)
    y = rng.normal(size=(12, m))
    lg = LGSSM(y, state_dim=n)
    th = lg.unconstrain(lg.constrain(np.asarray(rng.normal(size=lg.dim) * 0.3 + 0.0)))
    A = 0.5 * np.eye(n) + 0.1 * rng.normal(size=(n, n))
    params = lg.constrain(th)._replace(A=A, Q=np.eye(n) * 0.4, R=np.eye(m) * 0.7)
    th = np.asarray(lg.unconstrain(params))
    model = SLDS(y, n_states=1, state_dim=n, gradient="z", n_samples=1, burn_in=0)
    th1 = np.concatenate([[0.3], th])
    w = all_windows(12, 12, 0, np)
    score, _ = model.window_score(0, th1[None, :], w)
    np.testing.assert_allclose(np.asarray(score)[0], np.concatenate([[0.0], np.asarray(lg.grad_log_lik(th[None, :]))[0]]), rtol=1e-9, atol=1e-10)
    # windows that start later: both start from the stationary law at theta
    wl = all_windows(12, 3, 2, np)
    got = np.asarray(model.window_score(0, th1[None, :], wl)[0])[0]
    ref = np.asarray(lg.window_score(None, th[None, :], wl)[0])[0]
    np.testing.assert_allclose(got, np.concatenate([[0.0], ref]), rtol=1e-9, atol=1e-10)
    gp = np.asarray(model.grad_log_prior(th1[None, :]))[0]
    np.testing.assert_allclose(gp[1:], np.asarray(lg.grad_log_prior(th[None, :]))[0], rtol=1e-10, atol=1e-12)


def test_prior_gradient_matches_finite_differences():
    rng = np.random.default_rng(2)
    model = SLDS(rng.normal(size=(6, 3)), n_states=2, state_dim=2)
    theta = rng.normal(size=model.dim) * 0.5 + 0.5
    g = np.asarray(model.grad_log_prior(theta[None, :]))[0]
    fd = fd_jacobian(lambda th: np.asarray(model.log_prior(th)), theta[None, :])[0]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)


def test_constrain_inverts_unconstrain(small):
    y, theta, _ = small
    model = SLDS(y, n_states=2)
    for a, b in zip(model.constrain(theta), natural(model, theta)):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(model.unconstrain(model.constrain(theta))), theta, rtol=1e-12)


def test_one_regime_matches_numpy_on_every_backend(xb):
    rng = np.random.default_rng(5)
    y = rng.normal(size=(10, 2))
    th = np.concatenate([[0.0], [0.5, 0.1, -0.2, 0.4], [1.2, 0.1, 1.1], [1.0, -0.2, 0.9]])
    w = all_windows(10, 4, 3, np)
    ref = np.asarray(SLDS(y, 1, gradient="z", n_samples=1, burn_in=0).window_score(0, th[None, :], w)[0])
    model = SLDS(xb.asarray(y), 1, gradient="z", n_samples=1, burn_in=0)
    wx = all_windows(10, 4, 3, xb.xp, dtype=xb.dtype, device=xb.device)
    got = xb.to_numpy(model.window_score(xb.rng(0), xb.asarray(th[None, :]), wx)[0])
    tol = 1e-3 if xb.float_dtype == "float32" else 1e-9
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_sgld_with_buffered_gibbs_gradients_runs():
    proto = SLDS(np.zeros((5, 1)), n_states=2)
    truth = np.asarray(proto.unconstrain(SLDSParams(np.array([[0.9, 0.1], [0.1, 0.9]]), np.array([[[0.9]], [[-0.5]]]),
                                                    np.array([[[0.1]], [[0.3]]]), np.ones((1, 1)), np.full((1, 1), 0.1))))
    _, _, y = proto.simulate(backends.default_rng(3), 400, truth)
    for gradient in ("z", "x", "xz"):
        tr = sgmc.sample(SLDS(y, 2, gradient=gradient), "sgld", "buffered", step_size=1e-5, batch_size=10, n_iter=15,
                         chains=2, init=truth, rng=0, progress=False, estimator_options={"buffer": 5})
        draws = np.asarray(tr.draws)
        assert draws.shape == (2, 15, truth.size) and np.all(np.isfinite(draws))
        assert np.max(np.abs(draws[:, -1] - truth)) < 0.5


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"n_states": 6}, "n_states"),
        ({"n_states": 0}, "n_states"),
        ({"n_states": 2, "state_dim": 0}, "state_dim"),
        ({"n_states": 2, "gradient": "zx"}, "gradient"),
        ({"n_states": 2, "n_samples": 0}, "n_samples"),
        ({"n_states": 2, "burn_in": -1}, "burn_in"),
        ({"n_states": 2, "P0": np.eye(3)}, "P0"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, name):
    with pytest.raises((ValueError, TypeError), match=name):
        SLDS(np.zeros((5, 1)), **kwargs)


def test_bad_theta_and_data_are_refused_by_name(small):
    y, theta, _ = small
    model = SLDS(y, 2)
    w = all_windows(4, 4, 0, np)
    with pytest.raises(ValueError, match="theta"):
        model.window_score(0, theta[None, :-1], w)
    bad = theta.copy()
    bad[2] = np.inf
    with pytest.raises(ValueError, match="theta"):
        model.window_score(0, bad[None, :], w)
    with pytest.raises(ValueError, match="method"):
        model.window_score(0, theta[None, :], w, method="exact")
    yb = y.copy()
    yb[1, 0] = np.nan
    with pytest.raises(ValueError, match="y"):
        SLDS(yb, 2)
    with pytest.raises(NotImplementedError, match="buffered"):
        model.log_posterior(theta)
