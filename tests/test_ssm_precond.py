"""Complete-data Fisher preconditioners of the LGSSM and the Gaussian HMM (sgmc.ssm.fisher).

D = G^{-1} is checked against the Fisher information computed independently (closed form for the
scalar LGSSM; Monte Carlo averages of outer products of complete-data scores over simulated data,
with tolerances from their standard errors), Gamma against finite differences of D, and SGRLD with
the metric against an exact MALA reference on a small posterior.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import solve_discrete_lyapunov

import sgmc
from sgmc import backends
from sgmc.estimators import FullGradient
from sgmc.samplers import SGRLD, Recipe
from sgmc.ssm import LGSSM, GaussianHMM, HMMParams
from sgmc.ssm.fisher import SSMFisherMetric, cholesky_fisher, stationary_law

from _helpers import Z_TOL, fd_jacobian, replicate_mean


def _lgssm(T=50, n=2, m=3, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.normal(size=(T, m))
    model = LGSSM(y, state_dim=n)
    theta = rng.normal(size=model.dim) * 0.4
    A, C, psiQ, psiR = model._split(theta)
    theta = theta + model._pack(0 * A, 0 * C, 1.5 * np.eye(n), np.eye(m))   # well-conditioned factors
    return model, theta


def _hmm(T=60, K=3, m=2, seed=0, **kw):
    rng = np.random.default_rng(seed)
    model = GaussianHMM(rng.normal(size=(T, m)), n_states=K, **kw)
    theta = rng.normal(size=model.dim) * 0.4
    eta, mu, psi = model._split(theta)
    if model._fixed_psi is None:
        theta = theta + model._pack(0 * eta, 0 * mu, np.broadcast_to(1.3 * np.eye(m), psi.shape))
    return model, theta


def _chol_score(L, r):
    """Complete-data score of N(r | 0, (L L^T)^{-1}) in the packed lower triangle of L, (n, p)."""
    m = L.shape[0]
    rows = [i for i in range(m) for _ in range(i + 1)]
    cols = [j for i in range(m) for j in range(i + 1)]
    g = -np.einsum("ni,nk,kj->nij", r, r, L)
    g[:, np.arange(m), np.arange(m)] += 1.0 / np.diag(L)
    return g[:, rows, cols]


def _mc_fisher(scores):
    """E[s s^T] over rows of ``scores`` with the standard errors of its entries."""
    outer = scores[:, :, None] * scores[:, None, :]
    return replicate_mean(outer)


def test_scalar_lgssm_closed_form():
    phi, sig, tau, T = 0.7, 0.5, 2.0, 80
    model = LGSSM(np.zeros(T))
    theta = np.array([[phi, 1 / sig, 1 / tau]])
    G = SSMFisherMetric(model).value(theta)[0]
    # E[x^2] = sigma^2 / (1 - phi^2) (thesis Eq. 3.73); psi = 1/sigma: I_psi = 1/psi^2 + sigma^2 = 2 sigma^2
    np.testing.assert_allclose(G, T * np.diag([1 / (1 - phi**2), 2 * sig**2, 2 * tau**2]), rtol=1e-12)
    D, gam = model.fisher_metric().inverse_and_gamma(theta)
    np.testing.assert_allclose(D[0] @ G, np.eye(3), atol=1e-12)
    # D_A = (1 - phi^2) / T, so Gamma_A = -2 phi / T
    np.testing.assert_allclose(gam[0], [-2 * phi / T, 1 / sig / T, 1 / tau / T], rtol=1e-12)
    # the thesis's replacement E[x^2] -> 1, kept as moments="identity"
    G_id = SSMFisherMetric(model, moments="identity").value(theta)[0]
    np.testing.assert_allclose(G_id, T * np.diag([1 / sig**2, 2 * sig**2, 2 * tau**2]), rtol=1e-12)
    np.testing.assert_allclose(model.fisher_metric(moments="identity").gamma(theta)[0], [0.0, 1 / sig / T, 1 / tau / T], rtol=1e-12)


@pytest.mark.parametrize("m", [1, 2, 3])
def test_cholesky_block_is_the_fisher_information(m):
    rng = np.random.default_rng(m)
    L = np.tril(rng.normal(size=(m, m)) * 0.3) + np.diag(rng.uniform(0.8, 1.5, m) * np.sign(rng.normal(size=m)))
    Sigma = np.linalg.inv(L @ L.T)
    r = rng.multivariate_normal(np.zeros(m), Sigma, size=200_000)
    est, se = _mc_fisher(_chol_score(L, r))
    F, D, _ = cholesky_fisher(np, L)
    assert np.all(np.abs(est - F) <= Z_TOL * se + 1e-12)
    assert np.all(np.linalg.eigvalsh(D) > 0)
    np.testing.assert_allclose(D @ F, np.eye(F.shape[0]), atol=1e-10)


def test_lgssm_blocks_match_monte_carlo_fisher():
    model, theta = _lgssm(T=50, n=2, m=3)
    A, C, psiQ, psiR = model._split(theta)
    Q, R = np.linalg.inv(psiQ @ psiQ.T), np.linalg.inv(psiR @ psiR.T)
    rng = np.random.default_rng(7)
    N = 200_000
    Sigma = solve_discrete_lyapunov(A, Q)   # the stationary law of x_t = A x_{t-1} + N(0, Q)
    assert np.max(np.abs(np.linalg.eigvals(A))) < 0.95 and np.max(np.abs(Sigma - np.eye(2))) > 0.3
    x_prev = rng.multivariate_normal(np.zeros(2), Sigma, size=N)
    rq = rng.multivariate_normal(np.zeros(2), Q, size=N)
    x = x_prev @ A.T + rq                   # stationary too
    rr = rng.multivariate_normal(np.zeros(3), R, size=N)
    sA = np.einsum("ij,nj,nk->nik", psiQ @ psiQ.T, rq, x_prev).reshape(N, -1)
    sC = np.einsum("ij,nj,nk->nik", psiR @ psiR.T, rr, x).reshape(N, -1) @ model._E_C
    scores = np.concatenate([sA, sC, _chol_score(psiQ, rq), _chol_score(psiR, rr)], axis=1)
    G = SSMFisherMetric(model).value(theta[None, :])[0]
    est, se = _mc_fisher(scores)
    mask = np.abs(G) > 0
    # block diagonal: the cross blocks of the complete-data Fisher vanish (up to MC error)
    assert np.all(np.abs(T_est := model.T * est - G) <= Z_TOL * model.T * se + 1e-9), np.max(np.abs(T_est - G) / (model.T * se + 1e-12))
    assert mask.sum() < mask.size
    D = model.fisher_metric().inverse(theta[None, :])[0]
    assert np.all(np.linalg.eigvalsh(0.5 * (D + D.T)) > 0)
    np.testing.assert_allclose(D @ G, np.eye(model.dim), atol=1e-9)


@pytest.mark.parametrize("fixed", [False, True])
def test_hmm_blocks_match_monte_carlo_fisher(fixed):
    kw = {"emission_cov": 0.5} if fixed else {}
    model, theta = _hmm(T=60, K=3, m=2, **kw)
    eta, mu, psi = model._split(theta)
    Pi = np.exp(eta) / np.exp(eta).sum(axis=1, keepdims=True)
    w, v = np.linalg.eig(Pi.T)                                 # stationary law by eigenvectors
    pi = np.real(v[:, np.argmin(np.abs(w - 1))])
    pi = pi / pi.sum()
    np.testing.assert_allclose(stationary_law(np, Pi), pi, rtol=1e-10)
    rng = np.random.default_rng(3)
    N, K, m = 300_000, 3, 2
    z = rng.choice(K, size=N, p=pi)
    lam = psi @ np.swapaxes(psi, -1, -2)
    r = np.stack([rng.multivariate_normal(np.zeros(m), np.linalg.inv(lam[k]), size=N) for k in range(K)], axis=1)
    r = r[np.arange(N), z]                                     # residual y - mu_z
    onehot = np.eye(K)[z]
    s_mu = onehot[:, :, None] * np.einsum("nij,nj->ni", lam[z], r)[:, None, :]
    parts = [s_mu.reshape(N, -1)]
    if not fixed:
        parts.append(np.concatenate([onehot[:, [k]] * _chol_score(psi[k], r) for k in range(K)], axis=1))
    est, se = _mc_fisher(np.concatenate(parts, axis=1))
    G = SSMFisherMetric(model).value(theta[None, :])[0][K * K:, K * K:]
    assert np.all(np.abs(model.T * est - G) <= Z_TOL * model.T * se + 1e-9)
    # the transition block is the thesis's expanded-mean metric carried to eta = log phi
    phi = np.exp(eta).ravel()
    metric = SSMFisherMetric(model, nu_phi=0.4)
    Gfull = metric.value(theta[None, :])[0]
    np.testing.assert_allclose(Gfull[: K * K, : K * K], np.diag(np.repeat(model.T * pi, K) * (phi + 0.4)), rtol=1e-10)
    D = metric.inverse(theta[None, :])[0]
    assert np.all(np.linalg.eigvalsh(0.5 * (D + D.T)) > 0)
    np.testing.assert_allclose(D @ Gfull, np.eye(model.dim), atol=1e-9)


def _divergence_fd(metric, theta):
    """sum_j dD_ij / d theta_j by central differences, (chains, d)."""
    jac = fd_jacobian(lambda t: metric.inverse(t), theta, step=1e-6)   # (chains, i, j, k)
    return np.einsum("cijj->ci", jac)


@pytest.mark.parametrize("case", ["lgssm-scalar", "lgssm", "hmm", "hmm-nu", "hmm-none"])
def test_gamma_is_the_divergence_of_D(case):
    if case.startswith("lgssm"):
        model, theta = _lgssm(T=30, n=1, m=1) if case == "lgssm-scalar" else _lgssm(T=30, n=2, m=3)
        metric = model.fisher_metric()
    else:
        model, theta = _hmm(T=30, K=2, m=2)
        opts = {"hmm-nu": {"nu_phi": 0.0}, "hmm-none": {"occupancy": "none"}}.get(case, {})
        metric = SSMFisherMetric(model, **opts)
    th = np.stack([theta, theta * 0.9 + 0.05])
    gam = metric.gamma(th)
    fd = _divergence_fd(metric, th)
    np.testing.assert_allclose(gam, fd, rtol=1e-5, atol=1e-7 * np.max(np.abs(fd)))
    assert np.max(np.abs(gam)) > 0


def test_gamma_on_the_backends(xb):
    model, theta = _hmm(T=30, K=2, m=2)
    ref_D, ref_g = model.fisher_metric().inverse_and_gamma(theta[None, :])
    mb = GaussianHMM(xb.asarray(np.asarray(model.y)), n_states=2)
    D, g = mb.fisher_metric().inverse_and_gamma(xb.asarray(theta[None, :]))
    tol = 1e-9 if xb.float_dtype == "float64" else 2e-3
    np.testing.assert_allclose(xb.to_numpy(D), ref_D, rtol=tol, atol=tol * np.max(np.abs(ref_D)))
    np.testing.assert_allclose(xb.to_numpy(g), ref_g, rtol=tol, atol=tol * np.max(np.abs(ref_g)))


def test_sgrld_uses_the_model_metric_and_matches_the_recipe():
    model, theta = _lgssm(T=30, n=1, m=1)
    sampler = sgmc.samplers.SGRLD(model=model)
    assert isinstance(sampler.metric, SSMFisherMetric)
    metric = sampler.metric
    recipe = Recipe(D=metric.inverse, gamma=metric.gamma)
    est = FullGradient(model)
    x0 = np.tile(theta, (4, 1))
    out = []
    for s in (sampler, recipe):
        rng = backends.default_rng(5)
        state = s.init(rng, x0, est)
        for _ in range(5):
            state, _ = s.step(rng, state, est, 0.1)
        out.append(np.asarray(state.position))
    np.testing.assert_allclose(out[0], out[1], rtol=1e-10, atol=1e-12)


def test_bad_options():
    model, _ = _hmm(T=20, K=2, m=1)
    with pytest.raises(ValueError, match="nu_phi"):
        SSMFisherMetric(model, nu_phi=-1.0)
    with pytest.raises(ValueError, match="occupancy"):
        SSMFisherMetric(model, occupancy="flat")
    with pytest.raises(ValueError, match="moments.*'stationary' or 'identity'.*'unit'"):
        SSMFisherMetric(model, moments="unit")
    with pytest.raises(TypeError, match="model"):
        SSMFisherMetric(object())


@pytest.mark.slow
def test_sgrld_samples_the_lgssm_posterior():
    """SGRLD with the Fisher metric and exact gradients against exact (Metropolis-adjusted) MALA."""
    theta0 = np.array([0.6, 1.0, 2.0])
    _, y = LGSSM.simulate_scalar(backends.default_rng(11), 40, theta0)
    model = LGSSM(np.asarray(y))
    common = dict(chains=64, init=theta0, rng=0, progress=False)
    ref = sgmc.sample(model, "mala", step_size=0.02, n_iter=3000, burn_in=500, **common)
    run = sgmc.sample(model, "sgrld", "full", step_size=0.2, n_iter=3000, burn_in=500, **common)
    d_ref, d_run = np.asarray(ref.draws), np.asarray(run.draws)            # (chains, draws, dim)
    for f in (lambda d: d, lambda d: d * d):
        m_ref, se_ref = replicate_mean(f(d_ref).mean(axis=1))
        m_run, se_run = replicate_mean(f(d_run).mean(axis=1))
        z = np.abs(m_run - m_ref) / np.hypot(se_ref, se_run)
        assert np.all(z < Z_TOL), (m_ref, m_run, z)


def _switching(kind, seed=0):
    from sgmc.ssm import ARHMM, SLDS

    rng = np.random.default_rng(seed)
    if kind == "arhmm":
        model = ARHMM(rng.normal(size=(40, 2)), n_states=2, order=2)
        theta = rng.normal(size=model.dim) * 0.3
        eta, A, psi = model._split(theta)
        theta = theta + model._pack(0 * eta, 0 * A, np.broadcast_to(1.2 * np.eye(2), psi.shape))
    else:
        model = SLDS(rng.normal(size=(40, 3)), n_states=2, state_dim=2)
        theta = rng.normal(size=model.dim) * 0.3
        eta, A, C, psiQ, psiR = model._split(theta)
        theta = theta + model._pack(0 * eta, 0 * A, 0 * C, np.broadcast_to(1.4 * np.eye(2), psiQ.shape), 1.1 * np.eye(3))
    return model, theta


def _regressor_moments(Pi, F, Qn, iters=4000):
    """E[s_{t-1} s_{t-1}^T | z_t = k] by iterating the second-moment recursion of the switching process."""
    K, n = F.shape[0], F.shape[-1]
    w, v = np.linalg.eig(Pi.T)
    pi = np.real(v[:, np.argmin(np.abs(w - 1))])
    pi = pi / pi.sum()
    Xi = np.zeros((K, n, n))
    for _ in range(iters):        # Xi_j = E[s s^T 1{z = j}] after one more step
        Xi = np.stack([sum(Pi[i, j] * F[j] @ Xi[i] @ F[j].T for i in range(K)) + pi[j] * Qn[j] for j in range(K)])
    return np.stack([sum(Pi[i, k] * Xi[i] for i in range(K)) / pi[k] for k in range(K)]), pi


@pytest.mark.parametrize("kind", ["arhmm", "slds"])
def test_switching_models_blocks_and_gamma(kind):
    model, theta = _switching(kind)
    metric = model.fisher_metric()
    th = np.stack([theta, 0.9 * theta + 0.05])
    G = metric.value(th)
    D, gam = metric.inverse_and_gamma(th)
    assert np.all(np.linalg.eigvalsh(0.5 * (D + np.swapaxes(D, 1, 2))) > 0)
    np.testing.assert_allclose(D @ G, np.broadcast_to(np.eye(model.dim), G.shape), atol=1e-9)
    fd = _divergence_fd(metric, th)
    np.testing.assert_allclose(gam, fd, rtol=1e-5, atol=1e-7 * np.max(np.abs(fd)))
    # the regression block of state k is T pi_k Lambda_k (x) E[ybar ybar^T | z = k] (thesis Eq. 3.53)
    parts = model._split(th[:1])
    eta = parts[0][0]
    Pi = np.exp(eta) / np.exp(eta).sum(axis=1, keepdims=True)
    psi = parts[2][0] if kind == "arhmm" else parts[3][0]
    lam = psi @ np.swapaxes(psi, -1, -2)
    K, r = model.K, lam.shape[-1]
    if kind == "arhmm":
        m, mp = model.m, model.m * model.p
        F = np.concatenate([parts[1][0], np.broadcast_to(np.eye(mp - m, mp), (K, mp - m, mp))], axis=1)
        Qn = np.zeros((K, mp, mp))
        Qn[:, :m, :m] = np.linalg.inv(lam)
    else:
        F, Qn = parts[1][0], np.linalg.inv(lam)
    M, pi = _regressor_moments(Pi, F, Qn)
    cols = F.shape[-1]
    o, size = K * K, r * cols
    for k in range(K):
        want = model.T * pi[k] * np.kron(lam[k], M[k])
        np.testing.assert_allclose(G[0, o + k * size : o + (k + 1) * size, o + k * size : o + (k + 1) * size], want, rtol=1e-9)
    G_id = model.fisher_metric(moments="identity").value(th[:1])[0]
    np.testing.assert_allclose(G_id[o : o + size, o : o + size], model.T * pi[0] * np.kron(lam[0], np.eye(cols)), rtol=1e-10)
    if kind == "slds":          # the emission block: E[x_t x_t^T] = sum_k pi_k M_k
        E_C = np.asarray(model._E_C)
        lamR = parts[4][0] @ parts[4][0].T
        c0 = o + K * size
        GC = model.T * E_C.T @ np.kron(lamR, np.einsum("k,kij->ij", pi, M)) @ E_C
        np.testing.assert_allclose(G[0, c0 : c0 + GC.shape[0], c0 : c0 + GC.shape[0]], GC, rtol=1e-9)


@pytest.mark.slow
def test_sgrld_samples_a_gaussian_hmm_posterior():
    """The expanded-mean and mean blocks with their Gamma: SGRLD against exact MALA on a small HMM."""
    proto = GaussianHMM(np.zeros((5, 1)), 2, emission_cov=1.0)
    truth = np.asarray(proto.unconstrain(HMMParams(np.array([[0.8, 0.2], [0.3, 0.7]]), np.array([[-1.5], [1.5]]), None)))
    _, y = proto.simulate(backends.default_rng(4), 10, truth)
    model = GaussianHMM(np.asarray(y), 2, emission_cov=1.0)
    common = dict(chains=256, init=truth, rng=1, progress=False)
    ref = sgmc.sample(model, "mala", step_size=0.03, n_iter=3000, burn_in=500, **common)
    run = sgmc.sample(model, "sgrld", "full", step_size=0.1, n_iter=3000, burn_in=500, **common)

    def features(d):        # Pi_00, Pi_11 (the expanded means' scale is not identified) and the means
        e = np.exp(d[..., :4])
        return np.stack([e[..., 0] / (e[..., 0] + e[..., 1]), e[..., 3] / (e[..., 2] + e[..., 3]), d[..., 4], d[..., 5]], -1)

    for f in (lambda d: features(d), lambda d: features(d) ** 2):
        m_ref, se_ref = replicate_mean(f(np.asarray(ref.draws)).mean(axis=1))
        m_run, se_run = replicate_mean(f(np.asarray(run.draws)).mean(axis=1))
        z = np.abs(m_run - m_ref) / np.hypot(se_ref, se_run)
        assert np.all(z < Z_TOL), (m_ref, m_run, z)
