"""No silent wrong result: unmixed chains warn (sgmc.MixingWarning) and runaway checks see every iteration.

Both directions. The rule (sgmc.diagnostics.mixing) fires for stuck chains, chains that barely move on
the posterior's scale, and too few effective draws, and stays quiet on well-tuned runs on Gaussian
targets whose posterior is known (its false-alarm rate over fixed seeds, against the bound the module
derives). The runaway checks (sgmc.diagnostics.runaway) look at every iteration, burn-in included:
SGLD past its stability limit on a logistic regression, whose chains jump far out at the first
iteration and oscillate there, stationary (R-hat and ESS look healthy), is flagged, and the compiled
blocks flag it as the one-step loop does.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import numpy as np
import pytest

import sgmc
from sgmc.chains import DivergenceError, run_chains
from sgmc.diagnostics.mixing import ESS_MIN, MIN_DRAWS, RHAT_MAX, check_mixing
from sgmc.estimators.base import EstimateInfo
from sgmc.models import GaussianTarget, LinearRegression, LogisticRegression
from sgmc.samplers.base import StepInfo


def _logistic(n=1000, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-X @ np.ones(d)))).astype(float)
    return LogisticRegression(X, y)


# -- the verdict on arrays ---------------------------------------------------------------------------
def test_iid_draws_pass_and_stuck_chains_fail():
    rng = np.random.default_rng(0)
    ok = check_mixing(rng.normal(size=(4, 500, 3)))
    assert ok.mixed is True and ok.reasons == []
    assert ok.rhat < RHAT_MAX and ok.ess_bulk > ESS_MIN
    # each chain sits near its own start: a spread of 1% of the spread between the chains
    stuck = rng.normal(size=(4, 1, 3)) + 0.01 * rng.normal(size=(4, 500, 3))
    v = check_mixing(stuck)
    assert v.mixed is False
    checks = {r["check"] for r in v.reasons}
    assert {"stuck", "rhat"} <= checks
    stuck_reason = next(r for r in v.reasons if r["check"] == "stuck")
    assert stuck_reason["value"] < 0.1 and "spread" in stuck_reason["text"]
    assert all(r["fix"] for r in v.reasons)


def test_a_constant_chain_is_stuck():
    x = np.random.default_rng(1).normal(size=(3, 400, 2))
    x[1, :, 0] = 0.25
    v = check_mixing(x)
    assert v.mixed is False
    assert [(r["check"], r["chain"], r["coordinate"]) for r in v.reasons] == [("stuck", 1, 0)]


def test_one_chain_uses_split_rhat_and_ess():
    rng = np.random.default_rng(2)
    steady = rng.normal(size=(1, 1000, 2))
    assert check_mixing(steady).mixed is True
    drift = steady + np.linspace(0.0, 4.0, 1000)[None, :, None]  # the halves disagree
    v = check_mixing(drift)
    assert v.mixed is False
    assert any(r["check"] == "rhat" and "split R-hat" in r["text"] for r in v.reasons)
    # a slow AR(1) chain (phi = 0.995: autocorrelation time ~ 400) has far fewer than 100 effective draws
    e = rng.normal(size=2000)
    ar = np.empty(2000)
    ar[0] = e[0] * 10.0
    for t in range(1, 2000):
        ar[t] = 0.995 * ar[t - 1] + e[t]
    v = check_mixing(ar[None, :, None])
    assert v.mixed is False and any(r["check"] == "ess" for r in v.reasons)


def test_short_traces_are_not_checked():
    x = np.random.default_rng(3).normal(size=(2, MIN_DRAWS // 2 - 1, 2))
    v = check_mixing(x + np.arange(2.0)[:, None, None] * 10.0)  # far apart, but too few draws to judge
    assert v.mixed is None and v.reasons == []


def test_long_and_wide_traces_are_checked_on_a_subset():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 2500, 300))              # thinned to 2,000 draws, 256 of 300 coordinates
    x[1, :, 299] = 1.0                               # the last coordinate is among those checked
    v = check_mixing(x)
    assert v.mixed is False and [(r["check"], r["chain"], r["coordinate"]) for r in v.reasons] == [("stuck", 1, 299)]
    x[1, :, 299] = rng.normal(size=2500)
    v = check_mixing(x)
    assert v.mixed is True and v.ess_bulk > 1000  # nearly independent draws keep a large ESS after thinning


def test_check_mixing_checks_its_arguments():
    with pytest.raises(ValueError, match="draws"):
        check_mixing(np.zeros((10, 3)))


# -- sample() -----------------------------------------------------------------------------------------
def test_sample_warns_when_chains_barely_move_from_the_mode():
    # SGLD-CV starts every chain at the mode; with a step 1e-6 of the stable one (lambda_max ~ 500) the
    # chains' sds are 1-3% of the posterior's (as in a run whose sds were a fraction of a percent): the
    # Stein ratio, the chains' variance over the posterior's, is ~5e-4
    model = _logistic()
    with pytest.warns(sgmc.MixingWarning, match=r"have not mixed .*Fix: .*step") as rec:
        trace = sgmc.sample(model, "sgld", "cv", step_size=1e-8, batch_size=50, n_iter=1000, chains=4, rng=3,
                            progress=False)
    verdict = trace.info["mixing"]
    assert verdict["mixed"] is False
    checks = {r["check"] for r in verdict["reasons"]}
    assert "spread" in checks
    assert verdict["spread"] < 0.01 and verdict["rhat"] > RHAT_MAX and verdict["ess_bulk"] < ESS_MIN
    assert "Stein ratio" in str(rec[0].message)


def test_sample_records_a_passing_verdict():
    target = GaussianTarget(np.zeros(2), np.diag([1.0, 0.25]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = sgmc.sample(target, "sgld", "full", step_size=0.2, n_iter=3000, burn_in=500, chains=4, rng=0,
                            progress=False)
    v = trace.info["mixing"]
    assert v["mixed"] is True and v["rhat"] < RHAT_MAX and v["ess_bulk"] > ESS_MIN
    assert 0.8 < v["spread"] < 1.6  # the Stein ratio: (1 - h lambda / 4)^-1 averaged, 1.05 and 1.25


def _false_alarms(make, seeds, **kw):
    alarms = []
    for seed in seeds:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            trace = sgmc.sample(make(), rng=seed, progress=False, **kw)
        flagged = [w for w in rec if issubclass(w.category, (sgmc.MixingWarning, sgmc.RunawayChainWarning))]
        assert trace.info["mixing"]["mixed"] is (not flagged)
        alarms.append(bool(flagged))
    return alarms


@pytest.mark.parametrize("chains, n_iter", [(4, 3000), (1, 6500)])
def test_false_alarm_rate_on_well_tuned_gaussian_runs(chains, n_iter):
    # SGLD with the exact gradient on N(0, diag(1, 1/4)), h = 0.2: autocorrelation time ~ 19 in the slow
    # coordinate, so 4 chains x 2500 kept draws give a bulk ESS near 500 (n_e ~ 60 per split half-chain).
    # The module's bound: R-hat > 1.05 needs chi2_7 / 7 > 0.1025 * 60, probability < 1e-5 per
    # coordinate; ESS < 100 is a fifth of its mean. One chain of 6,000 draws (ESS ~ 300, n_e ~ 150 per
    # half): chi2_1 > 15, probability 1e-4 per coordinate. Per run p < 1e-3, so over 20 seeds
    # P(any alarm) < 0.02: none is allowed. Observed: 0 of 20 in both.
    target = GaussianTarget(np.zeros(2), np.diag([1.0, 0.25]))
    alarms = _false_alarms(lambda: target, range(20), sampler="sgld", estimator="full", step_size=0.2,
                           n_iter=n_iter, burn_in=500, chains=chains)
    assert sum(alarms) == 0, alarms


def test_false_alarm_rate_on_a_conjugate_linear_model_with_minibatches():
    # SGLD with minibatches (n = 50 of N = 2000) on a conjugate linear regression at h = 0.2 / lambda_max:
    # the minibatch noise inflates the spread (Stein ratio ~ 1.5), neither runaway nor unmixed.
    # Bound as above (bulk ESS ~ 1,000 here): none of 10 seeds may flag. Observed: 0 of 10.
    rng = np.random.default_rng(11)
    X = rng.normal(size=(2000, 3))
    y = X @ np.array([1.0, -0.5, 0.25]) + rng.normal(size=2000)
    model = LinearRegression(X, y)
    lam = float(np.linalg.eigvalsh(X.T @ X / model.noise_var)[-1])
    alarms = _false_alarms(lambda: model, range(10), sampler="sgld", estimator="minibatch", step_size=0.2 / lam,
                           batch_size=50, n_iter=3000, burn_in=500, chains=4)
    assert sum(alarms) == 0, alarms


# -- runaway: every iteration, every path ---------------------------------------------------------------
def test_sgld_past_its_stability_limit_is_flagged_though_rhat_and_ess_look_healthy():
    model = _logistic()
    with pytest.warns(sgmc.RunawayChainWarning, match=r"far outside the posterior .*Stein") as rec:
        trace = sgmc.sample(model, "sgld", "minibatch", step_size=10.0, n_iter=2000, burn_in=1000, chains=4, rng=1,
                            progress=False)
    assert "step_size=10" in str(rec[0].message)
    found = trace.info["runaway"]
    assert [r["chain"] for r in found] == [0, 1, 2, 3]
    assert all(r["kind"] == "spread" and r["factor"] > 20.0 for r in found)
    assert min(trace.info["abs_max"]) > 1000.0  # every iteration's |theta|, burn-in included
    # the draws themselves look mixed: only the Stein check tells
    assert trace.info["mixing"]["rhat"] < RHAT_MAX and trace.info["mixing"]["ess_bulk"] > ESS_MIN


@pytest.mark.parametrize("smp", ["sgld", "sghmc", "sgnht"])
def test_compiled_blocks_flag_the_same_runs_as_the_one_step_loop(smp, monkeypatch):
    model = _logistic()
    h = {"sgld": 10.0, "sghmc": 1.0, "sgnht": 0.1}[smp]  # SGNHT's thermostat holds, or overflows
    burn = 0 if smp == "sgnht" else 200  # SGNHT overflows within 20 iterations: checked every 10 below
    kw = dict(step_size=h, n_iter=600, burn_in=burn, chains=3, rng=5, progress=False, store_grads=True,
              check_every=10 if smp == "sgnht" else 100)
    runs = []
    for fused in (True, False):
        with monkeypatch.context() as mp, warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            if not fused:
                mp.setattr(sgmc.chains, "fused_plan", lambda *a: None)
            try:
                trace = sgmc.sample(model, smp, "minibatch", **kw)
            except DivergenceError as err:
                runs.append(("diverged", err.iteration))
                continue
        cats = sorted({w.category.__name__ for w in rec})
        runs.append((cats, [(r["chain"], r["kind"]) for r in trace.info["runaway"]]))
        # each path's per-iteration statistics are those of its own draws and gradient estimates (a run
        # past the stability limit is chaotic, so the two paths' trajectories part after a few iterations
        # of rounding differences; each is checked against itself)
        # (windows of check_every = 100 iterations, recorded at their ends; burn-in ends with one)
        x, g, st = trace.draws, trace.grads, trace.stats
        np.testing.assert_array_equal(np.max(st["abs_max"][:, burn:], axis=1), np.max(np.abs(x), axis=(1, 2)))
        assert np.all(np.max(st["abs_max"][:, :burn], axis=1) > 0)  # the burn-in is watched too
        u = np.sum((x - x[:, :1, :]) * g, axis=2)
        np.testing.assert_allclose(np.sum(st["stein"], axis=1), np.sum(u, axis=1), rtol=1e-9)
        assert np.all(np.sum(st["stein_n"], axis=1) == 600 - burn - 1)
        ends = np.flatnonzero(st["stein_n"][0])
        np.testing.assert_array_equal(ends, np.arange(burn + 99, 600, 100))
    assert runs[0] == runs[1]
    assert runs[0][1], "the step size was chosen to run away or diverge"


class _BlipState(NamedTuple):
    position: Any
    grad: Any
    est_state: Any


class _Blip:
    """A sampler whose position is NaN at one iteration only (then finite again): the check must still see it."""

    name = "blip"
    needs_log_density = False

    def __init__(self, at):
        self.at = at

    def init(self, rng, position, estimator):
        return _BlipState(position, np.zeros_like(position), 0)

    def step(self, rng, state, estimator, h):
        k = state.est_state
        x = np.full_like(state.position, np.nan) if k == self.at else np.zeros_like(state.position)
        return _BlipState(x, state.grad, k + 1), StepInfo(EstimateInfo(0, 0))


def test_a_non_finite_position_between_checks_is_found():
    # NaN at iteration 7 (0-based) only; the check runs every 50 iterations and sees it through the
    # running maximum of |theta| (the position itself is finite again at the check)
    rng = sgmc.backends.default_rng(0)
    with pytest.raises(DivergenceError, match="diverged by iteration 50") as err:
        run_chains(_Blip(7), None, rng, np.zeros((2, 3)), [0.1] * 120, list(range(20, 120)), check_every=50)
    assert err.value.iteration == 50
    res = run_chains(_Blip(-1), None, rng, np.zeros((2, 3)), [0.1] * 120, list(range(20, 120)), check_every=50)
    assert res.draws.shape == (2, 100, 3)
    assert np.all(res.stats["abs_max"] == 0.0)


# -- sgmc run ------------------------------------------------------------------------------------------
def test_sgmc_run_marks_an_unmixed_row_with_its_reason_and_fix(capsys):
    from sgmc.cli import main

    # SGLD-CV at a step 1e-4 of the curvature rule's: four chains at the mode that barely move (the
    # R-hat and ESS of a row once printed as a result)
    code = main(["run", "--quick", "--no-progress", "--model", "logistic", "--chains", "4", "--estimator", "cv",
                 "--step-size", "1e-7", "--iters", "1000"])
    out = capsys.readouterr().out
    assert code == 0
    row = next(ln for ln in out.splitlines() if ln.startswith("SGLD-CV "))
    assert "NOT MIXED (*)" in row and "no result" in row
    note = next(ln for ln in out.splitlines() if ln.startswith("(*) SGLD-CV not mixed: "))
    assert "R-hat" in note and "bulk ESS" in note and "Fix: " in note and "step size" in note
