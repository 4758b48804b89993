"""Gaussian KL, log-loss, predictive log-likelihood and MSE against scipy and closed forms."""

import math

import numpy as np
import pytest
from scipy import special, stats

from sgmc._array_api import device_of
from sgmc.diagnostics.metrics import gaussian_kl_from_samples, kl_gaussian, log_loss, mse, predictive_log_lik


def random_spd(rng, d):
    a = rng.normal(size=(d, d))
    return a @ a.T + d * np.eye(d)


# -- kl_gaussian ---------------------------------------------------------------------------------
def test_kl_gaussian_matches_monte_carlo_with_scipy():
    # KL(N0 || N1) = E_0[log p0(X) - log p1(X)], estimated with M = 200000 draws from N0 and scipy's
    # log densities. Tolerance: 5 standard errors of that Monte Carlo mean.
    rng = np.random.default_rng(0)
    d = 3
    m0, m1 = rng.normal(size=d), rng.normal(size=d)
    c0, c1 = random_spd(rng, d), random_spd(rng, d)
    x = stats.multivariate_normal(m0, c0).rvs(size=200_000, random_state=1)
    diff = stats.multivariate_normal(m0, c0).logpdf(x) - stats.multivariate_normal(m1, c1).logpdf(x)
    est, se = diff.mean(), diff.std(ddof=1) / math.sqrt(diff.size)
    assert abs(float(kl_gaussian(m0, c0, m1, c1)) - est) < 5 * se


def test_kl_gaussian_closed_forms():
    # univariate: log(s1 / s0) + (s0^2 + (m0 - m1)^2) / (2 s1^2) - 1/2
    m0, s0, m1, s1 = 0.3, 0.7, -1.1, 1.9
    want = math.log(s1 / s0) + (s0**2 + (m0 - m1) ** 2) / (2 * s1**2) - 0.5
    got = kl_gaussian(np.array([m0]), np.array([[s0**2]]), np.array([m1]), np.array([[s1**2]]))
    assert float(got) == pytest.approx(want, rel=1e-12)
    # zero for identical laws, asymmetric otherwise, and batched over leading axes
    rng = np.random.default_rng(1)
    c = random_spd(rng, 2)
    assert float(kl_gaussian(np.ones(2), c, np.ones(2), c)) == pytest.approx(0.0, abs=1e-12)
    a = float(kl_gaussian(np.zeros(2), c, np.ones(2), 2 * c))
    b = float(kl_gaussian(np.ones(2), 2 * c, np.zeros(2), c))
    assert a != pytest.approx(b)
    means = rng.normal(size=(4, 2))
    batch = np.asarray(kl_gaussian(means, np.stack([c] * 4), np.zeros(2), 2 * c))
    assert batch.shape == (4,)
    for i in range(4):
        assert batch[i] == pytest.approx(float(kl_gaussian(means[i], c, np.zeros(2), 2 * c)), rel=1e-12)


def test_kl_gaussian_validation():
    c = np.eye(2)
    with pytest.raises(ValueError, match="mean1"):
        kl_gaussian(np.zeros(2), c, np.zeros(3), np.eye(3))
    with pytest.raises(ValueError, match="cov1"):
        kl_gaussian(np.zeros(2), c, np.zeros(2), np.eye(3))
    with pytest.raises(ValueError, match="symmetric"):
        kl_gaussian(np.zeros(2), np.array([[1.0, 0.5], [0.0, 1.0]]), np.zeros(2), c)
    with pytest.raises(ValueError, match="positive definite"):
        kl_gaussian(np.zeros(2), c, np.zeros(2), np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="non-finite"):
        kl_gaussian(np.array([0.0, np.nan]), c, np.zeros(2), c)


# -- gaussian_kl_from_samples ----------------------------------------------------------------------
def test_kl_from_samples_is_reference_to_fit():
    rng = np.random.default_rng(2)
    ref_m, ref_c = np.array([0.5, -0.5]), np.array([[1.5, 0.5], [0.5, 1.5]])
    draws = rng.normal(size=(3, 400, 2)) * np.array([0.6, 1.4]) + 0.2     # a poor fit, 3 chains
    flat = draws.reshape(-1, 2)
    fit_m, fit_c = flat.mean(axis=0), np.cov(flat, rowvar=False)
    got = float(gaussian_kl_from_samples(draws, ref_m, ref_c))
    assert got == pytest.approx(float(kl_gaussian(ref_m, ref_c, fit_m, fit_c)), rel=1e-12)
    assert got != pytest.approx(float(kl_gaussian(fit_m, fit_c, ref_m, ref_c)), rel=1e-3)


def expected_kl_ref_to_fit(n, d):
    """Exact E[KL(N(mu, S) || N(xbar, S_hat))] for n draws from N(mu, S), S_hat with n - 1 denominator.

    (n - 1) S_hat ~ Wishart(n - 1, S) independent of xbar ~ N(mu, S / n), so
    E tr(S_hat^-1 S) = (n - 1) d / (n - d - 2), E (xbar - mu)' S_hat^-1 (xbar - mu) = that / n and
    E log det(S_hat S^-1) = sum_{i=1..d} psi((n - i) / 2) + d log(2 / (n - 1)).
    """
    tr = (n - 1) * d / (n - d - 2)
    logdet = sum(special.digamma((n - i) / 2) for i in range(1, d + 1)) + d * math.log(2 / (n - 1))
    return 0.5 * (tr * (1 + 1 / n) - d + logdet)


def test_kl_from_samples_expectation_from_wishart_theory():
    # 2000 replicates of n = 30 draws from the reference: the mean KL must match the exact
    # expectation within 4 standard errors of the replicate mean. (The reverse direction has a
    # different expectation, 0.5 (d / n - E log det(S_hat S^-1)), 13% smaller here: over 7 se.)
    n, d, reps = 30, 2, 2000
    rng = np.random.default_rng(3)
    ref_c = np.array([[1.5, 0.5], [0.5, 1.5]])
    chol = np.linalg.cholesky(ref_c)
    kls = np.array([
        float(gaussian_kl_from_samples(rng.normal(size=(n, d)) @ chol.T, np.zeros(d), ref_c))
        for _ in range(reps)
    ])
    se = kls.std(ddof=1) / math.sqrt(reps)
    assert abs(kls.mean() - expected_kl_ref_to_fit(n, d)) < 4 * se


def test_kl_from_samples_singular_fit_is_infinite():
    draws = np.random.default_rng(4).normal(size=(50, 1)) * np.array([[1.0, 2.0]])   # rank one
    assert float(gaussian_kl_from_samples(draws, np.zeros(2), np.eye(2))) == math.inf
    with pytest.raises(ValueError, match="ref_mean"):
        gaussian_kl_from_samples(np.ones((10, 2)), np.zeros(3), np.eye(2))
    with pytest.raises(ValueError, match="at least 2"):
        gaussian_kl_from_samples(np.ones((1, 2)), np.zeros(2), np.eye(2))


# -- log_loss ------------------------------------------------------------------------------------
def test_log_loss_matches_scipy_bernoulli():
    rng = np.random.default_rng(5)
    p = rng.uniform(0.01, 0.99, size=(3, 50))         # e.g. three draws' predictions
    y = (rng.uniform(size=50) < 0.4).astype(float)
    want = -stats.bernoulli.logpmf(y, p).mean(axis=-1)
    np.testing.assert_allclose(np.asarray(log_loss(p, y)), want, rtol=1e-12)
    assert np.asarray(log_loss(p[0], y)).shape == ()


def test_log_loss_clips_confident_mistakes():
    y = np.array([1.0, 0.0])
    got = float(log_loss(np.array([0.0, 0.0]), y))          # a certain mistake on the first point
    eps = np.finfo(np.float64).eps
    assert got == pytest.approx(-(math.log(eps) + math.log1p(-eps)) / 2, rel=1e-12)
    assert float(log_loss(np.array([1.0, 0.0]), y)) == pytest.approx(eps, rel=1e-3)   # near-perfect
    assert float(log_loss(np.array([0.0, 0.0]), y, eps=1e-3)) == pytest.approx(
        -(math.log(1e-3) + math.log1p(-1e-3)) / 2, rel=1e-12
    )


def test_log_loss_validation():
    with pytest.raises(ValueError, match="prob"):
        log_loss(np.array([1.2, 0.5]), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="y"):
        log_loss(np.array([0.2, 0.5]), np.array([2.0, 0.0]))
    with pytest.raises(ValueError, match="n_test"):
        log_loss(np.array([0.2, 0.5]), np.array([1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="eps"):
        log_loss(np.array([0.2, 0.5]), np.array([1.0, 0.0]), eps=0.7)


# -- predictive_log_lik --------------------------------------------------------------------------
def test_predictive_log_lik_matches_scipy_logsumexp():
    rng = np.random.default_rng(6)
    ll = rng.normal(-2.0, 1.5, size=(2, 40, 25))                  # (chains, draws, n_test)
    flat = ll.reshape(80, 25)
    want = np.mean(special.logsumexp(flat, axis=0) - math.log(80))
    assert float(predictive_log_lik(ll)) == pytest.approx(want, rel=1e-12)
    assert float(predictive_log_lik(flat)) == pytest.approx(want, rel=1e-12)


def test_predictive_log_lik_is_stable_and_handles_zero_likelihood():
    # every single-draw likelihood underflows (exp(-800) = 0 in float64), the average does not
    ll = np.array([[-800.0, -900.0], [-801.0, -901.0]])
    want = np.mean(special.logsumexp(ll, axis=0) - math.log(2))
    assert float(predictive_log_lik(ll)) == pytest.approx(want, rel=1e-12)
    # a zero likelihood under one draw is fine; under all draws the predictive density is zero
    assert float(predictive_log_lik(np.array([[-np.inf], [math.log(0.5)]]))) == pytest.approx(math.log(0.25))
    assert float(predictive_log_lik(np.array([[-np.inf, 0.0], [-np.inf, 0.0]]))) == -math.inf
    with pytest.raises(ValueError, match="NaN"):
        predictive_log_lik(np.array([[np.nan, 0.0]]))
    with pytest.raises(ValueError, match="log_lik"):
        predictive_log_lik(np.zeros(3))


def test_log_loss_of_averaged_probabilities_is_minus_predictive_log_lik():
    # For binary outcomes, -log of the draw-averaged probability of the observed label is the
    # negative log predictive density: two code paths, one number.
    rng = np.random.default_rng(9)
    eta = rng.normal(0.0, 2.0, size=(50, 30))                     # (draws, n_test) linear predictors
    y = (rng.uniform(size=30) < 0.5).astype(float)
    prob = 1 / (1 + np.exp(-eta))
    ll = y * eta - np.logaddexp(0.0, eta)
    assert float(log_loss(prob.mean(axis=0), y)) == pytest.approx(-float(predictive_log_lik(ll)), rel=1e-12)


# -- mse -----------------------------------------------------------------------------------------
def test_mse():
    ref = np.array([1.0, -2.0])
    assert float(mse(np.array([2.0, 0.0]), ref)) == pytest.approx(2.5)
    draws = np.random.default_rng(7).normal(size=(3, 100, 2))
    want = np.mean((draws.reshape(-1, 2).mean(axis=0) - ref) ** 2)
    assert float(mse(draws, ref)) == pytest.approx(want, rel=1e-12)
    assert float(mse(draws[0], ref)) == pytest.approx(np.mean((draws[0].mean(axis=0) - ref) ** 2), rel=1e-12)
    with pytest.raises(ValueError, match="draws_or_mean"):
        mse(np.zeros(3), ref)
    with pytest.raises(ValueError, match="reference_mean"):
        mse(np.zeros(2), np.zeros((2, 2)))


# -- every backend -------------------------------------------------------------------------------
def test_backends_agree_with_numpy(xb):
    rng = np.random.default_rng(8)
    m0, m1 = rng.normal(size=2), rng.normal(size=2)
    c0, c1 = random_spd(rng, 2), random_spd(rng, 2)
    draws = rng.normal(size=(2, 100, 2))
    p = rng.uniform(0.05, 0.95, size=(3, 20))
    y = (rng.uniform(size=20) < 0.5).astype(float)
    ll = rng.normal(-3.0, 1.0, size=(30, 20))
    a = xb.asarray
    cases = [
        (kl_gaussian(a(m0), a(c0), a(m1), a(c1)), kl_gaussian(m0, c0, m1, c1)),
        (gaussian_kl_from_samples(a(draws), a(m0), a(c0)), gaussian_kl_from_samples(draws, m0, c0)),
        (log_loss(a(p), a(y)), log_loss(p, y)),
        (predictive_log_lik(a(ll)), predictive_log_lik(ll)),
        (mse(a(draws), a(m0)), mse(draws, m0)),
    ]
    rtol = 1e-10 if xb.float_dtype == "float64" else 1e-4      # float32 rounding in solves and sums
    ref = a(m0)
    for got, want in cases:
        assert type(got) is type(ref)
        assert got.dtype == xb.dtype
        assert device_of(got) == device_of(ref)
        np.testing.assert_allclose(xb.to_numpy(got), np.asarray(want), rtol=rtol)


def test_mixed_namespaces_raise(xb):
    if xb.name == "numpy":
        pytest.skip("needs a second library")
    with pytest.raises(TypeError, match="sgmc.backends.asarray"):
        kl_gaussian(xb.asarray(np.zeros(2)), np.eye(2), np.zeros(2), np.eye(2))
