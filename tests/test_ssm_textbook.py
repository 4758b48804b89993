"""Textbook posteriors from the built-in models: GaussianHMM's priors, fixed covariances and initial
law, AR(p), and GARCH(1,1) with a mean and no observation noise.

Each posterior is checked against one computed independently: exact MALA draws from :func:`sgmc.sample`
against importance sampling of a log posterior written here from the model's definition (forward
algorithm in log space, the plain GARCH recursion, the AR regression), with a multivariate t
proposal; likelihoods against enumeration of all state paths, statsmodels and scipy.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from _helpers import Z_TOL, fd_jacobian, replay_rng
import sgmc
from sgmc import backends
from sgmc.ssm import AR, GARCH, GaussianHMM, HMMParams, sample_windows, windows_at
from sgmc.ssm.subsequence import all_windows


# -- independent posteriors -------------------------------------------------------------------------
def importance_check(trace_draws, log_post, features, n=200_000, seed=0, df=5):
    """Posterior means of ``features`` by MALA (per-chain means) and by importance sampling; z-scores."""
    d = np.asarray(trace_draws)
    f = features(d)
    cm = f.mean(axis=1)
    m1, se1 = cm.mean(axis=0), cm.std(axis=0, ddof=1) / math.sqrt(cm.shape[0])
    flat = d.reshape(-1, d.shape[-1])
    mean, C = flat.mean(axis=0), 2.0 * np.cov(flat.T)
    prop = stats.multivariate_t(mean, C, df=df, seed=seed)
    x = prop.rvs(n)
    lw = log_post(x) - prop.logpdf(x)
    w = np.exp(lw - lw.max())
    w /= w.sum()
    fx = features(x)
    m2 = w @ fx
    se2 = np.sqrt(np.sum(w[:, None] ** 2 * (fx - m2) ** 2, axis=0))
    assert 1.0 / np.sum(w**2) > 1000  # the proposal covers the posterior
    return (m1 - m2) / np.sqrt(se1**2 + se2**2), m1, m2


def _Pi(eta):
    return np.exp(eta - logsumexp(eta, axis=-1, keepdims=True))


def hmm_loglik(Pi, mu, var, y, p_init, initial):
    """log p(y) by the forward algorithm in log space; Pi (n, K, K), mu and var (n, K), y (T,)."""
    logp = -0.5 * np.log(2 * np.pi * var[:, None, :]) - 0.5 * (y[None, :, None] - mu[:, None, :]) ** 2 / var[:, None, :]
    la = np.log(p_init)[None, :]
    if initial == "z0":
        la = logsumexp(la[:, :, None] + np.log(Pi), axis=1)
    la = la + logp[:, 0, :]
    for t in range(1, y.size):
        la = logsumexp(la[:, :, None] + np.log(Pi), axis=1) + logp[:, t, :]
    return logsumexp(la, axis=-1)


# -- GaussianHMM ------------------------------------------------------------------------------------
def test_hmm_textbook_posterior_two_states():
    """2 states, unit variances (fixed), mu_1 ~ N(3, 1), mu_2 ~ N(10, 1), flat rows, z_1 uniform."""
    kw = dict(emission_cov=1.0, initial="z1", mean_prior=([3.0, 10.0], 1.0))
    proto = GaussianHMM(np.zeros(3), 2, **kw)
    th0 = proto.unconstrain(HMMParams(np.array([[0.8, 0.2], [0.3, 0.7]]), np.array([[3.5], [9.0]]), None))
    _, y = proto.simulate(backends.default_rng(1), 40, th0)
    y = np.asarray(y)[:, 0]
    model = GaussianHMM(y, 2, **kw)
    assert model.dim == 6
    with warnings.catch_warnings():  # not mixed by sgmc's rule (R-hat 1.05 in a transition logit): the
        warnings.simplefilter("ignore", sgmc.MixingWarning)  # importance check below tests the means
        tr = sgmc.sample(model, "mala", step_size=0.05, n_iter=2500, burn_in=500, chains=16, init=np.asarray(th0), rng=0, progress=False)

    def log_post(x):
        eta = x[:, :4].reshape(-1, 2, 2)
        mu = x[:, 4:]
        ll = hmm_loglik(_Pi(eta), mu, np.ones_like(mu), y, np.full(2, 0.5), "z1")
        return ll + np.sum(eta - np.exp(eta), axis=(1, 2)) - 0.5 * (mu[:, 0] - 3) ** 2 - 0.5 * (mu[:, 1] - 10) ** 2

    def features(th):
        Pi = _Pi(th[..., :4].reshape(th.shape[:-1] + (2, 2)))
        return np.stack([Pi[..., 0, 0], Pi[..., 1, 1], th[..., 4], th[..., 5]], axis=-1)

    z, m1, m2 = importance_check(tr.draws, log_post, features)
    assert np.all(np.abs(z) <= Z_TOL), (z, m1, m2)


def test_hmm_posterior_with_sampled_variances():
    """The same with sampled variances, a Gamma(2, 1) prior on each precision (Wishart(4, 1/2))."""
    kw = dict(initial="z1", mean_prior=([3.0, 10.0], 1.0), precision_prior=(4.0, 0.5))
    proto = GaussianHMM(np.zeros(3), 2, **kw)
    params = HMMParams(np.array([[0.8, 0.2], [0.3, 0.7]]), np.array([[3.5], [9.0]]), np.array([[[1.0]], [[2.0]]]))
    th0 = np.asarray(proto.unconstrain(params))
    _, y = proto.simulate(backends.default_rng(1), 60, th0)
    y = np.asarray(y)[:, 0]
    model = GaussianHMM(y, 2, **kw)
    with warnings.catch_warnings():  # not mixed by sgmc's rule (R-hat 1.1 in a transition logit): the
        warnings.simplefilter("ignore", sgmc.MixingWarning)  # importance check below tests the means
        tr = sgmc.sample(model, "mala", step_size=0.03, n_iter=2500, burn_in=500, chains=16, init=th0, rng=0, progress=False)

    def log_post(x):
        eta, mu, psi = x[:, :4].reshape(-1, 2, 2), x[:, 4:6], x[:, 6:8]
        ll = hmm_loglik(_Pi(eta), mu, 1.0 / psi**2, y, np.full(2, 0.5), "z1")
        lp = np.sum(eta - np.exp(eta), axis=(1, 2)) - 0.5 * (mu[:, 0] - 3) ** 2 - 0.5 * (mu[:, 1] - 10) ** 2
        # the precision psi^2 ~ Gamma(2, 1), carried to psi (Jacobian 2 |psi|)
        return ll + lp + np.sum(stats.gamma(2.0).logpdf(psi**2) + np.log(2 * np.abs(psi)), axis=1)

    def features(th):
        Pi = _Pi(th[..., :4].reshape(th.shape[:-1] + (2, 2)))
        return np.stack([Pi[..., 0, 0], Pi[..., 1, 1], th[..., 4], th[..., 5], th[..., 6] ** -2, th[..., 7] ** -2], axis=-1)

    z, m1, m2 = importance_check(tr.draws, log_post, features)
    assert np.all(np.abs(z) <= Z_TOL), (z, m1, m2)


def _hmm_brute(Pi, mu, Sigma, y, p_init, initial):
    """log p(y) by enumerating every state path (K^T terms)."""
    K, T = Pi.shape[0], y.shape[0]
    dens = np.array([[stats.multivariate_normal(mu[k], Sigma[k]).pdf(y[t]) for k in range(K)] for t in range(T)])
    tot = 0.0
    for path in itertools.product(range(K), repeat=T):
        p = p_init[path[0]] if initial == "z1" else (p_init @ Pi)[path[0]]
        p *= dens[0, path[0]]
        for t in range(1, T):
            p *= Pi[path[t - 1], path[t]] * dens[t, path[t]]
        tot += p
    return math.log(tot)


@pytest.mark.parametrize("initial", ["z0", "z1"])
@pytest.mark.parametrize("fixed", [False, True])
def test_hmm_likelihood_by_enumeration(initial, fixed):
    rng = np.random.default_rng(3)
    K, m, T = 3, 2, 5
    y = rng.normal(size=(T, m))
    p_init = np.array([0.5, 0.3, 0.2])
    cov = np.array([0.5 * np.eye(m), [[1.0, 0.3], [0.3, 0.8]], 2.0 * np.eye(m)])
    model = GaussianHMM(y, K, initial=initial, initial_probs=p_init, emission_cov=cov if fixed else None)
    Pi = rng.dirichlet(np.ones(K), size=K)
    mu = rng.normal(size=(K, m))
    Sigma = cov if fixed else np.array([np.eye(m), [[0.7, -0.2], [-0.2, 0.9]], 1.5 * np.eye(m)])
    theta = np.asarray(model.unconstrain(HMMParams(Pi, mu, Sigma)))
    thetas = np.stack([theta, theta + 0.1 * rng.normal(size=theta.size)])

    def brute(th):
        P = model.constrain(th)
        return np.array([_hmm_brute(P.Pi[i], P.mu[i], P.Sigma[i], y, p_init, initial) for i in range(th.shape[0])])

    np.testing.assert_allclose(model.log_lik(thetas), brute(thetas), rtol=1e-10)
    np.testing.assert_allclose(model.grad_log_lik(thetas), fd_jacobian(brute, thetas, 1e-6), rtol=1e-5, atol=1e-6)
    # the whole series as one window (weights one) is the exact gradient, in either initial law
    win = windows_at(np.zeros((2, 1), dtype=np.int64), T=T, S=T, B=0)
    np.testing.assert_allclose(model.window_score(None, thetas, win)[0], model.grad_log_lik(thetas), rtol=1e-10, atol=1e-10)


def test_hmm_priors_against_scipy():
    K, m = 2, 2
    a = np.array([[2.0, 1.5], [0.7, 3.0]])
    loc, var = np.array([[0.0, 1.0], [2.0, -1.0]]), np.array([1.0, 4.0])
    df, scale = np.array([4.0, 6.0]), np.array([[1.0, 0.2], [0.2, 0.5]])
    model = GaussianHMM(np.zeros((5, m)), K, transition_prior=a, mean_prior=(loc, var), precision_prior=(df, scale))
    rng = np.random.default_rng(0)
    thetas = rng.normal(size=(3, model.dim)) * 0.5
    thetas[:, -6:] += np.tile([1.0, 0.0, 1.0], 2)

    def ref(th):
        eta, mu = th[:4].reshape(2, 2), th[4:8].reshape(2, 2)
        out = np.sum(stats.gamma(a).logpdf(np.exp(eta)) + eta)  # expanded means, with the Jacobian of exp
        out += sum(stats.norm(loc[k], math.sqrt(var[k])).logpdf(mu[k]).sum() for k in range(K))
        for k in range(K):
            low = th[8 + 3 * k : 11 + 3 * k]
            psi = np.array([[low[0], 0.0], [low[1], low[2]]])
            out += stats.wishart(df[k], scale).logpdf(psi @ psi.T)
            out += math.log(2**m) + m * math.log(abs(psi[0, 0])) + (m - 1) * math.log(abs(psi[1, 1]))
        return out

    got = np.asarray(model.log_prior(thetas))
    want = np.array([ref(t) for t in thetas])
    np.testing.assert_allclose(got - got[0], want - want[0], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(model.grad_log_prior(thetas), fd_jacobian(model.log_prior, thetas, 1e-6), rtol=1e-6, atol=1e-6)
    # a fixed covariance removes psi from theta and from the prior
    fixed = GaussianHMM(np.zeros((5, m)), K, emission_cov=2.0, transition_prior=a, mean_prior=(loc, var))
    assert fixed.dim == 8 and all(not n.startswith("psi") for n in fixed.param_names)
    np.testing.assert_allclose(fixed.constrain(thetas[0, :8]).Sigma, np.broadcast_to(2.0 * np.eye(m), (K, m, m)), rtol=1e-12)
    np.testing.assert_allclose(fixed.grad_log_prior(thetas[:, :8]), fd_jacobian(fixed.log_prior, thetas[:, :8], 1e-6), rtol=1e-6, atol=1e-6)


def test_hmm_z1_windows_on_backends(xb):
    rng = np.random.default_rng(5)
    y = rng.normal(size=(60, 1)) * 2
    kw = dict(emission_cov=1.0, initial="z1", initial_probs=[0.7, 0.3], mean_prior=([-1.0, 1.0], 2.0))
    ref_model = GaussianHMM(y, 2, **kw)
    theta = rng.normal(size=(2, ref_model.dim))
    win = sample_windows(backends.default_rng(1), 60, 8, 4, chains=2, M=3)
    ref, _ = ref_model.window_score(None, theta, win)
    model = GaussianHMM(xb.asarray(y), 2, **kw)
    win_x = sample_windows(replay_rng(xb, 1), 60, 8, 4, chains=2, M=3, xp=xb.xp, dtype=xb.dtype)
    got, _ = model.window_score(None, xb.asarray(theta), win_x)
    tol = 1e-10 if xb.float_dtype == "float64" else 1e-3
    np.testing.assert_allclose(xb.to_numpy(got), ref, rtol=tol, atol=tol)


def test_hmm_bad_arguments():
    y = np.zeros((6, 2))
    for kwargs, name in [
        (dict(mean_prior=(np.zeros(3), 1.0)), "mean_prior"),
        (dict(mean_prior=(0.0, -1.0)), "mean_prior"),
        (dict(mean_prior=0.0), "mean_prior"),
        (dict(precision_prior=(0.5, 1.0)), "precision_prior"),
        (dict(precision_prior=(3.0, np.array([[1.0, 2.0], [2.0, 1.0]]))), "precision_prior"),
        (dict(transition_prior=np.ones((3, 3))), "transition_prior"),
        (dict(transition_prior=0.0), "transition_prior"),
        (dict(emission_cov=np.ones(3)), "emission_cov"),
        (dict(emission_cov=-1.0), "emission_cov"),
        (dict(initial="z2"), "initial"),
        (dict(initial_probs=[0.5, 0.6]), "initial_probs"),
    ]:
        with pytest.raises((ValueError, TypeError), match=name):
            GaussianHMM(y, 2, **kwargs)
    model = GaussianHMM(y, 2)
    with pytest.raises(ValueError, match="theta"):
        model.log_lik(np.zeros((2, model.dim + 1)))
    with pytest.raises(ValueError, match="theta"):
        model.grad_log_lik(np.full((1, model.dim), np.nan))
    with pytest.raises(ValueError, match="n_states"):
        GaussianHMM(y, 1)
    win = windows_at(np.zeros((1, 1), dtype=np.int64), T=6, S=6, B=0)
    with pytest.raises(ValueError, match="theta"):
        model.window_score(None, np.zeros((1, model.dim - 1)), win)


# -- AR(p) ------------------------------------------------------------------------------------------
def _ar_data(T=200, theta=(0.5, 0.6, -0.2, math.log(0.7)), seed=0):
    _, y = AR(np.zeros(3), order=2).simulate(backends.default_rng(seed), T, np.array(theta))
    return np.asarray(y)[:, 0]


def test_ar_likelihood_and_statsmodels_mode():
    statsmodels = pytest.importorskip("statsmodels.tsa.ar_model")
    y = _ar_data()
    model = AR(y, order=2)
    res = statsmodels.AutoReg(y, 2, trend="c").fit()
    n = y.size - 2
    sigma = math.sqrt(np.sum(res.resid**2) / n)  # the maximum likelihood scale
    mle = np.array([*res.params, math.log(sigma)])
    # the conditional MLE is OLS: the exact gradient vanishes there
    np.testing.assert_allclose(model.grad_log_lik(mle[None, :])[0], 0.0, atol=1e-8)
    th = np.array([[0.3, 0.5, 0.1, -0.2]])
    e = y[2:] - th[0, 0] - th[0, 1] * y[1:-1] - th[0, 2] * y[:-2]
    ref = stats.norm(0, math.exp(th[0, 3])).logpdf(e).sum()
    np.testing.assert_allclose(model.log_lik(th), [ref], rtol=1e-12)
    np.testing.assert_allclose(model.grad_log_lik(th), fd_jacobian(model.log_lik, th, 1e-6), rtol=1e-6)
    np.testing.assert_allclose(model.grad_log_prior(th), fd_jacobian(model.log_prior, th, 1e-6), rtol=1e-6)


def test_ar_buffered_gradient_is_unbiased():
    """The average of the buffered gradient over every subsequence start is the full gradient."""
    y = _ar_data(T=50)
    model = AR(y, order=3)
    theta = np.array([[0.1, 0.4, -0.1, 0.05, -0.3]])
    win = all_windows(50, 7, 3, np)
    score, _ = model.window_score(None, theta, win)
    np.testing.assert_allclose(score, model.grad_log_lik(theta), rtol=1e-10)


def test_ar_posterior():
    y = _ar_data(T=150, seed=2)
    model = AR(y, order=2, prior_var=4.0, prior_shape=2.0, prior_rate=1.0)
    init = np.array([0.5, 0.6, -0.2, math.log(0.7)])
    tr = sgmc.sample(model, "mala", step_size=4e-3, n_iter=2500, burn_in=500, chains=16, init=init, rng=0, progress=False)

    def log_post(x):
        e = y[None, 2:] - x[:, :1] - x[:, 1:2] * y[None, 1:-1] - x[:, 2:3] * y[None, :-2]
        s = np.exp(x[:, 3])
        ll = np.sum(stats.norm.logpdf(e / s[:, None]), axis=1) - e.shape[1] * np.log(s)
        lp = np.sum(stats.norm(0, 2.0).logpdf(x[:, :3]), axis=1)
        lam = np.exp(-2 * x[:, 3])
        lp += stats.gamma(2.0, scale=1.0).logpdf(lam) + np.log(2 * lam)  # precision carried to log sigma
        return ll + lp

    z, m1, m2 = importance_check(tr.draws, log_post, lambda th: th)
    assert np.all(np.abs(z) <= Z_TOL), (z, m1, m2)


def test_ar_bad_arguments():
    with pytest.raises(ValueError, match="order"):
        AR(np.zeros(3), order=3)
    with pytest.raises(ValueError, match="order"):
        AR(np.zeros(3), order=0)
    with pytest.raises(ValueError, match="y"):
        AR(np.array([1.0, np.inf, 0.0, 1.0]), order=1)
    with pytest.raises(ValueError, match="theta"):
        AR(np.zeros(5), order=1).log_lik(np.zeros((1, 4)))
    win = windows_at(np.zeros((1, 1), dtype=np.int64), T=5, S=5, B=0)
    with pytest.raises(ValueError, match="theta"):
        AR(np.zeros(5), order=1).window_score(None, np.zeros((1, 2)), win)


# -- GARCH(1,1) without noise, with a mean ----------------------------------------------------------
def test_garch_with_mean_posterior():
    th0 = np.asarray(GARCH.theta_from(0.1, 0.3, 0.5, mean=0.2))
    _, st_y = GARCH(np.zeros(3), noise=False, mean=True).simulate(backends.default_rng(6), 120, th0)
    y = np.asarray(st_y)[:, 0]
    model = GARCH(y, noise=False, mean=True, prior_var=4.0, mean_prior_var=1.0)
    with warnings.catch_warnings():  # not mixed by sgmc's rule (R-hat 1.9, bulk ESS 46 in coordinate 1): the
        warnings.simplefilter("ignore", sgmc.MixingWarning)  # importance check below tests the means
        tr = sgmc.sample(model, "mala", step_size=8e-3, n_iter=1200, burn_in=300, chains=32, init=th0, rng=0, progress=False)
    assert 0.4 < float(np.mean(tr.stats["accepted"])) < 0.95

    def log_post(x):
        mu = np.exp(x[:, 0])
        phi, lam = 1 / (1 + np.exp(-x[:, 1])), 1 / (1 + np.exp(-x[:, 2]))
        a, b, g = mu * (1 - phi), phi * lam, phi * (1 - lam)
        r = y[None, :] - x[:, 3:4]
        s = mu.copy()
        ll = np.zeros(x.shape[0])
        for t in range(y.size):
            if t > 0:
                s = a + b * r[:, t - 1] ** 2 + g * s
            ll += stats.norm.logpdf(r[:, t] / np.sqrt(s)) - 0.5 * np.log(s)
        lp = stats.norm(0, 2.0).logpdf(x[:, 0]) + stats.norm(0, 1.0).logpdf(x[:, 3])
        lp += np.log(phi * (1 - phi)) + np.log(lam * (1 - lam))  # uniform phi, lambda in logit coordinates
        return ll + lp

    z, m1, m2 = importance_check(tr.draws, log_post, lambda th: th, n=100_000)
    assert np.all(np.abs(z) <= Z_TOL), (z, m1, m2)
