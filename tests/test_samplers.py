"""Samplers: one-step formulas with replayed noise, cross-backend agreement, and stationary laws.

The statistical tests run many independent chains side by side on NumPy and compare pooled moments
with closed forms; the standard errors come from the spread of per-chain estimates across chains
(see ``_helpers.pooled_moments``), so no autocorrelation model is assumed.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import scipy.linalg
from scipy import stats

from _helpers import Z_TOL, TaggedGradient, pooled_moments, replay_rng, run_moments, to_host, tol_for
from sgmc import backends
from sgmc.estimators import SVRG, ControlVariate, EstimateInfo, FullGradient, Minibatch, NoisyGradient
from sgmc.models import GaussianTarget, LogisticRegression
from sgmc.samplers import (
    SGRLD,
    SGRHMC,
    Metric,
    Recipe,
    MALA,
    PSGLD,
    SAMPLERS,
    SGHMC,
    SGLD,
    SGNHT,
    ULA,
    StepInfo,
    constant,
    from_learning_rate,
    make_sampler,
    polynomial,
    step_sizes,
    to_epsilon,
)

REVIEW = GaussianTarget.review_example()
SIGMA = np.array([[1.5, 0.5], [0.5, 1.5]])


def check_cov(cov, cov_se, expected, label=""):
    z = np.abs(cov - expected) / cov_se
    assert np.all(z < Z_TOL), f"{label}: estimate {cov.ravel()} vs {np.ravel(expected)}; |z| = {z.ravel()}"


def check_mean(mu, mu_se, expected, label=""):
    z = np.abs(mu - expected) / mu_se
    assert np.all(z < Z_TOL), f"{label}: mean {mu} vs {expected}; |z| = {z}"


# -- one step, by hand ----------------------------------------------------------------------------------
def _setup(seed=0, chains=3):
    x = np.random.default_rng(seed).normal(size=(chains, 2))
    grad = FullGradient(REVIEW)
    return x, grad, REVIEW.grad_log_posterior(x)


def test_sgld_step_is_half_step_drift_plus_sqrt_h_noise():
    x, grad, g = _setup()
    h = 0.37
    rng, replay = backends.default_rng(1), backends.default_rng(1)
    s = SGLD()
    state = s.init(rng, x, grad)
    np.testing.assert_array_equal(state.grad, g)
    new, _ = s.step(rng, state, grad, h)
    z = replay.normal((3, 2))
    np.testing.assert_allclose(new.position, x + 0.5 * h * g + math.sqrt(h) * z, rtol=1e-14)
    np.testing.assert_allclose(new.grad, REVIEW.grad_log_posterior(new.position), rtol=1e-14)


@pytest.mark.parametrize("cls", [SGLD, ULA])
def test_without_noise_the_position_moves_by_half_step_times_gradient(xb, cls, monkeypatch):
    """With the injected noise set to zero and an exact gradient, one step is gradient ascent:
    theta' = theta + (h/2) grad log pi(theta) (the review's convention, eq. 3)."""
    target = GaussianTarget(xb.asarray(np.zeros(2)), xb.asarray(SIGMA))
    grad = FullGradient(target)
    rng = xb.rng(0)
    monkeypatch.setattr(rng, "normal", lambda shape, dtype=None: xb.xp.zeros(shape, dtype=dtype, device=xb.device))
    x = xb.asarray(np.array([[1.0, -2.0], [0.5, 0.25]]))
    s = cls()
    state = s.init(rng, x, grad)
    for h in (1e-8, 0.3):
        new, _ = s.step(rng, state, grad, h)
        g = target.grad_log_posterior(x)
        np.testing.assert_array_equal(to_host(new.position), to_host(x + (0.5 * h) * g))
        # the displacement is (h/2) g up to the rounding of theta + (h/2) g
        moved = to_host(new.position) - to_host(x)
        np.testing.assert_allclose(moved, 0.5 * h * to_host(g), rtol=0, atol=4 * xb.eps * 2.0)


def test_psgld_step_matches_the_preconditioned_update():
    x, grad, g = _setup()
    h, alpha, lam, n_data = 0.2, 0.9, 1e-3, 7
    rng, replay = backends.default_rng(2), backends.default_rng(2)
    s = PSGLD(alpha=alpha, lam=lam, n_data=n_data)
    state = s.init(rng, x, grad)
    np.testing.assert_allclose(state.second_moment, (g / n_data) ** 2)  # V starts at gbar^2
    new, _ = s.step(rng, state, grad, h)
    v = alpha * (g / n_data) ** 2 + (1 - alpha) * (g / n_data) ** 2
    G = 1.0 / (lam + np.sqrt(v))
    z = replay.normal((3, 2))
    np.testing.assert_allclose(new.position, x + 0.5 * h * G * g + np.sqrt(h * G) * z, rtol=1e-13)
    np.testing.assert_allclose(new.second_moment, v, rtol=1e-14)


@pytest.mark.parametrize("n_leapfrog", [1, 3])
def test_sghmc_iteration_matches_the_leapfrog_consistent_update(n_leapfrog):
    """Default SGHMC: fresh momentum, a half kick, a drift, then L - 1 full kicks and drifts:
    rho <- rho + (h/2)(g - C rho) + N(0, h C) and theta <- theta + (h/2) rho (review eq. 11, Table 1)."""
    x, grad, g = _setup()
    h, C = 0.3, 0.7
    rng, replay = backends.default_rng(3), backends.default_rng(3)
    s = SGHMC(friction=C, n_leapfrog=n_leapfrog)
    state = s.init(rng, x, grad)
    replay.normal((3, 2))  # init draws a momentum
    new, _ = s.step(rng, state, grad, h)
    rho = replay.normal((3, 2))
    z = replay.normal((3, 2))
    rho = rho + (h / 4) * (g - C * rho) + math.sqrt(h * C / 2) * z
    xx = x + (h / 2) * rho
    for _ in range(n_leapfrog - 1):
        gg = REVIEW.grad_log_posterior(xx)
        z = replay.normal((3, 2))
        rho = rho + (h / 2) * (gg - C * rho) + math.sqrt(h * C) * z
        xx = xx + (h / 2) * rho
    np.testing.assert_allclose(new.position, xx, rtol=1e-13)
    np.testing.assert_allclose(new.momentum, rho, rtol=1e-13)
    np.testing.assert_allclose(new.grad, REVIEW.grad_log_posterior(xx), rtol=1e-13)


def test_sghmc_persistent_momentum_and_noise_correction():
    x, grad, g = _setup()
    h, C, v_hat = 0.3, 1.2, 0.8
    rng, replay = backends.default_rng(4), backends.default_rng(4)
    s = SGHMC(friction=C, n_leapfrog=1, resample_momentum=False, noise_estimate=v_hat)
    state = s.init(rng, x, grad)
    rho = replay.normal((3, 2))
    np.testing.assert_array_equal(state.momentum, rho)
    new, _ = s.step(rng, state, grad, h)
    z = replay.normal((3, 2))
    rho = rho + (h / 2) * (g - C * rho) + math.sqrt(h * (C - h * v_hat / 4)) * z
    np.testing.assert_allclose(new.momentum, rho, rtol=1e-13)
    np.testing.assert_allclose(new.position, x + (h / 2) * rho, rtol=1e-13)


def test_sgnht_step_matches_the_thermostat_update():
    x, grad, g = _setup()
    h, A = 0.25, 1.3
    rng, replay = backends.default_rng(5), backends.default_rng(5)
    s = SGNHT(diffusion=A)
    state = s.init(rng, x, grad)
    np.testing.assert_array_equal(state.thermostat, np.full(3, A))
    rho = replay.normal((3, 2))
    new, info = s.step(rng, state, grad, h)
    z = replay.normal((3, 2))
    rho = rho + (h / 2) * (g - A * rho) + math.sqrt(h * A) * z
    xx = x + (h / 2) * rho
    xi = A + (h / 2) * (np.sum(rho * rho, axis=1) / 2 - 1)
    np.testing.assert_allclose(new.momentum, rho, rtol=1e-13)
    np.testing.assert_allclose(new.position, xx, rtol=1e-13)
    np.testing.assert_allclose(new.thermostat, xi, rtol=1e-13)
    assert info.extras["thermostat"] is new.thermostat


def test_mala_step_accepts_with_the_metropolis_hastings_probability():
    """Acceptance decisions follow log u < log pi(y) - log pi(x) + log q(x|y) - log q(y|x), with the
    Gaussian proposal densities computed independently by scipy."""
    x, _, g = _setup(chains=200)
    grad = FullGradient(REVIEW, log_density=True)
    h = 1.2
    rng, replay = backends.default_rng(6), backends.default_rng(6)
    s = MALA()
    state = s.init(rng, x, grad)
    new, info = s.step(rng, state, grad, h)
    z = replay.normal((200, 2))
    u = replay.uniform((200,))
    y = x + 0.5 * h * g + math.sqrt(h) * z
    gy = REVIEW.grad_log_posterior(y)
    logpi = lambda p: stats.multivariate_normal.logpdf(p, mean=[0, 0], cov=SIGMA)  # noqa: E731
    q = lambda to, frm, gf: stats.norm.logpdf(to - frm - 0.5 * h * gf, scale=math.sqrt(h)).sum(axis=1)  # noqa: E731
    log_alpha = logpi(y) - logpi(x) + q(x, y, gy) - q(y, x, g)
    accept = np.log(u) < log_alpha
    assert 0 < accept.sum() < 200
    np.testing.assert_allclose(new.position, np.where(accept[:, None], y, x), rtol=1e-13)
    np.testing.assert_array_equal(info.accepted, accept)
    np.testing.assert_allclose(info.accept_prob, np.minimum(1.0, np.exp(log_alpha)), rtol=1e-12)
    np.testing.assert_allclose(new.log_density, REVIEW.log_posterior(new.position), rtol=1e-12)


# -- every backend computes the same chain ---------------------------------------------------------------
@pytest.mark.parametrize("name", ["sgld", "ula", "psgld", "mala", "sghmc", "sghmc_persistent", "sgnht"])
def test_samplers_agree_across_backends(xb, name):
    """Ten steps with the same float64 noise stream on every backend give the same positions."""
    r = np.random.default_rng(0)
    X = r.normal(size=(50, 3)).astype(xb.float_dtype).astype(np.float64)
    y = (r.random(50) < 0.5).astype(float)
    x0 = (0.3 * r.normal(size=(4, 3))).astype(xb.float_dtype).astype(np.float64)

    def chain(model, conv, rng):
        exact = name in ("ula", "mala")
        est = FullGradient(model, log_density=name == "mala") if exact else Minibatch(model, 10)
        if name == "sghmc_persistent":
            s = SGHMC(n_leapfrog=2, resample_momentum=False)
        elif name == "sghmc":
            s = SGHMC(n_leapfrog=2)
        else:
            s = make_sampler(name, model)
        state = s.init(rng, conv(x0), est)
        for _ in range(10):
            state, info = s.step(rng, state, est, 0.05)
        return state, info

    ref, ref_info = chain(LogisticRegression(X, y), np.asarray, replay_rng(_NP, 3))
    got, got_info = chain(LogisticRegression(xb.asarray(X), xb.asarray(y)), xb.asarray, replay_rng(xb, 3))
    assert got_info.estimate.n_evals == ref_info.estimate.n_evals
    if name == "mala":
        np.testing.assert_array_equal(xb.to_numpy(got_info.accepted), ref_info.accepted)
    assert backends.get_backend(got.position) is xb.backend
    assert got.position.dtype == xb.dtype
    assert got._fields == ref._fields
    for a, b in zip(got, ref):
        if b is None:  # est_state of the stateless estimators
            assert a is None
            continue
        b = np.asarray(b, dtype=np.float64)
        assert np.abs(to_host(a) - b).max() <= tol_for(xb, 1e-11, 1e-4) * (1.0 + np.abs(b).max())


class _NP:
    name = "numpy"
    device = "cpu"
    backend = backends.get_backend("numpy")


# -- stationary laws on the review's Gaussian ---------------------------------------------------------------
@pytest.mark.parametrize(("h", "chains", "n_keep", "seed"), [(1.0, 400, 2500, 10), (0.5, 400, 2500, 11), (0.1, 1000, 4000, 12)])
def test_sgld_reaches_the_exact_stationary_covariance(h, chains, n_keep, seed):
    """SGLD with gradient noise N(0, 0.01 I) on the review's target has the stationary covariance
    P^T diag(c_j) P with c_j = s_j^2 (1 + h s^2 / 4) / (1 - h / (4 s_j^2)) (review section 2.5), which
    exceeds Sigma by O(h): 21% at h = 1. The burn-in covers 20 relaxation times 1 / lambda_1 = 4 / h of
    the slow direction from the start at 0, as in the paper's Figure 1."""
    est = NoisyGradient(REVIEW, noise_sd=0.1)
    m1, m2 = run_moments(SGLD(), est, backends.default_rng(seed), np.zeros((chains, 2)), h, int(80 / h), n_keep)
    mu, mu_se, cov, cov_se = pooled_moments(m1, m2)
    expected = REVIEW.sgld_stationary_cov(h, 0.01)
    check_mean(mu, mu_se, 0.0, f"SGLD h={h}")
    check_cov(cov, cov_se, expected, f"SGLD h={h}")
    resolvable = np.abs(expected - SIGMA) > 2 * Z_TOL * cov_se
    assert resolvable.any() or h < 0.5
    # where the inflation is resolvable, the estimate sits nearer the SGLD formula than Sigma
    assert np.all((np.abs(cov - expected) < np.abs(cov - SIGMA))[resolvable])


@pytest.mark.slow
def test_sgld_inflation_is_resolved_at_small_step():
    """At h = 0.1 the stationary variance exceeds Sigma's by 0.026 (1.7%); 4000 chains resolve it."""
    h = 0.1
    est = NoisyGradient(REVIEW, noise_sd=0.1)
    m1, m2 = run_moments(SGLD(), est, backends.default_rng(16), np.zeros((4000, 2)), h, 800, 5000)
    mu, mu_se, cov, cov_se = pooled_moments(m1, m2)
    expected = REVIEW.sgld_stationary_cov(h, 0.01)
    check_cov(cov, cov_se, expected, "SGLD h=0.1")
    diag = [0, 1], [0, 1]
    assert np.all(np.abs(expected - SIGMA)[diag] > 2 * Z_TOL * cov_se[diag])
    assert np.all(np.abs(cov - expected)[diag] < np.abs(cov - SIGMA)[diag])


@pytest.mark.parametrize(("h", "seed"), [(1.0, 13), (0.5, 14)])
def test_ula_matches_the_noise_free_formula(h, seed):
    m1, m2 = run_moments(ULA(), FullGradient(REVIEW), backends.default_rng(seed), np.zeros((400, 2)), h, int(80 / h), 2500)
    mu, mu_se, cov, cov_se = pooled_moments(m1, m2)
    check_mean(mu, mu_se, 0.0, "ULA")
    check_cov(cov, cov_se, REVIEW.sgld_stationary_cov(h, 0.0), f"ULA h={h}")
    assert np.all(np.abs(cov - SIGMA)[0, 0] > 2 * Z_TOL * cov_se[0, 0])


def test_mala_is_exact():
    """MALA at h = 1 (where ULA over-disperses by 20%) has stationary covariance Sigma exactly."""
    h = 1.0
    s = MALA()
    rng = backends.default_rng(15)
    grad = FullGradient(REVIEW, log_density=True)
    state = s.init(rng, np.zeros((400, 2)), grad)
    for _ in range(100):
        state, _ = s.step(rng, state, grad, h)
    n_accepted = np.zeros(400, dtype=np.int64)

    def count(info):
        n_accepted[:] += np.asarray(info.accepted, dtype=np.int64)

    m1, m2 = run_moments(s, grad, rng, np.zeros((400, 2)), h, 0, 2500, state=state, on_step=count)
    mu, mu_se, cov, cov_se = pooled_moments(m1, m2)
    check_mean(mu, mu_se, 0.0, "MALA")
    check_cov(cov, cov_se, SIGMA, "MALA")
    assert np.all(np.abs(REVIEW.sgld_stationary_cov(h) - SIGMA)[0, 0] > 2 * Z_TOL * cov_se[0, 0])
    rate = n_accepted / 2500
    assert 0.0 < rate.min() and rate.max() < 1.0
    assert 0.5 < rate.mean() < 0.99


def sghmc_stationary_cov(prec, h, C, L, resample, s2=0.0, v_hat=None):
    """Exact stationary covariance of theta for SGHMC on N(0, prec^-1) with gradient noise N(0, s2 I).

    With a linear gradient every sub-step is affine in the state z = (theta, rho) plus Gaussian noise:
    a kick of fraction f (1/2 after a momentum refresh, else 1) is
    rho <- (1 - f h C / 2) rho - (f h / 2) prec theta + N(0, f h (C - h v_hat / 4) + (f h / 2)^2 s2),
    and a drift is theta <- theta + (h / 2) rho. Composing the sub-steps of one iteration gives
    z' = M z + noise with covariance Q; the stationary covariance solves the discrete Lyapunov equation
    P = M P M^T + Q (for the refreshed scheme, on theta alone with rho ~ N(0, I) at the start).
    """
    d = prec.shape[0]
    eye, zero = np.eye(d), np.zeros((d, d))
    inj = C if v_hat is None else C - h * v_hat / 4

    def kick(f):
        F = np.block([[eye, zero], [-(f * h / 2) * prec, (1 - f * h * C / 2) * eye]])
        Qn = np.block([[zero, zero], [zero, (f * h * inj + (f * h / 2) ** 2 * s2) * eye]])
        return F, Qn

    drift = (np.block([[eye, (h / 2) * eye], [zero, eye]]), np.zeros((2 * d, 2 * d)))
    if resample:
        steps = [kick(0.5), drift] + [kick(1.0), drift] * (L - 1)
        M, Q = np.vstack([eye, zero]), np.block([[zero, zero], [zero, eye]])
    else:
        steps = [kick(1.0), drift] * L
        M, Q = np.eye(2 * d), np.zeros((2 * d, 2 * d))
    for F, Qn in steps:
        M, Q = F @ M, F @ Q @ F.T + Qn
    if resample:
        return scipy.linalg.solve_discrete_lyapunov(M[:d], Q[:d, :d])
    return scipy.linalg.solve_discrete_lyapunov(M, Q)[:d, :d]


def test_sghmc_oracle_is_consistent():
    """The linear-recursion covariance tends to Sigma as h -> 0: O(h^2) for L = 1 and for persistent
    momentum, O(h) (below 0.3 h relative here) for refreshed momentum with L > 1."""
    prec = np.linalg.inv(SIGMA)
    for h in (0.3, 0.1, 0.01):
        for L, resample in [(1, True), (3, True), (5, True), (1, False), (3, False)]:
            rel = np.abs(sghmc_stationary_cov(prec, h, 1.0, L, resample) - SIGMA).max() / 1.5
            bound = 0.3 * h if (resample and L > 1) else 0.2 * h * h
            assert rel < bound, (h, L, resample, rel)


@pytest.mark.parametrize(
    ("L", "resample", "noise_sd", "n_keep", "seed"),
    [(1, True, 0.0, 3000, 20), (3, True, 0.0, 2000, 21), (1, False, 0.0, 3000, 22), (3, False, 0.0, 2000, 23),
     (3, True, 1.5, 2000, 24)],
)
def test_sghmc_reaches_its_stationary_covariance(L, resample, noise_sd, n_keep, seed):
    """SGHMC at h = 0.3, C = 1 against the exact covariance of its linear recursion (see
    ``sghmc_stationary_cov``), which is within 5% of Sigma; with gradient noise of variance s^2 and
    noise_estimate = s^2 the corrected injection makes the law identical to the noise-free one."""
    h, C = 0.3, 1.0
    v_hat = noise_sd**2 if noise_sd else None
    est = NoisyGradient(REVIEW, noise_sd) if noise_sd else FullGradient(REVIEW)
    s = SGHMC(friction=C, n_leapfrog=L, resample_momentum=resample, noise_estimate=v_hat)
    m1, m2 = run_moments(s, est, backends.default_rng(seed), np.zeros((400, 2)), h, 300, n_keep)
    mu, mu_se, cov, cov_se = pooled_moments(m1, m2)
    expected = sghmc_stationary_cov(np.linalg.inv(SIGMA), h, C, L, resample, noise_sd**2, v_hat)
    assert np.abs(expected - SIGMA).max() < 0.05 * 1.5
    check_mean(mu, mu_se, 0.0, "SGHMC")
    check_cov(cov, cov_se, expected, f"SGHMC L={L} resample={resample}")


def test_sghmc_recovers_a_shifted_target():
    target = GaussianTarget(np.array([2.0, -1.0]), SIGMA)
    m1, m2 = run_moments(SGHMC(n_leapfrog=3), FullGradient(target), backends.default_rng(25), np.zeros((400, 2)), 0.3, 300, 1500)
    mu, mu_se, cov, cov_se = pooled_moments(m1, m2)
    check_mean(mu, mu_se, [2.0, -1.0], "SGHMC shifted")
    check_cov(cov, cov_se, sghmc_stationary_cov(np.linalg.inv(SIGMA), 0.3, 1.0, 3, True), "SGHMC shifted")


def _sgnht_moments(h, noise_sd, seed, chains=400, n_burn=400, n_keep=3000):
    est = NoisyGradient(REVIEW, noise_sd)
    s = SGNHT(diffusion=1.0)
    rng = backends.default_rng(seed)
    state = s.init(rng, np.zeros((chains, 2)), est)
    for _ in range(n_burn):
        state, _ = s.step(rng, state, est, h)
    s1, s2, xi = np.zeros((chains, 2)), np.zeros((chains, 2, 2)), np.zeros(chains)
    for _ in range(n_keep):
        state, _ = s.step(rng, state, est, h)
        x = state.position
        s1 += x
        s2 += x[:, :, None] * x[:, None, :]
        xi += state.thermostat
    return pooled_moments(s1 / n_keep, s2 / n_keep), xi / n_keep


def test_sgnht_is_consistent_and_its_thermostat_absorbs_gradient_noise():
    """SGNHT has no closed-form stationary law (the thermostat is nonlinear), but its bias is first
    order in h: the Richardson combination 2 C(h/2) - C(h) of the covariances at h = 0.2 and 0.1
    removes it and must equal Sigma within Monte Carlo error plus a second-order allowance of 0.01
    (for this target the O(h) bias is about -0.35 h, so the O(h^2) remainder at h = 0.1 is a few
    thousandths). Without gradient noise the thermostat settles at A = 1 up to O(h); gradient noise of
    variance s^2 adds (h/2)^2 s^2 to the momentum's variance per step, which the thermostat balances by
    raising its mean friction by h s^2 / 4."""
    (mu1, mu1_se, c1, c1_se), _ = _sgnht_moments(0.2, 0.5, 30)
    (mu2, mu2_se, c2, c2_se), xi_noisy = _sgnht_moments(0.1, 0.5, 31)
    check_mean(mu2, mu2_se, 0.0, "SGNHT")
    extrap = 2 * c2 - c1
    se = np.sqrt(4 * c2_se**2 + c1_se**2)
    assert np.all(np.abs(extrap - SIGMA) < Z_TOL * se + 0.01), (extrap, se)
    _, xi_exact = _sgnht_moments(0.1, 0.0, 31, n_keep=2000)
    shift = xi_noisy.mean() - xi_exact.mean()
    shift_se = math.sqrt(xi_noisy.var(ddof=1) / xi_noisy.size + xi_exact.var(ddof=1) / xi_exact.size)
    assert abs(shift - 0.1 * 0.25 / 4) < Z_TOL * shift_se
    assert abs(xi_exact.mean() - 1.0) < 0.05


def test_psgld_recovers_the_mean_and_roughly_the_covariance():
    """pSGLD omits the Gamma correction term of its position-dependent preconditioner (as Li et al.
    do in their experiments), so its stationary law is biased by an amount that does not vanish with
    h; on this target with gradient noise N(0, I) the covariance is about 10-15% too large. The mean is
    exact by symmetry of the target about its mean. We check the mean within Monte Carlo error and the
    covariance within 25%."""
    m1, m2 = run_moments(PSGLD(), NoisyGradient(REVIEW, 1.0), backends.default_rng(40), np.zeros((400, 2)), 0.1, 500, 3000)
    mu, mu_se, cov, cov_se = pooled_moments(m1, m2)
    check_mean(mu, mu_se, 0.0, "pSGLD")
    rel = np.abs(cov - SIGMA) / SIGMA
    assert np.all(rel < 0.25), rel
    assert np.all(cov_se / SIGMA < 0.03)


# -- step-size schedules -----------------------------------------------------------------------------------
def test_constant_schedule():
    c = constant(0.25)
    assert [c(k) for k in (0, 1, 1000)] == [0.25, 0.25, 0.25]
    assert repr(c) == "constant(0.25)"
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="`step_size` must be positive and finite"):
            constant(bad)


def test_polynomial_schedule_values():
    p = polynomial(0.5, b=10.0, gamma=0.55)
    for k in (0, 1, 7, 10_000):
        assert p(k) == pytest.approx(0.5 * (10.0 + k) ** -0.55, rel=1e-15)
    assert polynomial(2.0, gamma=0.0)(123) == 2.0
    hs = step_sizes(polynomial(1.0, 1.0, 1.0 / 3.0), 50)
    assert all(a > b for a, b in zip(hs, hs[1:]))
    assert hs[0] == 1.0


@pytest.mark.parametrize(("kwargs", "name"), [({"a": 0.0}, "a"), ({"a": -1.0}, "a"), ({"a": 1.0, "b": 0.0}, "b"),
                                              ({"a": 1.0, "b": float("nan")}, "b"), ({"a": 1.0, "gamma": -0.1}, "gamma")])
def test_polynomial_schedule_validation(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        polynomial(**kwargs)


def test_step_sizes_expands_scalars_schedules_and_sequences():
    assert step_sizes(0.1, 3) == [0.1, 0.1, 0.1]
    assert step_sizes(2, 2) == [2.0, 2.0]
    assert step_sizes(lambda k: 0.1 / (k + 1), 3) == [0.1, 0.05, 0.1 / 3]
    assert step_sizes([0.3, 0.2], 2) == [0.3, 0.2]
    assert step_sizes(np.array([0.3, 0.2]), 2) == [0.3, 0.2]
    assert step_sizes(constant(0.5), 2) == [0.5, 0.5]


def test_step_size_conventions():
    assert to_epsilon(0.2) == pytest.approx(0.1)
    # the sgmcmc R package's learning rate eta is (h/2)^2 for SGHMC and SGNHT
    assert from_learning_rate(0.25) == pytest.approx(1.0)
    assert from_learning_rate((0.3 / 2) ** 2) == pytest.approx(0.3)


# -- registry --------------------------------------------------------------------------------------------
def test_make_sampler_by_name():
    assert set(SAMPLERS) == {"sgld", "ula", "psgld", "mala", "sghmc", "sgnht", "sgrld", "sgrhmc", "recipe", "scir",
                             "sgld_corrected", "sghmc_corrected", "baoab", "badodab"}
    model = LogisticRegression(np.ones((5, 2)), np.array([0.0, 1.0, 1.0, 0.0, 1.0]))
    assert isinstance(make_sampler("SGLD"), SGLD)
    sghmc = make_sampler("sghmc", friction=2.0, n_leapfrog=4)
    assert sghmc.n_leapfrog == 4 and sghmc.friction == 2.0
    assert make_sampler("psgld", model).n_data == 5
    mala = make_sampler("mala", model)
    assert isinstance(mala, MALA) and mala.exact and mala.needs_log_density
    assert ULA.exact and not SGLD.exact
    assert not ULA.needs_log_density and not SGLD.needs_log_density
    s = SGNHT()
    assert make_sampler(s) is s
    assert repr(SGHMC()).startswith("SGHMC(friction=1.0, n_leapfrog=5, noise_estimate=None, resample_momentum=True")


def test_sghmc_noise_estimate_per_coordinate(xb):
    target = GaussianTarget(xb.asarray(np.zeros(2)), xb.asarray(SIGMA))
    s = SGHMC(n_leapfrog=1, noise_estimate=xb.asarray(np.array([0.5, 1.0])))
    grad = FullGradient(target)
    rng = xb.rng(0)
    state = s.init(rng, xb.asarray(np.zeros((2, 2))), grad)
    state, _ = s.step(rng, state, grad, 0.1)
    assert np.all(np.isfinite(xb.to_numpy(state.position)))
    with pytest.raises(ValueError, match="lower the step size or raise the friction"):
        SGHMC(noise_estimate=xb.asarray(np.array([0.5, 100.0]))).step(rng, state, grad, 0.1)


# -- the step contract: (state, StepInfo), costs, purity, pickling ------------------------------------------
N_DATA, BATCH = 60, 7


def _logistic():
    r = np.random.default_rng(0)
    X = r.normal(size=(N_DATA, 3))
    y = (r.random(N_DATA) < 0.5).astype(float)
    return LogisticRegression(X, y)


LOGISTIC = _logistic()

def _metric_g(t):
    return 1.0 + t * t


def _metric_dg(t):
    return 2.0 * t


def _recipe_d(z):
    return np.eye(z.shape[-1]) * (1.0 + 0.1 * z**2)[:, :, None]


def _recipe_gamma(z):
    return 0.2 * z


# module-level functions, so the samplers pickle
_DIAG_METRIC = Metric(_metric_g, grad=_metric_dg, diagonal=True)

# name -> (sampler factory, estimator calls per step)
CONTRACT_SAMPLERS = {
    "sgld": (SGLD, 1),
    "ula": (ULA, 1),
    "psgld": (lambda: PSGLD(alpha=0.9, n_data=N_DATA), 1),
    "mala": (MALA, 1),
    "sghmc": (lambda: SGHMC(friction=0.8, n_leapfrog=3), 3),
    "sghmc_persistent": (lambda: SGHMC(n_leapfrog=4, resample_momentum=False), 4),
    "sgnht": (lambda: SGNHT(diffusion=1.2), 1),
    "sgrld": (lambda: SGRLD(_DIAG_METRIC), 1),
    "sgrhmc": (lambda: SGRHMC(_DIAG_METRIC), 1),
    "recipe": (lambda: Recipe(D=_recipe_d, gamma=_recipe_gamma), 1),
}
EXACT = ("ula", "mala")


def _estimator(name, kind, model=LOGISTIC):
    """The estimator ``kind`` for sampler ``name`` (exact samplers always get the full gradient)."""
    if name in EXACT or kind == "full":
        return FullGradient(model, log_density=name == "mala")
    if kind == "minibatch":
        return Minibatch(model, BATCH)
    if kind == "svrg":
        return SVRG(model, BATCH, update_every=2)
    if kind == "cv":
        return ControlVariate(model, BATCH, centre=np.full(model.dim, 0.1))
    raise AssertionError(kind)


def assert_same(a, b, path="state"):
    """``a`` and ``b`` are bit-identical: same structure, types, dtypes and values."""
    if a is None or b is None:
        assert a is None and b is None, path
    elif isinstance(a, tuple):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (u, v) in enumerate(zip(a, b)):
            assert_same(u, v, f"{path}.{a._fields[i] if hasattr(a, '_fields') else i}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    else:
        np.testing.assert_array_equal(a, b, strict=True, err_msg=path)


@pytest.mark.parametrize("name", list(CONTRACT_SAMPLERS))
def test_step_returns_state_and_info_with_the_summed_cost_of_its_estimator_calls(name):
    """``step`` returns ``(state, StepInfo)``; ``info.estimate.n_evals`` is the sum of the costs of the
    estimator calls the step made, each counted once. The fake estimator's state counts its calls, and
    call k reports a cost of 2**k, so the sum names exactly which calls were added up."""
    factory, calls = CONTRACT_SAMPLERS[name]
    s = factory()
    est = TaggedGradient(REVIEW, log_density=name == "mala")
    x, _, _ = _setup(chains=4)
    rng = backends.default_rng(7)
    state = s.init(rng, x, est)
    assert state.est_state == 1  # init estimated the gradient once (call 0)
    for _ in range(3):
        before = state.est_state
        out = s.step(rng, state, est, 0.2)
        assert isinstance(out, tuple) and len(out) == 2
        new, info = out
        assert type(new) is type(state)
        assert isinstance(info, StepInfo) and isinstance(info.estimate, EstimateInfo)
        assert new.est_state == before + calls  # the estimator state is threaded through every call
        assert info.estimate.n_evals == sum(2**k for k in range(before, before + calls))
        np.testing.assert_allclose(new.grad, REVIEW.grad_log_posterior(new.position), rtol=1e-13)
        if name == "mala":
            assert info.accepted.shape == (4,) and info.accepted.dtype == np.bool_
            assert info.accept_prob.shape == (4,)
            assert np.all((0 <= info.accept_prob) & (info.accept_prob <= 1))
        else:
            assert info.accepted is None and info.accept_prob is None
        assert (info.extras is not None) == (name == "sgnht")
        state = new


@pytest.mark.parametrize("name", list(CONTRACT_SAMPLERS))
def test_step_cost_with_the_library_estimators(name):
    """Per chain and iteration: a Minibatch of size n costs n per call, so SGHMC with L leapfrog steps
    reports L n; the full gradient (ULA, MALA) costs N."""
    factory, calls = CONTRACT_SAMPLERS[name]
    s = factory()
    est = _estimator(name, "minibatch")
    rng = backends.default_rng(8)
    state = s.init(rng, np.zeros((5, 3)), est)
    for _ in range(2):
        state, info = s.step(rng, state, est, 0.05)
        expected = N_DATA if name in EXACT else calls * BATCH
        assert info.estimate.n_evals == expected
        assert info.estimate.batch_size == (N_DATA if name in EXACT else BATCH)
    if name in ("sghmc", "sghmc_persistent"):
        # a control variate costs 2n per call: 2 n L per iteration
        cv = _estimator(name, "cv")
        state = s.init(rng, np.zeros((5, 3)), cv)
        _, info = s.step(rng, state, cv, 0.05)
        assert info.estimate.n_evals == 2 * BATCH * calls


def test_sghmc_cost_includes_svrg_refreshes():
    """SVRG with update_every = 2 refreshes (2n + N) on every second call; init's gradient estimate is
    call 1 after the snapshot, so with L = 3 the first iteration's calls cost 2n, 2n + N, 2n and the
    second's 2n + N, 2n, 2n + N."""
    s = SGHMC(n_leapfrog=3)
    est = _estimator("sghmc", "svrg")
    rng = backends.default_rng(9)
    state = s.init(rng, np.zeros((2, 3)), est)
    assert state.est_state.count == 1
    state, info = s.step(rng, state, est, 0.05)
    assert info.estimate.n_evals == 6 * BATCH + N_DATA
    _, info = s.step(rng, state, est, 0.05)
    assert info.estimate.n_evals == 6 * BATCH + 2 * N_DATA


@pytest.mark.parametrize(
    ("name", "kind"),
    [(name, "full") for name in EXACT]
    + [(name, kind) for name in CONTRACT_SAMPLERS if name not in EXACT for kind in ("minibatch", "svrg", "cv")],
)
def test_same_seed_same_objects_give_bit_identical_runs(name, kind):
    """Nothing is kept on the sampler or the estimator: a second run with the same objects and a
    generator with the same seed reproduces the first bit for bit, and neither object changes."""
    s, est = CONTRACT_SAMPLERS[name][0](), _estimator(name, kind)
    x0 = np.random.default_rng(1).normal(size=(4, 3))
    frozen = pickle.dumps((s, est))

    def run(seed):
        rng = backends.default_rng(seed)
        state = s.init(rng, x0, est)
        out = [state]
        for _ in range(5):
            state, info = s.step(rng, state, est, 0.05)
            out.append((state, info))
        return out

    first = run(5)
    second = run(5)
    assert_same(tuple(first), tuple(second))
    assert pickle.dumps((s, est)) == frozen
    # the comparison has teeth: another seed gives another run
    assert not np.array_equal(run(6)[-1][0].position, first[-1][0].position)


def test_mala_needs_an_estimator_that_reports_the_log_density():
    x = np.zeros((3, 2))
    for est, start in ((FullGradient(REVIEW), x), (NoisyGradient(REVIEW, 0.1), x),
                       (Minibatch(LOGISTIC, BATCH), np.zeros((3, 3)))):
        with pytest.raises(TypeError, match=r"log_density=True"):
            MALA().init(backends.default_rng(0), start, est)
    state = MALA().init(backends.default_rng(0), x, FullGradient(REVIEW, log_density=True))
    np.testing.assert_allclose(state.log_density, REVIEW.log_posterior(x), rtol=1e-14)
    # a step with an estimator that does not report it is refused the same way
    with pytest.raises(TypeError, match=r"log_density=True"):
        MALA().step(backends.default_rng(1), state, FullGradient(REVIEW), 0.5)


def test_sgnht_reports_its_thermostat():
    """StepInfo.extras["thermostat"] is the thermostat of the state the step returns (xi after the
    update xi + (h/2)(rho.rho / d - 1)), not the one it started from."""
    s = SGNHT(diffusion=1.3)
    est = Minibatch(LOGISTIC, BATCH)
    h = 0.1
    rng = backends.default_rng(11)
    state = s.init(rng, np.zeros((6, 3)), est)
    for _ in range(4):
        new, info = s.step(rng, state, est, h)
        assert set(info.extras) == {"thermostat"}
        xi = info.extras["thermostat"]
        np.testing.assert_array_equal(xi, new.thermostat)
        np.testing.assert_allclose(
            xi, state.thermostat + (h / 2) * (np.sum(new.momentum**2, axis=1) / 3 - 1), rtol=1e-14
        )
        assert np.all(xi != state.thermostat)
        state = new


@pytest.mark.parametrize("name", list(CONTRACT_SAMPLERS))
def test_samplers_and_states_pickle_and_resume_identically(name):
    """A sampler, its estimator and a state survive pickle.dumps/loads (as they do on the way to a
    worker process), and stepping the unpickled copies gives exactly what stepping the originals does."""
    kind = "svrg" if name in ("sgld", "sghmc", "sgnht") else "cv" if name == "psgld" else "minibatch"
    s, est = CONTRACT_SAMPLERS[name][0](), _estimator(name, kind)
    x0 = np.random.default_rng(2).normal(size=(4, 3))
    rng_a, rng_b = backends.default_rng(12), backends.default_rng(12)
    state_a, state_b = s.init(rng_a, x0, est), s.init(rng_b, x0, est)
    for _ in range(2):
        state_a, _ = s.step(rng_a, state_a, est, 0.05)
        state_b, _ = s.step(rng_b, state_b, est, 0.05)
    s2, est2, state2 = pickle.loads(pickle.dumps((s, est, state_b)))
    assert type(s2) is type(s) and repr(s2) == repr(s)
    assert_same(state2, state_a)
    for _ in range(3):
        state_a, info_a = s.step(rng_a, state_a, est, 0.05)
        state2, info2 = s2.step(rng_b, state2, est2, 0.05)
        assert_same((state2, info2), (state_a, info_a))
    assert_same(pickle.loads(pickle.dumps(state_a)), state_a)
