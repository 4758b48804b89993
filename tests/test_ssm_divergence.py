"""Large steps on state space models are divergences: DivergenceError with the draws so far, the
iteration and the step size; tune_step_size marks such a step diverged; the SSM step unit."""

from __future__ import annotations

import math

import numpy as np
import pytest

import sgmc
from sgmc import backends
from sgmc.ssm import AR, GARCH, LGSSM, GaussianHMM
from sgmc.ssm._divergence import guarded, is_numerical_failure
from sgmc.ssm.stepsize import step_unit
from sgmc.tuning import StepSizeEdgeWarning, default_grid


@pytest.fixture(scope="module")
def lgssm_y():
    _, y = LGSSM.simulate_scalar(backends.default_rng(0), 1000, [0.9, 2.0, 2.0])
    return np.asarray(y)


@pytest.mark.parametrize("estimator", ["buffered", "full"])
def test_large_step_is_a_divergence(lgssm_y, estimator):
    with pytest.raises(sgmc.DivergenceError) as info:
        sgmc.sample(LGSSM(lgssm_y), "sgld", estimator, step_size=1e-2, n_iter=300, chains=2,
                    init=[0.9, 2.0, 2.0], rng=0, progress=False)
    err = info.value
    assert err.step_size == 1e-2 and 1 <= err.iteration < 300
    assert f"iteration {err.iteration}" in str(err) and "step_size=0.01" in str(err)
    assert "step unit" in str(err)
    # the draws up to the failing iteration are kept, finite
    assert err.trace is not None
    d = np.asarray(err.trace.draws)
    assert d.shape[:2] == (2, err.iteration - 1) and np.all(np.isfinite(d))
    # and the cause is kept for a reader who wants it
    assert err.__cause__ is None or is_numerical_failure(err.__cause__)


def test_hmm_and_garch_large_steps_diverge():
    rng = np.random.default_rng(1)
    y = np.concatenate([rng.normal(-2, 1, 100), rng.normal(2, 1, 100)])
    with pytest.raises(sgmc.DivergenceError):
        sgmc.sample(GaussianHMM(y, 2), "sgld", "buffered", step_size=10.0, n_iter=100, rng=0, progress=False,
                    batch_size=20)
    th = np.asarray(GARCH.theta_from(0.1, 0.8, 0.05, mean=0.0))
    _, st = GARCH(np.zeros(3), noise=False, mean=True).simulate(backends.default_rng(2), 300, th)
    with pytest.raises(sgmc.DivergenceError):
        sgmc.sample(GARCH(np.asarray(st)[:, 0], noise=False, mean=True), "sgld", "full", step_size=10.0,
                    n_iter=100, init=th, rng=0, progress=False)


def test_guard_passes_good_results_and_other_errors():
    xp = backends.get_backend("numpy").xp
    theta = np.zeros((2, 3))
    assert guarded(xp, "thing", lambda t: (t + 1.0, 3), theta)[1] == 3
    with pytest.raises(KeyError):  # not a numerical failure: not turned into a divergence
        guarded(xp, "thing", lambda t: {}["x"], theta)
    with pytest.raises(sgmc.DivergenceError, match="not finite"):
        guarded(xp, "thing", lambda t: t + np.inf, theta)
    with pytest.raises(sgmc.DivergenceError, match="position"):
        guarded(xp, "thing", lambda t: t, np.full((1, 2), np.nan))
    with pytest.raises(sgmc.DivergenceError, match="LinAlgError"):
        guarded(xp, "thing", lambda t: np.linalg.inv(np.zeros((2, 2))), theta)


def test_tuning_marks_a_diverged_grid_point_and_carries_on(lgssm_y):
    with pytest.warns(StepSizeEdgeWarning):          # the grid as given (no extension), its best at an edge
        res = sgmc.tune_step_size(LGSSM(lgssm_y), "sgld", "buffered", grid=[1e-4, 1e-2], pilot_iters=200,
                                  chains=2, rng=0, n_ksd=100, init=[0.9, 2.0, 2.0], batch_size=20, extend=0)
    rows = {r["step_size"]: r for r in res.table}
    assert rows[1e-2]["diverged"] and math.isinf(rows[1e-2]["ksd"])
    assert not rows[1e-4]["diverged"] and res.best == 1e-4


def test_step_unit_scales_like_one_over_T_and_anchors_the_grid():
    """The unit is 1 / lambda_max of the posterior curvature: for the scalar LGSSM it shrinks like 1/T,
    agrees between the exact Hessian and the empirical Fisher information of window scores, and is
    where tune_step_size's default grid for SGLD is anchored."""
    th = np.array([0.9, 2.0, 2.0])
    units = {}
    for T in (1000, 8000):
        _, y = LGSSM.simulate_scalar(backends.default_rng(3), T, th)
        units[T] = step_unit(LGSSM(y), th)
    assert 5.0 < units[1000] / units[8000] < 13.0
    _, y = LGSSM.simulate_scalar(backends.default_rng(3), 8000, th)

    class WindowsOnly(LGSSM):  # the same model seen without its exact likelihood
        log_lik = property(lambda self: None)

    emp = step_unit(WindowsOnly(y), th, rng=0, n_windows=400)
    assert 0.3 < emp / units[8000] < 3.0  # empirical Fisher at the truth against the observed information
    grid = default_grid(LGSSM(y), "sgld", position=th, rng=0)
    np.testing.assert_allclose(grid[6], units[8000], rtol=1e-6)
    assert grid[-1] > 3 * units[8000] and grid[0] < 1e-2 * units[8000]


def test_step_unit_bad_position():
    model = AR(np.arange(10.0), order=1)
    with pytest.raises(ValueError, match="position"):
        step_unit(model, np.array([0.0, 0.0, -800.0]))


def test_large_step_is_a_divergence_on_backends(xb, lgssm_y):
    """On NumPy the gradient finds the divergence at its iteration; elsewhere reading values each
    iteration would stall the device, so the runner's check (every ``check_every``) finds it, and the
    draws are kept up to the last check that found every position finite."""
    every = 4
    with pytest.raises(sgmc.DivergenceError) as info:
        sgmc.sample(LGSSM(xb.asarray(lgssm_y)), "sgld", "buffered", step_size=1e-2, n_iter=200,
                    init=[0.9, 2.0, 2.0], rng=0, progress=False, check_every=every)
    err = info.value
    assert 1 <= err.iteration < 200 and err.step_size == 1e-2 and "step unit" in str(err)
    host = xb.name == "numpy"
    assert host or err.iteration % every == 0
    kept = err.iteration - 1 if host else err.iteration - every
    assert err.trace is not None and err.trace.draws.shape[1] == kept > 0
    assert np.all(np.isfinite(xb.to_numpy(err.trace.draws)))
