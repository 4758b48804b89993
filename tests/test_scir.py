"""SCIR on the simplex: exact CIR transitions, and no boundary bias where SGRLD's expanded mean has one."""

import math

import numpy as np
import pytest

from _helpers import Z_TOL, replicate_mean
from sgmc import backends
from sgmc.estimators import FullGradient, Minibatch
from sgmc.models import DirichletCategorical
from sgmc.samplers import SCIR, SGRLD, make_sampler
from sgmc.samplers.scir import cir_transition, gamma_draws

COUNTS = [800, 150, 0, 3]
MODEL = DirichletCategorical(np.repeat(np.eye(4), COUNTS, axis=0), alpha=0.1)
A = np.asarray(MODEL.posterior())
EXACT_MEAN = A / A.sum()
EXACT_VAR = EXACT_MEAN * (1 - EXACT_MEAN) / (A.sum() + 1)


def simplex_moments(sampler, est, x0, h, n_iter, seed):
    """Per-chain time averages of theta and theta^2 over the second half of the run."""
    rng = backends.default_rng(seed)
    st = sampler.init(rng, x0, est)
    s1 = np.zeros(x0.shape)
    s2 = np.zeros(x0.shape)
    keep = 0
    for i in range(n_iter):
        st, _ = sampler.step(rng, st, est, h)
        if i >= n_iter // 2:
            th = np.asarray(st.position if isinstance(sampler, SCIR) else MODEL.to_simplex(st.position))
            s1 += th
            s2 += th * th
            keep += 1
    return s1 / keep, s2 / keep


@pytest.mark.parametrize("a, omega", [(0.1, 0.3), (0.1, 4.0), (5.0, 0.5), (5.0, 20.0)])
def test_cir_transition_moments(a, omega):
    # dw = (a - w) dt + sqrt(2 w) dW over time t: E = a + (w - a) e^-t, Var = 2 w (e^-t - e^-2t) + a (1 - e^-t)^2.
    t, n = 0.3, 40000
    rng = backends.default_rng(1)
    w = cir_transition(rng, np.full(n, omega), np.full(n, a), t)
    e = math.exp(-t)
    mean = a + (omega - a) * e
    var = 2 * omega * (e - e * e) + a * (1 - e) ** 2
    assert abs(w.mean() - mean) <= Z_TOL * math.sqrt(var / n)
    # Var(sample var) ~ (mu4 - var^2) / n; bound mu4 by the sample's own fourth central moment
    mu4 = np.mean((w - w.mean()) ** 4)
    assert abs(w.var() - var) <= Z_TOL * math.sqrt((mu4 - var * var) / n)


def test_gamma_draws_match_gamma_moments(xb):
    k = np.array([0.05, 0.5, 1.0, 3.0, 200.0])
    n = 20000
    draws = xb.to_numpy(gamma_draws(xb.rng(2), xb.asarray(np.repeat(k[None, :], n, axis=0)))).astype(float)
    se = np.sqrt(k / n)                                   # Var(Gamma(k)) = k
    assert np.all(np.abs(draws.mean(axis=0) - k) <= Z_TOL * se)
    assert np.all(draws >= 0)
    assert np.all(xb.to_numpy(gamma_draws(xb.rng(0), xb.asarray(np.zeros(3)))) == 0)


def test_scir_matches_exact_dirichlet_with_full_counts():
    # With the exact counts every step is an exact transition of the true posterior's CIR process.
    chains = 1000
    m1, m2 = simplex_moments(SCIR(), FullGradient(MODEL), np.full((chains, 4), 0.25), 1.0, 40, 3)
    mu, se = replicate_mean(m1)
    assert np.all(np.abs(mu - EXACT_MEAN) <= Z_TOL * se)
    v, v_se = replicate_mean(m2 - mu**2)
    assert np.all(np.abs(v - EXACT_VAR) <= Z_TOL * v_se + 1e-12)


def test_scir_has_no_boundary_bias_and_sgrld_expanded_mean_does():
    # Category 2 has no counts: its posterior is Dirichlet's small component (mean 1e-4). SCIR with
    # minibatches keeps its mean and variance (its a = alpha is not subsampled); SGRLD's Euler steps with
    # the expanded-mean reflection inflate the mean by far more than the Monte Carlo error.
    chains = 1000
    est = Minibatch(MODEL, 100)
    m1, m2 = simplex_moments(SCIR(), est, np.full((chains, 4), 0.25), 1.0, 40, 4)
    mu, se = replicate_mean(m1)
    v, v_se = replicate_mean(m2 - mu**2)
    assert abs(mu[2] - EXACT_MEAN[2]) <= Z_TOL * se[2]
    assert abs(v[2] - EXACT_VAR[2]) <= Z_TOL * v_se[2]
    sgrld = SGRLD(MODEL.metric(), mirror=True)
    start = np.broadcast_to(A, (chains, 4)).copy()
    g1, _ = simplex_moments(sgrld, est, start, 0.1, 120, 5)
    g_mu, g_se = replicate_mean(g1)
    assert g_mu[2] - EXACT_MEAN[2] > Z_TOL * g_se[2] + 10 * se[2]


def test_scir_registry_and_errors():
    assert isinstance(make_sampler("scir"), SCIR)
    from sgmc.models import LinearRegression

    lin = LinearRegression(np.ones((5, 1)), np.ones(5))
    with pytest.raises(TypeError, match="count_sum"):
        SCIR().init(backends.default_rng(0), np.full((2, 1), 0.5), Minibatch(lin, 2))
    with pytest.raises(ValueError, match="simplex"):
        SCIR().init(backends.default_rng(0), np.zeros((2, 4)), FullGradient(MODEL))


def test_scir_on_every_backend(xb):
    model = DirichletCategorical(xb.asarray(np.repeat(np.eye(3), [30, 5, 0], axis=0)), alpha=0.5)
    rng = xb.rng(0)
    est = Minibatch(model, 10)
    st = SCIR().init(rng, xb.asarray(np.full((50, 3), 1 / 3)), est)
    for _ in range(20):
        st, _ = SCIR().step(rng, st, est, 1.0)
    th = xb.to_numpy(st.position).astype(float)
    assert backends.get_backend(st.position) is xb.backend
    np.testing.assert_allclose(th.sum(axis=1), 1.0, rtol=1e-5)
    assert np.all(th > 0)
    a = np.array([30.5, 5.5, 0.5])
    # 50 chains: the mean of the first component within 4.5 se of the posterior mean 30.5 / 36.5
    assert abs(th[:, 0].mean() - a[0] / a.sum()) <= Z_TOL * th[:, 0].std() / math.sqrt(50) + 0.02
