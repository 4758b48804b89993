"""Stochastic volatility and GARCH(1,1)-with-noise: complete-data scores, priors, simulation, filters."""

from __future__ import annotations

import math

import numpy as np
import pytest

from _helpers import Z_TOL, fd_jacobian, replay_rng
from sgmc import backends
from sgmc.ssm.garch import GARCH, GARCHKernel
from sgmc.ssm.particle import ScalarLGSSMKernel, particle_filter
from sgmc.ssm.stochvol import StochasticVolatility, SVKernel
from sgmc.ssm.subsequence import sample_windows

SV_THETA = np.array([0.7, 1.3, -2.0])  # includes a negative precision root
GARCH_THETA = np.array([-0.3, 1.2, 0.5, -0.4])


def _sv_kernel(theta):
    return StochasticVolatility(np.zeros(3)).particle_kernel(theta)


def _garch_kernel(theta):
    # the thesis's partial terms are the gradient of log p(y_t, x_t | x_{t-1}, sigma_{t-1}^2)
    return GARCH(np.zeros(3), score="partial").particle_kernel(theta)


def _lgssm_kernel(theta):
    return ScalarLGSSMKernel(theta[:, 0], 1.0 / theta[:, 1], 1.0 / theta[:, 2])


@pytest.mark.parametrize(
    "make,theta,state",
    [
        (_sv_kernel, SV_THETA, "x"),
        (_garch_kernel, GARCH_THETA, "garch"),
        (_lgssm_kernel, np.array([0.8, -1.4, 0.9]), "x"),
    ],
)
def test_score_terms_are_gradients_of_the_complete_data_loglik(make, theta, state):
    """Fisher's identity terms: score_terms = d/dtheta log p(y_t, x_t | x_{t-1}) (finite differences)."""
    rng = np.random.default_rng(0)
    x_prev = rng.normal(size=(1, 5, 1))
    x = rng.normal(size=(1, 5, 1))
    if state == "garch":
        x_prev = np.concatenate([x_prev, rng.random((1, 5, 1)) + 0.2], axis=-1)
        x = np.concatenate([x, np.zeros((1, 5, 1))], axis=-1)
    y = rng.normal(size=(1, 1))
    got = make(theta[None, :]).score_terms(x_prev, x, y)  # (1, 5, dim)
    num = fd_jacobian(lambda th: make(th).log_joint(x_prev, x, y), theta[None, :], step=1e-6)
    np.testing.assert_allclose(got, num, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("model,theta", [(StochasticVolatility(np.zeros(3)), SV_THETA), (GARCH(np.zeros(3)), GARCH_THETA)])
def test_prior_gradient(model, theta):
    th = np.stack([theta, theta * 0.5 + 0.1])
    num = fd_jacobian(model.log_prior, th, step=1e-6)
    np.testing.assert_allclose(model.grad_log_prior(th), num, rtol=1e-6, atol=1e-7)
    assert np.all(np.isfinite(model.log_prior(th)))


def test_parameterisations_round_trip():
    sv = StochasticVolatility(np.zeros(3))
    th = StochasticVolatility.theta_from(phi=0.9, sigma=0.5, tau=0.25)
    p = sv.constrain(th)
    np.testing.assert_allclose([p.phi, p.sigma, p.tau], [0.9, 0.5, 0.25])
    np.testing.assert_allclose(sv.unconstrain(p), th)
    g = GARCH(np.zeros(3))
    th = GARCH.theta_from(alpha=0.1, beta=0.8, gamma=0.05, tau=0.3)
    p = g.constrain(th)
    np.testing.assert_allclose([float(v) for v in p], [0.1, 0.8, 0.05, 0.3, 0.0])
    np.testing.assert_allclose(g.unconstrain(p), th)
    # mu is the stationary variance alpha / (1 - beta - gamma)
    assert math.isclose(math.exp(th[0]), 0.1 / 0.15)
    with pytest.raises(ValueError, match="beta"):
        GARCH.theta_from(alpha=0.1, beta=0.8, gamma=0.3, tau=0.3)


def test_sv_simulation_moments():
    phi, sigma, tau = 0.9, 0.5, 0.5
    th = StochasticVolatility.theta_from(phi, sigma, tau)
    reps, T = 400, 50
    xs, ys = [], []
    for r in range(reps):
        x, y = StochasticVolatility.simulate_data(backends.default_rng(r), T, th)
        xs.append(np.asarray(x))
        ys.append(np.asarray(y))
    x, y = np.array(xs), np.array(ys)
    v = sigma**2 / (1 - phi**2)
    # stationary from the start: every time has variance v, and lag-1 covariance phi v
    for t in (0, 25, 49):
        col = x[:, t]
        se = v * math.sqrt(2.0 / reps)
        assert abs(col.var(ddof=1) - v) <= Z_TOL * se
    lag = (x[:, 1:] * x[:, :-1]).mean(axis=0)
    assert abs(lag.mean() - phi * v) <= Z_TOL * lag.std(ddof=1) / math.sqrt(lag.size) + 0.05
    # E[y^2] = tau^2 E[exp(x)] = tau^2 exp(v / 2)
    y2 = (y**2).mean(axis=1)
    assert abs(y2.mean() - tau**2 * math.exp(v / 2)) <= Z_TOL * y2.std(ddof=1) / math.sqrt(reps)


def test_garch_simulation_variance():
    th = GARCH.theta_from(alpha=0.2, beta=0.3, gamma=0.4, tau=0.3)
    st, y = GARCH(np.zeros(3)).simulate(backends.default_rng(1), 20_000, th)
    st, y = np.asarray(st), np.asarray(y)
    assert st.shape == (20_000, 2) and y.shape == (20_000, 1)
    s2 = st[:, 1]
    np.testing.assert_allclose(s2[1:], 0.2 + 0.3 * st[:-1, 0] ** 2 + 0.4 * s2[:-1])
    mu = 0.2 / 0.3
    # the mean of sigma_t^2 is mu; batch means over 100 blocks give its standard error
    blocks = s2.reshape(100, -1).mean(axis=1)
    assert abs(blocks.mean() - mu) <= Z_TOL * blocks.std(ddof=1) / 10
    resid = y[:, 0] - st[:, 0]
    assert abs(resid.var() - 0.09) <= Z_TOL * 0.09 * math.sqrt(2 / resid.size)


@pytest.fixture(scope="module")
def sv_data():
    th = StochasticVolatility.theta_from(0.9, 0.5, 0.5)
    _, y = StochasticVolatility.simulate_data(backends.default_rng(2), 200, th)
    return np.asarray(y)


def test_sv_likelihood_matches_particles_package(sv_data):
    """Same model and data in the ``particles`` package: the log-likelihood estimates agree."""
    particles = pytest.importorskip("particles")
    from particles import state_space_models as pssm

    phi, sigma, tau = 0.9, 0.5, 0.5
    reps, n = 12, 300
    ours = particle_filter(
        backends.default_rng(3), SVKernel(np.full(reps, phi), np.full(reps, sigma), np.full(reps, tau)),
        np.ascontiguousarray(np.broadcast_to(sv_data[None, :, None], (reps, sv_data.size, 1))), n,
    ).log_lik
    model = pssm.StochVol(mu=2 * math.log(tau), rho=phi, sigma=sigma)
    theirs = []
    for r in range(reps):
        np.random.seed(r)
        pf = particles.SMC(fk=pssm.Bootstrap(ssm=model, data=list(sv_data)), N=n, resampling="systematic", ESSrmin=1.0, collect=None, store_history=False)
        pf.run()
        theirs.append(pf.logLt)
    theirs = np.array(theirs)
    se = math.sqrt(ours.var(ddof=1) / reps + theirs.var(ddof=1) / reps)
    assert abs(ours.mean() - theirs.mean()) <= Z_TOL * se + 1e-9, (ours.mean(), theirs.mean(), se)
    assert ours.std() < 1.0  # the comparison has power


def test_garch_adapted_and_bootstrap_agree():
    """Two different proposals estimate the same likelihood: their exp-means agree within error."""
    th = GARCH.theta_from(alpha=0.1, beta=0.8, gamma=0.05, tau=0.3)
    _, y = GARCH.simulate_data(backends.default_rng(4), 60, th)
    Y = np.ascontiguousarray(np.broadcast_to(np.asarray(y)[None, :, None], (300, 60, 1)))
    mu, phi, lam, tau = math.exp(th[0]), 0.85, 0.8 / 0.85, 0.3
    par = [np.full(300, v) for v in (mu, phi, lam, tau)]
    a = particle_filter(backends.default_rng(5), GARCHKernel(*par, proposal="optimal"), Y, 100).log_lik
    b = particle_filter(backends.default_rng(6), GARCHKernel(*par, proposal="bootstrap"), Y, 100).log_lik
    ref = max(a.max(), b.max())
    ea, eb = np.exp(a - ref), np.exp(b - ref)
    se = math.sqrt(ea.var(ddof=1) / ea.size + eb.var(ddof=1) / eb.size)
    assert abs(ea.mean() - eb.mean()) <= Z_TOL * se
    assert a.std() < b.std()  # the fully adapted proposal is the better one


@pytest.mark.parametrize("cls,theta", [(StochasticVolatility, SV_THETA), (GARCH, GARCH_THETA)])
def test_window_score_runs_on_backends(xb, cls, theta):
    """Buffered particle scores on every backend: shapes, finiteness, and the same numbers as NumPy."""
    th = cls.theta_from(0.9, 0.5, 0.5) if cls is StochasticVolatility else cls.theta_from(0.1, 0.8, 0.05, 0.3)
    _, y = cls.simulate_data(backends.default_rng(7), 80, th)
    y = np.asarray(y)
    theta2 = np.stack([np.asarray(th), np.asarray(th) * 0.9])
    ref_model = cls(y)
    win = sample_windows(backends.default_rng(8), 80, 10, 5, chains=2, M=2)
    ref, n_ref = ref_model.window_score(backends.default_rng(9), theta2, win, method="particle", n_particles=64)
    model = cls(xb.asarray(y))
    win_x = sample_windows(replay_rng(xb, 8), 80, 10, 5, chains=2, M=2, xp=xb.xp, dtype=xb.dtype)
    got, n_got = model.window_score(replay_rng(xb, 9), xb.asarray(theta2), win_x, method="particle", n_particles=64)
    got = xb.to_numpy(got)
    assert got.shape == (2, cls(y).dim) and np.all(np.isfinite(got))
    np.testing.assert_array_equal(xb.to_numpy(n_got), n_ref)
    if xb.float_dtype == "float64":
        np.testing.assert_allclose(got, ref, rtol=1e-8, atol=1e-8)
    with pytest.raises(ValueError, match="method"):
        model.window_score(replay_rng(xb, 9), xb.asarray(theta2), win_x, method="exact")


def test_garch_refuses_paris():
    k = GARCHKernel(*(np.full(2, v) for v in (0.5, 0.8, 0.5, 0.3)))
    assert not hasattr(k, "log_transition")
    with pytest.raises(ValueError, match="log_transition"):
        particle_filter(0, k, np.zeros((2, 5, 1)), 10, stat_weight=np.ones((2, 5)), smoother="paris")


def test_sv_paris_matches_path_on_average(sv_data):
    """Two different smoothers estimate the same smoothed score (their means agree within error)."""
    y = sv_data[:30]
    B = 100
    k = SVKernel(np.full(B, 0.9), np.full(B, 0.5), np.full(B, 0.5))
    Y = np.ascontiguousarray(np.broadcast_to(y[None, :, None], (B, y.size, 1)))
    w = np.ones((B, y.size))
    a = particle_filter(backends.default_rng(10), k, Y, 100, stat_weight=w, smoother="path").score
    b = particle_filter(backends.default_rng(11), k, Y, 100, stat_weight=w, smoother="paris").score
    se = np.sqrt(a.var(axis=0, ddof=1) / B + b.var(axis=0, ddof=1) / B)
    assert np.all(np.abs(a.mean(axis=0) - b.mean(axis=0)) <= Z_TOL * se)
    # the transition parameters (phi, sigma) are the ones path degeneracy hurts
    assert np.all(b.var(axis=0)[:2] < a.var(axis=0)[:2])
