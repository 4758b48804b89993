"""EP collapsed Gibbs on Student-t mixtures: improper cavities are rebuilt, not skipped (sgmc.clustering).

Stale Student-t sites can combine into a cavity that is not a proper normal-inverse-Wishart. The
sampler used to skip such a datum, which froze it (and its cluster, when every member's cavity was
improper); it now rebuilds the cavity from the prior (:func:`sgmc.clustering.ep_gibbs.refresh_cavity`).
Oracles: the closed-form NIW posterior (Gaussian sites, where any order of sequential matching is
exact), and the exact posterior of the assignments enumerated over all ``2^6`` labelings with each
cluster's Student-t marginal likelihood integrated over the scales by Monte Carlo (scipy's
multivariate gamma function in the closed-form NIW marginal given the scales).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.special as sp

from sgmc.backends import default_rng
from sgmc.clustering import StudentTMixtureModel, ep_gibbs_sweep, ep_init
from sgmc.clustering.ep_gibbs import ep_step, refresh_cavity
from sgmc.clustering.niw import to_params

from _helpers import Z_TOL

N, K = 6, 2


def _audit_data(seed=0, sep=2.0):
    """6 points in 2 groups of 3, Student-t(5) noise: the case whose skipped updates were measured."""
    rng = np.random.default_rng(seed)
    return rng.standard_t(5, size=(N, 2)) + np.array([[sep, 0.0]] * 3 + [[-sep, 0.5]] * 3)


def _assembled(model, z, sites):
    """prior + sum of the sites of each cluster, computed here from the definitions."""
    prior = model.prior(K)
    out = []
    for p, s in zip(prior, sites):
        out.append(np.stack([np.asarray(p)[k] + np.asarray(s)[np.asarray(z) == k].sum(0) for k in range(K)]))
    return out


def log_niw_marginal(Y, W, kappa0, nu0):
    """log int prod_i N(y_i | mu, Sigma / w_i) NIW(mu, Sigma | 0, kappa0, nu0, I) for weight rows W (M, n).

    docs/ep_student_t_study.py enumerates its exact posterior with this oracle too.
    """
    n, d = Y.shape
    kn = kappa0 + W.sum(1)
    mn = (W @ Y) / kn[:, None]
    Psin = np.eye(d) + np.einsum("mn,ni,nj->mij", W, Y, Y) - kn[:, None, None] * mn[:, :, None] * mn[:, None, :]
    nun = nu0 + n
    return (0.5 * d * np.log(W).sum(1) - 0.5 * n * d * np.log(np.pi) + sp.multigammaln(nun / 2, d)
            - sp.multigammaln(nu0 / 2, d) - 0.5 * nun * np.linalg.slogdet(Psin)[1]
            + 0.5 * d * (np.log(kappa0) - np.log(kn)))


def _exact_posterior(y, nu, alpha=1.0, kappa0=0.1, nu0=4.0, draws=100_000, seed=0):
    """p(z | y) over all K^N labelings; each cluster's marginal is E_u[NIW marginal given u], u ~ Gamma(nu/2, nu/2)."""
    rng = np.random.default_rng(seed)
    log_m = {(): 0.0}
    for r in range(1, N + 1):
        for S in itertools.combinations(range(N), r):
            v = log_niw_marginal(y[list(S)], rng.gamma(nu / 2, 2 / nu, size=(draws, r)), kappa0, nu0)
            log_m[S] = v.max() + np.log(np.mean(np.exp(v - v.max())))
    zs = np.array(list(itertools.product(range(K), repeat=N)))
    lp = np.array([sum(sp.gammaln(np.sum(z == k) + alpha) + log_m[tuple(np.nonzero(z == k)[0])] for k in range(K))
                   for z in zs])
    p = np.exp(lp - lp.max())
    return zs, p / p.sum()


def _partition(z):
    """Index of the unlabelled partition (0..31) of a 2-cluster labelling of 6 points."""
    c = int(np.sum(np.asarray(z) * 2 ** np.arange(N)))
    return min(c, 2**N - 1 - c)


# --------------------------------------------------------------------------------------------------


def test_improper_cavities_are_refreshed_not_skipped():
    """Audit case (nu = 5): the old rule skips more than 2% of the updates; the refresh skips none,
    and the cluster approximations stay the prior times their members' sites."""
    model = StudentTMixtureModel(_audit_data(), nu=5.0)
    z0 = np.array([0, 1, 0, 1, 0, 1])
    sweeps = 150
    rates = {}
    for refresh in ("never", "improper"):
        state = ep_init(model, z0, K)
        gen = default_rng(3)
        for _ in range(sweeps):
            state = ep_gibbs_sweep(gen, model, state, 1.0, refresh=refresh)
        rates[refresh] = state.skipped / (N * sweeps)
        if refresh == "improper":
            assert state.refreshed > 0
            for got, want in zip(state.q, _assembled(model, state.z, state.sites)):
                np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
            assert bool(np.all(model.proper(state.q)))
    assert rates["never"] > 0.02, rates  # the skipped-update rate the refresh removes
    assert rates["improper"] <= 0.001, rates


def test_refreshed_cavity_is_the_exact_posterior_of_the_other_members_for_gaussian_sites():
    """nu=None: every sequential match is exact, so the rebuilt cavity is the closed-form NIW posterior
    of the cluster's other members, and q_k is that times the datum's site."""
    y = _audit_data(seed=4)
    model = StudentTMixtureModel(y, nu=None, kappa0=0.5, nu0=4.0)
    z = np.array([0, 1, 0, 0, 1, 0])
    state = ep_init(model, z, K)
    # scramble the sites of cluster 0 (stale values), keeping q consistent with them
    sites = tuple(np.array(s, copy=True) for s in state.sites)
    sites[0][[0, 2]] *= 1.7
    sites[2][[3, 5]] *= 0.6
    q = tuple(np.asarray(a) for a in _assembled(model, z, sites))
    state = state._replace(q=q, sites=sites)
    i = 2
    new = refresh_cavity(model, state, i)
    assert new.refreshed == state.refreshed + 1
    others = [0, 3, 5]
    Y = y[others]
    cav = tuple(np.asarray(a)[0] - np.asarray(s)[i] for a, s in zip(new.q, new.sites))
    np.testing.assert_allclose(cav[0], 0.5 + len(others), rtol=1e-12)
    np.testing.assert_allclose(cav[1], Y.sum(0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(cav[2], np.eye(2) + Y.T @ Y, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(cav[3], 4.0 + len(others), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(new.sites[0])[i], sites[0][i])  # the datum's own site is kept
    for got, old in zip(new.q, state.q):
        np.testing.assert_array_equal(np.asarray(got)[1], np.asarray(old)[1])  # the other cluster is untouched
    for got, want in zip(new.q, _assembled(model, z, new.sites)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_step_with_an_improper_cavity_draws_instead_of_skipping():
    """A state whose cavity for datum i is improper: refresh='never' returns NaN and counts a skip;
    the default rebuilds the cavity and returns a normalised conditional."""
    model = StudentTMixtureModel(_audit_data(), nu=5.0)
    z = np.array([0, 0, 0, 1, 1, 1])
    state = ep_init(model, z, K)
    i = 1
    # stale sites: i's has taken Psi that another member's gave up, so q_k is as before but the
    # cavity of i (q_k without i's site) is not positive definite
    sites = tuple(np.array(s, copy=True) for s in state.sites)
    sites[2][i] += 50.0 * np.eye(2)
    sites[2][0] -= 50.0 * np.eye(2)
    state = state._replace(sites=sites, q=tuple(np.asarray(a) for a in _assembled(model, z, sites)))
    cav = tuple(np.asarray(a)[:1] - np.asarray(s)[i : i + 1] for a, s in zip(state.q, state.sites))
    assert not bool(model.proper(cav)[0])
    skipped, logp = ep_step(default_rng(0), model, state, i, 1.0, refresh="never")
    assert skipped.skipped == 1 and np.all(np.isnan(logp))
    done, logp = ep_step(default_rng(0), model, state, i, 1.0)
    assert done.skipped == 0 and done.refreshed == 1
    np.testing.assert_allclose(np.exp(logp).sum(), 1.0, rtol=1e-12)
    assert bool(np.all(model.proper(done.q)))
    with pytest.raises(ValueError, match="`refresh`"):
        ep_step(default_rng(0), model, state, i, 1.0, refresh="sometimes")
    with pytest.raises(ValueError, match="`refresh`"):
        ep_gibbs_sweep(default_rng(0), model, state, refresh=None)


def test_full_ep_passes_run_when_some_cavities_are_improper():
    """ep_sweep matches only proper cavities (it used to hand improper ones to the model and fail)."""
    model = StudentTMixtureModel(_audit_data(), nu=5.0)
    state = ep_init(model, np.array([0, 1, 0, 1, 0, 1]), K)
    gen = default_rng(3)
    for _ in range(10):
        state = ep_gibbs_sweep(gen, model, state, 1.0, full_ep=1)
    assert all(bool(np.all(np.isfinite(np.asarray(a)))) for a in state.q)
    assert bool(np.all(model.proper(state.q)))


def test_partition_frequencies_match_enumeration_where_ep_is_accurate():
    """nu = 30 (EP's NIW family nearly exact): every partition's frequency over the chain lies within
    Z_TOL batch-means standard errors of its exact probability."""
    y = _audit_data()
    nu = 30.0
    zs, p = _exact_posterior(y, nu, draws=20_000)
    exact = np.zeros(32)
    for z, pz in zip(zs, p):
        exact[_partition(z)] += pz
    model = StudentTMixtureModel(y, nu=nu)
    state = ep_init(model, np.array([0, 1, 0, 1, 0, 1]), K)
    gen = default_rng(11)
    for _ in range(30):  # burn-in
        state = ep_gibbs_sweep(gen, model, state, 1.0)
    batches, size = 20, 30
    freq = np.zeros((batches, 32))
    for b in range(batches):
        for _ in range(size):
            state = ep_gibbs_sweep(gen, model, state, 1.0)
            freq[b, _partition(state.z)] += 1.0 / size
    mean = freq.mean(0)
    se = freq.std(0, ddof=1) / np.sqrt(batches)
    # a partition never visited has no batch spread: bound it by the binomial error of its exact mass
    se = np.maximum(se, np.sqrt(exact * (1 - exact) / (batches * size)))
    z = np.abs(mean - exact) / se
    assert np.all(z <= Z_TOL), (np.round(z, 2), np.round(mean, 3), np.round(exact, 3))
    assert state.skipped == 0


@pytest.mark.parametrize("backend", ["array_api_strict", "torch"])
def test_refresh_runs_on_other_backends(backend):
    """The rebuilt cavity on another array library equals NumPy's."""
    lib = pytest.importorskip(backend)
    y = _audit_data()
    z = np.array([0, 0, 0, 1, 1, 1])
    out = []
    for arr in (np.asarray, lib.asarray):
        model = StudentTMixtureModel(arr(y), nu=5.0)
        state = ep_init(model, arr(z), K)
        out.append([np.asarray(a) for a in refresh_cavity(model, state, 1).q])
    for a, b in zip(*out):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12)
