"""Effective sample size, R-hat, MCSE and HDI: AR(1) closed forms, arviz-stats as an oracle, every backend."""

import importlib
import math

import numpy as np
import pytest
from scipy.signal import lfilter

from sgmc._array_api import device_of
from sgmc.diagnostics.ess import ess, hdi, mcse, ndtri, rhat

# the module (its name is shadowed by the function in the package namespace)
ess_mod = importlib.import_module("sgmc.diagnostics.ess")
autocorr_mod = importlib.import_module("sgmc.diagnostics._autocorr")
mcse_mod = importlib.import_module("sgmc.diagnostics.mcse")


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
    e = np.asarray(ess(x, method="mean", per_chain=True))[:, 0]
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
    e = np.asarray(ess(x, method="mean"))
    tau_hat = chains * n / e
    se = tau_hat.std(ddof=1) / math.sqrt(reps)
    tau = tau_ar1(rho)
    assert abs(tau_hat.mean() - tau) <= 4 * se + 0.03 * tau


# -- ArviZ as an oracle --------------------------------------------------------------------------
def test_fft_and_direct_lag_sums_agree():
    # The direct O(n * max_lag) path (used when the namespace has no fft extension) stops early
    # once every series is truncated; it must reproduce the FFT numbers exactly.
    x = ess_mod._split(np, ar1(0.8, (3, 800, 4), seed=2))
    a = autocorr_mod._ess_autocorr(np, x, use_fft=True)
    b = autocorr_mod._ess_autocorr(np, x, use_fft=False, block=4)
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
    assert np.all(np.asarray(rhat(drift, method="split")) > 1.1)
    assert np.all(np.asarray(rhat(x + np.linspace(0.0, 3.0, 2000)[None, :, None])) > 1.1)
    # without splitting, the drift within each chain is invisible to R-hat but the shift is not
    assert np.all(np.asarray(rhat(shifted, method="identity")) > 1.1)


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
    assert np.asarray(ess(x, method="tail", per_chain=True)).shape == (3, 2)
    assert np.asarray(mcse(x, method="quantile", prob=0.1)).shape == (2,)
    assert np.asarray(hdi(x)).shape == (2, 2)
    assert np.asarray(rhat(x)).shape == (2,)
    assert np.asarray(rhat(x[0, :, 0], method="split")).shape == ()
    with pytest.raises(ValueError, match="`draws` holds one chain"):
        rhat(x[0, :, 0])  # 1-D draws are one chain: the rank R-hat has nothing to compare
    # a (n, dim) array is one chain: the same as a (1, n, dim) array
    np.testing.assert_allclose(ess(x[0]), ess(x[:1]))


def test_constant_coordinate():
    # ArviZ's conventions: a constant coordinate has ESS = number of (split) draws, R-hat NaN.
    x = np.ones((2, 50, 2))
    x[:, :, 1] = np.random.default_rng(0).normal(size=(2, 50))
    e = np.asarray(ess(x))
    assert e[0] == 100 and np.isfinite(e[1])
    assert np.isnan(np.asarray(rhat(x))[0]) and np.isfinite(np.asarray(rhat(x))[1])
    assert np.asarray(mcse(x))[0] == 0
    sd_error = np.asarray(mcse(x, method="sd"))  # the sd of a constant is exactly 0 (ArviZ: NaN)
    assert sd_error[0] == 0 and np.isfinite(sd_error[1]) and sd_error[1] > 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "bogus"}, "method"),
        ({"method": "batch_means"}, "no longer offered"),
        ({"method": "quantile"}, "prob"),
        ({"method": "tail", "prob": 1.5}, "prob"),
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
        rhat(np.random.default_rng(0).normal(size=(100, 2)), method="identity")
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
        (ess(xa, method="mean"), ess(x, method="mean")),
        (ess(xa, method="tail"), ess(x, method="tail")),
        (ess(xa, method="sd"), ess(x, method="sd")),
        (rhat(xa), rhat(x)),
        (rhat(xa, method="split"), rhat(x, method="split")),
        (mcse(xa), mcse(x)),
        (mcse(xa, method="sd"), mcse(x, method="sd")),
        (mcse(xa, method="quantile", prob=0.05), mcse(x, method="quantile", prob=0.05)),
        (hdi(xa, 0.8), hdi(x, 0.8)),
        (ess(xa[0, :, 0]), ess(x[0, :, 0])),
    ]
    for got, want in cases:
        assert type(got) is type(xa)
        assert got.dtype == xa.dtype
        assert device_of(got) == device_of(xa)
        np.testing.assert_allclose(xb.to_numpy(got), np.asarray(want), rtol=rtol)


# -- arviz-stats as an oracle ----------------------------------------------------------------------
def _oracle_cases():
    rng = np.random.default_rng(11)
    anti = np.cumprod(-np.ones((4, 200, 1)), axis=1) * rng.normal(size=(4, 1, 1)) + 0.1 * rng.normal(size=(4, 200, 1))
    return {
        "independent": rng.normal(size=(4, 500, 2)),
        "ar0.99": ar1(0.99, (4, 1000, 2), seed=12),
        "shifted": rng.normal(size=(4, 300, 2)) + 2.0 * np.arange(4)[:, None, None],
        "heavy_tails": rng.standard_cauchy(size=(4, 401, 2)),
        "antithetic": anti,
        "odd_lengths": rng.normal(size=(3, 77, 2)),
        "constant": np.full((4, 100, 1), 2.5),
        "one_chain": ar1(0.5, (1, 501, 2), seed=13),
    }


ORACLE = _oracle_cases()


@pytest.mark.parametrize("case", sorted(ORACLE))
def test_diagnostics_equal_arviz_stats(case):
    # arviz-stats is the reference implementation of Vehtari et al. (2021); every statistic here is
    # deterministic, so agreement is to rounding (1e-8 relative asked, ~1e-14 seen).
    array_stats = pytest.importorskip("arviz_stats.base").array_stats
    x = ORACLE[case]
    a = np.moveaxis(x, -1, 0)                     # arviz-stats: (..., chain, draw)
    import warnings

    with warnings.catch_warnings():               # the oracle warns on 0/0 for the constant case
        warnings.simplefilter("ignore")
        pairs = [
            (ess(x), array_stats.ess(a, method="bulk")),
            (ess(x, method="tail"), array_stats.ess(a, method="tail", prob=0.05)),
            (ess(x, method="mean"), array_stats.ess(a, method="mean")),
            (ess(x, method="sd"), array_stats.ess(a, method="sd")),
            (ess(x, method="quantile", prob=0.3), array_stats.ess(a, method="quantile", prob=0.3)),
            (mcse(x), array_stats.mcse(a, method="mean")),
            (mcse(x, method="sd") if case != "constant" else np.full(x.shape[-1], np.nan),
             array_stats.mcse(a, method="sd")),
            (mcse(x, method="quantile", prob=0.05), array_stats.mcse(a, method="quantile", prob=0.05)),
            (mcse(x, method="quantile", prob=0.5), array_stats.mcse(a, method="quantile", prob=0.5)),
            (hdi(x, 0.89), array_stats.hdi(a, 0.89, axis=(-2, -1))),
        ]
        if x.shape[0] > 1:     # arviz-stats gives NaN for one chain; sgmc refuses it (rank) or splits it
            pairs.append((rhat(x), array_stats.rhat(a, method="rank")))
            pairs.append((rhat(x, method="split"), array_stats.rhat(a, method="split")))
        else:
            assert bool(np.all(np.isnan(array_stats.rhat(a, method="rank"))))
            with pytest.raises(ValueError, match="`draws` holds one chain"):
                rhat(x)
    for got, want in pairs:
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-8, atol=0, equal_nan=True)


def test_ar099_and_shifted_chains_are_not_overstated():
    # The review's concern with mixing diagnostics: the ESS of an AR(0.99) chain is about
    # n (1 - rho) / (1 + rho) = 4 * 1000 / 199 ~ 20, and four chains shifted 2 sd apart carry about
    # one draw's worth of information each about the mean.
    e_ar = float(np.asarray(ess(ORACLE["ar0.99"], method="mean"))[0])
    assert e_ar < 80
    e_shift = np.asarray(ess(ORACLE["shifted"]))
    assert np.all(e_shift < 60)
    assert np.all(np.asarray(rhat(ORACLE["shifted"])) > 1.5)


def test_ndtri_matches_scipy(xb):
    from scipy.special import ndtri as ref

    p = np.concatenate([np.geomspace(1e-30, 1e-10, 7), np.linspace(1e-6, 1 - 1e-6, 101), [0.075, 0.925, 1 - 1e-6]])
    got = xb.to_numpy(ndtri(xb.asarray(p)))
    tol = 1e-14 if xb.float_dtype == "float64" else 1e-5
    np.testing.assert_allclose(got, ref(p.astype(xb.float_dtype)), rtol=tol, atol=tol)


def test_beta_quantile_matches_scipy():
    from scipy.stats import beta

    for q, a, b in [(0.1586553, 201.0, 3801.0), (0.8413447, 2.5, 1.5), (0.5, 1e4, 30.0), (0.01, 1.0, 1.0)]:
        assert mcse_mod._beta_ppf(q, a, b) == pytest.approx(beta.ppf(q, a, b), rel=1e-12)
