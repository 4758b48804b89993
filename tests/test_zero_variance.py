"""Zero-variance posterior means: exact on Gaussians, unbiased and honestly calibrated elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

from sgmc.diagnostics import zv_mean
from sgmc.diagnostics.zero_variance import n_zv_features, zv_order_for

from _helpers import Z_TOL


def _gaussian(seed: int, chains: int = 2, n: int = 120):
    r = np.random.default_rng(seed)
    A = r.normal(size=(3, 3))
    cov = A @ A.T + np.eye(3)
    mu = np.array([1.0, -2.0, 3.0])
    x = r.multivariate_normal(mu, cov, size=(chains, n))
    g = -(x - mu) @ np.linalg.inv(cov)
    return x, g, mu


@pytest.mark.parametrize("order", [1, 2])
def test_exact_on_gaussian_targets(order):
    # Both degrees contain x - mu = -Sigma grad log pi, so the estimate is the mean up to rounding.
    x, g, mu = _gaussian(0)
    est = zv_mean(x, g, order=order)
    np.testing.assert_allclose(est.mean, mu, atol=1e-8)
    assert np.all(est.se < 1e-8)
    assert np.all(est.plain_se > 0.05)


def _gamma_pair(seed: int, chains: int = 2, n: int = 300):
    """Independent Gamma(3, 1) and Gamma(6, 2) coordinates: skewed, with known means 3 and 3."""
    r = np.random.default_rng(seed)
    a = np.array([3.0, 6.0])
    b = np.array([1.0, 2.0])
    x = r.gamma(a, 1.0 / b, size=(chains, n, 2))
    g = (a - 1.0) / x - b
    return x, g, a / b


def test_degree_two_is_unbiased_and_its_standard_error_is_calibrated():
    # 300 replications: the average estimate is within Z_TOL Monte Carlo errors of the truth, and the
    # reported standard errors match the spread of the estimates (ratio near 1; a fit on the same
    # draws that are averaged, or an error that ignored the fit, would show in one of the two).
    est, se = [], []
    for seed in range(300):
        x, g, truth = _gamma_pair(seed)
        e = zv_mean(x, g, order=2)
        est.append(e.mean)
        se.append(e.se)
    est, se = np.array(est), np.array(se)
    spread = est.std(axis=0, ddof=1)
    bias_z = (est.mean(axis=0) - truth) / (spread / np.sqrt(len(est)))
    assert np.all(np.abs(bias_z) < Z_TOL), bias_z
    # the sd of a sd estimate from 300 replications is about 4%; the mcse itself is noisy too
    ratio = se.mean(axis=0) / spread
    assert np.all((ratio > 0.8) & (ratio < 1.25)), ratio


def test_control_variates_remove_most_of_the_noise():
    x, g, truth = _gamma_pair(1)
    e2 = zv_mean(x, g, order=2)
    e1 = zv_mean(x, g, order=1)
    assert np.all(e2.se < e2.plain_se / 5)
    assert np.all(e1.se < e1.plain_se)
    assert np.all(np.abs(e2.mean - truth) < Z_TOL * e2.se)


def test_one_chain_is_split_in_halves():
    x, g, truth = _gamma_pair(2, chains=1, n=600)
    e = zv_mean(x[0], g[0])
    assert e.mean.shape == (2,)
    assert np.all(np.abs(e.mean - truth) < Z_TOL * e.se)


def test_array_api_strict_matches_numpy():
    xps = pytest.importorskip("array_api_strict")
    x, g, _ = _gamma_pair(3)
    a = zv_mean(x, g)
    b = zv_mean(xps.asarray(x), xps.asarray(g))
    np.testing.assert_allclose(np.asarray(b.mean), a.mean, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(b.se), a.se, rtol=1e-8)


def test_feature_counts_and_order_choice():
    assert n_zv_features(10, 1) == 10
    assert n_zv_features(10, 2) == 65
    assert zv_order_for(10, 270) == 2
    assert zv_order_for(10, 100) == 1
    assert zv_order_for(100, 1350) == 1


def test_errors_name_the_argument():
    x, g, _ = _gamma_pair(4)
    with pytest.raises(ValueError, match="`grads` must have the shape"):
        zv_mean(x, g[:, :10, :])
    with pytest.raises(ValueError, match="`order` must be 1 or 2"):
        zv_mean(x, g, order=3)
    bad = g.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="`grads` contains 1 non-finite"):
        zv_mean(x, bad)
    with pytest.raises(ValueError, match="order=1"):
        zv_mean(x[:, :3, :], g[:, :3, :])
