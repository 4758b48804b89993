"""EP approximate collapsed Gibbs on mixtures of Student-t and Gaussians (sgmc.clustering).

Oracles: scipy's multivariate t (the NIW predictive), scipy's quadrature (the integral over u),
the closed-form NIW marginal likelihood enumerated over every assignment (the exact collapsed
posterior), importance sampling from scipy's inverse Wishart (the tilted moments), and chi-square
tests of one sweep started at the exact target (invariance) with independent chains.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.integrate as si
import scipy.special as sp
import scipy.stats as st

from sgmc.backends import default_rng
from sgmc.clustering import (BlockedTState, StudentTMixtureModel, blocked_t_sweep, ep_gibbs_sweep, ep_init,
                             ep_step, naive_t_sweep, NaiveTState)
from sgmc.clustering._special import digamma, lgamma, multi_psi_pair, multidigamma, multigammaln, trigamma
from sgmc.clustering.niw import from_params, to_params
from sgmc.clustering.student_t import match_niw
from sgmc.clustering.student_t_gibbs import naive_t_init, blocked_t_init

P_MIN = 1e-4  # chi-square p-value below which a sampler is declared to have moved its target


def _data(n=4, d=2, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)) + np.array([[2.0, 0.0]] * (n // 2) + [[-2.0, 0.5]] * (n - n // 2))[:, :d]


def _cavity(state, i, K):
    e = np.eye(K)[int(state.z[i])]
    return tuple(q - e.reshape((K,) + (1,) * (q.ndim - 1)) * s[i : i + 1] for q, s in zip(state.q, state.sites))


def _log_marginal(Y, w, mu0, kappa0, nu0, Psi0):
    """Closed-form log of int prod N(y_i | mu, Sigma / w_i) NIW(mu, Sigma) d mu d Sigma."""
    n, d = Y.shape
    kn = kappa0 + w.sum()
    mn = (kappa0 * mu0 + (w[:, None] * Y).sum(0)) / kn
    Psin = Psi0 + kappa0 * np.outer(mu0, mu0) + (w[:, None, None] * Y[:, :, None] * Y[:, None, :]).sum(0) - kn * np.outer(mn, mn)
    nun = nu0 + n
    return (0.5 * d * np.log(w).sum() - 0.5 * n * d * np.log(np.pi) + sp.multigammaln(nun / 2, d) - sp.multigammaln(nu0 / 2, d)
            + 0.5 * nu0 * np.linalg.slogdet(Psi0)[1] - 0.5 * nun * np.linalg.slogdet(Psin)[1] + 0.5 * d * (np.log(kappa0) - np.log(kn)))


def _enumerate(Y, K, alpha, w=None, kappa0=0.5, nu0=4.0):
    """Exact p(z | y) over all K^N assignments (symmetric Dirichlet(alpha) collapsed)."""
    n, d = Y.shape
    w = np.ones((n, K)) if w is None else w
    zs = np.array(list(itertools.product(range(K), repeat=n)))
    logp = []
    for z in zs:
        lp = sum(sp.gammaln(np.sum(z == k) + alpha) for k in range(K))
        for k in range(K):
            sel = z == k
            if sel.any():
                lp += _log_marginal(Y[sel], w[sel, k], np.zeros(d), kappa0, nu0, np.eye(d))
        logp.append(lp)
    logp = np.array(logp)
    p = np.exp(logp - logp.max())
    return zs, p / p.sum()


def _chi2_pvalue(counts, probs):
    """Chi-square p-value, pooling cells with expected count below 5."""
    exp = probs * counts.sum()
    small = exp < 5
    obs_c = np.concatenate([counts[~small], [counts[small].sum()]]) if small.any() else counts
    exp_c = np.concatenate([exp[~small], [exp[small].sum()]]) if small.any() else exp
    keep = exp_c > 0
    return st.chisquare(obs_c[keep], exp_c[keep]).pvalue


def _index(zs, z):
    return int(np.nonzero((zs == np.asarray(z)[None, :]).all(1))[0][0])


# --------------------------------------------------------------------------------------------------
# special functions and the NIW algebra


def test_special_functions_match_scipy():
    x = np.concatenate([np.linspace(0.02, 3, 40), np.geomspace(3, 1e6, 40)])
    np.testing.assert_allclose(lgamma(x), sp.gammaln(x), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(digamma(x), sp.digamma(x), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(trigamma(x), sp.polygamma(1, x), rtol=1e-11)
    np.testing.assert_allclose(multigammaln(x + 2, 3), sp.multigammaln(x + 2, 3), rtol=1e-12)
    np.testing.assert_allclose(multidigamma(x + 2, 3), sum(sp.digamma(x + 2 - j / 2) for j in range(3)), rtol=1e-12)
    for d in (1, 2, 3):
        psi, psi1 = multi_psi_pair(x + 2, d)
        np.testing.assert_allclose(psi, sum(sp.digamma(x + 2 - j / 2) for j in range(d)), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(psi1, sum(sp.polygamma(1, x + 2 - j / 2) for j in range(d)), rtol=1e-11)


def test_match_niw_recovers_parameters_from_their_expected_statistics():
    rng = np.random.default_rng(0)
    d = 3
    M = rng.normal(size=(d, d))
    Psi = M @ M.T + d * np.eye(d)
    m, kappa, nu = rng.normal(size=d), 2.5, 7.3
    Pinv = np.linalg.inv(Psi)
    A = nu * Pinv
    b = nu * Pinv @ m
    c = nu * m @ Pinv @ m + d / kappa
    e = sum(sp.digamma((nu - j) / 2) for j in range(d)) + d * np.log(2) - np.linalg.slogdet(Psi)[1]
    nat = match_niw(A[None], b[None], np.array([c]), np.array([e]), np.array([3.0]))
    k2, m2, P2, n2 = to_params(nat)
    np.testing.assert_allclose(n2[0], nu, rtol=1e-10)
    np.testing.assert_allclose(k2[0], kappa, rtol=1e-10)
    np.testing.assert_allclose(m2[0], m, rtol=1e-10)
    np.testing.assert_allclose(P2[0], Psi, rtol=1e-9)


# --------------------------------------------------------------------------------------------------
# the approximate collapsed term


def test_gaussian_sites_make_ep_exact():
    """nu=None: the EP cluster approximations are the exact NIW posteriors and F~ is the NIW predictive t."""
    y = _data(6, 2)
    z = np.array([0, 0, 1, 1, 0, 1])
    model = StudentTMixtureModel(y, nu=None, kappa0=0.5, nu0=4.0)
    state = ep_init(model, z, 2)
    for k in range(2):
        sel = z == k
        np.testing.assert_allclose(state.q[0][k], 0.5 + sel.sum(), rtol=1e-12)
        np.testing.assert_allclose(state.q[1][k], y[sel].sum(0), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(state.q[2][k], np.eye(2) + y[sel].T @ y[sel], rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(state.q[3][k], 4.0 + sel.sum(), rtol=1e-12)
    for i in range(6):
        cav = _cavity(state, i, 2)
        got = model.log_predictive(cav, i)
        kap, m, Psi, nu = to_params(cav)
        want = [st.multivariate_t(loc=m[k], shape=Psi[k] * (kap[k] + 1) / (kap[k] * (nu[k] - 1)), df=nu[k] - 1).logpdf(y[i])
                for k in range(2)]
        np.testing.assert_allclose(got, want, rtol=1e-10)


@pytest.mark.parametrize("nu", [1.0, 3.0, 5.0, 30.0, 1000.0])
def test_student_t_term_is_the_integral_over_u(nu):
    y = _data(6, 2, seed=4)
    y[0] += 6.0  # an outlier: the integrand in u is far from flat
    model = StudentTMixtureModel(y, nu=nu, kappa0=0.5, nu0=4.0)
    cav = from_params(np.array([1.5, 4.0]), np.array([[0.3, -0.2], [-1.0, 1.0]]),
                      np.array([[[2.0, 0.3], [0.3, 1.0]], [[5.0, -1.0], [-1.0, 3.0]]]), np.array([6.0, 9.5]))
    kap, m, Psi, nuc = to_params(cav)
    for i in (0, 3):
        got = model.log_predictive(cav, i)

        def f(u, k):
            shape = Psi[k] * (kap[k] + u) / (kap[k] * u * (nuc[k] - 1))
            return st.gamma(nu / 2, scale=2 / nu).pdf(u) * st.multivariate_t(loc=m[k], shape=shape, df=nuc[k] - 1).pdf(y[i])

        want = [np.log(si.quad(f, 0, np.inf, args=(k,), limit=400, epsabs=0, epsrel=1e-11)[0]) for k in range(2)]
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_tilted_moments_match_importance_sampling():
    """E[Sigma^-1], E[Sigma^-1 mu], E[log|Sigma^-1|] of the EP site's q against weighted NIW draws."""
    y = _data(5, 2, seed=7)
    nu = 4.0
    model = StudentTMixtureModel(y, nu=nu, kappa0=0.5, nu0=5.0)
    cav = from_params(np.array([1.5]), np.array([[0.3, -0.2]]), np.array([[[2.0, 0.3], [0.3, 1.0]]]), np.array([6.0]))
    A_, b_, c_, e_, nu_, _ = model.tilted_moments(cav, np.array([2]))
    kap, m, Psi, nun = to_params(match_niw(A_, b_, c_, e_, nu_))
    rng = np.random.default_rng(11)
    n = 400_000
    kc, mc, Pc, nc = (a[0] for a in to_params(cav))
    Sig = st.invwishart(df=nc, scale=Pc).rvs(n, random_state=rng)
    mu = mc + np.einsum("nij,nj->ni", np.linalg.cholesky(Sig / kc), rng.normal(size=(n, 2)))
    e = y[2] - mu
    q = np.einsum("ni,nij,nj->n", e, np.linalg.inv(Sig), e)
    logw = -0.5 * (nu + 2) * np.log1p(q / nu) - 0.5 * np.linalg.slogdet(Sig)[1]
    w = np.exp(logw - logw.max())
    w /= w.sum()
    Sinv = np.linalg.inv(Sig)
    ess = 1.0 / np.sum(w * w)
    for stat, want in (
        (Sinv, nun[0] * np.linalg.inv(Psi[0])),
        (np.einsum("nij,nj->ni", Sinv, mu), nun[0] * np.linalg.inv(Psi[0]) @ m[0]),
        (-np.linalg.slogdet(Sig)[1], sum(sp.digamma((nun[0] - j) / 2) for j in range(2)) + 2 * np.log(2) - np.linalg.slogdet(Psi[0])[1]),
    ):
        stat = stat.reshape(n, -1)
        mean = w @ stat
        se = np.sqrt(w @ (stat - mean) ** 2 / ess)
        assert np.all(np.abs(mean - np.ravel(want)) <= 4.5 * se + 1e-3), (mean, want, se)


# --------------------------------------------------------------------------------------------------
# assignment probabilities against enumeration


def test_assignment_probabilities_match_enumeration():
    y = _data(4, 2, seed=2)
    K, alpha = 2, 0.7
    zs, p = _enumerate(y, K, alpha)
    model = StudentTMixtureModel(y, nu=None, kappa0=0.5, nu0=4.0)
    z = np.array([0, 1, 1, 0])
    state = ep_init(model, z, K)
    for i in range(4):
        _, logp = ep_step(default_rng(i), model, state, i, alpha)
        cond = []
        for k in range(K):
            zz = z.copy()
            zz[i] = k
            cond.append(p[_index(zs, zz)])
        np.testing.assert_allclose(np.exp(logp), np.array(cond) / sum(cond), rtol=1e-9)


# --------------------------------------------------------------------------------------------------
# invariance: one sweep from the exact target, many independent chains


CHAINS = 500


def test_ep_sweep_leaves_exact_collapsed_posterior_invariant_on_gaussian_sites():
    y = _data(4, 1, seed=3)
    K, alpha = 2, 1.0
    zs, p = _enumerate(y, K, alpha)
    model = StudentTMixtureModel(y, nu=None, kappa0=0.5, nu0=4.0)
    rng = np.random.default_rng(5)
    starts = zs[rng.choice(len(zs), size=CHAINS, p=p)]
    gen = default_rng(6)
    counts = np.zeros(len(zs))
    for z0 in starts:
        state = ep_gibbs_sweep(gen, model, ep_init(model, z0, K), alpha)
        counts[_index(zs, state.z)] += 1
    assert _chi2_pvalue(counts, p) > P_MIN


def test_naive_sweep_leaves_posterior_invariant():
    y = _data(4, 1, seed=3)
    K, alpha = 2, 1.0
    zs, p = _enumerate(y, K, alpha)
    model = StudentTMixtureModel(y, nu=None, kappa0=0.5, nu0=4.0)
    rng = np.random.default_rng(8)
    gen = default_rng(9)
    counts = np.zeros(len(zs))
    for z0 in zs[rng.choice(len(zs), size=CHAINS, p=p)]:
        mus, Sigmas = [], []
        for k in range(K):  # (mu_k, Sigma_k) | z, y exactly, from scipy
            Yk = y[z0 == k]
            kn, nn = 0.5 + len(Yk), 4.0 + len(Yk)
            mn = Yk.sum(0) / kn
            Pn = np.eye(1) + Yk.T @ Yk - kn * np.outer(mn, mn)
            S = np.atleast_2d(st.invwishart(df=nn, scale=Pn).rvs(random_state=rng))
            mus.append(rng.multivariate_normal(mn, S / kn))
            Sigmas.append(S)
        state = NaiveTState(z0.copy(), np.bincount(z0, minlength=K).astype(float), np.array(mus), np.array(Sigmas),
                            np.ones((4, K)))
        state = naive_t_sweep(gen, model, state, alpha)
        counts[_index(zs, state.z)] += 1
    assert _chi2_pvalue(counts, p) > P_MIN


def test_blocked_z_step_leaves_conditional_posterior_invariant():
    """Student-t (nu = 4): for fixed scales u, the collapsed z-block keeps p(z | u, y)."""
    y = _data(4, 1, seed=3)
    K, alpha = 2, 1.0
    u = np.random.default_rng(1).gamma(2.0, 0.5, size=(4, K))
    zs, p = _enumerate(y, K, alpha, w=u)
    model = StudentTMixtureModel(y, nu=4.0, kappa0=0.5, nu0=4.0)
    rng = np.random.default_rng(12)
    gen = default_rng(13)
    counts = np.zeros(len(zs))
    for z0 in zs[rng.choice(len(zs), size=CHAINS, p=p)]:
        state = blocked_t_sweep(gen, model, BlockedTState(z0.copy(), np.bincount(z0, minlength=K).astype(float), u), alpha)
        counts[_index(zs, state.z)] += 1
    assert _chi2_pvalue(counts, p) > P_MIN


# --------------------------------------------------------------------------------------------------
# recovery, backends, errors


def test_samplers_recover_separated_student_t_clusters():
    from sklearn.metrics import normalized_mutual_info_score as nmi

    rng = np.random.default_rng(0)
    K, n = 3, 40
    zt = np.repeat(np.arange(K), n)
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    y = centres[zt] + rng.standard_t(5, size=(K * n, 2))
    model = StudentTMixtureModel(y, nu=5.0)
    z0 = rng.integers(0, K, K * n)
    gen = default_rng(1)
    ep, naive, blocked = ep_init(model, z0, K), naive_t_init(gen, model, z0, K), blocked_t_init(gen, model, z0, K)
    for _ in range(8):
        ep = ep_gibbs_sweep(gen, model, ep)
        naive = naive_t_sweep(gen, model, naive)
        blocked = blocked_t_sweep(gen, model, blocked)
    assert nmi(zt, ep.z) > 0.95
    assert nmi(zt, blocked.z) > 0.95
    assert nmi(zt, naive.z) > 0.5  # the naive sampler mixes slowly from a random start (thesis 5.4.1)


@pytest.mark.parametrize("backend", ["torch", "array_api_strict"])
def test_other_backends_run_the_same_sweep(backend):
    lib = pytest.importorskip(backend)
    y = _data(8, 2, seed=5)
    z0 = np.array([0, 1] * 4)
    out = []
    for arr, be in ((np.asarray, "numpy"), (lib.asarray, backend)):
        model = StudentTMixtureModel(arr(y), nu=5.0)
        # NumPy's PCG64 stream on every backend (torch draws with its own generator otherwise)
        rng = default_rng(np.random.default_rng(3), backend=be)
        state = ep_gibbs_sweep(rng, model, ep_init(model, arr(z0), 2), full_ep=1)
        out.append([np.asarray(state.z), np.asarray(state.q[2])])
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-9)


@pytest.mark.parametrize("kwargs, match", [
    (dict(nu=0.0), "nu"), (dict(nu=-1.0), "nu"), (dict(kappa0=0.0), "kappa0"), (dict(nu0=0.5), "nu0"),
    (dict(Psi0=-np.eye(2)), "Psi0"), (dict(mu0=np.zeros(3)), "mu0"), (dict(resolution=0.0), "resolution"),
])
def test_bad_model_arguments_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StudentTMixtureModel(np.zeros((3, 2)), **kwargs)


def test_bad_data_and_assignments_name_the_argument():
    with pytest.raises(ValueError, match="`y`"):
        StudentTMixtureModel(np.zeros(3))
    with pytest.raises(ValueError, match="`y`"):
        StudentTMixtureModel(np.array([[np.nan, 0.0]]))
    model = StudentTMixtureModel(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="`K`"):
        ep_init(model, np.zeros(3, dtype=int), 0)
    with pytest.raises(ValueError, match="`z`"):
        ep_init(model, np.zeros(4, dtype=int), 2)
    with pytest.raises(ValueError, match="`z`"):
        ep_init(model, np.array([0, 1, 2]), 2)
    with pytest.raises(TypeError, match="`z`"):
        ep_init(model, np.zeros(3), 2)
    with pytest.raises(ValueError, match="`alpha`"):
        ep_gibbs_sweep(default_rng(0), model, ep_init(model, np.zeros(3, dtype=int), 2), alpha=0.0)


def test_log_predictive_is_finite_for_outliers():
    y = np.array([[0.0, 0.0], [0.1, 0.0], [1e3, -1e3]])
    model = StudentTMixtureModel(y, nu=3.0)
    state = ep_init(model, np.array([0, 0, 1]), 2, passes=3)
    assert np.all(np.isfinite(model.log_predictive(_cavity(state, 2, 2), 2)))
    assert math.isfinite(float(np.sum(state.q[2])))


def test_scale_draws_follow_their_gamma_conditional():
    """u | z, mu, Sigma (Eq. C.3 with the 1/2 on the quadratic form): means against the closed form."""
    from sgmc.clustering.student_t_gibbs import sample_scales

    y = np.array([[0.0, 0.0], [3.0, -1.0]])
    nu = 4.0
    model = StudentTMixtureModel(y, nu=nu)
    mu = np.array([[0.5, 0.0], [-1.0, 1.0]])
    Sigma = np.array([[[1.0, 0.2], [0.2, 0.5]], [[2.0, 0.0], [0.0, 1.0]]])
    z = np.array([0, 1])
    gen = default_rng(0)
    draws = np.stack([sample_scales(gen, model, z, mu, Sigma) for _ in range(4000)])  # (n, N, K)
    delta = np.array([[(y[i] - mu[k]) @ np.linalg.solve(Sigma[k], y[i] - mu[k]) for k in range(2)] for i in range(2)])
    own = np.eye(2)[z]
    shape = nu / 2 + own * 1.0
    rate = nu / 2 + own * delta / 2
    mean, se = draws.mean(0), draws.std(0) / np.sqrt(len(draws))
    assert np.all(np.abs(mean - shape / rate) <= 4.5 * se)
