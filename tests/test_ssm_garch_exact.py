"""GARCH(1,1): the exact particle score against independent likelihoods, and the noise-free model.

Oracles written here, independently of :mod:`sgmc.ssm.garch`:

* with observation noise tau = 1e-3 the likelihood is that of the plain GARCH(1,1) with the state
  before the first observation integrated out, ``p(y) = int N(x_0 | 0, mu) prod_t N(y_t | 0,
  sigma_t^2(x_0)) dx_0``, computed by Gauss-Hermite quadrature and differentiated by finite
  differences;
* the complete-data log density along a fixed path, differentiated by finite differences;
* the plain GARCH log-likelihood as a loop over time.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from _helpers import Z_TOL, fd_jacobian, replay_rng
from sgmc import backends
from sgmc.ssm import GARCH, sample_windows, windows_at
from sgmc.ssm.garch_kernel import GARCHKernel
from sgmc.ssm.particle import particle_filter


def _nat(theta):
    mu = math.exp(theta[0])
    phi = 1.0 / (1.0 + math.exp(-theta[1]))
    lam = 1.0 / (1.0 + math.exp(-theta[2]))
    return mu, phi, lam, mu * (1 - phi), phi * lam, phi * (1 - lam)


def plain_loglik_x0_integrated(theta, y, n_nodes=60):
    """log int N(x_0 | 0, mu) prod_t N(y_t | 0, sigma_t^2) dx_0, sigma_0^2 = mu (quadrature)."""
    mu, _, _, a, b, g = _nat(theta)
    z, w = np.polynomial.hermite.hermgauss(n_nodes)
    x0 = math.sqrt(2.0 * mu) * z
    s = a + b * x0**2 + g * mu
    ll = np.zeros_like(x0)
    for t in range(len(y)):
        if t > 0:
            s = a + b * y[t - 1] ** 2 + g * s
        ll += -0.5 * np.log(2 * np.pi * s) - 0.5 * y[t] ** 2 / s
    mx = ll.max()
    return mx + math.log(np.sum(w * np.exp(ll - mx)) / math.sqrt(math.pi))


def plain_loglik(theta, y, mean=0.0, s1=None):
    """The textbook GARCH(1,1) log-likelihood of y_t = mean + x_t, sigma_1^2 = s1 (default mu)."""
    mu, _, _, a, b, g = _nat(theta)
    x = np.asarray(y, dtype=float) - mean
    s = mu if s1 is None else s1
    out = 0.0
    for t in range(len(x)):
        if t > 0:
            s = a + b * x[t - 1] ** 2 + g * s
        out += -0.5 * math.log(2 * math.pi * s) - 0.5 * x[t] ** 2 / s
    return out


def _fd(f, theta, step=1e-5):
    out = []
    for j in range(len(theta)):
        e = np.zeros(len(theta))
        e[j] = step
        out.append((f(theta + e) - f(theta - e)) / (2 * step))
    return np.array(out)


@pytest.mark.parametrize("abg", [(0.1, 0.8, 0.05), (0.05, 0.1, 0.85)], ids=["thesis", "persistent"])
def test_exact_particle_score_is_the_likelihood_gradient(abg):
    """At tau = 1e-3 the particle score matches finite differences of the quadrature likelihood;
    the thesis's partial score does not (the test has the power to tell them apart)."""
    a, b, g = abg
    theta = np.asarray(GARCH.theta_from(a, b, g, 1e-3))
    _, y = GARCH.simulate_data(backends.default_rng(3), 100, theta)
    y = np.asarray(y)
    ref = _fd(lambda th: plain_loglik_x0_integrated(th, y), theta[:3])
    R, N = 24, 600
    Y = np.ascontiguousarray(np.broadcast_to(y[None, :, None], (R, y.size, 1)))
    mu, phi, lam = _nat(theta)[:3]
    par = [np.full(R, v) for v in (mu, phi, lam, 1e-3)]
    got = {}
    for score in ("exact", "partial"):
        k = GARCHKernel(*par, score=score)
        s = particle_filter(backends.default_rng(5), k, Y, N, stat_weight=np.ones((R, y.size))).score[:, :3]
        got[score] = (s.mean(axis=0), s.std(axis=0, ddof=1) / math.sqrt(R))
    mean, se = got["exact"]
    # 2e-3: the model difference of tau = 1e-3 against tau = 0 (O(tau^2 T))
    assert np.all(np.abs(mean - ref) <= Z_TOL * se + 2e-3), (mean, ref, se)
    pmean, pse = got["partial"]
    assert np.max(np.abs(pmean - ref) / (pse + 2e-3)) > 10 * Z_TOL


def _fixed_path_score(theta5, x, y, with_mean=True):
    """Sum of the exact kernel's score terms along a given path x_{0:T} (one row, one particle)."""
    mu, phi, lam = _nat(theta5)[:3]
    tau, m = theta5[3], theta5[4]
    k = GARCHKernel(*(np.array([v]) for v in (mu, phi, lam, tau)), m=np.array([m]), with_mean=with_mean)

    class Zeros:  # a generator whose normal draws are zero: propagate then only computes sigma^2, D
        def normal(self, shape, dtype=None):
            return np.zeros(shape)

    prev = np.array([[[x[0], mu, mu, 0.0, 0.0, 1.0]]])
    total = np.zeros(k.dim)
    for t in range(len(y)):
        yt = np.array([[y[t]]])
        new = k.propagate(Zeros(), prev, yt)
        new[..., 0] = x[t + 1]
        total += k.score_terms(prev, new, yt)[0, 0]
        prev = new
    return total


def test_exact_terms_sum_to_the_complete_data_gradient():
    """Along a fixed path the exact terms add up to d/dtheta log p(x_{0:T}, y | theta), sigma^2
    differentiated through the whole recursion (the thesis's partial terms do not)."""
    rng = np.random.default_rng(0)
    T = 7
    x = rng.normal(size=T + 1)
    y = x[1:] + 0.3 * rng.normal(size=T) + 0.2
    theta = np.array([-0.3, 1.2, 0.5, 0.4, 0.15])

    def complete(th):
        mu, _, _, a, b, g = _nat(th)
        tau, m = th[3], th[4]
        out = -0.5 * math.log(2 * math.pi * mu) - 0.5 * x[0] ** 2 / mu
        s = mu
        for t in range(1, T + 1):
            s = a + b * x[t - 1] ** 2 + g * s
            out += -0.5 * math.log(2 * math.pi * s) - 0.5 * x[t] ** 2 / s
            out += -0.5 * math.log(2 * math.pi * tau**2) - 0.5 * (y[t - 1] - m - x[t]) ** 2 / tau**2
        return out

    np.testing.assert_allclose(_fixed_path_score(theta, x, y), _fd(complete, theta, 1e-6), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("init_var", [None, 0.7])
@pytest.mark.parametrize("mean", [False, True])
def test_noise_free_likelihood_and_gradient(mean, init_var):
    th = GARCH.theta_from(0.1, 0.8, 0.05, mean=0.3 if mean else None)
    _, st_y = GARCH(np.zeros(3), noise=False, mean=True).simulate(backends.default_rng(2), 80, GARCH.theta_from(0.1, 0.8, 0.05, mean=0.3))
    y = np.asarray(st_y)[:, 0]
    model = GARCH(y, noise=False, mean=mean, init_var=init_var)
    thetas = np.stack([np.asarray(th), np.asarray(th) * 0.8 + 0.05])

    def ref(t):
        return plain_loglik(t[:3], y, t[3] if mean else 0.0, init_var)

    np.testing.assert_allclose(model.log_lik(thetas), [ref(t) for t in thetas], rtol=1e-12)
    np.testing.assert_allclose(model.grad_log_lik(thetas), [_fd(ref, t, 1e-6) for t in thetas], rtol=1e-6, atol=1e-6)
    num = fd_jacobian(model.log_prior, thetas, step=1e-6)
    np.testing.assert_allclose(model.grad_log_prior(thetas), num, rtol=1e-6, atol=1e-7)
    # one window covering the series is the exact gradient
    win = windows_at(np.zeros((2, 1), dtype=np.int64), T=y.size, S=y.size, B=0)
    score, _ = model.window_score(None, thetas, win)
    np.testing.assert_allclose(score, model.grad_log_lik(thetas), rtol=1e-10, atol=1e-10)


def test_noise_free_buffered_gradient_on_backends(xb):
    th = np.asarray(GARCH.theta_from(0.1, 0.8, 0.05, mean=0.1))
    _, st_y = GARCH(np.zeros(3), noise=False, mean=True).simulate(backends.default_rng(4), 120, th)
    y = np.asarray(st_y)[:, 0]
    theta2 = np.stack([th, th * 0.9])
    win = sample_windows(backends.default_rng(8), 120, 10, 5, chains=2, M=3)
    ref, _ = GARCH(y, noise=False, mean=True).window_score(None, theta2, win)
    model = GARCH(xb.asarray(y), noise=False, mean=True)
    win_x = sample_windows(replay_rng(xb, 8), 120, 10, 5, chains=2, M=3, xp=xb.xp, dtype=xb.dtype)
    got, _ = model.window_score(None, xb.asarray(theta2), win_x)
    tol = 1e-10 if xb.float_dtype == "float64" else 2e-3
    np.testing.assert_allclose(xb.to_numpy(got), ref, rtol=tol, atol=tol)


def test_garch_options_are_checked():
    y = np.zeros(5)
    with pytest.raises(ValueError, match="score"):
        GARCH(y, score="thesis")
    with pytest.raises(ValueError, match="score"):
        GARCH(y, noise=False, score="partial")
    with pytest.raises(ValueError, match="init_var"):
        GARCH(y, init_var=1.0)
    with pytest.raises(TypeError, match="mean"):
        GARCH(y, mean=1)
    with pytest.raises(ValueError, match="theta"):
        GARCH(y, noise=False).log_lik(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="y"):
        GARCH(np.array([0.0, np.nan, 1.0]))
    with pytest.raises(NotImplementedError, match="log_lik"):
        GARCH(y).log_lik(np.zeros((1, 4)))
    assert GARCH(y, noise=False).param_names == ("log_mu", "logit_phi", "logit_lambda")
    win = windows_at(np.zeros((1, 1), dtype=np.int64), T=5, S=5, B=0)
    for model in (GARCH(y), GARCH(y, noise=False, mean=True)):
        with pytest.raises(ValueError, match="theta"):
            model.window_score(backends.default_rng(0), np.zeros((1, model.dim + 1)), win, method=model.score_methods[0])
    with pytest.raises(ValueError, match="theta"):
        GARCH(y, noise=False).grad_log_lik(np.array([[0.0, np.inf, 0.0]]))


def _loglik_x0_integrated_batch(X, y, n_nodes=30):
    """:func:`plain_loglik_x0_integrated` for many ``(log mu, logit phi, logit lambda)`` rows at once."""
    mu = np.exp(X[:, 0])
    phi, lam = 1 / (1 + np.exp(-X[:, 1])), 1 / (1 + np.exp(-X[:, 2]))
    a, b, g = (mu * (1 - phi))[:, None], (phi * lam)[:, None], (phi * (1 - lam))[:, None]
    z, w = np.polynomial.hermite.hermgauss(n_nodes)
    x0 = np.sqrt(2 * mu)[:, None] * z[None, :]
    s = a + b * x0**2 + g * mu[:, None]
    ll = np.zeros_like(x0)
    for t in range(len(y)):
        if t > 0:
            s = a + b * y[t - 1] ** 2 + g * s
        ll += -0.5 * np.log(2 * np.pi * s) - 0.5 * y[t] ** 2 / s
    mx = ll.max(axis=1, keepdims=True)
    return mx[:, 0] + np.log(np.exp(ll - mx) @ w) - 0.5 * math.log(math.pi)


@pytest.mark.slow
def test_sgld_with_the_exact_particle_score_samples_the_posterior():
    """SGLD driven by the particle score (tau = 1e-3 held fixed, 50 particles) against the posterior of
    (log mu, logit phi, logit lambda) by importance sampling of the quadrature likelihood: the means
    and the variance of log mu agree. (At this size the prior dominates, and the thesis's partial
    score is not rejected by this test either; the gradient tests above separate the two.)"""
    from scipy import stats

    T, chains, h, n_iter = 50, 32, 0.05, 1500
    th_true = np.asarray(GARCH.theta_from(0.1, 0.8, 0.05, 1e-3))
    _, y = GARCH.simulate_data(backends.default_rng(11), T, th_true)
    y = np.asarray(y)
    model = GARCH(y)  # its prior, on the first three coordinates

    def prior3(x):  # tau's terms are a constant here, which the normalised weights ignore
        return model.log_prior(np.concatenate([x, np.full((x.shape[0], 1), 1e-3)], axis=1))

    rng, nr = backends.default_rng(0), np.random.default_rng(0)
    x = th_true[:3] + 0.1 * nr.normal(size=(chains, 3))
    Y = np.ascontiguousarray(np.broadcast_to(y[None, :, None], (chains, T, 1)))
    draws = []
    for _ in range(n_iter):
        k = GARCHKernel(np.exp(x[:, 0]), 1 / (1 + np.exp(-x[:, 1])), 1 / (1 + np.exp(-x[:, 2])), np.full(chains, 1e-3),
                        score="exact")
        g = particle_filter(rng, k, Y, 50, stat_weight=np.ones((chains, T))).score[:, :3]
        g = g + model.grad_log_prior(np.concatenate([x, np.full((chains, 1), 1e-3)], axis=1))[:, :3]
        x = x + 0.5 * h * g + math.sqrt(h) * nr.normal(size=x.shape)
        draws.append(x.copy())
    d = np.array(draws).transpose(1, 0, 2)[:, n_iter // 4 :]
    cm = d.mean(axis=1)
    m1, se1 = cm.mean(axis=0), cm.std(axis=0, ddof=1) / math.sqrt(chains)
    flat = d.reshape(-1, 3)
    prop = stats.multivariate_t(flat.mean(axis=0), 3 * np.cov(flat.T), df=5, seed=1)
    xs = prop.rvs(20_000)
    lw = _loglik_x0_integrated_batch(xs, y) + prior3(xs) - prop.logpdf(xs)
    w = np.exp(lw - lw.max())
    w /= w.sum()
    assert 1 / np.sum(w**2) > 1000
    m2 = w @ xs
    se2 = np.sqrt(np.sum(w[:, None] ** 2 * (xs - m2) ** 2, axis=0))
    z = (m1 - m2) / np.sqrt(se1**2 + se2**2)
    cv = d[:, :, 0].var(axis=1, ddof=1)  # per-chain variances of log mu
    v2 = w @ (xs[:, 0] - m2[0]) ** 2
    zv = (cv.mean() - v2) / (cv.std(ddof=1) / math.sqrt(chains))
    assert np.all(np.abs(z) <= Z_TOL) and abs(zv) <= Z_TOL, (z, zv, m1, m2)
