"""The one-call runner ``sgmc.sample`` and the :class:`~sgmc.Trace` it returns."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.linalg

import sgmc
from _helpers import Z_TOL, pooled_moments, to_host
from sgmc import backends
from sgmc._array_api import device_of
from sgmc.estimators import ControlVariate, FullGradient, Minibatch
from sgmc.models import GaussianTarget, LinearRegression
from sgmc.samplers import SGLD, polynomial

N, D = 500, 3


def regression(n=N, seed=0):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, D))
    y = X @ np.array([1.0, -2.0, 0.5]) + r.normal(size=n)
    return X, y


@pytest.fixture(scope="module")
def model():
    return LinearRegression(*regression())


def quick(model, sampler="sgld", estimator="minibatch", **kw):
    kw.setdefault("step_size", 1e-4)
    kw.setdefault("n_iter", 20)
    kw.setdefault("batch_size", 50)
    kw.setdefault("progress", False)
    kw.setdefault("rng", 0)
    return sgmc.sample(model, sampler, estimator, **kw)


# -- shapes and bookkeeping -------------------------------------------------------------------------------
def test_burn_in_and_thinning_shapes(model):
    tr = quick(model, n_iter=50, burn_in=10, thin=3, chains=4)
    assert tr.iterations == list(range(10, 50, 3))
    assert tr.draws.shape == (4, 14, D)
    assert (tr.n_chains, tr.n_draws, tr.dim) == (4, 14, D)
    assert tr.grads is None
    assert tr.stats["step_size"].shape == (50,)
    for key in ("n_evals", "batch_size", "data_passes", "wall_time"):
        assert tr.stats[key].shape == (4, 50)
    assert tr.info["burn_in"] == 10 and tr.info["thin"] == 3 and tr.info["n_iter"] == 50
    assert tr.info["sampler"] == "sgld" and tr.info["estimator"] == "minibatch"
    assert tr.info["backend"] == "numpy" and tr.info["chains"] == 4
    assert np.all(np.diff(tr.stats["wall_time"], axis=1) >= 0)
    assert tr.flat_draws().shape == (56, D)
    assert "chains=4, draws=14, dim=3" in repr(tr)


def test_kept_draws_are_the_states_at_the_kept_iterations(model):
    cb_positions = []
    tr = quick(model, n_iter=12, burn_in=2, thin=5, chains=2,
               callback=lambda k, state: cb_positions.append(np.array(state.position)))
    assert len(cb_positions) == 12
    for j, k in enumerate(tr.iterations):
        np.testing.assert_array_equal(tr.draws[:, j, :], cb_positions[k])


def test_step_size_schedule_is_recorded_per_iteration(model):
    sched = polynomial(1e-4, b=1.0, gamma=0.55)
    tr = quick(model, step_size=sched, n_iter=30)
    np.testing.assert_allclose(tr.stats["step_size"], [sched(k) for k in range(30)], rtol=1e-15)
    seq = list(np.linspace(1e-4, 2e-4, 30))
    np.testing.assert_allclose(quick(model, step_size=seq, n_iter=30).stats["step_size"], seq)


@pytest.mark.parametrize(
    ("sampler", "estimator", "per_iter"),
    [("sgld", "minibatch", 50 / N), ("sgld", "full", 1.0), ("sgld", "cv", 100 / N), ("ula", "full", 1.0),
     ("mala", "full", 1.0), ("sghmc", "minibatch", 3 * 50 / N), ("sgnht", "minibatch", 50 / N)],
)
def test_data_passes_count_gradient_work(model, sampler, estimator, per_iter):
    opts = {"sghmc": {"n_leapfrog": 3}}.get(sampler)
    est_opts = {"opt_steps": 30, "opt_batch_size": 40} if estimator == "cv" else None
    tr = quick(model, sampler, estimator, n_iter=25, sampler_options=opts, estimator_options=est_opts)
    passes = tr.stats["data_passes"]
    assert passes.shape == (1, 25)
    # every iteration's cost comes from what the step reported, summed over its estimator calls
    np.testing.assert_allclose(np.diff(passes, axis=1), per_iter, rtol=1e-12)
    np.testing.assert_allclose(passes[:, 0], per_iter, rtol=1e-12)
    np.testing.assert_allclose(tr.stats["n_evals"], per_iter * N, rtol=1e-12)
    expected_batch = N if estimator == "full" else 50
    np.testing.assert_array_equal(tr.stats["batch_size"], expected_batch)
    if estimator == "cv":
        # set-up: the optimiser's minibatches, the Newton polish (the log density at the start, then per
        # step a Hessian, a gradient and at least one log density of the line search: whole passes, at
        # least four; tests/test_costs.py counts them against the model), two passes for the check of
        # the centre, and one full pass at the centre (the estimator's init)
        newton = tr.info["setup_data_passes"] - (30 * 40 + 2 * N + N) / N
        assert newton >= 4 and newton == pytest.approx(round(newton), abs=1e-9)
    else:
        assert tr.info["setup_data_passes"] == 0


def test_svrg_data_passes_include_the_snapshot_refreshes(model):
    tr = quick(model, "sgld", "svrg", n_iter=12, chains=2, estimator_options={"update_every": 4})
    d = np.diff(np.concatenate([np.zeros((2, 1)), tr.stats["data_passes"]], axis=1), axis=1)
    # init takes the snapshot (set-up); estimator calls 0 (the initial gradient), 4, 8 and 12
    # refresh it: iterations 3, 7, 11 carry a full pass on top of their two minibatches
    refresh = np.isin(np.arange(12), [3, 7, 11])
    np.testing.assert_allclose(d[:, refresh], 100 / N + 1.0)
    np.testing.assert_allclose(d[:, ~refresh], 100 / N)
    assert tr.info["setup_data_passes"] == pytest.approx(1.0)


def test_exact_samplers_switch_to_the_full_gradient(model):
    tr = quick(model, "ula", "minibatch")
    assert tr.info["estimator"] == "full"
    np.testing.assert_array_equal(tr.stats["batch_size"], N)


def test_sampler_state_statistics_reach_the_info(model):
    tr = quick(model, "mala", "full", n_iter=40, chains=3, step_size=1e-3)
    assert len(tr.info["n_accepted"]) == 3
    rate = np.array(tr.info["acceptance_rate"])
    assert np.all((rate >= 0) & (rate <= 1))
    tr = quick(model, "sgnht", chains=3)
    assert len(tr.info["thermostat"]) == 3
    assert tr.info["setup_time"] >= 0 and tr.info["sampling_time"] > 0


# -- stored gradients --------------------------------------------------------------------------------------
def test_store_grads_full_is_the_exact_gradient_at_the_draws(model):
    tr = quick(model, store_grads="full", n_iter=20, thin=2, chains=3)
    assert tr.info["grads"] == "full"
    assert tr.grads.shape == tr.draws.shape
    expected = model.grad_log_posterior(tr.flat_draws())
    np.testing.assert_allclose(tr.flat_grads(), expected, rtol=1e-12)


def test_store_grads_true_keeps_the_estimate_paired_with_each_draw(model):
    exact = quick(model, estimator="full", store_grads=True, chains=2)
    assert exact.info["grads"] == "estimate"
    np.testing.assert_allclose(exact.flat_grads(), model.grad_log_posterior(exact.flat_draws()), rtol=1e-12)
    # with a minibatch estimator the stored value is the (noisy) estimate the sampler used
    noisy = quick(model, store_grads="estimate", chains=2, batch_size=10)
    full = model.grad_log_posterior(noisy.flat_draws())
    assert not np.allclose(noisy.flat_grads(), full)
    with pytest.raises(ValueError, match="no stored gradients"):
        quick(model).flat_grads()


# -- seeds and starting points -----------------------------------------------------------------------------
def test_same_seed_reproduces_and_different_seeds_differ(xb):
    X, y = regression(n=60)
    m = LinearRegression(xb.asarray(X), xb.asarray(y))
    a = quick(m, chains=2, rng=xb.rng(3), batch_size=10)
    b = quick(m, chains=2, rng=xb.rng(3), batch_size=10)
    c = quick(m, chains=2, rng=xb.rng(4), batch_size=10)
    np.testing.assert_array_equal(xb.to_numpy(a.draws), xb.to_numpy(b.draws))
    assert not np.allclose(xb.to_numpy(a.draws), xb.to_numpy(c.draws))
    assert device_of(a.draws) == device_of(m.X)
    # the two chains of one run are different streams
    assert not np.allclose(xb.to_numpy(a.draws)[0], xb.to_numpy(a.draws)[1])


def test_integer_seed_and_generator_agree(model):
    a = quick(model, rng=5)
    b = quick(model, rng=backends.default_rng(5))
    np.testing.assert_array_equal(a.draws, b.draws)


def test_init_is_broadcast_or_taken_per_chain(model):
    start = np.array([10.0, -10.0, 5.0])
    tr = quick(model, init=start, chains=3, step_size=1e-12, n_iter=3)
    np.testing.assert_allclose(tr.draws[:, 0, :], np.broadcast_to(start, (3, D)), atol=1e-4)
    per_chain = np.arange(9.0).reshape(3, D)
    tr = quick(model, init=per_chain, chains=3, step_size=1e-12, n_iter=3)
    np.testing.assert_allclose(tr.draws[:, 0, :], per_chain, atol=1e-4)
    tr = quick(model, init=[1.0, 2.0, 3.0], chains=2, step_size=1e-12, n_iter=3)
    np.testing.assert_allclose(tr.draws[:, 0, :], [[1.0, 2.0, 3.0]] * 2, atol=1e-4)


def test_control_variate_chains_start_at_the_centre(model):
    mean, _ = model.posterior()
    centre = mean + 0.05
    est = ControlVariate(model, 50, centre=centre)
    tr = quick(model, estimator=est, chains=3, step_size=1e-12, n_iter=3)
    np.testing.assert_allclose(tr.draws[:, 0, :], np.broadcast_to(centre, (3, D)), atol=1e-4)
    # found by the optimiser when not given: the chains start at the (approximate) mode
    tr = quick(model, estimator="cv", chains=2, step_size=1e-12, n_iter=3,
               estimator_options={"opt_steps": 300, "opt_batch_size": N})
    np.testing.assert_allclose(tr.draws[:, 0, :], np.broadcast_to(mean, (2, D)), atol=1e-3)
    # an explicit init wins over the centre
    tr = quick(model, estimator=ControlVariate(model, 50, centre=centre), init=np.zeros(D), step_size=1e-12, n_iter=3)
    np.testing.assert_allclose(tr.draws[0, 0, :], 0.0, atol=1e-4)


def test_configured_sampler_and_estimator_objects(model):
    tr = quick(model, SGLD(), Minibatch(model, 25))
    assert tr.info["sampler"] == "sgld" and np.all(tr.stats["batch_size"] == 25)
    tr = quick(model, "ula", FullGradient(model))
    assert tr.info["estimator"] == "full"


def test_progress_bar_runs(model, capsys):
    pytest.importorskip("tqdm")
    tr = quick(model, progress=True, n_iter=30)
    assert tr.draws.shape == (1, 30, D)


# -- trace I/O ---------------------------------------------------------------------------------------------
def test_trace_save_load_round_trip(tmp_path, model):
    tr = quick(model, "mala", "full", store_grads=True, chains=2, n_iter=15, burn_in=3, thin=2, step_size=1e-3)
    path = str(tmp_path / "trace.npz")
    tr.save(path)
    back = sgmc.Trace.load(path)
    np.testing.assert_array_equal(back.draws, tr.draws)
    np.testing.assert_array_equal(back.grads, tr.grads)
    assert back.iterations == tr.iterations
    assert set(back.stats) == set(tr.stats)
    for k in tr.stats:
        np.testing.assert_array_equal(back.stats[k], tr.stats[k])
    assert back.info == tr.info
    pytest.importorskip("array_api_strict")
    on_strict = sgmc.Trace.load(path, backend="array_api_strict")
    assert backends.get_backend(on_strict.draws).name == "array_api_strict"
    np.testing.assert_array_equal(backends.to_numpy(on_strict.mean()), tr.mean())


def test_trace_save_from_another_backend(tmp_path, xb):
    X, y = regression(n=60)
    m = LinearRegression(xb.asarray(X), xb.asarray(y))
    tr = quick(m, chains=2, rng=xb.rng(0), batch_size=10, store_grads=True)
    path = str(tmp_path / "t.npz")
    tr.save(path)
    back = sgmc.Trace.load(path)
    np.testing.assert_array_equal(back.draws, xb.to_numpy(tr.draws))
    np.testing.assert_array_equal(back.grads, xb.to_numpy(tr.grads))


def test_trace_to_arviz(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("arviz")
    tr = quick(model, n_iter=30, burn_in=10, thin=2, chains=3)
    idata = tr.to_arviz(var_name="beta")
    post = idata.posterior["beta"]
    assert post.dims == ("chain", "draw", "beta_dim")
    assert post.shape == (3, 10, D)
    np.testing.assert_array_equal(post.values, tr.draws)
    ss = idata.sample_stats
    assert ss["step_size"].shape == (3, 10)
    np.testing.assert_array_equal(ss["data_passes"].values, tr.stats["data_passes"][:, tr.iterations])


def test_trace_mean_and_cov(model):
    tr = quick(model, n_iter=40, chains=3)
    x = tr.flat_draws()
    np.testing.assert_allclose(tr.mean(), x.mean(axis=0))
    np.testing.assert_allclose(tr.cov(), np.cov(x.T))


# -- posterior recovery on linear regression ---------------------------------------------------------------
def _chain_moments(trace):
    x = to_host(trace.draws)
    return x.mean(axis=1), np.einsum("cti,ctj->cij", x, x) / x.shape[1]


def test_mala_recovers_the_linear_regression_posterior(model):
    """MALA is exact: pooled mean and covariance of 200 chains started in the posterior match the
    closed form within Z_TOL replicate-chain standard errors."""
    mean, cov = model.posterior()
    h = float(np.linalg.eigvalsh(cov).min())  # h = smallest posterior variance: acceptance about 0.8
    init = np.random.default_rng(1).multivariate_normal(mean, cov, size=200)
    tr = sgmc.sample(model, "mala", step_size=h, n_iter=800, chains=200, init=init, rng=2, progress=False)
    mu, mu_se, c, c_se = pooled_moments(*_chain_moments(tr))
    assert np.all(np.abs(mu - mean) < Z_TOL * mu_se)
    assert np.all(np.abs(c - cov) < Z_TOL * c_se)
    assert 0.5 < np.mean(tr.info["acceptance_rate"]) < 0.99
    # the check has power: ULA's O(h) inflation at this h would be resolved
    ula = scipy.linalg.solve_discrete_lyapunov(np.eye(D) - 0.5 * h * np.linalg.inv(cov), h * np.eye(D))
    assert np.all(np.abs(np.diag(ula - cov)) > 2 * Z_TOL * np.diag(c_se))


def test_ula_reaches_its_lyapunov_covariance_on_linear_regression(model):
    """ULA on a Gaussian posterior N(m, S) is the AR(1) recursion x' - m = (I - (h/2) S^-1)(x - m) +
    sqrt(h) Z, whose stationary covariance solves P = A P A^T + h I (scipy's Lyapunov solver)."""
    mean, cov = model.posterior()
    h = float(np.linalg.eigvalsh(cov).min())
    A = np.eye(D) - 0.5 * h * np.linalg.inv(cov)
    expected = scipy.linalg.solve_discrete_lyapunov(A, h * np.eye(D))
    init = np.random.default_rng(3).multivariate_normal(mean, expected, size=200)
    tr = sgmc.sample(model, "ula", step_size=h, n_iter=800, chains=200, init=init, rng=4, progress=False)
    mu, mu_se, c, c_se = pooled_moments(*_chain_moments(tr))
    assert np.all(np.abs(mu - mean) < Z_TOL * mu_se)
    assert np.all(np.abs(c - expected) < Z_TOL * c_se)


def test_sgld_cv_recovers_the_linear_regression_mean(model):
    """SGLD-CV: the gradient is linear in theta and the estimator unbiased, so the stationary mean is
    the posterior mean exactly; the covariance is inflated by O(h) (gradient noise and
    discretisation), so it is only checked to lie above the posterior covariance's diagonal minus
    Monte Carlo error and within 30% of it at this small step."""
    mean, cov = model.posterior()
    h = 0.1 * float(np.linalg.eigvalsh(cov).min())
    tr = sgmc.sample(model, "sgld", "cv", step_size=h, batch_size=25, n_iter=1500, burn_in=300, chains=100, rng=5,
                     progress=False, estimator_options={"opt_steps": 500})
    mu, mu_se, c, c_se = pooled_moments(*_chain_moments(tr))
    assert np.all(np.abs(mu - mean) < Z_TOL * mu_se)
    d, d_se = np.diag(c), np.diag(c_se)
    assert np.all(d > np.diag(cov) - Z_TOL * d_se)
    assert np.all(d < 1.3 * np.diag(cov))


def test_sgld_on_the_review_example_through_the_runner():
    """The runner's SGLD with the noisy-gradient estimator reproduces the review's h = 1 covariance."""
    target = GaussianTarget.review_example()
    tr = sgmc.sample(target, "sgld", "noisy", step_size=1.0, n_iter=1500, burn_in=100, chains=200, rng=6,
                     progress=False, estimator_options={"noise_sd": 0.1})
    mu, mu_se, c, c_se = pooled_moments(*_chain_moments(tr))
    assert np.all(np.abs(c - target.sgld_stationary_cov(1.0, 0.01)) < Z_TOL * c_se)
    assert np.all(np.abs(mu) < Z_TOL * mu_se)
    assert tr.info["n_data"] == 0
    np.testing.assert_allclose(np.diff(tr.stats["data_passes"], axis=1), 1.0)  # one exact evaluation per step
    assert math.isfinite(tr.info["sampling_time"])
