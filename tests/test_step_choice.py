"""``step_size="auto"`` bounds the posterior sd inflation of its step; the default burn-in; the bias warning.

The sd inflation of SGLD and SGHMC on a Gaussian (sgmc/_stepbias.py) is checked against the review's
closed form, a Kronecker-product solve of the Lyapunov equation and a simulation of the samplers
themselves; the sds of "auto" runs against the exact posterior of a conjugate linear regression.
"""

import math

import numpy as np
import pytest

import sgmc
from sgmc._array_api import array_namespace
from sgmc._stepbias import StepSizeBiasWarning, inflation, iteration_map, stationary
from sgmc.adapt import AutoStep
from sgmc.estimators import NoisyGradient
from sgmc.models import GaussianTarget, LinearRegression
from sgmc.samplers import SGHMC, SGLD

from _helpers import Z_TOL

XP = array_namespace(np.zeros(1))


def _rotation(d, seed):
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q


def test_sgld_inflation_is_the_reviews_closed_form_per_eigen_direction():
    # H = P diag(lam) P^T and V = P diag(v) P^T share eigenvectors: per direction the stationary
    # variance is (1 + h v / 4) / (lam (1 - h lam / 4)) (review section 2.5 plus the noise term)
    lam, v, h = np.array([0.5, 1.0, 3.0]), np.array([2.0, 0.1, 4.0]), 0.4
    P = _rotation(3, 0)
    H, V = P @ np.diag(lam) @ P.T, P @ np.diag(v) @ P.T
    G, Q = iteration_map(SGLD(), XP.asarray(H), XP.asarray(V), h)
    S, rho = stationary(G, Q)
    expected = P @ np.diag((1 + h * v / 4) / (lam * (1 - h * lam / 4))) @ P.T
    np.testing.assert_allclose(np.asarray(S), expected, rtol=1e-10, atol=1e-12)
    assert rho == pytest.approx(1 - h * lam.min() / 2, rel=1e-3)
    est = inflation(SGLD(), XP.asarray(H), XP.asarray(V), h)
    ratios = np.sqrt(np.diag(expected) / np.diag(np.linalg.inv(H)))
    assert est["low"] == pytest.approx(ratios.min(), rel=1e-10)
    assert est["high"] == pytest.approx(ratios.max(), rel=1e-10)
    assert inflation(SGLD(), XP.asarray(H), XP.asarray(V), 4.01 / lam.max()) is None   # unstable: no bound


@pytest.mark.parametrize("resample", [True, False])
def test_sghmc_stationary_covariance_solves_the_lyapunov_equation(resample):
    # an independent solve: vec(S) = (I - G (x) G)^-1 vec(Q) over the (position, momentum) state
    P = _rotation(2, 1)
    H, V = P @ np.diag([0.7, 2.5]) @ P.T, np.array([[1.0, 0.3], [0.3, 0.5]])
    smp = SGHMC(friction=1.5, n_leapfrog=3, resample_momentum=resample)
    G, Q = (np.asarray(a) for a in iteration_map(smp, XP.asarray(H), XP.asarray(V), 0.3))
    n = G.shape[0]
    vec = np.linalg.solve(np.eye(n * n) - np.kron(G, G), Q.reshape(-1))
    S, _ = stationary(XP.asarray(G), XP.asarray(Q))
    np.testing.assert_allclose(np.asarray(S), vec.reshape(n, n), rtol=1e-9, atol=1e-12)


@pytest.mark.filterwarnings("ignore::sgmc.diagnostics.mixing.MixingWarning")   # one draw per chain is used
@pytest.mark.parametrize("name,h,options", [("sgld", 0.3, {}), ("sghmc", 0.5, {}), ("sghmc", 1.0, {"n_leapfrog": 1})])
def test_predicted_inflation_matches_the_samplers_own_draws(name, h, options):
    """The samplers run on N(0, diag(1, 1/4)) with gradient noise N(0, 2.25 I): the sample sds of
    2000 independent chains after 200 iterations match the predicted ones within the Monte Carlo
    error (SGHMC with one leapfrog step: its half kick's noise decides)."""
    target = GaussianTarget(np.zeros(2), np.diag([1.0, 0.25]))
    trace = sgmc.sample(target, name, NoisyGradient(target, noise_sd=1.5), step_size=h, n_iter=240, burn_in=200,
                        chains=2000, rng=0, progress=False, init=np.zeros(2), sampler_options=options)
    est = inflation(sgmc.samplers.make_sampler(name, target, **options), XP.asarray(np.diag([1.0, 4.0])),
                    XP.asarray(2.25 * np.eye(2)), h)
    last = np.asarray(trace.draws)[:, -1, :]                       # one draw per chain: independent
    sd = last.std(axis=0, ddof=1) / np.sqrt([1.0, 0.25])
    se = sd / np.sqrt(2 * (last.shape[0] - 1))                     # sd of a normal sample's sd
    predicted = np.array([est["low"], est["high"]])
    assert np.all(np.abs(np.sort(sd) - predicted) <= Z_TOL * se), (sd, predicted)
    assert est["high"] > 1 + 8 * se.max()                          # the inflation is real here, not 1


@pytest.fixture(scope="module")
def regression():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10_000, 5))
    model = LinearRegression(X, X @ rng.normal(size=5) + rng.normal(size=10_000))
    _, cov = model.posterior()
    return model, np.sqrt(np.diag(np.asarray(cov)))


def _sd_ratios(trace, sd):
    """Pooled sample sds over the exact ones, and their Monte Carlo error from the chains as replicates."""
    draws = np.asarray(trace.draws)
    ratio = draws.reshape(-1, draws.shape[-1]).std(axis=0) / sd
    per_chain = draws.std(axis=1) / sd                             # (chains, dim)
    se = per_chain.std(axis=0, ddof=1) / math.sqrt(draws.shape[0])
    return ratio, se


@pytest.mark.parametrize("estimator", ["minibatch", "cv"])
def test_auto_sds_are_within_a_quarter_of_the_exact_ones(regression, estimator):
    """SGLD with "auto" on a conjugate linear regression (d = 5, N = 10^4, batches of 100): every
    posterior sd within 0.8-1.25 of the closed form. A short burn-in (windows of 166 iterations)
    leads the KSD to a step that inflates the minibatch sds about twofold (the gradient noise
    dominates the injected noise there) and, with control variates, to one too small to mix in the
    run; the sd bound lowers the first and raises the second."""
    model, sd = regression
    trace = sgmc.sample(model, "sgld", estimator, step_size="auto", n_iter=30_000, burn_in=2000, chains=8, rng=1,
                        progress=False)
    auto = trace.info["step_size_auto"]
    ratio, se = _sd_ratios(trace, sd)
    assert np.all(se < 0.04), se                                   # the check below can tell 1.25 from 1.1
    assert np.all((0.8 <= ratio) & (ratio <= 1.25)), (ratio, auto["step_size"], auto["sd_inflation"])
    bias = auto["sd_inflation"]
    assert bias["bounded"] and bias["worst"] <= 1.1 + 1e-9
    # the predicted inflation at the chosen step agrees with the draws (Monte Carlo error and the
    # few percent that the sample sd of autocorrelated chains is biased low)
    assert bias["high"] <= ratio.max() + Z_TOL * se.max() + 0.05
    if estimator == "minibatch":
        assert auto["step_size"] < auto["step_size_ksd"] and auto["sd_inflation"]["at_ksd_step"]["high"] > 1.5
    else:
        assert auto["step_size"] > auto["step_size_ksd"] and bias["tau"] <= 28_000 / 50


def test_auto_has_a_default_burn_in(regression):
    model, _ = regression
    trace = sgmc.sample(model, "sgld", "cv", step_size="auto", n_iter=4000, chains=4, rng=2, progress=False)
    auto = trace.info["step_size_auto"]
    assert auto["iterations"] == 2000 and trace.info["burn_in"] == 2000     # n_iter // 2, not given
    assert trace.draws.shape == (4, 2000, 5)


def test_a_run_too_short_to_bound_the_bias_warns_with_the_estimate(regression):
    model, sd = regression
    with pytest.warns(StepSizeBiasWarning, match=r"posterior sds are estimated to be off by a factor (\d\.\d+)") as rec:
        trace = sgmc.sample(model, "sgld", "minibatch", step_size="auto", n_iter=1200, chains=4, rng=3,
                            progress=False)
    bias = trace.info["step_size_auto"]["sd_inflation"]
    assert not bias["bounded"] and bias["worst"] > 1.2
    message = str([w for w in rec if issubclass(w.category, StepSizeBiasWarning)][0].message)
    assert f"factor {bias['worst']:.3g}" in message and "600 iterations after burn-in" in message


@pytest.mark.filterwarnings("ignore::sgmc.diagnostics.mixing.MixingWarning")   # the cost is checked, not the draws
@pytest.mark.parametrize("estimator,per_estimate", [("minibatch", 50), ("cv", 100)])
def test_the_bias_check_is_counted_in_the_data_passes(estimator, per_estimate):
    """At a tolerance that keeps the ladder's step (and does not warn: its estimated factor 1.3-1.4
    is within it), the run differs from one without the check only by
    the check's cost per chain: 16 gradient estimates (n = 50 of N = 500 points; twice that for a
    control variate), one exact gradient and the GLM's one-pass Hessian."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 2))
    model = LinearRegression(X, X @ np.array([1.0, -1.0]) + rng.normal(size=500))
    auto = {}
    for tol in (None, 1.5):
        trace = sgmc.sample(model, "sgld", estimator, batch_size=50, n_iter=4000, burn_in=600, chains=3, rng=1,
                            step_size=AutoStep(window=60, n_ksd=24, sd_tolerance=tol), progress=False)
        auto[tol] = trace.info["step_size_auto"]
    assert auto[1.5]["step_size"] == auto[None]["step_size"] and auto[1.5]["sd_inflation"]["bounded"]
    assert auto[1.5]["data_passes"] - auto[None]["data_passes"] == pytest.approx(16 * per_estimate / 500 + 2, rel=1e-12)
