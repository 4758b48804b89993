"""Effective sample size and split-R-hat: AR(1) closed forms, ArviZ as an oracle, every backend."""

import importlib
import math

import numpy as np
import pytest
from scipy.signal import lfilter

from sgmc._array_api import device_of
from sgmc.diagnostics.ess import ess, ess_batch_means, rhat

# the module (its name is shadowed by the function in the package namespace)
ess_mod = importlib.import_module("sgmc.diagnostics.ess")


def ar1(rho, shape, seed):
    """Stationary AR(1) series with unit marginal variance along axis 1 of ``shape`` (a, n, b)."""
    rng = np.random.default_rng(seed)
    e = rng.normal(size=shape) * math.sqrt(1.0 - rho**2)
    e[:, 0, :] = rng.normal(size=(shape[0], shape[2]))
    return lfilter([1.0], [1.0, -rho], e, axis=1)


def tau_ar1(rho):
    """Integrated autocorrelation time of AR(1): 1 + 2 sum_t rho^t = (1 + rho) / (1 - rho)."""
    return (1.0 + rho) / (1.0 - rho)


# -- AR(1) closed form ---------------------------------------------------------------------------
@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9])
def test_ess_autocorr_matches_ar1_closed_form(rho):
    # 200 independent chains of n = 4000 draws. We compare the mean over replicates of
    # tau_hat = n / ESS_hat with tau = (1 + rho) / (1 - rho), i.e. ESS = n (1 - rho) / (1 + rho).
    # Tolerance: 4 standard errors of the replicate mean (the MC error, estimated from the
    # replicates) plus 3% of tau for the estimator's own finite-sample bias: Geyer's truncated sum
    # keeps pairs of lags while their noise keeps them positive, which biases tau_hat upwards by
    # O(sqrt(tau / n)); a 400-replicate study put it at 2.3%, 2.0% and 3.5% for these rho.
    n, reps = 4000, 200
    x = ar1(rho, (reps, n, 1), seed=10 + int(10 * rho))
    e = np.asarray(ess(x, per_chain=True))[:, 0]
    tau_hat = n / e
    se = tau_hat.std(ddof=1) / math.sqrt(reps)
    tau = tau_ar1(rho)
    assert abs(tau_hat.mean() - tau) <= 4 * se + 0.03 * tau


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9])
def test_multichain_ess_matches_ar1_closed_form(rho):
    # Four chains combined: ESS = 4 n (1 - rho) / (1 + rho). The 60 coordinates are independent
    # replicates (ESS is computed per coordinate in one call). Same tolerance as above; the
    # multi-chain bias is smaller (|bias| < 1.1% of tau in a 100-replicate study).
    n, chains, reps = 4000, 4, 60
    x = ar1(rho, (chains, n, reps), seed=20 + int(10 * rho))
    e = np.asarray(ess(x))
    tau_hat = chains * n / e
    se = tau_hat.std(ddof=1) / math.sqrt(reps)
    tau = tau_ar1(rho)
    assert abs(tau_hat.mean() - tau) <= 4 * se + 0.03 * tau


def batch_means_expectation(rho, n, b):
    """Exact E[b * var(batch means)] for unit-variance stationary AR(1), ``a = n // b`` batches.

    The batch means Y_1..Y_a have Cov(Y_i, Y_j) = b^-2 sum_{s in batch i, t in batch j} rho^|s-t|;
    the unbiased-variance statistic has expectation (tr C - 1'C1 / a) / (a - 1).
    """
    a = n // b
    lags = np.abs(np.arange(a * b)[:, None] - np.arange(a * b)[None, :])
    g = rho ** lags
    c = g.reshape(a, b, a, b).sum(axis=(1, 3)) / b**2
    return b * (np.trace(c) - c.sum() / a) / (a - 1)


@pytest.mark.parametrize("rho", [0.0, 0.5])
def test_batch_means_matches_exact_expectation(rho):
    # With b = floor(sqrt(n)) = 44 the batch-means estimate of tau has an O(1/b) bias, so the oracle is
    # the exact expectation of its numerator, b * var(batch means), computed from the AR(1)
    # autocovariances (tau_bm below), divided by the unit variance. The denominator of
    # n / ESS_bm = b var(batch means) / var(draws) is the sample variance, whose relative error is
    # about sqrt(2 tau / n) < 5%, so E[ratio] equals tau_bm up to second-order terms (< 0.3%).
    # Tolerance: 4 standard errors of the mean over 200 replicates + 0.5% of tau for those terms.
    n, reps = 2000, 200
    b = math.isqrt(n)
    x = ar1(rho, (reps, n, 1), seed=30 + int(10 * rho))
    e = np.asarray(ess_batch_means(x, per_chain=True))[:, 0]
    tau_hat = n / e
    se = tau_hat.std(ddof=1) / math.sqrt(reps)
    tau_bm = batch_means_expectation(rho, n, b)
    assert abs(tau_hat.mean() - tau_bm) <= 4 * se + 0.005 * tau_bm
    # and the asymptotic value it approaches: within the O(1/b) bias (2 sum t rho^t / b = 4 / 44)
    assert abs(tau_bm - tau_ar1(rho)) <= 2 * (rho / (1 - rho) ** 2) * 2 / b + 1e-12


# -- ArviZ as an oracle --------------------------------------------------------------------------
def test_ess_and_rhat_match_arviz():
    az = pytest.importorskip("arviz")
    x = ar1(0.7, (4, 1001, 3), seed=1)            # odd n: the middle draw is dropped by both
    x[:, :, 2] += np.arange(4)[:, None] * 0.3     # chains that disagree a little
    e = np.asarray(ess(x))
    r = np.asarray(rhat(x))
    for j in range(3):
        # ArviZ's "mean" ESS is the same estimator (split chains, no rank normalisation, Geyer's
        # initial monotone sequence with Stan's refinements); "split" R-hat is the same statistic.
        # Both are deterministic, so agreement is to rounding.
        np.testing.assert_allclose(e[j], az.ess(x[:, :, j], method="mean"), rtol=1e-10)
        np.testing.assert_allclose(r[j], az.rhat(x[:, :, j], method="split"), rtol=1e-12)
    # per-chain ESS is the same estimator applied to each chain alone
    pc = np.asarray(ess(x, per_chain=True))
    for c in range(4):
        np.testing.assert_allclose(pc[c, 0], az.ess(x[c, :, 0], method="mean"), rtol=1e-10)


def test_fft_and_direct_lag_sums_agree():
    # The direct O(n * max_lag) path (used when the namespace has no fft extension) stops early
    # once every series is truncated; it must reproduce the FFT numbers exactly.
    x = ess_mod._split(np, ar1(0.8, (3, 800, 4), seed=2))
    a = ess_mod._ess_autocorr(np, x, use_fft=True)
    b = ess_mod._ess_autocorr(np, x, use_fft=False, block=4)
    np.testing.assert_allclose(a, b, rtol=1e-10)


# -- R-hat ---------------------------------------------------------------------------------------
def test_rhat_near_one_for_mixed_chains():
    # Four stationary chains of 2000 AR(0.5) draws: split-R-hat - 1 is O(tau / n) ~ 1e-3 here, and
    # 1.01 is the usual convergence threshold.
    x = ar1(0.5, (4, 2000, 5), seed=3)
    r = np.asarray(rhat(x))
    assert np.all(r < 1.01)
    assert np.all(r > 0.99)


def test_rhat_flags_shifted_chains_and_trends():
    x = ar1(0.5, (4, 2000, 2), seed=4)
    shifted = x + np.array([0.0, 0.0, 0.0, 1.5])[:, None, None]   # one chain 1.5 sd away
    assert np.all(np.asarray(rhat(shifted)) > 1.1)
    # a single chain that drifts: the split halves disagree
    drift = x[0] + np.linspace(0.0, 3.0, 2000)[:, None]
    assert np.all(np.asarray(rhat(drift)) > 1.1)
    # without splitting, the drift within each chain is invisible to R-hat but the shift is not
    assert np.all(np.asarray(rhat(shifted, split=False)) > 1.1)


def test_disagreeing_chains_lower_multichain_ess():
    x = ar1(0.0, (4, 1000, 1), seed=5)
    e_mixed = float(np.asarray(ess(x))[0])
    e_shift = float(np.asarray(ess(x + np.arange(4)[:, None, None]))[0])
    assert e_mixed > 2000
    assert e_shift < 0.1 * e_mixed


# -- shapes, validation --------------------------------------------------------------------------
def test_shapes():
    x = ar1(0.3, (3, 200, 2), seed=6)
    assert np.asarray(ess(x)).shape == (2,)
    assert np.asarray(ess(x, per_chain=True)).shape == (3, 2)
    assert np.asarray(ess(x[0])).shape == (2,)
    assert np.asarray(ess(x[0, :, 0])).shape == ()
    assert np.asarray(ess(x[0, :, 0], per_chain=True)).shape == (1,)
    assert np.asarray(ess(x, method="batch_means", per_chain=True)).shape == (3, 2)
    assert np.asarray(rhat(x)).shape == (2,)
    assert np.asarray(rhat(x[0, :, 0])).shape == ()
    # a (n, dim) array is one chain: the same as a (1, n, dim) array
    np.testing.assert_allclose(ess(x[0]), ess(x[:1]))


def test_zero_variance_gives_nan():
    x = np.ones((2, 50, 2))
    x[:, :, 1] = np.random.default_rng(0).normal(size=(2, 50))
    e = np.asarray(ess(x))
    assert np.isnan(e[0]) and np.isfinite(e[1])
    assert np.isnan(np.asarray(ess(x, method="batch_means"))[0])
    assert np.isnan(np.asarray(rhat(x))[0])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "bogus"}, "method"),
        ({"method": "batch_means", "batch_size": 0}, "batch_size"),
        ({"method": "batch_means", "batch_size": 500}, "batch_size"),
    ],
)
def test_ess_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ess(np.zeros((2, 100, 1)) + np.arange(100.0)[:, None], **kwargs)


def test_input_validation():
    with pytest.raises(ValueError, match="draws"):
        ess(np.zeros((2, 3, 4, 5)))
    with pytest.raises(ValueError, match="at least 4 draws"):
        ess(np.zeros((2, 3, 1)))
    bad = np.random.default_rng(0).normal(size=(2, 10, 1))
    bad[0, 3, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        ess(bad)
    with pytest.raises(ValueError, match="two chains"):
        rhat(np.random.default_rng(0).normal(size=(100, 2)), split=False)
    with pytest.raises(TypeError):
        ess([1.0, 2.0, 3.0, 4.0])


# -- every backend -------------------------------------------------------------------------------
def test_backends_agree_with_numpy(xb):
    x = ar1(0.6, (3, 301, 2), seed=7)
    xa = xb.asarray(x)
    # float32 carries ~1e-7 relative rounding into sums over 300 draws and the Geyer truncation;
    # a rounding-level change could flip a truncation decision on a near-zero pair, so float32 is
    # compared with a looser tolerance than float64.
    rtol = 1e-9 if xb.float_dtype == "float64" else 2e-3
    cases = [
        (ess(xa), ess(x)),
        (ess(xa, per_chain=True), ess(x, per_chain=True)),
        (ess(xa, split=False), ess(x, split=False)),
        (ess(xa, method="batch_means"), ess(x, method="batch_means")),
        (rhat(xa), rhat(x)),
        (ess(xa[0, :, 0]), ess(x[0, :, 0])),
    ]
    for got, want in cases:
        assert type(got) is type(xa)
        assert got.dtype == xa.dtype
        assert device_of(got) == device_of(xa)
        np.testing.assert_allclose(xb.to_numpy(got), np.asarray(want), rtol=rtol)
