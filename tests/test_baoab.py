"""BAOAB and BADODAB: one-step formulas, stationary laws on Gaussian targets, cost and registry.

BAOAB on a Gaussian target with exact gradients is a linear recursion x' = M x + N z in (theta, rho) per
coordinate, so its stationary covariance S solves the discrete Lyapunov equation S = M S M^T + N N^T;
the test builds M and N from the paper's five sub-steps and solves it with scipy, then compares the
simulated variances and lag-one covariance of many independent chains with S (standard errors from the
spread across chains, as in tests/_helpers.py). BADODAB's check is statistical: with additive Gaussian
gradient noise of known variance its thermostat absorbs the noise where SGHMC and BAOAB run hot.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import scipy.linalg

import sgmc
from _helpers import Z_TOL, TaggedGradient, pooled_moments, replay_rng, run_moments, to_host, tol_for
from sgmc import backends
from sgmc.estimators import FullGradient, Minibatch, NoisyGradient
from sgmc.models import GaussianTarget, LogisticRegression
from sgmc.samplers import BADODAB, BAOAB, SAMPLERS, SGHMC, StepInfo, make_sampler
from sgmc.samplers import _fused

SIGMA = np.array([1.0, 0.5])          # target sd per coordinate: eigenfrequencies omega = 1 and 2
TARGET = GaussianTarget(np.zeros(2), np.diag(SIGMA**2))


def _lyapunov(sigma: float, h: float, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """Stationary covariance of (theta, rho) after a BAOAB step, and the lag-one covariance
    Cov(x_{n+1}, x_n), for N(0, sigma^2) with exact gradients; dt = h/2 (the review's h)."""
    dt = h / 2
    w2 = 1.0 / sigma**2
    c = math.exp(-gamma * dt)
    B = np.array([[1.0, 0.0], [-0.5 * dt * w2, 1.0]])   # rho += (dt/2) g, g = -w2 theta
    A = np.array([[1.0, 0.5 * dt], [0.0, 1.0]])          # theta += (dt/2) rho
    O = np.array([[1.0, 0.0], [0.0, c]])
    M = B @ A @ O @ A @ B
    N = B @ A @ np.array([[0.0], [math.sqrt(1.0 - c * c)]])
    S = scipy.linalg.solve_discrete_lyapunov(M, N @ N.T)
    return S, M @ S


def _simulate(sampler, est, h, chains, burn, keep, seed):
    """Per-chain time averages of theta^2, rho^2 and theta_{n+1} theta_n, each (chains, dim)."""
    rng = backends.default_rng(seed)
    state = sampler.init(rng, np.zeros((chains, 2)), est)
    for _ in range(burn):
        state, _ = sampler.step(rng, state, est, h)
    q2 = np.zeros((chains, 2))
    p2 = np.zeros((chains, 2))
    lag = np.zeros((chains, 2))
    for _ in range(keep):
        prev = state.position
        state, _ = sampler.step(rng, state, est, h)
        q2 += state.position**2
        p2 += state.momentum**2
        lag += state.position * prev
    return q2 / keep, p2 / keep, lag / keep


def _z(values, expected):
    """|chain mean - expected| in standard errors of the chain mean (chains are independent)."""
    mean = values.mean(axis=0)
    se = values.std(axis=0, ddof=1) / math.sqrt(values.shape[0])
    return np.abs(mean - expected) / se


# -- the closed form -------------------------------------------------------------------------------------
@pytest.mark.parametrize("h", [0.3, 1.2, 1.9])
def test_lyapunov_position_variance_is_exact(h):
    """Leimkuhler and Matthews (2013, section 4.1): on a harmonic oscillator BAOAB samples the position
    exactly at every stable step; the momentum after the step's last kick has variance
    1 - dt^2 omega^2 / 4 (exactly 1 after the O step, which the last kick changes). The exact
    stationary covariance of the test's recursion says both (dt = h/2 < 2/omega for omega = 1, 2 at
    these steps), and a wrong recursion would not (an Euler-type kick order is biased by O(dt))."""
    for sigma in SIGMA:
        S, _ = _lyapunov(sigma, h, gamma=0.7)
        w2, dt = 1.0 / sigma**2, h / 2
        assert S[0, 0] == pytest.approx(sigma**2, rel=1e-12)
        assert S[1, 1] == pytest.approx(1.0 - dt * dt * w2 / 4.0, rel=1e-12)
        assert S[0, 1] == pytest.approx(0.0, abs=1e-12)


def test_baoab_stationary_moments_match_the_lyapunov_solution():
    """Simulated Var(theta), Var(rho) and Cov(theta_{n+1}, theta_n) of 1000 chains agree with the exact
    stationary covariance within Z_TOL standard errors, per coordinate. At h = 1.2 (dt omega = 0.6 and
    1.2) the momentum runs 9% and 36% cool while the position stays exact, and the lag-one covariance
    depends on the O step's c = exp(-gamma dt), so the step's friction-to-time mapping is checked too."""
    h, gamma = 1.2, 0.7
    q2, p2, lag = _simulate(BAOAB(friction=gamma), FullGradient(TARGET), h, chains=2000, burn=300, keep=3000,
                            seed=1)
    for j, sigma in enumerate(SIGMA):
        S, L = _lyapunov(sigma, h, gamma)
        assert _z(q2[:, j], S[0, 0]) < Z_TOL, (j, q2[:, j].mean(), S[0, 0])
        assert _z(p2[:, j], S[1, 1]) < Z_TOL, (j, p2[:, j].mean(), S[1, 1])
        assert _z(lag[:, j], L[0, 0]) < Z_TOL, (j, lag[:, j].mean(), L[0, 0])
    # the comparison has teeth: the momentum's excess and the lag-one correlation are far outside the errors
    assert _z(p2[:, 1], 1.0) > 10 * Z_TOL and _z(q2[:, 1], 0.9 * SIGMA[1] ** 2) > 10 * Z_TOL
    assert _z(lag[:, 0], _lyapunov(SIGMA[0], h, 2 * gamma)[1][0, 0]) > 3 * Z_TOL


def test_baoab_step_matches_the_splitting():
    """One step against the five sub-steps written out, with the same normal draw."""
    x = np.array([[0.3, -0.2], [1.0, 0.5], [-0.7, 0.1]])
    est = FullGradient(TARGET)
    h, gamma = 0.4, 1.3
    rng, replay = backends.default_rng(4), backends.default_rng(4)
    s = BAOAB(friction=gamma)
    state = s.init(rng, x, est)
    rho = replay.normal((3, 2))
    np.testing.assert_array_equal(state.momentum, rho)
    new, info = s.step(rng, state, est, h)
    z = replay.normal((3, 2))
    dt = h / 2
    c = math.exp(-gamma * dt)
    grad = lambda t: -t / SIGMA**2  # noqa: E731
    rho = rho + dt / 2 * grad(x)
    q = x + dt / 2 * rho
    rho = c * rho + math.sqrt(1 - c * c) * z
    q = q + dt / 2 * rho
    rho = rho + dt / 2 * grad(q)
    np.testing.assert_allclose(new.position, q, rtol=1e-14)
    np.testing.assert_allclose(new.momentum, rho, rtol=1e-14)
    np.testing.assert_allclose(new.grad, grad(q), rtol=1e-14)
    assert info.extras is None


def test_badodab_step_matches_the_splitting():
    """One step against the seven sub-steps of Leimkuhler and Shang's BADODAB, with mu the dimension by
    default and a given thermostat mass otherwise; also at a thermostat of exactly zero (the O step's
    variance 2 A dt)."""
    x = np.array([[0.3, -0.2], [1.0, 0.5], [-0.7, 0.1]])
    est = FullGradient(TARGET)
    h, A = 0.4, 1.7
    grad = lambda t: -t / SIGMA**2  # noqa: E731
    for mu, xi0 in ((None, None), (3.5, None), (None, 0.0)):
        rng, replay = backends.default_rng(5), backends.default_rng(5)
        s = BADODAB(diffusion=A, thermostat_mass=mu)
        state = s.init(rng, x, est)
        np.testing.assert_array_equal(state.thermostat, np.full(3, A))
        if xi0 is not None:
            state = state._replace(thermostat=np.array([xi0, -0.4, 2.0]))
        new, info = s.step(rng, state, est, h)
        rho = replay.normal((3, 2))
        z = replay.normal((3, 2))
        dt, m = h / 2, 2.0 if mu is None else mu
        xi = np.array(state.thermostat, dtype=float)
        rho = rho + dt / 2 * grad(x)
        q = x + dt / 2 * rho
        xi = xi + dt / 2 * (np.sum(rho**2, axis=1) - 2) / m
        with np.errstate(invalid="ignore", divide="ignore"):
            var = np.where(xi == 0, 2 * A * dt, A * (1 - np.exp(-2 * xi * dt)) / xi)
        rho = np.exp(-xi * dt)[:, None] * rho + np.sqrt(var)[:, None] * z
        xi = xi + dt / 2 * (np.sum(rho**2, axis=1) - 2) / m
        q = q + dt / 2 * rho
        rho = rho + dt / 2 * grad(q)
        np.testing.assert_allclose(new.position, q, rtol=1e-13)
        np.testing.assert_allclose(new.momentum, rho, rtol=1e-13)
        np.testing.assert_allclose(new.thermostat, xi, rtol=1e-13)
        assert info.extras["thermostat"] is new.thermostat


# -- noisy gradients ---------------------------------------------------------------------------------------
def test_badodab_thermostat_absorbs_gradient_noise():
    """Gradient noise N(0, s^2 I) with s = 2 at h = 0.2: SGHMC (one kick per iteration, no noise estimate)
    and BAOAB run at temperature about 1 + h s^2 / (4 C) = 1.2, so their position variance is 20% too
    large, tens of standard errors out. BADODAB's thermostat absorbs the noise: its position variance
    matches the target's within Z_TOL standard errors (its remaining bias is O(h^2), about 0.3% here,
    below one standard error), and its thermostat's mean settles at A + (h/4) s^2 = 1.2 (Leimkuhler and
    Shang's xi = (sigma_A^2 + sigma_F^2) / 2 with sigma_F^2 = (h/2) s^2)."""
    h, s, chains = 0.2, 2.0, 1000
    est = NoisyGradient(TARGET, s)
    rng = backends.default_rng(11)
    x0 = np.zeros((chains, 2))
    burn, keep = 3000, 6000
    smp = BADODAB(diffusion=1.0)
    state = smp.init(rng, x0, est)
    for _ in range(burn):
        state, _ = smp.step(rng, state, est, h)
    q2 = np.zeros((chains, 2))
    xi = np.zeros(chains)
    for _ in range(keep):
        state, info = smp.step(rng, state, est, h)
        q2 += state.position**2
        xi += info.extras["thermostat"]
    q2, xi = q2 / keep, xi / keep
    for j, sigma in enumerate(SIGMA):
        assert _z(q2[:, j], sigma**2) < Z_TOL, (j, q2[:, j].mean(), sigma**2)
    assert _z(xi, 1.0 + h * s * s / 4) < Z_TOL, xi.mean()
    # without the thermostat the same noise heats the chain
    for other in (SGHMC(friction=1.0, n_leapfrog=1, resample_momentum=False), BAOAB(friction=1.0)):
        m1, m2 = run_moments(other, est, backends.default_rng(12), x0, h, 1000, 2000)
        _, _, cov, cov_se = pooled_moments(m1, m2)
        excess = (np.diag(cov) - SIGMA**2) / np.diag(cov_se)
        assert np.all(excess > 5 * Z_TOL), (type(other).__name__, np.diag(cov))


# -- the contract ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [BAOAB, BADODAB])
def test_one_gradient_estimate_per_step(cls):
    """The step reuses the gradient at the new position for the next step's first half kick: each step
    makes exactly one estimator call (the fake estimator's call k costs 2**k), and ``state.grad`` is the
    gradient at ``state.position``."""
    s = cls()
    est = TaggedGradient(TARGET)
    rng = backends.default_rng(7)
    state = s.init(rng, np.ones((4, 2)), est)
    assert state.est_state == 1
    for k in range(1, 4):
        state, info = s.step(rng, state, est, 0.3)
        assert isinstance(info, StepInfo)
        assert state.est_state == k + 1
        assert info.estimate.n_evals == 2**k
        np.testing.assert_allclose(state.grad, TARGET.grad_log_posterior(state.position), rtol=1e-14)


@pytest.mark.parametrize("cls", [BAOAB, BADODAB])
def test_pickle_and_resume_identically(cls):
    """A sampler and its state pickle (on the way to a worker); stepping the copies matches the originals."""
    model = LogisticRegression(np.random.default_rng(0).normal(size=(60, 3)), np.arange(60) % 2 * 1.0)
    s, est = cls(), Minibatch(model, 10)
    rng_a, rng_b = backends.default_rng(3), backends.default_rng(3)
    x0 = np.zeros((3, 3))
    a, b = s.init(rng_a, x0, est), s.init(rng_b, x0, est)
    s2, b = pickle.loads(pickle.dumps((s, b)))
    assert repr(s2) == repr(s)
    for _ in range(3):
        a, _ = s.step(rng_a, a, est, 0.05)
        b, _ = s2.step(rng_b, b, est, 0.05)
    for u, v in zip(a, b):
        if u is not None:
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("name", ["baoab", "badodab"])
def test_agree_across_backends(xb, name):
    """Ten steps with the same float64 noise stream on every backend give the same state."""
    r = np.random.default_rng(0)
    X = r.normal(size=(50, 3)).astype(xb.float_dtype).astype(np.float64)
    y = (r.random(50) < 0.5).astype(float)
    x0 = (0.3 * r.normal(size=(4, 3))).astype(xb.float_dtype).astype(np.float64)

    def chain(model, conv, rng):
        est, s = Minibatch(model, 10), make_sampler(name)
        state = s.init(rng, conv(x0), est)
        for _ in range(10):
            state, _ = s.step(rng, state, est, 0.05)
        return state

    ref = chain(LogisticRegression(X, y), np.asarray, replay_rng(_NP, 3))
    got = chain(LogisticRegression(xb.asarray(X), xb.asarray(y)), xb.asarray, replay_rng(xb, 3))
    assert backends.get_backend(got.position) is xb.backend and got.position.dtype == xb.dtype
    for a, b in zip(got, ref):
        if b is None:
            continue
        b = np.asarray(b, dtype=np.float64)
        assert np.abs(to_host(a) - b).max() <= tol_for(xb, 1e-11, 1e-4) * (1.0 + np.abs(b).max())


class _NP:
    name = "numpy"
    device = "cpu"
    backend = backends.get_backend("numpy")


def test_registered_by_name_and_run_by_sample_without_a_fused_block():
    """``"baoab"`` and ``"badodab"`` are registry names (options by keyword, errors naming the option);
    the compiled fused-block plan declines them, so ``sample`` runs the one-step loop, and the trace
    records BADODAB's thermostat."""
    assert SAMPLERS["baoab"] is BAOAB and SAMPLERS["badodab"] is BADODAB
    assert make_sampler("BAOAB", friction=2.0).friction == 2.0
    assert make_sampler("badodab", diffusion=0.5, thermostat_mass=4.0).thermostat_mass == 4.0
    with pytest.raises(TypeError, match="frction"):
        make_sampler("baoab", frction=2.0)
    for bad in (0.0, -1.0, math.inf):
        with pytest.raises(ValueError, match="friction"):
            BAOAB(friction=bad)
        with pytest.raises(ValueError, match="thermostat_mass"):
            BADODAB(thermostat_mass=bad)
    model = LogisticRegression(np.random.default_rng(0).normal(size=(80, 2)), np.arange(80) % 2 * 1.0)
    for smp in (BAOAB(), BADODAB()):
        assert _fused.plan(smp, Minibatch(model, 10), np.zeros((2, 2))) is None
    tr = sgmc.sample(model, "badodab", "minibatch", batch_size=10, step_size=0.1, n_iter=30, chains=2, rng=0,
                     progress=False)
    assert tr.stats["thermostat"].shape == (2, 30)
    assert np.all(np.isfinite(tr.draws))
    assert tr.info["sampler"] == "badodab"


def test_step_unit_is_the_momentum_samplers():
    """1 / sqrt(lambda_max), like SGHMC and SGNHT: BAOAB's dt = h/2 is stable below 2 / omega."""
    H = np.diag([4.0, 1.0])
    for s in (BAOAB(), BADODAB()):
        assert s.step_unit(TARGET, H) == pytest.approx(0.5)
