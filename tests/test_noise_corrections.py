"""Gradient-noise corrections on a Gaussian posterior, against the closed-form stationary covariances.

For the mean of Gaussian data (known covariance) every per-datum gradient is linear in theta with a
theta-independent spread, so a minibatch gradient is the exact one plus noise of a fixed covariance V,
and each sampler is a linear recursion whose stationary covariance solves a discrete Lyapunov equation.
Plain SGLD: A S A^T + h I + (h^2/4) V with A = I - (h/2) P; a correct noise correction removes the
(h^2/4) V term exactly in expectation (E V_hat = V).
"""

import numpy as np
import pytest
from scipy.linalg import solve_discrete_lyapunov

from _helpers import Z_TOL, pooled_moments, run_moments
from sgmc import backends
from sgmc.estimators import ControlVariate, Minibatch, MinibatchNoise, SwitchingControlVariate, make_estimator
from sgmc.models import Gaussian
from sgmc.samplers import SGHMC, SGLD, SGHMCCorrected, VollmerSGLD, make_sampler

N, BATCH = 100, 50


def _model():
    r = np.random.default_rng(0)
    y = r.normal(size=(N, 2)) * 2.0 + np.array([1.0, -1.0])
    return Gaussian(y, cov=4.0, prior_cov=10.0)


MODEL = _model()
MEAN, COV = (np.asarray(a) for a in MODEL.posterior())
PREC = np.linalg.inv(COV)
G = (np.asarray(MODEL.y) - 0.0) / 4.0                     # per-datum gradients up to a shift in theta
V = N * N * (1 - BATCH / N) / BATCH * np.cov(G.T)          # exact covariance of the minibatch gradient


def test_noise_estimate_is_unbiased_for_the_minibatch_gradient_covariance():
    est = MinibatchNoise(MODEL, BATCH, diagonal=False)
    x = np.zeros((20000, 2))
    g, st, _ = est.estimate(backends.default_rng(1), est.init(None, x), x)
    emp = np.cov(np.asarray(g).T)                          # the gradients' spread over 20000 draws
    v_mean = np.asarray(st.v_hat).mean(axis=0)
    se = np.sqrt((np.outer(np.diag(V), np.diag(V)) + V**2) / x.shape[0])
    assert np.all(np.abs(emp - V) <= Z_TOL * se)
    assert np.all(np.abs(v_mean - V) <= Z_TOL * np.asarray(st.v_hat).std(axis=0) / np.sqrt(x.shape[0]))
    diag = MinibatchNoise(MODEL, BATCH)
    _, st_d, _ = diag.estimate(backends.default_rng(1), None, x[:5])
    assert st_d.v_hat.shape == (5, 2)


def _stationary(sampler, est, h, chains=1000, burn=40, keep=80, seed=2, x0=None):
    x0 = np.broadcast_to(MEAN, (chains, 2)).copy() if x0 is None else x0
    m1, m2 = run_moments(sampler, est, backends.default_rng(seed), x0, h, burn, keep)
    _, _, cov, cov_se = pooled_moments(m1, m2)
    return cov, cov_se


def test_vollmer_sgld_removes_the_gradient_noise_bias():
    h = 0.04                                               # (h^2/4) V is a quarter of h I here
    A = np.eye(2) - 0.5 * h * PREC
    exact = solve_discrete_lyapunov(A, h * np.eye(2))
    noisy = solve_discrete_lyapunov(A, h * np.eye(2) + 0.25 * h * h * V)
    cov, se = _stationary(VollmerSGLD(), MinibatchNoise(MODEL, BATCH, diagonal=False), h)
    assert np.all(np.abs(cov - exact) <= Z_TOL * se)
    assert np.all(np.abs(noisy - exact)[[0, 1], [0, 1]] > 2 * Z_TOL * se[[0, 1], [0, 1]])
    # plain SGLD with the same minibatches shows the bias the closed form predicts
    cov_plain, se_plain = _stationary(SGLD(), Minibatch(MODEL, BATCH), h)
    assert np.all(np.abs(cov_plain - noisy) <= Z_TOL * se_plain)


def test_vollmer_sgld_refuses_or_clips_when_not_positive_definite():
    est = MinibatchNoise(MODEL, 5)
    rng = backends.default_rng(3)
    s = VollmerSGLD()
    state = s.init(rng, np.zeros((4, 2)), est)
    with pytest.raises(ValueError, match="step_size=0.2.*clip=True"):
        s.step(rng, state, est, 0.2)
    clipped, _ = VollmerSGLD(clip=True).step(rng, state, est, 0.2)
    assert np.all(np.isfinite(clipped.position))
    with pytest.raises(TypeError, match="MinibatchNoise"):
        VollmerSGLD().init(rng, np.zeros((4, 2)), Minibatch(MODEL, 5))


def _sghmc_closed_form(h, C, extra):
    """Stationary covariance of theta for SGHMC (one kick-drift per iteration, persistent momentum)."""
    a = 1 - 0.5 * h * C
    I2 = np.eye(2)
    A = np.block([[I2 - 0.25 * h * h * PREC, 0.5 * h * a * I2], [-0.5 * h * PREC, a * I2]])
    mom = h * C * I2 + extra                               # covariance of the momentum's noise
    B = np.block([[0.25 * h * h * mom, 0.5 * h * mom], [0.5 * h * mom, mom]])
    return solve_discrete_lyapunov(A, B)[:2, :2]


def test_sghmc_corrected_matches_the_exact_gradient_closed_form():
    h, C = 0.04, 1.0                                       # (h/4) V = C / 4: a visible effect, C >= (h/4) V_hat
    exact = _sghmc_closed_form(h, C, 0.0)
    noisy = _sghmc_closed_form(h, C, 0.25 * h * h * V)
    smp = SGHMCCorrected(friction=C, n_leapfrog=1, resample_momentum=False)
    cov, se = _stationary(smp, MinibatchNoise(MODEL, BATCH, diagonal=False), h, chains=600, burn=150, keep=150)
    assert np.all(np.abs(cov - exact) <= Z_TOL * se)
    assert np.all(np.abs(noisy - exact)[[0, 1], [0, 1]] > 1.5 * Z_TOL * se[[0, 1], [0, 1]])
    # the per-coordinate estimate works the same way on the diagonal
    smp_d = SGHMC(friction=C, n_leapfrog=1, resample_momentum=False, noise_estimate="minibatch")
    cov_d, se_d = _stationary(smp_d, MinibatchNoise(MODEL, BATCH), h, chains=600, burn=150, keep=150)
    assert np.all(np.abs(np.diag(cov_d) - np.diag(exact)) <= Z_TOL * np.diag(se_d) + 0.25 * np.diag(noisy - exact))


def test_sghmc_correction_checks_friction():
    est = MinibatchNoise(MODEL, BATCH, diagonal=False)
    rng = backends.default_rng(4)
    smp = make_sampler("sghmc_corrected", friction=0.01, n_leapfrog=1)
    state = smp.init(rng, np.zeros((3, 2)), est)
    with pytest.raises(ValueError, match="friction"):
        smp.step(rng, state, est, 0.05)


def test_switching_control_variate_switches_on_near_the_centre():
    # Gaussian per-datum gradients differ from their values at the centre by the same amount, so the
    # control variate is exact: within the radius SGLD has the exact-gradient stationary covariance.
    h = 0.02
    est = SwitchingControlVariate(MODEL, BATCH, centre=MEAN, radius=1.5)
    rng = backends.default_rng(5)
    far = np.broadcast_to(MEAN + 3.0, (4, 2)).copy()
    st = est.init(rng, far)
    _, st, info = est.estimate(rng, st, far)
    assert not np.any(st.active) and np.all(np.asarray(info.n_evals) == BATCH)
    _, st, info = est.estimate(rng, st, far * 0 + MEAN)
    assert np.all(st.active) and np.all(np.asarray(info.n_evals) == 2 * BATCH)
    A = np.eye(2) - 0.5 * h * PREC
    exact = solve_discrete_lyapunov(A, h * np.eye(2))
    x0 = np.broadcast_to(MEAN + 3.0, (1000, 2)).copy()      # start outside the radius: plain estimates first
    cov, se = _stationary(SGLD(), est, h, x0=x0, burn=100)
    assert np.all(np.abs(cov - exact) <= Z_TOL * se)
    assert make_estimator("cv_switch", MODEL, BATCH, centre=MEAN, radius=1.0).radius == 1.0
    # the centre is found by prepare() like ControlVariate's
    prepared = SwitchingControlVariate(MODEL, BATCH, radius=1.0, opt_steps=200).prepare(rng, np.zeros((1, 2)))
    assert isinstance(prepared.estimator, SwitchingControlVariate) and prepared.estimator.radius == 1.0
    assert isinstance(prepared.estimator, ControlVariate)


def test_noise_estimate_on_every_backend(xb):
    model = Gaussian(xb.asarray(np.asarray(MODEL.y)), cov=4.0, prior_cov=10.0)
    est = MinibatchNoise(model, BATCH, diagonal=False)
    rng = xb.rng(0)
    x = xb.asarray(np.zeros((3, 2)))
    s = VollmerSGLD()
    state = s.init(rng, x, est)
    for _ in range(3):
        state, _ = s.step(rng, state, est, 0.01)
    v = xb.to_numpy(state.est_state.v_hat)
    assert v.shape == (3, 2, 2) and np.all(np.isfinite(v))
    assert backends.get_backend(state.position) is xb.backend
    smp = SGHMCCorrected(n_leapfrog=2)
    st = smp.init(rng, x, MinibatchNoise(model, BATCH))
    st, _ = smp.step(rng, st, MinibatchNoise(model, BATCH), 0.01)
    assert np.all(np.isfinite(xb.to_numpy(st.position)))


def test_switching_control_variate_on_every_backend(xb):
    model = Gaussian(xb.asarray(np.asarray(MODEL.y)), cov=4.0, prior_cov=10.0)
    est = SwitchingControlVariate(model, 10, centre=xb.asarray(MEAN), radius=1.0)
    x = xb.asarray(np.stack([MEAN, MEAN + 3.0]))
    st = est.init(xb.rng(0), x)
    g, st, info = est.estimate(xb.rng(1), st, x)
    assert xb.to_numpy(st.active).tolist() == [True, False]
    assert xb.to_numpy(info.n_evals).tolist() == [20, 10]
    # at the centre the control variate is exact for this model: the full gradient there
    full = xb.to_numpy(model.grad_log_posterior(x))
    tol = 1e-9 if xb.float_dtype == "float64" else 1e-3
    np.testing.assert_allclose(xb.to_numpy(g)[0], full[0], rtol=tol, atol=tol)
