"""sample(..., max_time=...): a wall-clock budget for the iterations."""

import time

import numpy as np
import pytest

import sgmc
from sgmc.models import LinearRegression


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 3))
    y = X @ np.array([1.0, -1.0, 0.5]) + rng.normal(size=2000)
    m = LinearRegression(X, y)
    # one short run first, so that one-off costs (loading compiled code) fall outside the budgets
    sgmc.sample(m, "sgld", step_size=1e-4, n_iter=5, rng=0, progress=False)
    return m


def test_stops_near_the_budget_and_says_so(model):
    t0 = time.perf_counter()
    tr = sgmc.sample(model, "sgld", step_size=1e-4, n_iter=10**5, burn_in=50, thin=3, chains=4,
                     group_size=2, max_time=0.4, rng=1, progress=False)
    elapsed = time.perf_counter() - t0
    done = tr.info["iterations_done"]
    assert tr.info["stopped"] == "max_time" and tr.info["max_time"] == 0.4
    assert 50 < done < 10**5
    # the first group spends its half of the budget; the second runs as many iterations as the first,
    # which can take less than its half, so the whole run may end before 0.4 s
    assert 0.2 <= elapsed < 0.4 + 1.5  # set-up and assembly on a loaded machine
    # burn-in and thinning apply to the iterations done; every chain has the same length
    assert tr.iterations == list(range(50, done, 3))
    assert tr.draws.shape == (4, len(tr.iterations), 3)
    assert tr.stats["n_evals"].shape == (4, done)
    # the groups shared the budget: the first stopped on its half (0.2 s, plus at most one iteration);
    # the second ran as many iterations as the first, however long that took on a loaded machine
    assert tr.stats["wall_time"][0, -1] < 0.4
    assert tr.stats["wall_time"].shape == (4, done)


def test_a_generous_budget_changes_nothing(model):
    kw = dict(step_size=1e-4, n_iter=300, burn_in=100, thin=2, chains=3, group_size=2, rng=2, progress=False)
    a = sgmc.sample(model, "sghmc", **kw)
    b = sgmc.sample(model, "sghmc", max_time=60, **kw)
    np.testing.assert_array_equal(a.draws, b.draws)
    assert b.info["stopped"] is None and a.info["stopped"] is None
    assert b.info["iterations_done"] == 300


def test_the_stopped_run_is_the_start_of_the_full_run(model):
    tr = sgmc.sample(model, "sgld", step_size=1e-4, n_iter=10**5, chains=2, max_time=0.2, rng=3, progress=False)
    k = tr.info["iterations_done"]
    full = sgmc.sample(model, "sgld", step_size=1e-4, n_iter=k, chains=2, rng=3, progress=False)
    np.testing.assert_array_equal(tr.draws, full.draws)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "1", True])
def test_bad_budgets_are_refused(model, bad):
    with pytest.raises(ValueError, match="`max_time` must be a positive number of seconds"):
        sgmc.sample(model, "sgld", step_size=1e-4, n_iter=10, max_time=bad, progress=False)


def test_not_with_an_executor_or_checkpoint(model, tmp_path):
    with pytest.raises(ValueError, match="`max_time`.*`executor`"):
        sgmc.sample(model, "sgld", step_size=1e-4, n_iter=10, max_time=1, executor="processes", progress=False)
    with pytest.raises(ValueError, match="`max_time`.*`checkpoint`"):
        sgmc.sample(model, "sgld", step_size=1e-4, n_iter=10, max_time=1, checkpoint=tmp_path / "c",
                    progress=False)
