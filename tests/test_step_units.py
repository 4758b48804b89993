"""Samplers whose step is on their own scale: units, default grids, the command line's defaults, errors."""

import math

import numpy as np
import pytest

import sgmc
from sgmc.estimators import Minibatch
from sgmc.models import Gaussian, LogisticRegression
from sgmc.optimize import negative_hessian
from sgmc.samplers import PSGLD, SGHMC, SGLD, SGRLD, Recipe, make_sampler
from sgmc.tuning import default_grid

r = np.random.default_rng(0)
Y = r.normal(size=(1000, 2)) + np.array([0.5, -0.5])
GAUSS = Gaussian(Y, cov=1.0, prior_cov=100.0)
G_MEAN, G_COV = (np.asarray(a) for a in GAUSS.posterior())
X = r.normal(size=(500, 3))
LOGIT = LogisticRegression(X, (r.random(500) < 1 / (1 + np.exp(-X @ np.array([1.0, -1.0, 0.5])))).astype(float))


def _sd(sampler, h, seed=1):
    t = sgmc.sample(GAUSS, sampler, "minibatch", step_size=h, batch_size=10, n_iter=1500, burn_in=500, chains=8,
                    init=G_MEAN, rng=seed, progress=False)
    return np.asarray(t.flat_draws()).std(axis=0)


def test_psgld_at_an_sgld_sized_step_over_disperses_and_at_its_unit_does_not():
    # Posterior N(mean, ~I/1000): SGLD's unit is 1/lambda_max = 1/1000. pSGLD's preconditioner is about
    # 1 / |per-datum gradient| ~ 3 here (n = 10), so at SGLD's step its sd is too large; at 0.1 of its own
    # unit it behaves like SGLD at 0.1 of SGLD's.
    H = np.asarray(negative_hessian(GAUSS, G_MEAN))
    lam = np.linalg.eigvalsh(H)[-1]
    sd_exact = np.sqrt(np.diag(G_COV))
    psgld = make_sampler("psgld", GAUSS)
    unit = psgld.step_unit(GAUSS, H, G_MEAN, Minibatch(GAUSS, 10), 0)
    assert unit < 0.5 / lam                                # its own scale is smaller than SGLD's
    sgld_sd = _sd("sgld", 0.1 / lam)
    over = _sd("psgld", 0.1 / lam) / sd_exact
    right = _sd("psgld", 0.1 * unit) / sd_exact
    assert np.all(over > 1.5 * sgld_sd / sd_exact)
    assert np.all(np.abs(right - sgld_sd / sd_exact) < 0.35 * sgld_sd / sd_exact)


def test_units_and_default_grids():
    theta = np.zeros(3)
    H = np.asarray(negative_hessian(LOGIT, theta))
    lam = np.linalg.eigvalsh(H)[-1]
    assert SGLD().step_unit(LOGIT, H) == pytest.approx(1 / lam)
    assert SGHMC().step_unit(LOGIT, H) == pytest.approx(1 / math.sqrt(lam))
    # SGRLD with the Fisher metric: G = H for the logistic model (canonical link), so its unit is 1
    assert make_sampler("sgrld", LOGIT).step_unit(LOGIT, H, theta) == pytest.approx(1.0, rel=1e-8)
    assert Recipe(D=np.linalg.inv(H)).step_unit(LOGIT, H, theta) == pytest.approx(1.0, rel=1e-8)
    grid = default_grid(LOGIT, "sgrld", position=theta)
    assert grid[8] == pytest.approx(1.0, rel=1e-8) and len(grid) == 11
    grid = default_grid(LOGIT, "sghmc", position=theta)
    assert grid[8] == pytest.approx(1 / math.sqrt(lam))
    # SGLD keeps the curvature-bound grid
    assert default_grid(LOGIT, "sgld") == default_grid(LOGIT)
    with pytest.raises(ValueError, match="estimator"):
        PSGLD(n_data=500).step_unit(LOGIT, H)


def test_tune_step_size_supports_samplers_on_their_own_scale():
    res = sgmc.tune_step_size(LOGIT, "sgrld", "minibatch", batch_size=50, pilot_iters=200, chains=2, n_ksd=100,
                              init=np.zeros(3), rng=0)
    steps = [row["step_size"] for row in res.table]
    assert steps[8] == pytest.approx(1.0, rel=1e-8)         # the grid is centred on SGRLD's unit
    assert res.best in steps
    res = sgmc.tune_step_size(LOGIT, "psgld", "minibatch", batch_size=50, pilot_iters=200, chains=2, n_ksd=100,
                              init=np.zeros(3), rng=0)
    assert [row["step_size"] for row in res.table][0] < default_grid(LOGIT)[0]


def test_divergence_error_says_the_step_is_on_its_own_scale():
    # pSGLD's preconditioner shrinks as gradients grow, so a too-large step over-disperses rather than
    # overflowing; when its chain does stop being finite, the error carries its note
    from sgmc.chains import check_diverged

    with pytest.raises(FloatingPointError, match="own scale"):
        check_diverged(np, np.array([[np.inf]]), 3, 1.0, "psgld", PSGLD.step_note)
    with pytest.raises(FloatingPointError, match="metric's scale"):
        sgmc.sample(GAUSS, SGRLD(metric=np.ones(2)), "minibatch", step_size=1e6, batch_size=10, n_iter=200,
                    check_every=10, rng=0, progress=False)
    assert "own scale" in PSGLD.__doc__


def test_command_line_default_steps_use_each_samplers_unit():
    from sgmc.backends import default_rng
    from sgmc.cli import methods as cli

    theta = np.zeros(3)
    H = np.asarray(negative_hessian(LOGIT, theta))
    lam = float(np.linalg.eigvalsh(H)[-1])
    m = cli._Method("SGRLD", "sgrld", "minibatch")
    unit = cli._step_unit(m, LOGIT, H, theta, 50, default_rng(0))
    assert unit == pytest.approx(1.0, rel=1e-8)
    assert cli._default_step(m, lam, unit) == pytest.approx(cli.STEP_FACTORS[("sgld", "minibatch")])
    p = cli._Method("PSGLD", "psgld", "minibatch")
    pu = cli._step_unit(p, LOGIT, H, theta, 50, default_rng(0))
    assert cli._default_step(p, lam, pu) == pytest.approx(0.1 * pu)
    s = cli._Method("SGLD", "sgld", "minibatch")
    assert cli._step_unit(s, LOGIT, H, theta, 50, default_rng(0)) is None
    assert cli._default_step(s, lam) == pytest.approx(0.1 / lam)
    assert "sgrld" in cli.CLI_SAMPLERS and "recipe" not in cli.CLI_SAMPLERS


def test_step_units_on_every_backend(xb):
    Xb, yb = xb.asarray(X), xb.asarray(np.asarray(LOGIT.y))
    model = LogisticRegression(Xb, yb)
    theta = xb.asarray(np.zeros(3))
    H = negative_hessian(model, theta)
    tol = 1e-8 if xb.float_dtype == "float64" else 1e-4
    assert make_sampler("sgrld", model).step_unit(model, H, theta) == pytest.approx(1.0, rel=tol)
    unit = make_sampler("psgld", model).step_unit(model, H, theta, Minibatch(model, 50), xb.rng(0))
    ref = make_sampler("psgld", LOGIT).step_unit(LOGIT, np.asarray(negative_hessian(LOGIT, np.zeros(3))),
                                                 np.zeros(3), Minibatch(LOGIT, 50), 0)
    assert 0.2 * ref < unit < 5 * ref                      # same law, the backend's own minibatches
    grid = default_grid(model, "sghmc", position=theta)
    assert len(grid) == 11 and all(math.isfinite(h) and h > 0 for h in grid)


def test_tuning_marks_steps_where_the_noise_correction_is_impossible():
    res = sgmc.tune_step_size(LOGIT, "sgld_corrected", "minibatch_noise", grid=[1e-4, 0.5], batch_size=50,
                              pilot_iters=100, chains=2, n_ksd=50, init=np.zeros(3), rng=0)
    # the best step is the grid's smallest, so one pilot is added below it (extend), which brackets it
    assert [row["diverged"] for row in res.table] == [False, False, True]
    assert res.best == 1e-4
