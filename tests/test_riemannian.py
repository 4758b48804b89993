"""SGRLD, SGRHMC and the general recipe sampler: closed-form stationary laws and same-seed identities."""

import math

import numpy as np
import pytest
from scipy.linalg import solve_discrete_lyapunov

from _helpers import Z_TOL, fd_jacobian, replay_rng, to_host, tol_for
from sgmc import backends
from sgmc.estimators import FullGradient, Minibatch
from sgmc.models import GaussianTarget, LinearRegression, LogisticRegression
from sgmc.samplers import SGHMC, SGLD, SGRHMC, SGRLD, GLMFisherMetric, Metric, Recipe, make_sampler
from sgmc.samplers.metrics import sym_sqrt

SIGMA = np.array([[1.0, 0.5], [0.5, 2.0]])
PREC = np.linalg.inv(SIGMA)


def final_positions(sampler, est, x0, h, n_iter, seed):
    rng = backends.default_rng(seed)
    state = sampler.init(rng, x0, est)
    for _ in range(n_iter):
        state, _ = sampler.step(rng, state, est, h)
    return state


def assert_cov_close(x, want):
    """Sample covariance of independent rows ``x`` against ``want``, entry by entry, within Z_TOL se."""
    n = x.shape[0]
    got = np.cov(x.T)
    se = np.sqrt((np.outer(np.diag(want), np.diag(want)) + want**2) / n)
    assert np.all(np.abs(got - want) <= Z_TOL * se), (got, want, se)


# -- the recipe on a Gaussian: the discretised chain's exact stationary covariance ---------------------
def test_recipe_constant_d_q_matches_lyapunov_closed_form():
    # theta' = A theta + sqrt(h) sqrt(D) z with A = I - (h/2)(D + Q) Sigma^-1: the stationary covariance
    # solves S = A S A^T + h D (it differs from Sigma by O(h), which makes the check sharp).
    D = np.array([[1.5, 0.3], [0.3, 0.8]])
    Q = np.array([[0.0, 2.0], [-2.0, 0.0]])
    h = 0.3
    A = np.eye(2) - 0.5 * h * (D + Q) @ PREC
    S = solve_discrete_lyapunov(A, h * D)
    # the O(h) bias is visible at this h, and it depends on Q (a sampler that drops Q fails)
    assert np.abs(S - SIGMA).max() > 0.2
    without_q = solve_discrete_lyapunov(np.eye(2) - 0.5 * h * D @ PREC, h * D)
    assert np.abs(S - without_q)[1, 1] > 0.4
    target = GaussianTarget(np.zeros(2), SIGMA)
    st = final_positions(Recipe(D=D, Q=Q), FullGradient(target), np.zeros((4000, 2)), h, 150, 1)
    assert_cov_close(np.asarray(st.position), S)


def _d1(zeta):
    return 1.0 + 0.8 * zeta**2 / (1.0 + zeta**2)


def _d1_prime(zeta):
    return 1.6 * zeta / (1.0 + zeta**2) ** 2


def test_position_dependent_diffusion_needs_gamma():
    # N(0, 1) with D(theta) = 1 + 0.8 theta^2 / (1 + theta^2): Gamma = D'(theta) keeps the law; the
    # discretisation error is O(h) (below 0.01 in E theta^2 at h = 0.02, far inside the tolerance).
    target = GaussianTarget(np.zeros(1), np.eye(1))
    est = FullGradient(target)
    x0 = np.random.default_rng(0).normal(size=(4000, 1))

    def second_moment(sampler):
        st = final_positions(sampler, est, x0, 0.02, 300, 2)
        x = np.asarray(st.position)[:, 0]
        return np.mean(x**2), np.std(x**2) / math.sqrt(x.size)

    D = lambda z: _d1(z)[..., None]                            # noqa: E731 - (chains, 1, 1)
    m2, se = second_moment(Recipe(D=D, gamma=_d1_prime))
    assert abs(m2 - 1.0) <= Z_TOL * se + 0.01
    # SGRLD with G = 1 / D is the same sampler through a diagonal metric
    metric = Metric(lambda z: 1.0 / _d1(z), grad=lambda z: -_d1_prime(z) / _d1(z) ** 2, diagonal=True)
    m2r, se_r = second_moment(SGRLD(metric))
    assert abs(m2r - 1.0) <= Z_TOL * se_r + 0.01
    # SGRHMC with the same metric
    m2h, se_h = second_moment(SGRHMC(metric))
    assert abs(m2h - 1.0) <= Z_TOL * se_h + 0.02
    # without Gamma the stationary law is wrong by far more than the Monte Carlo error
    m2_bad, se_bad = second_moment(Recipe(D=D, constant=True))
    assert abs(m2_bad - 1.0) > Z_TOL * se_bad + 0.02


# -- SGRLD with the GLM Fisher metric ---------------------------------------------------------------
def test_fisher_metric_gamma_matches_derivative_of_inverse():
    r = np.random.default_rng(3)
    X = r.normal(size=(40, 3))
    y = (r.random(40) < 1 / (1 + np.exp(-X @ np.array([1.0, -1.0, 0.5])))).astype(float)
    metric = GLMFisherMetric(LogisticRegression(X, y, prior_var=2.0))
    theta = 0.5 * r.normal(size=(2, 3))
    jac = fd_jacobian(lambda t: metric.inverse(t), theta, step=1e-5)     # (chains, i, k, j): d A_ik / d theta_j
    want = np.einsum("cijj->ci", jac)
    np.testing.assert_allclose(metric.gamma(theta), want, rtol=1e-6, atol=1e-9)
    # G itself: sum_i w_i x_i x_i^T + I / prior_var
    eta = theta @ X.T
    s = 1 / (1 + np.exp(-eta))
    G = np.einsum("cn,ni,nj->cij", s * (1 - s), X, X) + np.eye(3) / 2.0
    np.testing.assert_allclose(metric.value(theta), G, rtol=1e-12)


def test_sgrld_fisher_on_linear_regression_matches_closed_form():
    # Linear regression: the Fisher metric is the posterior precision P, so SGRLD with exact gradients is
    # theta' = theta - (h/2)(theta - mu) + sqrt(h) P^{-1/2} z, with stationary covariance P^{-1} / (1 - h/4).
    r = np.random.default_rng(4)
    X = r.normal(size=(200, 2)) * np.array([1.0, 0.1])
    y = X @ np.array([1.0, -2.0]) + r.normal(size=200)
    model = LinearRegression(X, y)
    mean, cov = model.posterior()
    h = 0.5
    sampler = make_sampler("sgrld", model)                     # metric "fisher" by default
    st = final_positions(sampler, FullGradient(model), np.zeros((4000, 2)) + mean, h, 60, 5)
    x = np.asarray(st.position)
    assert_cov_close(x, cov / (1 - h / 4))
    se = np.sqrt(np.diag(cov) / x.shape[0] / (1 - h / 4))
    assert np.all(np.abs(x.mean(axis=0) - mean) <= Z_TOL * se)


def test_sgrhmc_constant_metric_matches_lyapunov_closed_form():
    G = np.array([[2.0, 0.4], [0.4, 1.0]])
    h = 0.4
    ginv = np.linalg.inv(G)
    R = sym_sqrt(np, ginv)
    A = np.block([
        [np.eye(2) - 0.25 * h * h * ginv @ PREC, 0.5 * h * R @ (np.eye(2) - 0.5 * h * ginv)],
        [-0.5 * h * R @ PREC, np.eye(2) - 0.5 * h * ginv],
    ])
    B = np.vstack([0.5 * h * math.sqrt(h) * ginv, math.sqrt(h) * R])
    S = solve_discrete_lyapunov(A, B @ B.T)[:2, :2]
    target = GaussianTarget(np.zeros(2), SIGMA)
    st = final_positions(SGRHMC(metric=G), FullGradient(target), np.zeros((4000, 2)), h, 250, 6)
    assert_cov_close(np.asarray(st.position), S)


# -- the dedicated samplers as instances of the recipe: the same draws ----------------------------
def _linear_problem():
    r = np.random.default_rng(7)
    X = r.normal(size=(100, 2))
    y = X @ np.array([0.5, -1.0]) + r.normal(size=100)
    return LinearRegression(X, y), 0.1 * r.normal(size=(3, 2))


def _same_chain(a, b, est, x0, h, n=30):
    rng_a, rng_b = backends.default_rng(11), backends.default_rng(11)
    sa, sb = a.init(rng_a, x0, est), b.init(rng_b, x0, est)
    for _ in range(n):
        sa, _ = a.step(rng_a, sa, est, h)
        sb, _ = b.step(rng_b, sb, est, h)
    np.testing.assert_allclose(sa.position, sb.position, rtol=1e-10, atol=1e-12)
    return sa, sb


def test_sgld_sghmc_sgrld_are_instances_of_the_recipe():
    model, x0 = _linear_problem()
    est = Minibatch(model, 10)
    _same_chain(SGLD(), Recipe(D=np.eye(2)), est, x0, 0.01)
    C = 2.0
    d4 = np.zeros((4, 4))
    d4[2:, 2:] = C * np.eye(2)
    q4 = np.block([[np.zeros((2, 2)), -np.eye(2)], [np.eye(2), np.zeros((2, 2))]])
    a, b = _same_chain(SGHMC(friction=C, n_leapfrog=1, resample_momentum=False),
                       Recipe(D=d4, Q=q4, momentum=True, scheme="momentum_first"), est, x0, 0.01)
    np.testing.assert_allclose(a.momentum, b.momentum, rtol=1e-10, atol=1e-12)
    logistic = LogisticRegression(model.X, (model.y > 0).astype(float))
    fisher = GLMFisherMetric(logistic)
    _same_chain(SGRLD(fisher), Recipe(D=fisher.inverse, gamma=fisher.gamma), Minibatch(logistic, 10), x0, 0.2)


def test_recipe_validation():
    with pytest.raises(ValueError, match="gamma"):
        Recipe(D=lambda z: z)
    with pytest.raises(ValueError, match="momentum"):
        Recipe(D=np.eye(2), scheme="momentum_first")
    with pytest.raises(ValueError, match="grad"):
        Metric(lambda t: t)
    with pytest.raises(NotImplementedError, match="diagonal"):
        Metric(lambda t: t, grad=lambda t: t).gamma_sqrt(np.ones((1, 2)))
    with pytest.raises(TypeError, match="generalised linear model"):
        GLMFisherMetric(GaussianTarget(np.zeros(2), np.eye(2)))


@pytest.mark.parametrize("name", ["sgrld", "sgrhmc", "recipe"])
def test_agree_across_backends(xb, name):
    r = np.random.default_rng(0)
    X = r.normal(size=(50, 3)).astype(xb.float_dtype).astype(np.float64)
    y = (r.random(50) < 0.5).astype(float)
    x0 = (0.3 * r.normal(size=(4, 3))).astype(xb.float_dtype).astype(np.float64)

    def chain(model, conv, rng):
        est = Minibatch(model, 10)
        if name == "recipe":
            fisher = GLMFisherMetric(model)
            s = Recipe(D=fisher.inverse, gamma=fisher.gamma)
        elif name == "sgrhmc":
            s = SGRHMC(Metric(lambda t: 1.0 + t * t, grad=lambda t: 2.0 * t, diagonal=True))
        else:
            s = make_sampler(name, model)
        state = s.init(rng, conv(x0), est)
        for _ in range(5):
            state, _ = s.step(rng, state, est, 0.1)
        return state

    np_case = type(xb)("numpy", "numpy", "cpu", "float64")
    ref = chain(LogisticRegression(X, y), np.asarray, replay_rng(np_case, 3))
    got = chain(LogisticRegression(xb.asarray(X), xb.asarray(y)), xb.asarray, replay_rng(xb, 3))
    assert backends.get_backend(got.position) is xb.backend
    assert got.position.dtype == xb.dtype
    b = np.asarray(ref.position)
    assert np.abs(to_host(got.position) - b).max() <= tol_for(xb, 1e-10, 1e-3) * (1.0 + np.abs(b).max())
