"""ARHMM: exact likelihood and gradient against enumeration of state paths and finite differences.

The reference log-likelihood below is written independently of sgmc: it enumerates every path
``z_0..z_T`` of a small model and sums the complete-data densities (scipy's multivariate normal).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import multivariate_normal

import sgmc
from sgmc import backends
from sgmc.ssm import ARHMM, ARHMMParams, Buffered, all_windows, gather_windows

from _helpers import fd_jacobian


def rot(a):
    return np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])


def natural(theta, K, m, p):
    """(Pi, A, Q) from theta, independently of the model's code."""
    eta = theta[: K * K].reshape(K, K)
    Pi = np.exp(eta) / np.exp(eta).sum(axis=1, keepdims=True)
    o = K * K + K * m * m * p
    A = theta[K * K : o].reshape(K, m, m * p)
    tri = np.tril_indices(m)
    Q = np.empty((K, m, m))
    packed = theta[o:].reshape(K, -1)
    for k in range(K):
        psi = np.zeros((m, m))
        psi[tri] = packed[k]
        Q[k] = np.linalg.inv(psi @ psi.T)
    return Pi, A, Q


def brute_loglik(theta, y, K, p):
    """log p(y_{p+1..T} | y_{1..p}) by summing over all K^(T-p+1) paths z_0..z_{T-p}, z_0 uniform."""
    T, m = y.shape
    Pi, A, Q = natural(theta, K, m, p)
    n = T - p
    logem = np.empty((n, K))
    for i, t in enumerate(range(p, T)):
        ybar = np.concatenate([y[t - j] for j in range(1, p + 1)])
        for k in range(K):
            logem[i, k] = multivariate_normal(A[k] @ ybar, Q[k]).logpdf(y[t])
    terms = []
    for path in itertools.product(range(K), repeat=n + 1):
        lp = -np.log(K) + sum(np.log(Pi[path[i], path[i + 1]]) + logem[i, path[i + 1]] for i in range(n))
        terms.append(lp)
    return logsumexp(terms)


@pytest.fixture
def case():
    rng = np.random.default_rng(0)
    K, m, p = 2, 2, 2
    Pi = np.array([[0.7, 0.3], [0.4, 0.6]])
    A = np.stack([np.concatenate([0.6 * rot(-np.pi / 4), 0.2 * np.eye(2)], axis=1),
                  np.concatenate([0.5 * rot(np.pi / 4), -0.1 * np.eye(2)], axis=1)])
    Q = np.stack([0.3 * np.eye(2), np.array([[0.5, 0.1], [0.1, 0.2]])])
    y = rng.normal(size=(7, m))
    model = ARHMM(y, n_states=K, order=p)
    theta = np.asarray(model.unconstrain(ARHMMParams(Pi, A, Q)))
    theta = theta + 0.05 * rng.normal(size=theta.shape)  # off the Cholesky's positive diagonal too
    return model, theta, y, K, p


def test_loglik_matches_enumeration_of_paths(case):
    model, theta, y, K, p = case
    ll = float(model.log_lik(theta[None, :])[0])
    assert ll == pytest.approx(brute_loglik(theta, y, K, p), rel=1e-10, abs=1e-10)


def test_gradient_matches_finite_differences_of_the_enumeration(case):
    model, theta, y, K, p = case
    g = np.asarray(model.grad_log_lik(theta[None, :]))[0]
    fd = fd_jacobian(lambda th: np.array([brute_loglik(t, y, K, p) for t in th]), theta[None, :])[0]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)


def test_prior_gradient_matches_finite_differences(case):
    model, theta, _, _, _ = case
    g = np.asarray(model.grad_log_prior(theta[None, :]))[0]
    fd = fd_jacobian(lambda th: np.asarray(model.log_prior(th)), theta[None, :])[0]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)


def test_constrain_inverts_unconstrain(case):
    model, theta, _, _, _ = case
    Pi, A, Q = natural(theta, model.K, model.m, model.p)
    got = model.constrain(theta)
    for a, b in zip(got, (Pi, A, Q)):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-10, atol=1e-12)


def test_buffer_covering_the_series_gives_the_exact_gradient(case):
    model, theta, _, _, _ = case
    T = model.T
    w = all_windows(T, T, 0, np)  # one window, the whole series
    score = model.window_score(None, theta[None, :], w)[0]
    np.testing.assert_allclose(np.asarray(score)[0], np.asarray(model.grad_log_lik(theta[None, :]))[0], rtol=1e-10)
    # the expectation over all subsequences of the buffered gradient with B covering the series
    S = 2
    wb = all_windows(T, S, T, np)
    mean = np.asarray(model.exact_window_score(theta[None, :], wb, gather_windows(np, model.y, wb)))[0]
    np.testing.assert_allclose(mean, np.asarray(model.grad_log_lik(theta[None, :]))[0], rtol=1e-9, atol=1e-9)


def test_short_buffer_is_biased_and_windows_batch_over_chains(case):
    model, theta, _, _, _ = case
    wb = all_windows(model.T, 1, 0, np)
    nobuf = np.asarray(model.exact_window_score(theta[None, :], wb, gather_windows(np, model.y, wb)))[0]
    exact = np.asarray(model.grad_log_lik(theta[None, :]))[0]
    assert np.max(np.abs(nobuf - exact)) > 1e-3  # the check above can fail
    two = np.stack([theta, theta + 0.1])
    g2 = np.asarray(model.grad_log_lik(two))
    np.testing.assert_allclose(g2[0], exact, rtol=1e-12)
    np.testing.assert_allclose(g2[1], np.asarray(model.grad_log_lik((theta + 0.1)[None, :]))[0], rtol=1e-12)


def test_matches_across_backends(xb, case):
    model, theta, y, K, p = case
    m2 = ARHMM(xb.asarray(y), n_states=K, order=p)
    got = xb.to_numpy(m2.grad_log_lik(xb.asarray(theta[None, :])))
    ref = np.asarray(model.grad_log_lik(theta[None, :]))
    tol = 1e-3 if xb.float_dtype == "float32" else 1e-9
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())
    w = all_windows(model.T, 2, 1, np)
    ref_w = np.asarray(model.window_score(None, theta[None, :], w)[0])
    wx = all_windows(model.T, 2, 1, xb.xp, dtype=xb.dtype, device=xb.device)
    got_w = xb.to_numpy(m2.window_score(None, xb.asarray(theta[None, :]), wx)[0])
    np.testing.assert_allclose(got_w, ref_w, rtol=tol, atol=tol * np.abs(ref_w).max())


def test_sgld_with_buffered_gradients_runs_and_stays_near_the_truth():
    K, m, p = 2, 2, 1
    params = ARHMMParams(np.array([[0.1, 0.9], [0.9, 0.1]]), np.stack([0.9 * rot(-np.pi / 4), 0.9 * rot(np.pi / 4)]),
                         np.stack([0.1 * np.eye(2)] * 2))
    proto = ARHMM(np.zeros((5, m)), K, p)
    truth = np.asarray(proto.unconstrain(params))
    _, y = proto.simulate(backends.default_rng(1), 2000, truth)
    model = ARHMM(y, K, p)
    tr = sgmc.sample(model, "sgld", "buffered", step_size=1e-5, batch_size=10, n_iter=300, chains=2, init=truth,
                     rng=0, progress=False, estimator_options={"buffer": 4})
    draws = np.asarray(tr.draws)
    assert np.all(np.isfinite(draws))
    A_hat = draws[:, 150:, K * K : K * K + K * m * m].mean(axis=(0, 1))
    assert np.max(np.abs(A_hat - truth[K * K : K * K + K * m * m])) < 0.1
    assert isinstance(Buffered(model, subsequence_length=10), Buffered)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"n_states": 2, "order": 7}, "order"),
        ({"n_states": 2, "order": 0}, "order"),
        ({"n_states": 7, "order": 2}, "n_states"),
        ({"n_states": 0, "order": 1}, "n_states"),
        ({"n_states": 2, "order": 1, "prior_var": -1.0}, "prior_var"),
    ],
)
def test_bad_orders_and_state_counts_are_refused_by_name(kwargs, name):
    with pytest.raises((ValueError, TypeError), match=name):
        ARHMM(np.zeros((7, 2)), **kwargs)


def test_bad_theta_and_data_are_refused_by_name(case):
    model, theta, y, K, p = case
    with pytest.raises(ValueError, match="theta"):
        model.log_lik(theta[:-1])
    bad = theta.copy()
    bad[0] = np.nan
    with pytest.raises(ValueError, match="theta"):
        model.grad_log_lik(bad)
    yb = y.copy()
    yb[3, 1] = np.inf
    with pytest.raises(ValueError, match="y"):
        ARHMM(yb, K, p)
