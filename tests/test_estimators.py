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
from sgmc._sampling import subsample
from sgmc.estimators import (
    ESTIMATORS,
    SVRG,
    ControlVariate,
    ControlVariateState,
    EstimateInfo,
    FullGradient,
    Minibatch,
    NoisyGradient,
    Prepared,
    SVRGState,
    make_estimator,
)
from sgmc.models import GaussianTarget, LinearRegression, LogisticRegression
from sgmc.optimize import find_mode

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


def once(est, rng, theta):
    """One estimate at ``theta`` from a fresh estimator state: ``init`` then ``estimate`` -> (grad, info)."""
    g, _, info = est.estimate(rng, est.init(rng, theta), theta)
    return g, info


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
    assert est.init(backends.default_rng(3), theta) is None
    g, state, info = est.estimate(backends.default_rng(3), None, theta)
    idx = subsample(backends.default_rng(3), 200, 20, 4)  # the same draw, replayed
    per = model.grad_log_lik(theta, idx)
    expected = model.grad_log_prior(theta) + (200 / 20) * per.sum(axis=1)
    np.testing.assert_allclose(g, expected, rtol=1e-12)
    assert state is None
    assert info == EstimateInfo(20, 20) and est.init_cost == 0
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
    g, info = once(est, backends.default_rng(3), theta)
    idx = subsample(backends.default_rng(3), 200, 20, 4)
    diff = (model.grad_log_lik(theta, idx) - model.grad_log_lik(np.broadcast_to(centre, (4, 3)), idx)).sum(axis=1)
    expected = model.grad_log_prior(theta) + model.grad_log_lik_sum(centre[None, :]) + 10.0 * diff
    np.testing.assert_allclose(g, expected, rtol=1e-12)
    assert info.n_evals == 40 and est.init_cost == 200


def test_control_variate_is_exact_at_its_centre():
    X, y = logistic_data()
    model = LogisticRegression(X, y)
    centre = exact_mode(model) + 0.1
    est = ControlVariate(model, 10, centre=centre)
    g, _ = once(est, backends.default_rng(0), copies(centre, 50))
    np.testing.assert_allclose(g, np.broadcast_to(model.grad_log_posterior(centre), (50, 3)), rtol=1e-10, atol=1e-9)


def test_control_variate_needs_a_centre():
    X, y = linear_data()
    est = ControlVariate(LinearRegression(X, y), 10)
    with pytest.raises(ValueError, match="ControlVariate has no centre: pass `centre=`"):
        est.init(backends.default_rng(0), np.zeros((1, 3)))


def test_noisy_gradient_adds_gaussian_noise_to_the_exact_gradient():
    target = GaussianTarget.review_example()
    theta = np.array([[0.3, -1.2]])
    exact = target.grad_log_posterior(theta)
    g, _ = once(NoisyGradient(target, 0.1), backends.default_rng(5), theta)
    z = backends.default_rng(5).normal((1, 2))
    np.testing.assert_allclose(g, exact + 0.1 * z, rtol=1e-12)
    g0, _ = once(NoisyGradient(target, 0.0), backends.default_rng(5), theta)
    np.testing.assert_array_equal(g0, exact)


def test_full_gradient_is_the_full_data_gradient():
    X, y = linear_data()
    model = LinearRegression(X, y)
    theta = np.random.default_rng(2).normal(size=(3, 3))
    g, info = once(FullGradient(model), None, theta)
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
    state = None
    if kind == "minibatch":
        est = Minibatch(model, 10)
    elif kind == "minibatch_replace":
        est = Minibatch(model, 10, replace=True)
    elif kind == "cv":
        est = ControlVariate(model, 10, centre=mode - 0.2)
    elif kind == "svrg":
        est = SVRG(model, 10, update_every=10**9)
        snap = copies(mode - 0.2)
        state = est.init(rng, snap)  # snapshot at another point; later calls keep it
        _, state, _ = est.estimate(rng, state, snap)
    else:
        model = GaussianTarget.review_example()
        theta = np.array([0.7, -0.4])
        est = NoisyGradient(model, 0.5)
    if state is None:
        state = est.init(rng, copies(theta))
    g, _, _ = est.estimate(rng, state, copies(theta))
    exact = model.grad_log_posterior(theta)
    mean, se = replicate_mean(g)
    assert np.all(se > 0)
    assert np.all(np.abs(mean - exact) < Z_TOL * se), (mean, exact, se)


@pytest.mark.parametrize("replace", [False, True])
def test_minibatch_variance_matches_sampling_theory(replace):
    X, y = linear_data()
    model = LinearRegression(X, y)
    theta = np.array([0.5, -0.5, 0.0])
    g, _ = once(Minibatch(model, 40, replace=replace), backends.default_rng(12), copies(theta))
    per = model.grad_log_lik(theta[None, :])[0]
    expected = np.diag(sampling_cov(per, 40, replace))
    var, se = var_and_se(g)
    assert np.all(np.abs(var - expected) < Z_TOL * se), (var, expected, se)
    # the two schemes differ by about n/N = 20% here, well over 2 * Z_TOL standard errors
    other = np.diag(sampling_cov(per, 40, not replace))
    assert np.all(np.abs(var - other) > 2 * Z_TOL * se)


def test_noisy_gradient_variance_is_noise_sd_squared():
    target = GaussianTarget.review_example()
    g, _ = once(NoisyGradient(target, 0.3), backends.default_rng(13), copies([0.1, 0.2]))
    var, se = var_and_se(g)
    assert np.all(np.abs(var - 0.09) < Z_TOL * se)
    assert abs(np.corrcoef(g.T)[0, 1]) < Z_TOL / math.sqrt(REPS)


# -- control variates: variance near the mode ----------------------------------------------------------
def _total_var(est, theta, seed):
    """Trace of the covariance of the estimates and its standard error (delta method over replicates)."""
    g, _ = once(est, backends.default_rng(seed), copies(theta))
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
    est0 = ControlVariate(model, 50, opt_steps=400, opt_batch_size=1000)
    prepared = est0.prepare(backends.default_rng(2), np.zeros((3, 3)))
    est, start = prepared.estimator, prepared.start
    assert start.shape == (3, 3)
    np.testing.assert_allclose(start, np.broadcast_to(est.centre, (3, 3)))
    np.testing.assert_allclose(est.centre, mean, atol=1e-3 * np.sqrt(cov.diagonal()).max())
    state = est.init(backends.default_rng(3), start)
    np.testing.assert_allclose(state.centre_grad[0], model.grad_log_lik_sum(est.centre[None, :])[0])
    # the optimiser's minibatches, the Newton passes (the start's log density, then per step a Hessian, a
    # gradient and the line search's log densities: whole passes, at least four), two for the check, one in init
    newton = (prepared.n_evals + est.init_cost - (400 * 1000 + 2 * 1000 + 1000)) / 1000
    assert newton >= 4 and newton == round(newton)


# -- SVRG --------------------------------------------------------------------------------------------------
def test_svrg_refreshes_its_snapshot_every_update_every_calls():
    X, y = linear_data(n=100)
    model = LinearRegression(X, y)
    est = SVRG(model, 10, update_every=3)
    assert est.init_cost == 100  # the snapshot at the start: one full pass
    rng = backends.default_rng(4)
    replay = backends.default_rng(4)
    pts = np.random.default_rng(5).normal(size=(8, 2, 3))
    snap_of_call = []
    # init takes the first snapshot (the old API's refresh at call 0); estimate refreshes at calls 3, 6
    state = est.init(rng, pts[0])
    assert isinstance(state, SVRGState) and state.count == 0
    for k in range(8):
        g, state, info = est.estimate(rng, state, pts[k])
        refresh = k % 3 == 0
        assert info.n_evals == 20 + (100 if refresh and k > 0 else 0)
        snap = pts[k] if refresh else snap_of_call[-1]
        snap_of_call.append(snap)
        np.testing.assert_array_equal(state.snapshot, snap)
        idx = subsample(replay, 100, 10, 2)
        diff = (model.grad_log_lik(pts[k], idx) - model.grad_log_lik(snap, idx)).sum(axis=1)
        expected = model.grad_log_prior(pts[k]) + model.grad_log_lik_sum(snap) + 10.0 * diff
        np.testing.assert_allclose(g, expected, rtol=1e-12)
    # a new init restarts the cycle at the new position, for any number of chains
    state = est.init(rng, pts[1])
    np.testing.assert_array_equal(state.snapshot, pts[1])
    g, state, info = est.estimate(rng, state, pts[1])
    assert info.n_evals == 20 and state.count == 1
    state = est.init(rng, np.zeros((5, 3)))
    assert tuple(state.snapshot.shape) == (5, 3) and tuple(state.snapshot_grad.shape) == (5, 3)
    assert est.estimate(rng, state, np.zeros((5, 3)))[2].n_evals == 20


def test_svrg_default_update_interval_is_one_epoch():
    X, y = linear_data(n=105)
    assert SVRG(LinearRegression(X, y), 10).update_every == 11


# -- no hidden state: the same object, the same inputs, the same outputs ------------------------------
def _assert_same(a, b):
    """Exact equality of nested estimator outputs: arrays, tuples (states, infos), numbers and None."""
    if a is None or b is None:
        assert a is None and b is None
    elif isinstance(a, tuple):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        np.testing.assert_array_equal(a, b)
        assert np.asarray(a).dtype == np.asarray(b).dtype
    else:
        assert a == b


def _trajectory(est, seed, n_calls=10):
    """Thread one estimator state through ``n_calls`` estimates at fixed positions; record everything."""
    rng = backends.default_rng(seed)
    pts = np.random.default_rng(6).normal(size=(n_calls, 3, 3))
    state = est.init(rng, pts[0])
    out = [state]
    for k in range(n_calls):
        g, state, info = est.estimate(rng, state, pts[k])
        out.append((g, state, info))
    return out


@pytest.mark.parametrize("kind", ["minibatch", "cv", "svrg"])
def test_estimators_keep_no_state_on_the_object(kind):
    """Running the same estimator object twice from generators of one seed repeats every output
    exactly: whatever carries from call to call lives in the returned state, not on the object."""
    X, y = linear_data(n=100)
    model = LinearRegression(X, y)
    if kind == "minibatch":
        est = Minibatch(model, 10)
    elif kind == "cv":
        est = ControlVariate(model, 10, centre=np.array([0.9, -1.1, 0.4]))
    else:
        est = SVRG(model, 10, update_every=3)
    before = dict(vars(est))
    first = _trajectory(est, 8)
    second = _trajectory(est, 8)
    assert len(first) == len(second) == 11
    for a, b in zip(first, second):
        _assert_same(a, b)
    # the object itself is unchanged: the same attributes, bound to the same objects
    assert vars(est).keys() == before.keys()
    assert all(vars(est)[k] is v for k, v in before.items())
    # and a different seed gives different estimates (the comparison above is not vacuous)
    # (SVRG's estimate is exact at its snapshot, on refresh calls, so compare call 1)
    other = _trajectory(est, 9)
    assert not np.array_equal(first[2][0], other[2][0])


def test_svrg_refreshes_at_calls_3_6_9_and_snapshots_the_refresh_position():
    X, y = linear_data(n=100)
    model = LinearRegression(X, y)
    est = SVRG(model, 10, update_every=3)
    rng = backends.default_rng(4)
    pts = np.random.default_rng(5).normal(size=(10, 2, 3))
    state = est.init(rng, pts[0])
    assert isinstance(state, SVRGState) and state.count == 0
    np.testing.assert_array_equal(state.snapshot, pts[0])
    np.testing.assert_allclose(state.snapshot_grad, model.grad_log_lik_sum(pts[0]), rtol=1e-14)
    last_refresh = 0
    refreshes = []
    for k in range(10):
        g, state, info = est.estimate(rng, state, pts[k])
        if info.n_evals == 2 * 10 + 100:
            refreshes.append(k)
            last_refresh = k
        else:
            assert info.n_evals == 2 * 10
        assert info.batch_size == 10
        np.testing.assert_array_equal(state.snapshot, pts[last_refresh])
        np.testing.assert_allclose(state.snapshot_grad, model.grad_log_lik_sum(pts[last_refresh]), rtol=1e-14)
        assert state.count == k - last_refresh + 1
    assert refreshes == [3, 6, 9]


def test_control_variate_prepare_returns_a_new_estimator_centred_at_find_mode():
    X, y = linear_data(n=400)
    model = LinearRegression(X, y)
    est = ControlVariate(model, 20, optimizer="sgd", opt_steps=60, opt_batch_size=40, opt_step_size=1e-3)
    position = np.random.default_rng(3).normal(size=(4, 3))
    prepared = est.prepare(backends.default_rng(2), position)
    assert isinstance(prepared, Prepared)
    new = prepared.estimator
    assert new is not est and isinstance(new, ControlVariate)
    assert est.centre is None  # the original is untouched
    mode = find_mode(model, backends.default_rng(2), position[0], method="sgd", n_steps=60, step_size=1e-3, batch_size=40)
    np.testing.assert_array_equal(new.centre, mode)
    newton = (prepared.n_evals - (60 * 40 + 2 * 400)) / 400  # whole passes of the Newton polish
    assert newton >= 4 and newton == round(newton)
    np.testing.assert_array_equal(prepared.start, np.broadcast_to(mode, (4, 3)))
    # every other setting is carried over
    assert (new.batch_size, new.optimizer, new.opt_steps, new.opt_step_size, new.opt_batch_size, new.replace) == (
        20, "sgd", 60, 1e-3, 40, False)
    state = new.init(backends.default_rng(0), position)
    assert isinstance(state, ControlVariateState)
    np.testing.assert_array_equal(state.centre, mode)
    # preparing an estimator that has a centre changes nothing and costs nothing
    again = new.prepare(backends.default_rng(5), position)
    assert again.estimator is new and again.n_evals == 0.0
    np.testing.assert_array_equal(again.start, np.broadcast_to(mode, (4, 3)))
    # the original still refuses to run without a centre
    with pytest.raises(ValueError, match="centre="):
        est.init(backends.default_rng(0), position)


# -- registry ---------------------------------------------------------------------------------------------
def test_make_estimator_by_name():
    X, y = linear_data(n=500)
    model = LinearRegression(X, y)
    assert set(ESTIMATORS) == {"full", "minibatch", "cv", "svrg", "noisy", "ps", "cv-ps", "adaptive-cv",
                               "adaptive-cv-ps", "saga", "dpp", "minibatch-noise", "cv-switch", "buffered",
                               "chunked"}
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
        state = est.init(rng, conv(theta))
        for k in range(3):
            g, state, info = est.estimate(rng, state, conv(theta + 0.1 * k))
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
