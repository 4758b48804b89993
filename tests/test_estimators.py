"""Gradient estimators: exact formulas, unbiasedness, variances, control variates, mode finding, SVRG.

Estimators are vectorised over chains, so R independent estimates at one position are one call at a
(R, dim) array of copies of that position: statistical checks below cost a single call each.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, special

from _helpers import Z_TOL, replay_rng, replicate_mean, to_host, tol_for
from sgmc import backends
from sgmc.estimators import (
    ESTIMATORS,
    SVRG,
    ControlVariate,
    EstimateInfo,
    FullGradient,
    Minibatch,
    NoisyGradient,
    find_mode,
    make_estimator,
)
from sgmc.models import GaussianTarget, LinearRegression, LogisticRegression

REPS = 20_000


def linear_data(n=200, d=3, seed=0):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, d))
    return X, X @ np.array([1.0, -1.0, 0.5])[:d] + r.normal(size=n)


def logistic_data(n=1000, d=3, seed=0):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, d))
    y = (r.random(n) < special.expit(X @ np.array([1.0, -1.0, 0.5])[:d])).astype(float)
    return X, y


def exact_mode(model):
    """Posterior mode by BFGS on the full log posterior (scipy, independent of sgmc's optimisers)."""
    res = optimize.minimize(
        lambda t: -model.log_posterior(t), np.zeros(model.dim), jac=lambda t: -model.grad_log_posterior(t),
        method="BFGS", options={"gtol": 1e-10},
    )
    return res.x


def copies(theta, reps=REPS):
    return np.broadcast_to(np.asarray(theta, dtype=np.float64), (reps, len(theta))).copy()


def sampling_cov(per_datum, n, replace):
    """Exact covariance of (N/n) sum_{i in S} a_i for a uniform n-subset S (or n i.i.d. draws).

    Without replacement this is N^2/n (1 - n/N) S_a with S_a the ddof=1 covariance of the a_i (finite
    population correction); with replacement it is N^2/n times the ddof=0 covariance.
    """
    big_n = per_datum.shape[0]
    if replace:
        return big_n**2 / n * np.cov(per_datum.T, ddof=0)
    return big_n**2 / n * (1 - n / big_n) * np.cov(per_datum.T, ddof=1)


def var_and_se(samples):
    """Per-coordinate sample variance and its standard error sqrt(Var[(x - mean)^2] / R)."""
    dev2 = (samples - samples.mean(axis=0)) ** 2
    return replicate_mean(dev2)


# -- exact formulas with the indices replayed --------------------------------------------------------
def test_minibatch_is_the_scaled_subset_sum():
    X, y = linear_data()
    model = LinearRegression(X, y)
    est = Minibatch(model, 20)
    theta = np.random.default_rng(1).normal(size=(4, 3))
    g, info = est(backends.default_rng(3), theta)
    idx = backends.default_rng(3).subsample(200, 20, 4)  # the same draw, replayed
    per = model.grad_log_lik(theta, idx)
    expected = model.grad_log_prior(theta) + (200 / 20) * per.sum(axis=1)
    np.testing.assert_allclose(g, expected, rtol=1e-12)
    assert info == EstimateInfo(20) and est.evals_per_call == 20
    assert est.scale == 10.0


def test_minibatch_fraction_batch_size():
    X, y = linear_data()
    est = Minibatch(LinearRegression(X, y), 0.05)
    assert est.batch_size == 10


def test_control_variate_is_the_centred_estimate():
    X, y = linear_data()
    model = LinearRegression(X, y)
    centre = np.array([0.9, -1.1, 0.4])
    est = ControlVariate(model, 20, centre=centre)
    theta = np.random.default_rng(1).normal(size=(4, 3))
    g, info = est(backends.default_rng(3), theta)
    idx = backends.default_rng(3).subsample(200, 20, 4)
    diff = (model.grad_log_lik(theta, idx) - model.grad_log_lik(np.broadcast_to(centre, (4, 3)), idx)).sum(axis=1)
    expected = model.grad_log_prior(theta) + model.grad_log_lik_sum(centre[None, :]) + 10.0 * diff
    np.testing.assert_allclose(g, expected, rtol=1e-12)
    assert info.n_evals == 40 and est.setup_evals == 200


def test_control_variate_is_exact_at_its_centre():
    X, y = logistic_data()
    model = LogisticRegression(X, y)
    centre = exact_mode(model) + 0.1
    est = ControlVariate(model, 10, centre=centre)
    g, _ = est(backends.default_rng(0), copies(centre, 50))
    np.testing.assert_allclose(g, np.broadcast_to(model.grad_log_posterior(centre), (50, 3)), rtol=1e-10, atol=1e-9)


def test_control_variate_needs_a_centre():
    X, y = linear_data()
    est = ControlVariate(LinearRegression(X, y), 10)
    with pytest.raises(RuntimeError, match="no centre yet"):
        est(backends.default_rng(0), np.zeros((1, 3)))


def test_noisy_gradient_adds_gaussian_noise_to_the_exact_gradient():
    target = GaussianTarget.review_example()
    theta = np.array([[0.3, -1.2]])
    exact = target.grad_log_posterior(theta)
    g, _ = NoisyGradient(target, 0.1)(backends.default_rng(5), theta)
    z = backends.default_rng(5).normal((1, 2))
    np.testing.assert_allclose(g, exact + 0.1 * z, rtol=1e-12)
    g0, _ = NoisyGradient(target, 0.0)(backends.default_rng(5), theta)
    np.testing.assert_array_equal(g0, exact)


def test_full_gradient_is_the_full_data_gradient():
    X, y = linear_data()
    model = LinearRegression(X, y)
    theta = np.random.default_rng(2).normal(size=(3, 3))
    g, info = FullGradient(model)(None, theta)
    np.testing.assert_allclose(g, model.grad_log_posterior(theta), rtol=1e-14)
    assert info.n_evals == 200


# -- unbiasedness and variance ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["minibatch", "minibatch_replace", "cv", "svrg", "noisy"])
def test_estimators_are_unbiased(kind):
    """The mean of R independent estimates at one position equals the full gradient within
    Z_TOL standard errors (sample standard deviation of the estimates / sqrt(R), per coordinate)."""
    X, y = linear_data()
    model = LinearRegression(X, y)
    mode = np.asarray(model.posterior()[0])
    theta = mode + np.array([0.4, -0.3, 0.2])
    rng = backends.default_rng(11)
    if kind == "minibatch":
        est = Minibatch(model, 10)
    elif kind == "minibatch_replace":
        est = Minibatch(model, 10, replace=True)
    elif kind == "cv":
        est = ControlVariate(model, 10, centre=mode - 0.2)
    elif kind == "svrg":
        est = SVRG(model, 10, update_every=10**9)
        est(rng, copies(mode - 0.2))  # snapshot at another point; later calls keep it
    else:
        model = GaussianTarget.review_example()
        theta = np.array([0.7, -0.4])
        est = NoisyGradient(model, 0.5)
    g, _ = est(rng, copies(theta))
    exact = model.grad_log_posterior(theta)
    mean, se = replicate_mean(g)
    assert np.all(se > 0)
    assert np.all(np.abs(mean - exact) < Z_TOL * se), (mean, exact, se)


@pytest.mark.parametrize("replace", [False, True])
def test_minibatch_variance_matches_sampling_theory(replace):
    X, y = linear_data()
    model = LinearRegression(X, y)
    theta = np.array([0.5, -0.5, 0.0])
    g, _ = Minibatch(model, 40, replace=replace)(backends.default_rng(12), copies(theta))
    per = model.grad_log_lik(theta[None, :])[0]
    expected = np.diag(sampling_cov(per, 40, replace))
    var, se = var_and_se(g)
    assert np.all(np.abs(var - expected) < Z_TOL * se), (var, expected, se)
    # the two schemes differ by about n/N = 20% here, well over 2 * Z_TOL standard errors
    other = np.diag(sampling_cov(per, 40, not replace))
    assert np.all(np.abs(var - other) > 2 * Z_TOL * se)


def test_noisy_gradient_variance_is_noise_sd_squared():
    target = GaussianTarget.review_example()
    g, _ = NoisyGradient(target, 0.3)(backends.default_rng(13), copies([0.1, 0.2]))
    var, se = var_and_se(g)
    assert np.all(np.abs(var - 0.09) < Z_TOL * se)
    assert abs(np.corrcoef(g.T)[0, 1]) < Z_TOL / math.sqrt(REPS)


# -- control variates: variance near the mode ----------------------------------------------------------
def _total_var(est, theta, seed):
    """Trace of the covariance of the estimates and its standard error (delta method over replicates)."""
    g, _ = est(backends.default_rng(seed), copies(theta))
    dev2 = np.sum((g - g.mean(axis=0)) ** 2, axis=1)
    return replicate_mean(dev2)


def test_control_variate_variance_scales_with_squared_distance_to_the_centre():
    """Var[g_cv(theta)] <= C ||theta - theta_hat||^2 N^2 / n (review section 2.3): doubling the
    distance multiplies the variance by 4. For logistic regression the per-datum gradient differences
    are linear in theta - theta_hat up to O(r^2) terms; at r = 0.02 (a quarter of a posterior sd) the
    exact variance ratio from the finite-population formula is 4 within 0.1%, so the Monte Carlo ratio
    must be 4 within its standard error (delta method: ratio * sqrt((se1/v1)^2 + (se2/v2)^2))."""
    X, y = logistic_data()
    model = LogisticRegression(X, y)
    mode = exact_mode(model)
    n = 20
    est = ControlVariate(model, n, centre=mode)
    u = np.array([1.0, 1.0, -1.0]) / math.sqrt(3.0)
    r = 0.02
    per = [model.grad_log_lik((mode + k * r * u)[None, :])[0] - model.grad_log_lik(mode[None, :])[0] for k in (1, 2)]
    exact = [np.trace(sampling_cov(p, n, False)) for p in per]
    assert exact[1] / exact[0] == pytest.approx(4.0, rel=1e-3)
    v1, se1 = _total_var(est, mode + r * u, 21)
    v2, se2 = _total_var(est, mode + 2 * r * u, 22)
    ratio = v2 / v1
    ratio_se = ratio * math.sqrt((se1 / v1) ** 2 + (se2 / v2) ** 2)
    assert abs(ratio - 4.0) < Z_TOL * ratio_se, (ratio, ratio_se)
    assert abs(v1 - exact[0]) < Z_TOL * se1
    # near the mode the control variate beats plain subsampling by orders of magnitude: at one
    # posterior standard deviation (about 0.09 here) the variance is still below 1% of the minibatch's
    v_cv, se_cv = _total_var(est, mode + 0.09 * u, 23)
    v_mb, _ = _total_var(Minibatch(model, n), mode + 0.09 * u, 23)
    assert v_cv + Z_TOL * se_cv < 0.01 * v_mb


# -- finding the centre ------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["adam", "sgd"])
def test_find_mode_reaches_the_linear_regression_mode(method):
    X, y = linear_data(n=1000)
    model = LinearRegression(X, y)
    mean, cov = model.posterior()
    sd = np.sqrt(np.diag(cov))
    # with full batches the optimiser is deterministic and converges to the closed-form mode
    full = find_mode(model, backends.default_rng(0), np.zeros(3), method=method, batch_size=1000)
    np.testing.assert_allclose(full, mean, atol=1e-8 * sd.max())
    # with minibatches of 100, averaging the second half of 2000 iterates leaves an error whose spread
    # across seeds is about 0.1 posterior sd for this model; 0.5 sd is five of those
    mb = find_mode(model, backends.default_rng(1), np.zeros(3), method=method, batch_size=100)
    assert np.all(np.abs(mb - mean) < 0.5 * sd), (mb - mean) / sd


def test_find_mode_on_a_data_free_target_uses_the_exact_gradient():
    target = GaussianTarget(np.array([1.0, -2.0]), np.array([[1.0, 0.3], [0.3, 0.5]]))
    out = find_mode(target, backends.default_rng(0), np.zeros(2), method="adam", n_steps=3000)
    np.testing.assert_allclose(out, [1.0, -2.0], atol=1e-3)


def test_find_mode_diverging_raises_floating_point_error_naming_the_step_size():
    X, y = linear_data()
    model = LinearRegression(X, y)
    with np.errstate(over="ignore", invalid="ignore"):
        with pytest.raises(FloatingPointError, match=r"mode finder \(sgd\) diverged.*`step_size`"):
            find_mode(model, backends.default_rng(0), np.zeros(3), method="sgd", step_size=10.0, n_steps=500)


def test_control_variate_prepare_finds_the_centre_and_counts_setup_cost():
    X, y = linear_data(n=1000)
    model = LinearRegression(X, y)
    mean, cov = model.posterior()
    est = ControlVariate(model, 50, opt_steps=400, opt_batch_size=1000)
    start = est.prepare(backends.default_rng(2), np.zeros((3, 3)))
    assert start.shape == (3, 3)
    np.testing.assert_allclose(start, np.broadcast_to(est.centre, (3, 3)))
    np.testing.assert_allclose(est.centre, mean, atol=1e-3 * np.sqrt(cov.diagonal()).max())
    np.testing.assert_allclose(est.centre_grad[0], model.grad_log_lik_sum(est.centre[None, :])[0])
    assert est.setup_evals == 400 * 1000 + 1000


# -- SVRG --------------------------------------------------------------------------------------------------
def test_svrg_refreshes_its_snapshot_every_update_every_calls():
    X, y = linear_data(n=100)
    model = LinearRegression(X, y)
    est = SVRG(model, 10, update_every=3)
    assert est.evals_per_call == pytest.approx(2 * 10 + 100 / 3)
    rng = backends.default_rng(4)
    replay = backends.default_rng(4)
    pts = np.random.default_rng(5).normal(size=(8, 2, 3))
    snap_of_call = []
    for k in range(8):
        g, info = est(rng, pts[k])
        refresh = k % 3 == 0
        assert info.n_evals == 20 + (100 if refresh else 0)
        snap = pts[k] if refresh else snap_of_call[-1]
        snap_of_call.append(snap)
        np.testing.assert_array_equal(est._snap, snap)
        idx = replay.subsample(100, 10, 2)
        diff = (model.grad_log_lik(pts[k], idx) - model.grad_log_lik(snap, idx)).sum(axis=1)
        expected = model.grad_log_prior(pts[k]) + model.grad_log_lik_sum(snap) + 10.0 * diff
        np.testing.assert_allclose(g, expected, rtol=1e-12)
    # prepare resets the cycle; a change in the number of chains forces a refresh
    est.prepare(rng, pts[0])
    assert est(rng, pts[1])[1].n_evals == 120
    assert est(rng, np.zeros((5, 3)))[1].n_evals == 120


def test_svrg_default_update_interval_is_one_epoch():
    X, y = linear_data(n=105)
    assert SVRG(LinearRegression(X, y), 10).update_every == 11


# -- registry ---------------------------------------------------------------------------------------------
def test_make_estimator_by_name():
    X, y = linear_data(n=500)
    model = LinearRegression(X, y)
    assert set(ESTIMATORS) == {"full", "minibatch", "cv", "svrg", "noisy"}
    assert isinstance(make_estimator("full", model), FullGradient)
    mb = make_estimator("minibatch", model)
    assert isinstance(mb, Minibatch) and mb.batch_size == 5  # default N // 100
    assert make_estimator("Minibatch", model, 7).batch_size == 7
    assert isinstance(make_estimator("cv", model, 10, opt_steps=5), ControlVariate)
    assert make_estimator("svrg", model, 10, update_every=4).update_every == 4
    noisy = make_estimator("noisy", GaussianTarget.review_example(), noise_sd=0.2)
    assert isinstance(noisy, NoisyGradient) and noisy.noise_sd == 0.2
    assert make_estimator(mb, model) is mb
    assert "Minibatch(model=LinearRegression(n_data=500, dim=3))" == repr(mb)


# -- every backend computes the same numbers ---------------------------------------------------------------
@pytest.mark.parametrize("kind", ["full", "minibatch", "cv", "svrg", "noisy"])
def test_estimators_agree_across_backends(xb, kind):
    X, y = logistic_data(n=300)
    Xr, yr = X.astype(xb.float_dtype), y
    theta = np.random.default_rng(3).normal(size=(4, 3)).astype(xb.float_dtype)
    centre = np.array([0.8, -0.9, 0.4]).astype(xb.float_dtype)

    def build(model, conv):
        if kind == "full":
            return FullGradient(model)
        if kind == "minibatch":
            return Minibatch(model, 15)
        if kind == "cv":
            return ControlVariate(model, 15, centre=conv(centre))
        if kind == "svrg":
            return SVRG(model, 15, update_every=2)
        return NoisyGradient(model, 0.3)

    def run(model, conv, rng):
        est = build(model, conv)
        out = []
        for k in range(3):
            g, info = est(rng, conv(theta + 0.1 * k))
            out.append(g)
        return out, info

    if kind == "noisy":
        t_np = GaussianTarget(np.zeros(3), np.eye(3) * 2.0)
        t_xb = GaussianTarget(xb.asarray(np.zeros(3)), xb.asarray(np.eye(3) * 2.0))
    else:
        t_np = LogisticRegression(Xr.astype(np.float64), yr)
        t_xb = LogisticRegression(xb.asarray(Xr), xb.asarray(yr))
    ref, info_ref = run(t_np, np.asarray, replay_rng(_NumpyCase, 7))
    got, info = run(t_xb, xb.asarray, replay_rng(xb, 7))
    assert info == info_ref
    for a, b in zip(got, ref):
        assert backends.get_backend(a) is xb.backend
        assert a.dtype == xb.dtype
        scale = 1.0 + np.abs(b).max()
        assert np.abs(to_host(a) - b).max() <= tol_for(xb, 1e-12, 1e-5) * scale


class _NumpyCase:
    name = "numpy"
    device = "cpu"
    backend = backends.get_backend("numpy")
