"""The regression blocks of the complete-data Fisher metric use the model's own E[x x^T] (sgmc.ssm.fisher).

Each block is checked against a Monte Carlo complete-data Fisher information: many independent paths
of the model's own process are run from zero until they forget their start, one more step is taken,
and the covariance of the per-step complete-data scores (times T) is compared with G entry by entry,
with tolerances from the Monte Carlo standard errors. The thesis's replacement E[x x^T] -> I
(``moments="identity"``) must fail the same comparison. The stationary moments themselves are checked
against SciPy's Lyapunov solver and finite differences, and the non-stationary fallback is checked.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.linalg import solve_discrete_lyapunov

from sgmc.ssm import ARHMM, LGSSM, SLDS
from sgmc.ssm.fisher import SSMFisherMetric, regime_moments

from _helpers import Z_TOL, replicate_mean

N_PATHS = 40_000


def _rot(angle):
    return np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])


def _chol_score(L, r):
    """Complete-data score of N(r | 0, (L L^T)^{-1}) in the packed lower triangle of L, (N, p)."""
    m = L.shape[0]
    rows = [i for i in range(m) for _ in range(i + 1)]
    cols = [j for i in range(m) for j in range(i + 1)]
    g = -np.einsum("ni,nk,kj->nij", r, r, L)
    g[:, np.arange(m), np.arange(m)] += 1.0 / np.diag(L)
    return g[:, rows, cols]


def _burn(a, Pi=None):
    """Steps after which a start at zero (and in regime 0) is forgotten to 1e-4: ``a`` bounds the decay of
    the state's second moment per step, the second eigenvalue of ``Pi`` that of the regimes' law."""
    rate = a * a
    if Pi is not None:
        rate = max(rate, float(np.sort(np.abs(np.linalg.eigvals(Pi)))[-2]))
    return int(math.ceil(math.log(1e-4) / math.log(rate)))


def _compare(G, scores, T, block, offset=0):
    """Largest |T * MC Fisher - G| in standard errors on ``block`` (a slice of the parameters), with
    ``scores`` (N, d - offset) the complete-data scores of parameters ``offset:``."""
    s = scores[:, block.start - offset : block.stop - offset]
    outer = s[:, :, None] * s[:, None, :]
    est, se = replicate_mean(outer)
    z = np.abs(T * est - G[block, block]) / (T * se + 1e-12)
    return float(np.max(z))


def _switch(rng, z, Pi):
    """One Markov step of the regimes z (N,) with transition matrix Pi (K, K)."""
    u = rng.random(z.shape[0])
    return np.sum(u[:, None] > np.cumsum(Pi[z], axis=1)[:, :-1], axis=1)


# -- LGSSM ----------------------------------------------------------------------------------------------
def _lgssm_case(a):
    V = np.array([[1.0, 0.4], [-0.3, 1.0]])
    A = V @ np.diag([a, 0.5 * a]) @ np.linalg.inv(V)          # spectral radius a, not normal
    Q = np.array([[0.5, 0.2], [0.2, 1.6]])
    R = np.array([[1.0, 0.3, 0.0], [0.3, 0.8, 0.1], [0.0, 0.1, 1.2]])
    model = LGSSM(np.zeros((200, 3)), state_dim=2)
    psiQ = np.linalg.cholesky(np.linalg.inv(Q))
    psiR = np.linalg.cholesky(np.linalg.inv(R))
    C = np.array([[1.0, 0.0], [0.0, 1.0], [0.7, -0.4]])
    theta = model._pack(A, C, psiQ, psiR)
    return model, theta, A, C, Q, R, psiQ, psiR


@pytest.mark.parametrize("a", [0.5, 0.9, 0.99])
def test_lgssm_metric_is_the_monte_carlo_complete_data_fisher(a):
    model, theta, A, C, Q, R, psiQ, psiR = _lgssm_case(a)
    rng = np.random.default_rng(11)
    N = N_PATHS
    LQ, LR = np.linalg.cholesky(Q), np.linalg.cholesky(R)
    x = np.zeros((N, 2))
    for _ in range(_burn(a)):
        x = x @ A.T + rng.normal(size=(N, 2)) @ LQ.T
    rq = rng.normal(size=(N, 2)) @ LQ.T
    xt = x @ A.T + rq
    rr = rng.normal(size=(N, 3)) @ LR.T
    lamQ, lamR = np.linalg.inv(Q), np.linalg.inv(R)
    sA = np.einsum("ij,nj,nk->nik", lamQ, rq, x).reshape(N, -1)
    sC = np.einsum("ij,nj,nk->nik", lamR, rr, xt).reshape(N, -1) @ np.asarray(model._E_C)
    scores = np.concatenate([sA, sC, _chol_score(psiQ, rq), _chol_score(psiR, rr)], axis=1)
    every = slice(0, model.dim)
    G = SSMFisherMetric(model).value(theta[None, :])[0]
    assert _compare(G, scores, model.T, every) < Z_TOL
    # the thesis's E[x x^T] -> I is far outside the Monte Carlo error in the A and C blocks
    G_id = SSMFisherMetric(model, moments="identity").value(theta[None, :])[0]
    assert _compare(G_id, scores, model.T, slice(0, 4)) > 3 * Z_TOL
    assert _compare(G_id, scores, model.T, slice(4, 6)) > 3 * Z_TOL


# -- SLDS -----------------------------------------------------------------------------------------------
def _slds_case(a):
    Pi = np.array([[0.9, 0.1], [0.25, 0.75]])
    A = np.stack([a * _rot(0.4), 0.5 * a * np.array([[1.0, 0.5], [0.0, 0.6]])])
    Q = np.stack([np.array([[0.6, 0.1], [0.1, 1.3]]), np.array([[1.5, -0.3], [-0.3, 0.7]])])
    R = np.array([[0.9, 0.2, 0.0], [0.2, 1.1, 0.0], [0.0, 0.0, 0.7]])
    C = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.8]])
    model = SLDS(np.zeros((150, 3)), n_states=2, state_dim=2)
    psiQ = np.linalg.cholesky(np.linalg.inv(Q))
    psiR = np.linalg.cholesky(np.linalg.inv(R))
    theta = model._pack(np.log(Pi), A, C, psiQ, psiR)
    return model, theta, Pi, A, C, Q, R, psiQ, psiR


@pytest.mark.parametrize("a", [0.5, 0.9, 0.99])
def test_slds_metric_is_the_monte_carlo_complete_data_fisher(a):
    model, theta, Pi, A, C, Q, R, psiQ, psiR = _slds_case(a)
    rng = np.random.default_rng(12)
    N, K = N_PATHS, 2
    LQ, LR = np.linalg.cholesky(Q), np.linalg.cholesky(R)
    z = np.zeros(N, dtype=int)
    x = np.zeros((N, 2))
    for _ in range(_burn(a, Pi)):
        z = _switch(rng, z, Pi)
        x = np.einsum("nij,nj->ni", A[z], x) + np.einsum("nij,nj->ni", LQ[z], rng.normal(size=(N, 2)))
    z = _switch(rng, z, Pi)
    rq = np.einsum("nij,nj->ni", LQ[z], rng.normal(size=(N, 2)))
    xt = np.einsum("nij,nj->ni", A[z], x) + rq
    rr = rng.normal(size=(N, 3)) @ LR.T
    lamQ, lamR = np.linalg.inv(Q), np.linalg.inv(R)
    onehot = np.eye(K)[z]
    sA = onehot[:, :, None, None] * np.einsum("nij,nj,nk->nik", lamQ[z], rq, x)[:, None]
    sC = np.einsum("ij,nj,nk->nik", lamR, rr, xt).reshape(N, -1) @ np.asarray(model._E_C)
    sQ = np.concatenate([onehot[:, [k]] * _chol_score(psiQ[k], rq) for k in range(K)], axis=1)
    scores = np.concatenate([sA.reshape(N, -1), sC, sQ, _chol_score(psiR, rr)], axis=1)
    block = slice(K * K, model.dim)                           # all but the transition block
    G = SSMFisherMetric(model).value(theta[None, :])[0]
    assert _compare(G, scores, model.T, block, K * K) < Z_TOL
    G_id = SSMFisherMetric(model, moments="identity").value(theta[None, :])[0]
    assert _compare(G_id, scores, model.T, slice(4, 12), K * K) > 3 * Z_TOL          # A_k
    assert _compare(G_id, scores, model.T, slice(12, 14), K * K) > 3 * Z_TOL         # free C entries


# -- ARHMM ----------------------------------------------------------------------------------------------
def _arhmm_case(a):
    Pi = np.array([[0.85, 0.15], [0.3, 0.7]])
    # order 2 in R^2: y_t = A_k (y_{t-1}, y_{t-2}) + N(0, Q_k); state 0 persists with spectral radius about a
    A0 = np.concatenate([(a - 0.1 * a) * _rot(0.3), 0.1 * a * np.eye(2)], axis=1)
    A1 = np.concatenate([0.4 * a * np.array([[1.0, 0.3], [-0.2, 0.8]]), -0.1 * np.eye(2)], axis=1)
    A = np.stack([A0, A1])
    Q = np.stack([np.array([[0.7, 0.2], [0.2, 1.2]]), np.array([[1.4, -0.1], [-0.1, 0.5]])])
    model = ARHMM(np.zeros((150, 2)), n_states=2, order=2)
    psi = np.linalg.cholesky(np.linalg.inv(Q))
    theta = model._pack(np.log(Pi), A, psi)
    return model, theta, Pi, A, Q, psi


@pytest.mark.parametrize("a", [0.5, 0.9, 0.99])
def test_arhmm_metric_is_the_monte_carlo_complete_data_fisher(a):
    model, theta, Pi, A, Q, psi = _arhmm_case(a)
    F = np.concatenate([A, np.broadcast_to(np.eye(2, 4), (2, 2, 4))], axis=1)
    rho = max(np.max(np.abs(np.linalg.eigvals(F[k]))) for k in range(2))
    rng = np.random.default_rng(13)
    N, K = N_PATHS, 2
    LQ = np.linalg.cholesky(Q)
    z = np.zeros(N, dtype=int)
    ybar = np.zeros((N, 4))                                    # (y_{t-1}, y_{t-2})
    for _ in range(_burn(rho, Pi)):
        z = _switch(rng, z, Pi)
        y = np.einsum("nij,nj->ni", A[z], ybar) + np.einsum("nij,nj->ni", LQ[z], rng.normal(size=(N, 2)))
        ybar = np.concatenate([y, ybar[:, :2]], axis=1)
    z = _switch(rng, z, Pi)
    r = np.einsum("nij,nj->ni", LQ[z], rng.normal(size=(N, 2)))
    lam = np.linalg.inv(Q)
    onehot = np.eye(K)[z]
    sA = onehot[:, :, None, None] * np.einsum("nij,nj,nk->nik", lam[z], r, ybar)[:, None]
    sQ = np.concatenate([onehot[:, [k]] * _chol_score(psi[k], r) for k in range(K)], axis=1)
    scores = np.concatenate([sA.reshape(N, -1), sQ], axis=1)
    block = slice(K * K, model.dim)
    G = SSMFisherMetric(model).value(theta[None, :])[0]
    assert _compare(G, scores, model.T, block, K * K) < Z_TOL
    G_id = SSMFisherMetric(model, moments="identity").value(theta[None, :])[0]
    assert _compare(G_id, scores, model.T, slice(4, 20), K * K) > 3 * Z_TOL


# -- the moments ----------------------------------------------------------------------------------------
def test_stationary_moments_match_scipy_lyapunov_and_their_derivatives():
    rng = np.random.default_rng(5)
    n = 3
    A = rng.normal(size=(n, n))
    A = 0.95 * A / np.max(np.abs(np.linalg.eigvals(A)))
    B = rng.normal(size=(n, n))
    Q = B @ B.T + 0.5 * np.eye(n)
    one = np.ones((1, 1, 1))
    M, dM, ok = regime_moments(np, one, A[None, None], Q[None, None], n)
    assert bool(ok[0])
    np.testing.assert_allclose(M[0, 0], solve_discrete_lyapunov(A, Q), rtol=1e-9)
    eps = 1e-6
    for c in range(n):
        for d in range(n):
            E = np.zeros((n, n))
            E[c, d] = eps
            fd = (solve_discrete_lyapunov(A + E, Q) - solve_discrete_lyapunov(A - E, Q)) / (2 * eps)
            np.testing.assert_allclose(dM[0, 0, c, d], fd, rtol=1e-5, atol=1e-6 * np.max(np.abs(fd)))


def test_non_stationary_theta_falls_back_to_the_identity_form():
    model = LGSSM(np.zeros(50))
    theta = np.array([[0.6, 1.5, 1.0], [1.02, 1.5, 1.0], [1.0, 1.5, 1.0], [-3.0, 1.5, 1.0]])
    G = SSMFisherMetric(model).value(theta)
    G_id = SSMFisherMetric(model, moments="identity").value(theta)
    D, gam = model.fisher_metric().inverse_and_gamma(theta)
    np.testing.assert_allclose(G[0, 0, 0], 50 * 1.5**2 / (1.5**2 * (1 - 0.36)), rtol=1e-12)
    np.testing.assert_allclose(G[1:], G_id[1:], rtol=1e-12)
    assert np.all(np.isfinite(D)) and np.all(np.isfinite(gam))
    np.testing.assert_array_equal(gam[1:, 0], 0.0)
    # near the boundary the stationary moment is large but finite
    near = SSMFisherMetric(model).value(np.array([[0.9999, 1.0, 1.0]]))[0, 0, 0]
    np.testing.assert_allclose(near, 50 / (1 - 0.9999**2), rtol=1e-6)


@pytest.mark.parametrize("kind", ["lgssm", "arhmm"])
def test_stationary_moments_on_the_backends(xb, kind):
    if kind == "lgssm":
        model, theta, *_ = _lgssm_case(0.9)
        y = np.random.default_rng(0).normal(size=(30, 3))
        ref = LGSSM(y, state_dim=2)
        mb = LGSSM(xb.asarray(y), state_dim=2)
    else:
        model, theta, *_ = _arhmm_case(0.9)
        y = np.random.default_rng(0).normal(size=(30, 2))
        ref = ARHMM(y, n_states=2, order=2)
        mb = ARHMM(xb.asarray(y), n_states=2, order=2)
    th = np.stack([theta, 0.97 * theta])
    ref_D, ref_g = ref.fisher_metric().inverse_and_gamma(th)
    D, g = mb.fisher_metric().inverse_and_gamma(xb.asarray(th))
    tol = 1e-9 if xb.float_dtype == "float64" else 2e-3
    np.testing.assert_allclose(xb.to_numpy(D), ref_D, rtol=tol, atol=tol * np.max(np.abs(ref_D)))
    np.testing.assert_allclose(xb.to_numpy(g), ref_g, rtol=tol, atol=tol * np.max(np.abs(ref_g)))
