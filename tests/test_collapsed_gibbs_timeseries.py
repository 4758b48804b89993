"""EP approximate collapsed Gibbs for correlated time series clustering (sgmc.clustering.timeseries).

The oracle is the dense joint Gaussian of every series and factor, built here from the model's
definition as a linear map of standard normals (scipy's multivariate normal for densities, plain
Gaussian conditioning for posteriors), enumerated over all assignments for the exact collapsed
posterior ``p(z | y)``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.special as sp
import scipy.stats as st

from sgmc.backends import default_rng
from sgmc.clustering import (NaiveTSState, TimeSeriesClusterModel, cluster_log_marginal, collapsed_init,
                             collapsed_sweep, ep_gibbs_sweep, ep_init, ep_step, naive_init, naive_sweep,
                             simulate_timeseries)
from sgmc.clustering.timeseries import eta_moments, scalar_filter
from sgmc.clustering.timeseries_gibbs import collapsed_conditional

P_MIN = 1e-4
CHAINS = 500
LAM = np.array([1.0, 0.6, 1.3, 0.8])


def _linear_map(z, a, lam, sx2, p0, T, K):
    """x (N*T) = M w, w standard normal = (x_0 / sqrt(p0) (N), eta (K*T), eps / sqrt(sx2) (N*T))."""
    N = len(z)
    M = np.zeros((N * T, N + K * T + N * T))
    for i in range(N):
        for t in range(1, T + 1):
            row = i * T + t - 1
            M[row, i] = a[i] ** t * np.sqrt(p0[i])
            for r in range(1, t + 1):
                M[row, N + z[i] * T + r - 1] += a[i] ** (t - r) * lam[i]
                M[row, N + K * T + i * T + r - 1] += a[i] ** (t - r) * np.sqrt(sx2[i])
    return M


def _dense_loglik(y, z, a, lam, sx2, sy2, p0, K):
    N, T = y.shape
    M = _linear_map(z, a, lam, sx2, p0, T, K)
    cov = M @ M.T + np.diag(np.repeat(sy2, T))
    return st.multivariate_normal(np.zeros(N * T), cov).logpdf(y.ravel())


def _setup(a=0.7, T=3, seed=0, z=(0, 0, 1, 1)):
    z = np.asarray(z)
    N = len(z)
    y, _, _ = simulate_timeseries(default_rng(seed), z, T, 2, a=a, lam=LAM[:N], sigma_x2=0.3, sigma_y2=0.5)
    model = TimeSeriesClusterModel(y, a=a, lam=LAM[:N], sigma_x2=0.3, sigma_y2=0.5, p0=1.0)
    par = (np.full(N, a), LAM[:N], np.full(N, 0.3), np.full(N, 0.5), np.ones(N))
    return model, y, par


def _enumerate(y, par, K, alpha):
    N = y.shape[0]
    zs = np.array(list(itertools.product(range(K), repeat=N)))
    logp = np.array([_dense_loglik(y, z, *par, K) + sum(sp.gammaln(np.sum(z == k) + alpha) for k in range(K)) for z in zs])
    p = np.exp(logp - logp.max())
    return zs, p / p.sum()


def _index(zs, z):
    return int(np.nonzero((zs == np.asarray(z)[None, :]).all(1))[0][0])


def _chi2_pvalue(counts, probs):
    exp = probs * counts.sum()
    small = exp < 5
    obs_c = np.concatenate([counts[~small], [counts[small].sum()]]) if small.any() else counts
    exp_c = np.concatenate([exp[~small], [exp[small].sum()]]) if small.any() else exp
    keep = exp_c > 0
    return st.chisquare(obs_c[keep], exp_c[keep]).pvalue


def _cavity(state, i, K):
    e = np.eye(K)[int(state.z[i])][:, None]
    return tuple(q - e * s[i] for q, s in zip(state.q, state.sites))


# --------------------------------------------------------------------------------------------------
# the recursions against the dense Gaussian


@pytest.mark.parametrize("scan", [False, True])
def test_filter_and_tilted_moments_match_dense_gaussian(scan):
    """One series with eta ~ N(m, diag v): log F~ (Eq. C.19) and the tilted moments of eta (Eq. C.20),
    by the loop over time steps and by the log-depth scans."""
    rng = np.random.default_rng(3)
    T, a, lam, sx2, sy2, p0 = 5, 0.8, 1.3, 0.2, 0.5, 1.5
    m, v, y = rng.normal(size=T), rng.uniform(0.2, 1.0, T), rng.normal(size=T)
    # x = A eta + B w with w standard normal (x_0 and eps); eta = m + sqrt(v) e
    A = np.zeros((T, T))
    B = np.zeros((T, T + 1))
    for t in range(1, T + 1):
        B[t - 1, 0] = a ** t * np.sqrt(p0)
        for r in range(1, t + 1):
            A[t - 1, r - 1] = a ** (t - r) * lam
            B[t - 1, r] = a ** (t - r) * np.sqrt(sx2)
    mean_y = A @ m
    cov_eta = np.diag(v)
    cov_y = A @ cov_eta @ A.T + B @ B.T + sy2 * np.eye(T)
    want_ll = st.multivariate_normal(mean_y, cov_y).logpdf(y)
    C = cov_eta @ A.T
    post_mean = m + C @ np.linalg.solve(cov_y, y - mean_y)
    post_var = np.diag(cov_eta - C @ np.linalg.solve(cov_y, C.T))
    one = lambda x: np.array([x])  # noqa: E731
    ll, _ = scalar_filter(np, y[None], one(a), one(lam), one(sx2), one(sy2), one(p0), m[None], v[None], scan=scan)
    mean, var, ll2 = eta_moments(np, y[None], one(a), one(lam), one(sx2), one(sy2), one(p0), m[None], v[None],
                                 scan=scan)
    np.testing.assert_allclose(ll[0], want_ll, rtol=1e-11)
    np.testing.assert_allclose(ll2[0], want_ll, rtol=1e-11)
    np.testing.assert_allclose(mean[0], post_mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(var[0], post_var, rtol=1e-10)


def test_exact_collapsed_marginal_matches_dense_gaussian():
    model, y, par = _setup(a=0.8, T=4, z=(0, 1, 0, 0))
    members = np.array([[True, False, True, True], [False, True, False, False], [False] * 4, [True] * 4])
    got = cluster_log_marginal(model, members)
    for r, mem in enumerate(members):
        if not mem.any():
            assert got[r] == pytest.approx(0.0, abs=1e-12)
            continue
        sub = tuple(p[mem] for p in par)
        want = _dense_loglik(y[mem], np.zeros(mem.sum(), dtype=int), *sub, 1)
        np.testing.assert_allclose(got[r], want, rtol=1e-10)


def test_ep_is_exact_when_time_steps_are_independent():
    """a = 0: the posterior of eta_k is diagonal, EP is exact, and F~ is the exact collapsed term."""
    model, y, par = _setup(a=0.0, T=4)
    z = np.array([0, 0, 1, 1])
    state = ep_init(model, z, 2)
    coll = collapsed_init(model, z, 2)
    for i in range(4):
        got = model.log_predictive(_cavity(state, i, 2), i)
        _, ll_without, ll_with, _ = collapsed_conditional(model, coll, i, 1.0)
        np.testing.assert_allclose(got, ll_with - ll_without, rtol=1e-10)


def test_ep_term_approximates_collapsed_term_when_steps_are_coupled():
    model, _, _ = _setup(a=0.7, T=6)
    z = np.array([0, 0, 1, 1])
    state = ep_init(model, z, 2, passes=5)
    coll = collapsed_init(model, z, 2)
    for i in range(4):
        got = model.log_predictive(_cavity(state, i, 2), i)
        _, lw, lwi, _ = collapsed_conditional(model, coll, i, 1.0)
        np.testing.assert_allclose(got, lwi - lw, atol=0.5)


def test_assignment_probabilities_match_enumeration():
    model, y, par = _setup(a=0.6, T=3)
    K, alpha = 2, 0.8
    zs, p = _enumerate(y, par, K, alpha)
    z = np.array([1, 0, 1, 1])
    coll = collapsed_init(model, z, K)
    model0 = TimeSeriesClusterModel(y, a=0.0, lam=LAM, sigma_x2=0.3, sigma_y2=0.5)  # EP exact at a = 0
    ep0 = ep_init(model0, z, K)
    zs0, p0 = _enumerate(y, (np.zeros(4),) + par[1:], K, alpha)
    for i in range(4):
        logits, _, _, _ = collapsed_conditional(model, coll, i, alpha)
        cond = np.array([p[_index(zs, np.where(np.arange(4) == i, k, z))] for k in range(K)])
        np.testing.assert_allclose(np.exp(logits - sp.logsumexp(logits)), cond / cond.sum(), rtol=1e-9)
        _, logp = ep_step(default_rng(i), model0, ep0, i, alpha)
        cond0 = np.array([p0[_index(zs0, np.where(np.arange(4) == i, k, z))] for k in range(K)])
        np.testing.assert_allclose(np.exp(logp), cond0 / cond0.sum(), rtol=1e-9)


# --------------------------------------------------------------------------------------------------
# invariance: one sweep from the exact target, many independent chains


def _starts(p, zs, seed):
    return zs[np.random.default_rng(seed).choice(len(zs), size=CHAINS, p=p)]


def test_collapsed_sweep_leaves_posterior_invariant():
    model, y, par = _setup(a=0.7, T=3)
    zs, p = _enumerate(y, par, 2, 1.0)
    gen = default_rng(1)
    counts = np.zeros(len(zs))
    for z0 in _starts(p, zs, 2):
        counts[_index(zs, collapsed_sweep(gen, model, collapsed_init(model, z0, 2)).z)] += 1
    assert _chi2_pvalue(counts, p) > P_MIN


def test_ep_sweep_leaves_exact_posterior_invariant_where_ep_is_exact():
    model, y, par = _setup(a=0.0, T=3)
    zs, p = _enumerate(y, par, 2, 1.0)
    gen = default_rng(3)
    counts = np.zeros(len(zs))
    for z0 in _starts(p, zs, 4):
        counts[_index(zs, ep_gibbs_sweep(gen, model, ep_init(model, z0, 2)).z)] += 1
    assert _chi2_pvalue(counts, p) > P_MIN


def test_naive_sweep_leaves_posterior_invariant():
    model, y, par = _setup(a=0.7, T=3)
    K, T = 2, 3
    zs, p = _enumerate(y, par, K, 1.0)
    rng = np.random.default_rng(5)
    gen = default_rng(6)
    counts = np.zeros(len(zs))
    for z0 in _starts(p, zs, 7):
        # eta | z, y exactly, by conditioning the dense joint Gaussian
        M = _linear_map(z0, *(par[0], par[1], par[2], par[4]), T, K)
        cov_y = M @ M.T + np.diag(np.repeat(par[3], T))
        C = M[:, 4 : 4 + K * T].T  # Cov(eta, x) = Cov(eta, y)
        mean = C @ np.linalg.solve(cov_y, y.ravel())
        cov = np.eye(K * T) - C @ np.linalg.solve(cov_y, C.T)
        eta = rng.multivariate_normal(mean, cov).reshape(K, T)
        state = NaiveTSState(z0.copy(), np.bincount(z0, minlength=K).astype(float), eta)
        counts[_index(zs, naive_sweep(gen, model, state).z)] += 1
    assert _chi2_pvalue(counts, p) > P_MIN


# --------------------------------------------------------------------------------------------------
# recovery, backends, errors


def test_samplers_recover_clusters_on_simulated_series():
    from sklearn.metrics import normalized_mutual_info_score as nmi

    K, N, T = 3, 24, 60
    zt = np.repeat(np.arange(K), N // K)
    y, _, _ = simulate_timeseries(default_rng(0), zt, T, K, a=0.95, lam=1.0, sigma_x2=0.01, sigma_y2=1.0)
    model = TimeSeriesClusterModel(y, a=0.95, lam=1.0, sigma_x2=0.01, sigma_y2=1.0)
    z0 = np.random.default_rng(1).integers(0, K, N)
    gen = default_rng(2)
    ep, coll, naive = ep_init(model, z0, K), collapsed_init(model, z0, K), naive_init(gen, model, z0, K)
    for _ in range(5):
        ep = ep_gibbs_sweep(gen, model, ep)
        coll = collapsed_sweep(gen, model, coll)
        naive = naive_sweep(gen, model, naive)
    assert nmi(zt, ep.z) > 0.9
    assert nmi(zt, coll.z) > 0.9
    assert nmi(zt, naive.z) > 0.3


def test_full_ep_passes_keep_the_state_consistent():
    model, _, _ = _setup(a=0.7, T=6)
    state = ep_init(model, np.array([0, 1, 0, 1]), 2)
    state = ep_gibbs_sweep(default_rng(0), model, state, full_ep=2)
    P, h = state.q
    oh = np.eye(2)[np.asarray(state.z)]
    np.testing.assert_allclose(P, 1.0 + oh.T @ state.sites[0], rtol=1e-10)
    np.testing.assert_allclose(h, oh.T @ state.sites[1], atol=1e-10)
    np.testing.assert_allclose(state.counts, oh.sum(0))


@pytest.mark.parametrize("backend", ["torch", "array_api_strict"])
def test_other_backends_run_the_same_sweep(backend):
    lib = pytest.importorskip(backend)
    model_np, y, _ = _setup(a=0.9, T=8)
    out = []
    for arr, be in ((np.asarray, "numpy"), (lib.asarray, backend)):
        model = TimeSeriesClusterModel(arr(y), a=0.9, lam=arr(LAM), sigma_x2=0.3, sigma_y2=0.5)
        # NumPy's PCG64 stream on every backend (torch draws with its own generator otherwise)
        rng4, rng5 = (default_rng(np.random.default_rng(seed), backend=be) for seed in (4, 5))
        state = ep_gibbs_sweep(rng4, model, ep_init(model, arr(np.array([0, 1, 0, 1])), 2), full_ep=1)
        coll = collapsed_sweep(rng5, model, collapsed_init(model, arr(np.array([0, 1, 0, 1])), 2))
        out.append((np.asarray(state.z), np.asarray(state.q[1]), np.asarray(coll.cluster_ll)))
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out[0][2], out[1][2], rtol=1e-9)


@pytest.mark.parametrize("kwargs, match", [
    (dict(sigma_x2=0.0), "sigma_x2"), (dict(sigma_y2=-1.0), "sigma_y2"), (dict(p0=0.0), "p0"),
    (dict(a=np.ones(3)), "`a`"), (dict(lam=np.array([np.nan, 1.0])), "lam"),
])
def test_bad_parameters_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TimeSeriesClusterModel(np.zeros((2, 5)), **kwargs)


def test_bad_data_and_sizes_name_the_argument():
    with pytest.raises(ValueError, match="`y`"):
        TimeSeriesClusterModel(np.zeros(5))
    with pytest.raises(ValueError, match="`y`"):
        TimeSeriesClusterModel(np.full((2, 3), np.inf))
    model = TimeSeriesClusterModel(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="`K`"):
        collapsed_init(model, np.zeros(2, dtype=int), 0)
    with pytest.raises(ValueError, match="`z`"):
        naive_init(default_rng(0), model, np.zeros(3, dtype=int), 2)
    with pytest.raises(ValueError, match="`full_ep`"):
        ep_gibbs_sweep(default_rng(0), model, ep_init(model, np.zeros(2, dtype=int), 1), full_ep=-1)


def test_state_and_factor_draws_keep_the_factor_posterior():
    """For fixed z, x | y, eta then eta | x, z started at eta ~ p(eta | z, y) keeps that law (naive blocks)."""
    from sgmc.clustering.timeseries_gibbs import sample_eta, sample_states

    T, K, sx2 = 3, 1, 3.0  # a weak factor signal, so the prior on eta matters
    z = np.zeros(4, dtype=int)
    y, _, _ = simulate_timeseries(default_rng(8), z, T, K, a=0.7, lam=LAM, sigma_x2=sx2, sigma_y2=0.5)
    model = TimeSeriesClusterModel(y, a=0.7, lam=LAM, sigma_x2=sx2, sigma_y2=0.5)
    M = _linear_map(z, np.full(4, 0.7), LAM, np.full(4, sx2), np.ones(4), T, K)
    cov_y = M @ M.T + 0.5 * np.eye(4 * T)
    C = M[:, 4 : 4 + K * T].T
    mean = C @ np.linalg.solve(cov_y, y.ravel())
    cov = np.eye(K * T) - C @ np.linalg.solve(cov_y, C.T)
    rng = np.random.default_rng(9)
    gen = default_rng(10)
    n = 3000
    out = np.empty((n, K * T))
    for r in range(n):
        eta = rng.multivariate_normal(mean, cov).reshape(K, T)
        x = sample_states(gen, model, eta[z])
        out[r] = np.ravel(sample_eta(gen, model, x, z, K))
    for stat, want in ((out, mean), (out ** 2, np.diag(cov) + mean ** 2)):
        se = stat.std(0) / np.sqrt(n)
        assert np.all(np.abs(stat.mean(0) - want) <= 4.5 * se), (stat.mean(0), want, se)


def test_state_draws_follow_their_conditional():
    """x_{1:T} | y, eta by forward filtering, backward sampling against dense Gaussian conditioning."""
    from sgmc.clustering.timeseries_gibbs import sample_states

    T, K = 4, 1
    z = np.zeros(4, dtype=int)
    y, _, eta = simulate_timeseries(default_rng(11), z, T, K, a=0.8, lam=LAM, sigma_x2=0.4, sigma_y2=0.5)
    model = TimeSeriesClusterModel(y, a=0.8, lam=LAM, sigma_x2=0.4, sigma_y2=0.5)
    M = _linear_map(z, np.full(4, 0.8), LAM, np.full(4, 0.4), np.ones(4), T, K)
    shift = M[:, 4 : 4 + T] @ np.ravel(eta)  # the factor's part of x, fixed
    R = np.delete(M, np.arange(4, 4 + T), axis=1)  # x = shift + R w
    cov_x = R @ R.T
    cov_y = cov_x + 0.5 * np.eye(4 * T)
    mean = shift + cov_x @ np.linalg.solve(cov_y, y.ravel() - shift)
    var = np.diag(cov_x - cov_x @ np.linalg.solve(cov_y, cov_x))
    gen = default_rng(12)
    n = 3000
    xs = np.stack([np.asarray(sample_states(gen, model, eta[z]))[:, 1:].ravel() for _ in range(n)])
    se_m = xs.std(0) / np.sqrt(n)
    assert np.all(np.abs(xs.mean(0) - mean) <= 4.5 * se_m)
    se_v = np.sqrt(2.0 / n) * var
    assert np.all(np.abs(xs.var(0) - var) <= 4.5 * se_v)


# --------------------------------------------------------------------------------------------------
# the fast forms against the reference forms they replace


def _reference_filter(y, a, lam, sx2, sy2, p0, eta_mean, eta_var):
    """The per-step filter of Eq. C.19 written out plainly, one series (floats), with its moments."""
    T = len(y)
    mf, Pf, ll = 0.0, p0, 0.0
    mfs, Pfs, mps, Pps = [mf], [Pf], [], []
    for t in range(T):
        mp = a * mf + lam * eta_mean[t]
        Pp = a * a * Pf + sx2 + lam * lam * eta_var[t]
        S = Pp + sy2
        ll -= 0.5 * (np.log(2 * np.pi) + np.log(S) + (y[t] - mp) ** 2 / S)
        mf = mp + Pp / S * (y[t] - mp)
        Pf = Pp * sy2 / S
        mfs.append(mf), Pfs.append(Pf), mps.append(mp), Pps.append(Pp)
    return ll, (mfs, Pfs, mps, Pps)


def _reference_site(y, a, lam, sx2, sy2, p0, P, h):
    """New site (P, h) of one series against the cavity (P, h) (T,) by filter, RTS smoother, Eq. C.20."""
    m, v = h / P, 1.0 / P
    ll, (mf, Pf, mp, Pp) = _reference_filter(y, a, lam, sx2, sy2, p0, m, v)
    T = len(y)
    ms, Ps = mf[T], Pf[T]
    mean, var = np.zeros(T), np.zeros(T)
    for t in range(T, 0, -1):
        J = Pf[t - 1] * a / Pp[t - 1]
        ms_prev = mf[t - 1] + J * (ms - mp[t - 1])
        Ps_prev = Pf[t - 1] + J * J * (Ps - Pp[t - 1])
        dm, dv = ms - a * ms_prev, Ps + a * a * Ps_prev - 2 * a * J * Ps
        prec = 1 / v[t - 1] + lam * lam / sx2
        g = lam / sx2 / prec
        mean[t - 1] = m[t - 1] / v[t - 1] / prec + g * dm
        var[t - 1] = 1 / prec + g * g * dv
        ms, Ps = ms_prev, Ps_prev
    return np.maximum(1 / var - P, 0.0), mean / var - h


def test_fused_ep_step_equals_reference_per_datum_code():
    """ep_step (one filter over all clusters, smoother on the drawn one) against the plain per-series
    filter and smoother for F~_k of every cluster and the new site, through a whole sweep."""
    model, y, par = _setup(a=0.7, T=7)
    a, lam, sx2, sy2, p0 = par
    K, alpha = 3, 0.7
    state = ep_init(model, np.array([0, 2, 0, 1]), K)
    gen = default_rng(8)
    for i in range(4):
        cav = _cavity(state, i, K)
        want = np.array([_reference_filter(y[i], a[i], lam[i], sx2[i], sy2[i], p0[i], cav[1][k] / cav[0][k],
                                           1.0 / cav[0][k])[0] for k in range(K)])
        counts = np.asarray(state.counts) - np.eye(K)[int(state.z[i])]
        logits = np.log(counts + alpha) + want
        state, logp = ep_step(gen, model, state, i, alpha)
        np.testing.assert_allclose(logp, logits - sp.logsumexp(logits), rtol=1e-12, atol=1e-12)
        k = int(state.z[i])
        site = _reference_site(y[i], a[i], lam[i], sx2[i], sy2[i], p0[i], cav[0][k], cav[1][k])
        np.testing.assert_allclose(state.sites[0][i], site[0], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(state.sites[1][i], site[1], rtol=1e-10, atol=1e-12)


def _shared_setup(T=4, a=0.8):
    z = np.array([0, 1, 0, 0])
    y, _, _ = simulate_timeseries(default_rng(6), z, T, 2, a=a, lam=0.9, sigma_x2=0.3, sigma_y2=0.5)
    model = TimeSeriesClusterModel(y, a=a, lam=0.9, sigma_x2=0.3, sigma_y2=0.5, p0=1.5)
    N = len(z)
    return model, y, (np.full(N, a), np.full(N, 0.9), np.full(N, 0.3), np.full(N, 0.5), np.full(N, 1.5))


@pytest.mark.parametrize("a", [0.8, -0.5, 0.0])
def test_spectral_marginal_matches_dense_gaussian_and_kalman(a):
    model, y, par = _shared_setup(a=a)
    z = np.array([0, 2, 0, 0])  # cluster 1 empty
    spec = collapsed_init(model, z, 3).spectral
    assert spec is not None
    got = spec.log_marginal(*spec.cluster_stats(z, 3))
    kalman = cluster_log_marginal(model, z[None, :] == np.arange(3)[:, None])
    np.testing.assert_allclose(got, kalman, rtol=1e-10, atol=1e-12)
    for k in (0, 2):
        mem = z == k
        want = _dense_loglik(y[mem], np.zeros(mem.sum(), dtype=int), *(p[mem] for p in par), 1)
        np.testing.assert_allclose(got[k], want, rtol=1e-10)
    assert got[1] == pytest.approx(0.0, abs=1e-12)


def test_spectral_and_kalman_sweeps_agree_and_keep_the_posterior():
    model, y, par = _shared_setup(T=3)
    zs, p = _enumerate(y, par, 2, 1.0)
    z0 = np.array([1, 0, 1, 1])
    for i in range(4):
        got = collapsed_conditional(model, collapsed_init(model, z0, 2), i, 1.0)
        want = collapsed_conditional(model, collapsed_init(model, z0, 2, method="kalman"), i, 1.0)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)
    gen = default_rng(9)
    counts = np.zeros(len(zs))
    for z in _starts(p, zs, 10):
        counts[_index(zs, collapsed_sweep(gen, model, collapsed_init(model, z, 2)).z)] += 1
    assert _chi2_pvalue(counts, p) > P_MIN


def test_spectral_form_refuses_per_series_parameters():
    model, _, _ = _setup()
    with pytest.raises(ValueError, match="model"):
        collapsed_init(model, np.array([0, 0, 1, 1]), 2, method="spectral")
    with pytest.raises(ValueError, match="method"):
        collapsed_init(model, np.array([0, 0, 1, 1]), 2, method="dense")


def test_scans_equal_the_loop_over_time_steps():
    """Long, non-power-of-two T, several rows with their own parameters (one with a < 0)."""
    rng = np.random.default_rng(11)
    B, T = 4, 37
    y, m = rng.normal(size=(B, T)), rng.normal(size=(B, T))
    v = rng.uniform(0.01, 2.0, (B, T))
    par = (np.array([0.95, -0.6, 0.0, 1.02]), rng.uniform(0.5, 1.5, B), rng.uniform(0.01, 0.5, B),
           rng.uniform(0.2, 2.0, B), rng.uniform(0.5, 2.0, B))
    out = []
    for scan in (False, True):
        ll, moments = scalar_filter(np, y, *par, m, v, keep=True, scan=scan)
        mean, var, _ = eta_moments(np, y, *par, m, v, scan=scan)
        out.append((ll,) + moments + (mean, var))
    for loop, sc in zip(*out):
        np.testing.assert_allclose(sc, loop, rtol=1e-10, atol=1e-12)
