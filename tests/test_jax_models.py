"""Models under JAX's transforms, and models built from JAX code (``sgmc.models.from_jax``).

Every built-in model's posterior and per-datum terms must trace: ``jax.jit`` and ``jax.vmap`` give the
eager values (to 1e-10 in 64-bit mode), and ``jax.grad`` of the log posterior reproduces the model's
analytic gradient (to 1e-8 relative), an independent check of the hand-written derivatives. The state
space models' exact likelihoods are of the whole series, so there ``log_lik``/``grad_log_lik`` take no
index set. Each model runs one compiled call (all its methods at once) to keep the file fast.

``from_jax`` models are compared with the hand-written LogisticRegression on the same data: the log
posterior, its gradient, per-datum Hessians and HVPs, a jitted sampler step for several estimators, and
whole ``sgmc.sample`` runs (compiled blocks) with the same key, which must make the same draws.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import sgmc  # noqa: E402
from sgmc import estimators as E, models as M, samplers as S, ssm  # noqa: E402

pytestmark = pytest.mark.skipif(not jax.config.jax_enable_x64, reason="the suite runs JAX in 64-bit mode")

N, D, CH, B = 30, 3, 2, 5
_r = np.random.default_rng(0)
X = jnp.asarray(_r.standard_normal((N, D)))
Y_BIN = jnp.asarray((_r.random(N) < 0.5).astype(np.float64))
Y_REAL = jnp.asarray(_r.standard_normal(N))
SERIES = jnp.asarray(np.cumsum(_r.standard_normal(12)) * 0.1)

IID = {
    "linear": lambda: M.LinearRegression(X, Y_REAL),
    "logistic": lambda: M.LogisticRegression(X, Y_BIN),
    "gaussian": lambda: M.Gaussian(jnp.asarray(_r.standard_normal((N, 2))), prior_cov=3.0),
    "bnn": lambda: M.BayesianNeuralNetwork(X, jnp.asarray(_r.integers(0, 3, N)), n_hidden=4),
    "bpmf": lambda: M.BPMF(jnp.asarray(_r.integers(0, 4, N)), jnp.asarray(_r.integers(0, 5, N)),
                           jnp.asarray(_r.standard_normal(N)), 4, 5, d=2),
    "dirichlet": lambda: M.DirichletCategorical(jnp.asarray(np.eye(3)[_r.integers(0, 3, N)]), alpha=2.0),
    "affine": lambda: M.Affine(M.LogisticRegression(X, Y_BIN), jnp.asarray([0.1, 0.2, -0.1]),
                               jnp.asarray([[1.0, 0.0, 0.0], [0.2, 1.5, 0.0], [0.0, 0.1, 0.7]])),
    "conditioned": lambda: M.conditioned(M.LinearRegression(X, Y_REAL), jnp.asarray(np.diag([1.0, 2.0, 0.5]))),
}
TARGETS = {"gaussian-target": lambda: M.GaussianTarget(jnp.zeros(2), jnp.asarray([[2.0, 0.3], [0.3, 1.0]]))}
# last: their likelihoods run the Kalman / forward recursions
SERIES_MODELS = {
    "ar": lambda: ssm.AR(SERIES, 2),
    "garch": lambda: ssm.GARCH(SERIES, noise=False),
    "lgssm": lambda: ssm.LGSSM(SERIES[:, None]),
    "hmm": lambda: ssm.GaussianHMM(SERIES[:, None], 2),
    "arhmm": lambda: ssm.ARHMM(SERIES[:, None], 2),
}
ALL = {**IID, **TARGETS, **SERIES_MODELS}


def _theta(name, model):
    t = np.random.default_rng(1).normal(scale=0.3, size=(CH, model.dim))
    if name == "dirichlet":  # the expanded mean lives on omega > 0
        t = np.abs(t) + 0.5
    return jnp.asarray(t)


def _idx():
    return jnp.asarray(np.random.default_rng(2).integers(0, N, (CH, B)))


def _close(got, want, rtol=1e-10):
    got, want = np.asarray(got), np.asarray(want)
    scale = max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)


def _everything(model, name):
    """All of a model's traced methods at (theta, idx) in one function, so that one jit covers them."""
    if name in IID:
        def f(theta, idx):
            return (model.log_posterior(theta), model.grad_log_posterior(theta),
                    model.log_lik(theta, idx), model.grad_log_lik(theta, idx), model.grad_log_lik_sum(theta, idx))
    elif name in SERIES_MODELS:
        def f(theta, idx):
            return (model.log_posterior(theta), model.grad_log_posterior(theta),
                    model.log_lik(theta), model.grad_log_lik(theta))
    else:
        def f(theta, idx):
            return model.log_posterior(theta), model.grad_log_posterior(theta)
    return f


@pytest.mark.parametrize("name", list(ALL))
def test_jit_and_vmap_give_the_eager_values(name):
    model = ALL[name]()
    theta, idx = _theta(name, model), _idx()
    f = _everything(model, name)
    eager = f(theta, idx)
    assert all(bool(jnp.all(jnp.isfinite(v))) for v in eager)
    for got, want in zip(jax.jit(f)(theta, idx), eager):
        _close(got, want)
    # vmap over the chains: each chain's (1, dim) row through the model, mapped
    mapped = jax.jit(jax.vmap(lambda t, i: f(t[None, :], i[None, :])))(theta, idx)
    for got, want in zip(mapped, eager):
        _close(jnp.reshape(got, want.shape), want)


@pytest.mark.parametrize("name", list(ALL))
def test_autodiff_of_the_log_posterior_matches_the_analytic_gradient(name):
    model = ALL[name]()
    theta = _theta(name, model)
    idx = _idx()

    def derivatives(t):  # compiled once: JAX's derivatives of the model's log densities
        out = [jax.grad(lambda u: jnp.sum(model.log_posterior(u)))(t)]
        if name in IID:  # the per-datum gradients: the Jacobian of the (chains, batch) terms
            jac = jax.jacrev(lambda u: model.log_lik(u, idx))(t)  # (chains, batch, chains, dim)
            out.append(jnp.stack([jac[c, :, c, :] for c in range(CH)]))
        elif name in SERIES_MODELS:
            out.append(jax.grad(lambda u: jnp.sum(model.log_lik(u)))(t))
        return out

    auto = jax.jit(derivatives)(theta)
    _close(auto[0], model.grad_log_posterior(theta), rtol=1e-8)
    if name in IID:
        _close(auto[1], model.grad_log_lik(theta, idx), rtol=1e-8)
    elif name in SERIES_MODELS:
        _close(auto[1], model.grad_log_lik(theta), rtol=1e-8)


def test_autodiff_of_the_logistic_likelihood_at_the_origin():
    """At theta = 0 every eta is 0, where max(eta, 0) and |eta| have kinks: the gradient must be X^T (y - 1/2)."""
    model = IID["logistic"]()
    auto = jax.grad(lambda t: jnp.sum(model.log_lik(t)))(jnp.zeros((1, D)))
    _close(auto[0], X.T @ (Y_BIN - 0.5), rtol=1e-12)


def test_a_nonfinite_theta_is_still_refused_eagerly():
    model = SERIES_MODELS["ar"]()
    bad = jnp.full((1, model.dim), jnp.nan)
    with pytest.raises(ValueError, match="theta"):
        model.log_lik(bad)


# -- from_jax ---------------------------------------------------------------------------------------
PRIOR_VAR = 10.0


def _ll(theta, x, y):
    eta = x @ theta
    return y * eta - jax.nn.softplus(eta)


def _lp(theta):
    return -0.5 * D * math.log(2.0 * math.pi * PRIOR_VAR) - 0.5 * theta @ theta / PRIOR_VAR


REF = M.LogisticRegression(X, Y_BIN, prior_var=PRIOR_VAR)
FJ = M.from_jax(_ll, _lp, (X, Y_BIN), dim=D)
CENTRE = jnp.asarray([0.3, -0.2, 0.1])


def test_from_jax_matches_the_hand_written_model():
    theta, idx = _theta("x", REF), _idx()
    _close(FJ.log_posterior(theta), REF.log_posterior(theta))
    _close(FJ.grad_log_posterior(theta), REF.grad_log_posterior(theta))
    _close(FJ.log_lik(theta, idx), REF.log_lik(theta, idx))
    _close(FJ.grad_log_lik(theta, idx), REF.grad_log_lik(theta, idx))
    _close(FJ.grad_log_lik(theta), REF.grad_log_lik(theta))
    hess = FJ.hess_log_lik(theta, idx)
    _close(hess, REF.hess_log_lik(theta, idx))
    v = jnp.asarray(np.random.default_rng(5).standard_normal((CH, D)))
    _close(FJ.hvp_log_lik(theta, v, idx), jnp.einsum("cbij,cj->cbi", hess, v))
    _close(FJ.hvp_log_lik(theta, v)[:, :B], jnp.einsum("cbij,cj->cbi", FJ.hess_log_lik(theta)[:, :B], v))
    assert FJ.n_data == N and FJ.dim == D and FJ.dtype == jnp.float64


def test_from_jax_with_a_flat_prior_and_one_data_array():
    m = M.from_jax(lambda t, y: -0.5 * jnp.sum((y - t) ** 2), None, jnp.asarray(_r.standard_normal((N, 2))), dim=2)
    theta = jnp.zeros((CH, 2))
    np.testing.assert_array_equal(np.asarray(m.log_prior(theta)), 0.0)
    _close(m.grad_log_posterior(theta), jnp.broadcast_to(jnp.sum(m.data[0], axis=0), (CH, 2)))


ESTIMATORS = {
    "minibatch": lambda m: E.Minibatch(m, 8),
    "cv": lambda m: E.ControlVariate(m, 8, centre=CENTRE),
    "svrg": lambda m: E.SVRG(m, 8, update_every=2),
    "saga": lambda m: E.SAGA(m, 8),
    "ps": lambda m: E.PreferentialSubsampling(m, 8, centre=CENTRE),
    "cv-ps": lambda m: E.ControlVariatePS(m, 8, centre=CENTRE),
}


@pytest.mark.parametrize("est_name", ["minibatch", "svrg", "cv-ps"])
def test_from_jax_in_a_jitted_step_makes_the_hand_written_models_draw(est_name):
    start = jnp.asarray(np.random.default_rng(4).normal(scale=0.1, size=(CH, D)))
    out = []
    for model in (FJ, REF):
        est = ESTIMATORS[est_name](model)
        if hasattr(est, "prepare"):
            est = est.prepare(jax.random.key(9), start).estimator
        sampler = S.SGHMC()
        state = sampler.init(jax.random.key(0), start, est)
        step = jax.jit(lambda k, s, est=est, sampler=sampler: sampler.step(k, s, est, 0.01))
        for k in jax.random.split(jax.random.key(1), 3):
            state, _ = step(k, state)
        out.append(state.position)
    assert not np.allclose(np.asarray(out[0]), np.asarray(start))
    _close(out[0], out[1])


@pytest.mark.parametrize("sampler,estimator", [("sgld", "minibatch"), ("sghmc", "cv")])
def test_sample_runs_a_from_jax_model_like_the_hand_written_one(sampler, estimator):
    args = dict(sampler=sampler, estimator=estimator, batch_size=8, step_size=2e-3, n_iter=30, chains=2, rng=3,
                progress=False)
    from sgmc.backends import _jax_blocks

    _jax_blocks.clear_cache()  # compiled afresh here (blocks are otherwise kept across runs)
    a, b = sgmc.sample(FJ, **args), sgmc.sample(REF, **args)
    assert a.info["compile_time"] > 0
    _close(a.draws, b.draws)


def test_from_jax_refuses_bad_input_naming_the_argument():
    with pytest.raises(TypeError, match="`data`.*numpy.ndarray.*jax.numpy.asarray"):
        M.from_jax(_ll, _lp, (np.asarray(X), Y_BIN), dim=D)
    with pytest.raises(ValueError, match="`log_lik.*dim=4"):
        M.from_jax(_ll, _lp, (X, Y_BIN), dim=4)
    with pytest.raises(TypeError, match="`dim` must be an int"):
        M.from_jax(_ll, _lp, (X, Y_BIN), dim=2.5)
    with pytest.raises(ValueError, match="`dim` must be at least 1"):
        M.from_jax(_ll, _lp, (X, Y_BIN), dim=0)
    with pytest.raises(ValueError, match="same first dimension"):
        M.from_jax(_ll, _lp, (X, Y_BIN[:5]), dim=D)
    with pytest.raises(TypeError, match="`log_lik` must be a callable"):
        M.from_jax("ll", _lp, (X, Y_BIN), dim=D)
    with pytest.raises(ValueError, match="must return a scalar"):
        M.from_jax(lambda t, x, y: x * t, _lp, (X, Y_BIN), dim=D)
