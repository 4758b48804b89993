"""Step-size tuning by KSD: scores, selection against a known answer, divergence, validation."""

import math
import warnings

import numpy as np
import pytest

from sgmc.diagnostics.ess import ess
from sgmc.diagnostics.metrics import gaussian_kl_from_samples
from sgmc.estimators import NoisyGradient
from sgmc.models import GaussianTarget, LinearRegression, LogisticRegression
from sgmc.tuning import StepSizeEdgeWarning, TuningResult, default_grid, tune_step_size


def ksd_eq13_bruteforce(x, s, c=1.0, beta=-0.5):
    """The review's eq. (13) with the IMQ kernel, written out over all n^2 pairs (test oracle).

    k0_j(x, y) = s_j(x) s_j(y) k + s_j(x) dk/dy_j + s_j(y) dk/dx_j + d2k/dx_j dy_j, with s = grad log pi,
    k = (c^2 + |x - y|^2)^beta, dk/dx_j = 2 beta (x_j - y_j) B^(beta-1) = -dk/dy_j and
    d2k/dx_j dy_j = -2 beta B^(beta-1) - 4 beta (beta-1) (x_j - y_j)^2 B^(beta-2).
    KSD = sum_j sqrt(sum_{k,k'} k0_j / n^2).
    """
    diff = x[:, None, :] - x[None, :, :]
    b = c**2 + np.sum(diff**2, axis=-1)
    k = b**beta
    dkx = 2 * beta * diff * (b ** (beta - 1))[..., None]
    dxy = -2 * beta * (b ** (beta - 1))[..., None] - 4 * beta * (beta - 1) * diff**2 * (b ** (beta - 2))[..., None]
    sx, sy = s[:, None, :], s[None, :, :]
    k0 = sx * sy * k[..., None] + sx * (-dkx) + sy * dkx + dxy
    n = x.shape[0]
    return float(np.sum(np.sqrt(np.sum(k0, axis=(0, 1)) / n**2)))


@pytest.fixture(scope="module")
def review():
    target = GaussianTarget.review_example()
    return target, NoisyGradient(target, noise_sd=0.1)


def test_table_scores_are_exact_ksd_and_ess_of_kept_draws(review):
    target, noisy = review
    with pytest.warns(StepSizeEdgeWarning, match="chose 0.5, the largest step tried"):   # the grid as given
        res = tune_step_size(target, "sgld", noisy, grid=[0.05, 0.5], pilot_iters=600, chains=3, n_ksd=150,
                             init=np.zeros(2), rng=1, keep_traces=True, extend=0)
    assert isinstance(res, TuningResult)
    assert res.thin == 12                              # ceil(600 / (150 // 3))
    for row, trace in zip(res.table, res.traces):
        x = np.asarray(trace.draws).reshape(-1, 2)
        assert trace.draws.shape == (3, 50, 2)
        # the stored scores are the exact gradients at the kept draws, not the noisy estimates
        np.testing.assert_allclose(np.asarray(trace.grads).reshape(-1, 2), -x @ np.linalg.inv(np.asarray(target.cov)),
                                   rtol=1e-10, atol=1e-12)
        assert row["ksd"] == pytest.approx(ksd_eq13_bruteforce(x, -x @ np.linalg.inv(np.asarray(target.cov))), rel=1e-9)
        assert row["ess"] == pytest.approx(float(np.min(np.asarray(ess(trace.draws)))), rel=1e-12)
        assert row["time"] > 0 and row["diverged"] is False
    assert res.best == min(res.table, key=lambda r: r["ksd"])["step_size"]


def test_joint_kind_and_ksd_options_are_used(review):
    target, noisy = review
    kw = dict(grid=[0.1], pilot_iters=200, chains=2, n_ksd=40, init=np.zeros(2), rng=2, keep_traces=True)
    r_sum = tune_step_size(target, "sgld", noisy, **kw)
    r_joint = tune_step_size(target, "sgld", noisy, ksd_kind="joint", **kw)
    r_c = tune_step_size(target, "sgld", noisy, ksd_options={"c": 2.0}, **kw)
    # same seed, same draws: only the discrepancy changes
    np.testing.assert_array_equal(np.asarray(r_sum.traces[0].draws), np.asarray(r_joint.traces[0].draws))
    assert r_sum.table[0]["ksd"] != pytest.approx(r_joint.table[0]["ksd"])
    x = np.asarray(r_c.traces[0].draws).reshape(-1, 2)
    s = -x @ np.linalg.inv(np.asarray(target.cov))
    assert r_c.table[0]["ksd"] == pytest.approx(ksd_eq13_bruteforce(x, s, c=2.0), rel=1e-9)


def test_picks_the_step_with_the_best_kl_on_a_gaussian_posterior():
    # Linear regression has an exact Gaussian posterior, so each pilot sample's distance from it can
    # be measured independently by the Gaussian KL. Minibatch SGLD from theta = 0: small steps have
    # not arrived after 4000 iterations, large steps are over-dispersed. KSD must pick the step that
    # KL ranks best or its neighbour on the grid (seeds 0-5 all picked exactly the KL-best step).
    r = np.random.default_rng(0)
    X = r.normal(size=(1000, 2))
    y = X @ np.array([1.0, -1.0]) + r.normal(size=1000)
    model = LinearRegression(X, y)
    mean, cov = model.posterior()
    grid = [1e-6, 1e-5, 3.16e-5, 1e-4, 3.16e-4, 1e-3]
    res = tune_step_size(model, "sgld", "minibatch", grid=grid, batch_size=10, pilot_iters=4000, chains=4,
                         n_ksd=1000, init=np.zeros(2), rng=0, keep_traces=True)
    kl = [float(gaussian_kl_from_samples(t.draws, mean, cov)) for t in res.traces]
    best_kl = int(np.argmin(kl))
    assert abs(grid.index(res.best) - best_kl) <= 1
    assert not res.at_edge
    # and ESS alone would have picked the largest step, whose KL is more than twice as large
    assert max(res.table, key=lambda row: row["ess"])["step_size"] == 1e-3
    assert kl[-1] > 2 * kl[best_kl]


def test_diverging_runs_are_marked_not_raised(review):
    target, noisy = review
    # h = 50 > 4 sigma_2^2 = 4: the recursion is unstable and overflows within a few hundred steps
    with pytest.warns(StepSizeEdgeWarning, match="chose 0.1, the smallest step tried"):
        res = tune_step_size(target, "sgld", noisy, grid=[0.1, 50.0], pilot_iters=500, chains=2, n_ksd=100,
                             init=np.zeros(2), rng=3, keep_traces=True, extend=0)
    bad = res.table[1]
    assert bad["diverged"] is True and bad["ksd"] == math.inf and math.isnan(bad["ess"])
    assert res.traces[1] is None
    assert res.best == 0.1 and res.at_edge
    assert "diverged" in res.summary() and "*" in res.summary() and "edge of the grid" in res.summary()
    with pytest.raises(FloatingPointError, match="every step size"):
        tune_step_size(target, "sgld", noisy, grid=[50.0, 80.0], pilot_iters=500, chains=2, n_ksd=100,
                       init=np.zeros(2), rng=3)


def test_grid_is_extended_past_an_edge_choice(review):
    """On the review's Gaussian target the KSD-best step of test_picks... lies near 0.1 (review Figure
    1); a grid whose steps all lie below it is extended upwards, one ratio at a time, until a worse
    step brackets the choice; the added rows are run like the others (same scores as a grid that
    holds them from the start, each on its own stream)."""
    target, noisy = review
    kw = dict(pilot_iters=4000, chains=4, n_ksd=400, init=np.zeros(2), rng=0, progress=False)
    with pytest.warns(StepSizeEdgeWarning, match="the largest step tried"):
        plain = tune_step_size(target, "sgld", noisy, grid=[1e-3, 3e-3], extend=0, **kw)
    assert plain.best == 3e-3 and plain.at_edge and plain.extended == 0
    res = tune_step_size(target, "sgld", noisy, grid=[1e-3, 3e-3], extend=6, keep_traces=True, **kw)
    steps = [row["step_size"] for row in res.table]
    assert steps == sorted(steps) and steps[:2] == [1e-3, 3e-3]
    np.testing.assert_allclose(steps[2:], [3e-3 * 3.0**k for k in range(1, len(steps) - 1)])
    assert 0 < res.extended == len(steps) - 2 < 6
    assert not res.at_edge and res.best not in (steps[0], steps[-1])
    assert res.table[-1]["ksd"] > min(row["ksd"] for row in res.table)
    assert res.table[:2] == [dict(r, time=res.table[i]["time"]) for i, r in enumerate(plain.table)]
    for row, trace in zip(res.table, res.traces):   # the added pilots are scored like the others
        x = np.asarray(trace.draws).reshape(-1, 2)
        assert row["ksd"] == pytest.approx(ksd_eq13_bruteforce(x, -x @ np.linalg.inv(np.asarray(target.cov))), rel=1e-9)
    # downwards too, and an exhausted budget is reported as an edge
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        down = tune_step_size(target, "sgld", noisy, grid=[1.0, 2.0], extend=1, **kw)
        div = tune_step_size(target, "sgld", noisy, grid=[0.1, 50.0], extend=3, **dict(kw, pilot_iters=500, n_ksd=100))
    assert [row["step_size"] for row in down.table] == [0.5, 1.0, 2.0] and down.extended == 1
    assert down.best in (0.5, 1.0) and down.at_edge == (down.best == 0.5)   # the budget of one run is spent
    # a larger step that diverged brackets the choice: nothing is added above it
    assert div.table[-1]["diverged"] and all(row["step_size"] <= 50.0 for row in div.table)
    # an edge choice left after the extension, and only that, is reported by a StepSizeEdgeWarning
    edges = [str(w.message) for w in caught if issubclass(w.category, StepSizeEdgeWarning)]
    assert len(edges) == down.at_edge + div.at_edge, edges
    with pytest.raises(ValueError, match="extend"):
        tune_step_size(target, "sgld", noisy, grid=[0.1], extend=-1, **kw)


def test_default_grid():
    target = GaussianTarget.review_example()             # precision eigenvalues 1/2 and 1: M = 1
    g = default_grid(target)
    np.testing.assert_allclose(g, 10.0 ** (np.arange(-8, 3) / 2))
    r = np.random.default_rng(1)
    X = r.normal(size=(200, 3))
    model = LogisticRegression(X, (r.random(200) < 0.5).astype(float))
    m = 0.25 * np.sum(X**2) + 1 / 10.0                   # sum of per-datum bounds + prior precision
    np.testing.assert_allclose(default_grid(model), 10.0 ** (np.arange(-8, 3) / 2) / m, rtol=1e-12)

    class NoCurvature:
        pass

    assert default_grid(NoCurvature()) == [10.0**k for k in range(-8, 0)]


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        ({"grid": []}, ValueError, "at least one"),
        ({"grid": [0.1, -1.0]}, ValueError, "positive"),
        ({"grid": [0.1, float("nan")]}, ValueError, "positive"),
        ({"grid": ["a"]}, ValueError, "numbers"),
        ({"grid": 0.1}, TypeError, "sequence"),
        ({"grid": [0.1], "n_ksd": 2, "chains": 4}, ValueError, "n_ksd"),
        ({"grid": [0.1], "burn_in": 100, "pilot_iters": 100}, ValueError, "burn_in"),
        ({"grid": [0.1], "ksd_kind": "max"}, ValueError, "ksd_kind"),
        ({"grid": [0.1], "ksd_options": {"preconditioner": "med"}}, ValueError, "ksd_preconditioner"),
        ({"grid": [0.1], "ksd_options": {"kind": "joint"}}, ValueError, "ksd_kind"),
        ({"grid": [0.1], "chains": 0}, ValueError, "chains"),
    ],
)
def test_validation(review, kwargs, err, match):
    target, noisy = review
    with pytest.raises(err, match=match):
        tune_step_size(target, "sgld", noisy, pilot_iters=kwargs.pop("pilot_iters", 100), **kwargs)


def test_runs_on_backend(xb):
    r = np.random.default_rng(0)
    X = r.normal(size=(300, 2))
    y = (r.random(300) < 1 / (1 + np.exp(-X @ np.array([1.0, -1.0])))).astype(float)
    model = LogisticRegression(xb.asarray(X), xb.asarray(y))
    res = tune_step_size(model, "sgld", "minibatch", grid=[1e-3, 1e-2], batch_size=30, pilot_iters=100, chains=2,
                         n_ksd=40, rng=xb.rng(4), keep_traces=True)
    assert res.best in (1e-3, 1e-2)
    for row, trace in zip(res.table, res.traces):
        assert type(trace.draws) is type(model.X)
        assert isinstance(row["ksd"], float) and math.isfinite(row["ksd"])
        assert isinstance(row["ess"], float)


def test_the_grid_is_extended_by_default_and_an_edge_left_is_a_warning(review):
    """By default up to three pilots are added past an edge choice; a choice still at the edge after
    them is reported by a StepSizeEdgeWarning that names the step, the side and the pilots added."""
    target, noisy = review                     # the KSD-best step lies near 0.1 (review Figure 1)
    kw = dict(pilot_iters=4000, chains=4, n_ksd=400, init=np.zeros(2), rng=0, progress=False)
    res = tune_step_size(target, "sgld", noisy, grid=[1e-3, 3e-3], **kw)     # no warning: bracketed
    steps = [row["step_size"] for row in res.table]
    assert res.extended == 3 and len(steps) == 5
    np.testing.assert_allclose(steps[2:], [9e-3, 2.7e-2, 8.1e-2])
    assert not res.at_edge and min(steps) < res.best < max(steps)
    # far below the basin: three doublings do not reach it, and the warning says so
    small = dict(kw, pilot_iters=300, n_ksd=60)
    with pytest.warns(StepSizeEdgeWarning, match=r"chose 1\.6e-05, the largest step tried \(5 pilots, 3 added past "
                      r"the grid's ends with extend=3\)"):
        low = tune_step_size(target, "sgld", noisy, grid=[1e-6, 2e-6], **small)
    assert low.at_edge and low.extended == 3
    np.testing.assert_allclose([row["step_size"] for row in low.table], [1e-6, 2e-6, 4e-6, 8e-6, 1.6e-5])


def test_a_pilot_diverging_before_its_first_kept_draw_is_marked(review):
    # h = 50 overflows within a few hundred steps, before the burn-in of 400 ends: no draw is kept
    target, noisy = review
    res = tune_step_size(target, "sgld", noisy, grid=[0.1, 0.3, 50.0], pilot_iters=500, burn_in=400, chains=2,
                         n_ksd=100, init=np.zeros(2), rng=3, progress=False)
    assert [row["diverged"] for row in res.table] == [False, False, True]
    assert res.table[-1]["ksd"] == math.inf
