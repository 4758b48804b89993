"""Errors at the boundary: every check raises the right exception type with a message naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

import sgmc
from sgmc import backends
from sgmc.estimators import SVRG, ControlVariate, FullGradient, Minibatch, NoisyGradient, make_estimator
from sgmc.models import Gaussian, GaussianTarget, LinearRegression, LogisticRegression, Model
from sgmc.optimize import curvature_bound, find_mode
from sgmc.samplers import MALA, PSGLD, SGHMC, SGNHT, constant, make_sampler, polynomial, step_sizes

strict = pytest.importorskip("array_api_strict")
torch = pytest.importorskip("torch")

R = np.random.default_rng(0)
X = R.normal(size=(50, 3))
Y = X @ np.array([1.0, -1.0, 0.5]) + R.normal(size=50)
Y01 = (R.random(50) < 0.5).astype(float)
MODEL = LinearRegression(X, Y)
TARGET = GaussianTarget.review_example()
DEV1 = strict.Device("device1")


def run(model=MODEL, sampler="sgld", estimator="minibatch", **kw):
    kw.setdefault("step_size", 1e-3)
    kw.setdefault("n_iter", 5)
    kw.setdefault("progress", False)
    return sgmc.sample(model, sampler, estimator, **kw)


class _GradOnly:
    """A user model object (no base class) with the Target attributes, data and a prior gradient, but
    no grad_log_lik_sum, no log_posterior_and_grad and no Lipschitz constants."""

    xp = backends.get_backend("numpy").xp
    dim = 3
    dtype = np.float64
    device = "cpu"
    n_data = 50

    def grad_log_prior(self, theta):
        return -theta


class _NoLipschitz(Model):
    """A Model subclass that keeps the base class's placeholder ``lipschitz``."""

    def __init__(self):
        super().__init__(50, 3, backends.get_backend("numpy").xp, np.float64)

    def grad_log_prior(self, theta):
        return -theta

    def grad_log_lik(self, theta, idx=None):
        return np.zeros((theta.shape[0], 50 if idx is None else idx.shape[1], 3))


def on_strict(a, device=None):
    return backends.asarray(a, backend="array_api_strict", device=device)


CASES = {
    # -- data shapes and values ------------------------------------------------------------------------
    "X 1-D": (lambda: LinearRegression(X[:, 0], Y), ValueError, r"`X` must be 2-D \(n_data, dim\); got shape \(50,\)"),
    "X no rows": (lambda: LinearRegression(np.zeros((0, 3)), np.zeros(0)), ValueError, "`X` has no rows"),
    "y length": (lambda: LinearRegression(X, Y[:-1]), ValueError, r"`y` must be 1-D with 50 entries to match `X`; got shape \(49,\)"),
    "y 2-D": (lambda: LinearRegression(X, Y[:, None]), ValueError, "`y` must be 1-D"),
    "X NaN": (lambda: LinearRegression(np.where(X > 2, np.nan, X), Y), ValueError, r"`X` contains \d+ non-finite"),
    "y inf": (lambda: LinearRegression(X, np.where(Y > 1, np.inf, Y)), ValueError, "`y` contains .* non-finite"),
    "logistic y not binary": (lambda: LogisticRegression(X, Y), ValueError, "`y` must contain only 0 and 1"),
    "logistic y = 2": (lambda: LogisticRegression(X, 2 * Y01), ValueError, "`y` must contain only 0 and 1"),
    "logistic y NaN": (lambda: LogisticRegression(X, np.where(Y01 > 0, np.nan, 0.0)), ValueError, "`y` contains"),
    "X strings": (lambda: LinearRegression([["a", "b"]], [1.0]), (TypeError, ValueError), "`X`"),
    "noise_var 0": (lambda: LinearRegression(X, Y, noise_var=0.0), ValueError, "`noise_var` must be positive"),
    "prior_var negative": (lambda: LogisticRegression(X, Y01, prior_var=-1.0), ValueError, "`prior_var` must be positive"),
    "prior_var NaN": (lambda: LinearRegression(X, Y, prior_var=float("nan")), ValueError, "`prior_var`"),
    "Gaussian y 1-D": (lambda: Gaussian(Y), ValueError, r"`y` must be 2-D \(n_data, dim\)"),
    "Gaussian y NaN": (lambda: Gaussian(np.where(X > 2, np.nan, X)), ValueError, "`y` contains"),
    "Gaussian cov shape": (lambda: Gaussian(X, cov=np.eye(2)), ValueError, r"`cov` must be a positive scalar or a \(3, 3\) matrix"),
    "Gaussian cov not PD": (lambda: Gaussian(X, cov=np.diag([1.0, -1.0, 1.0])), ValueError, "`cov` must be positive definite"),
    "Gaussian prior_cov asym": (lambda: Gaussian(X, prior_cov=np.triu(np.ones((3, 3)))), ValueError, "`prior_cov` must be symmetric"),
    "Gaussian cov scalar <= 0": (lambda: Gaussian(X, cov=0.0), ValueError, "`cov` must be positive"),
    "Gaussian prior_mean shape": (lambda: Gaussian(X, prior_mean=np.zeros(2)), ValueError, r"`prior_mean` must be a scalar or have shape \(3,\)"),
    "Gaussian prior_mean NaN": (lambda: Gaussian(X, prior_mean=[0.0, np.nan, 0.0]), ValueError, "`prior_mean` contains"),
    "target mean 2-D": (lambda: GaussianTarget(np.zeros((2, 1)), np.eye(2)), ValueError, "`mean` must be 1-D"),
    "target mean NaN": (lambda: GaussianTarget([0.0, np.nan], np.eye(2)), ValueError, "`mean` contains"),
    "target cov NaN": (lambda: GaussianTarget([0.0, 0.0], [[1.0, np.nan], [np.nan, 1.0]]), ValueError, "`cov` contains"),
    "target cov not PD": (lambda: GaussianTarget([0.0, 0.0], [[1.0, 2.0], [2.0, 1.0]]), ValueError, "`cov` must be positive definite"),
    # -- parameter shapes ---------------------------------------------------------------------------------
    "theta wrong dim": (lambda: MODEL.grad_log_posterior(np.zeros(4)), ValueError, r"`theta` must have shape \(dim,\) or \(chains, dim\) with dim=3; got \(1, 4\)"),
    "theta 3-D": (lambda: MODEL.log_posterior(np.zeros((2, 2, 3))), ValueError, "`theta` must have shape"),
    "init wrong dim": (lambda: run(init=np.zeros(4)), ValueError, r"`init` must have shape \(3,\) or \(1, 3\); got \(4,\)"),
    "init wrong chains": (lambda: run(init=np.zeros((3, 3)), chains=2), ValueError, r"`init` must have shape \(3,\) or \(2, 3\); got \(3, 3\)"),
    "init NaN": (lambda: run(init=np.array([0.0, np.nan, 0.0])), ValueError, "`init` contains 1 non-finite"),
    "init strings": (lambda: run(init=np.array(["a", "b", "c"])), TypeError, "`init` must be numeric"),
    "centre wrong dim": (lambda: ControlVariate(MODEL, 10, centre=np.zeros(2)), ValueError, r"`centre` must have shape \(3,\)"),
    "centre NaN": (lambda: ControlVariate(MODEL, 10, centre=[np.nan, 0.0, 0.0]), ValueError, "`centre` contains"),
    "find_mode init dim": (lambda: find_mode(MODEL, 0, np.zeros(4)), ValueError, r"`init` must have shape \(3,\)"),
    # -- backends and devices -----------------------------------------------------------------------------
    "numpy X, strict y": (lambda: LinearRegression(X, on_strict(Y)), TypeError, r"`X` is a numpy array but `y` is a array_api_strict array.*sgmc.backends.asarray"),
    "torch X, numpy y": (lambda: LogisticRegression(torch.asarray(X), Y01), TypeError, "`X` is a torch array but `y` is a numpy array"),
    "numpy model, torch rng": (lambda: run(rng=backends.default_rng(0, backend="torch")), TypeError, r"`rng` belongs to backend 'torch' but the arrays are 'numpy'.*default_rng"),
    "strict model, numpy rng": (lambda: run(LinearRegression(on_strict(X), on_strict(Y)), rng=backends.default_rng(0)), TypeError, "`rng` belongs to backend 'numpy'"),
    "torch theta, numpy model": (lambda: MODEL.grad_log_posterior(torch.zeros(3, dtype=torch.float64)), TypeError, "`theta` is a torch array but `model data` is a numpy array"),
    "numpy init, strict model": (lambda: run(LinearRegression(on_strict(X), on_strict(Y)), init=np.zeros(3)), TypeError, "`init` is a numpy array but `model data`"),
    "numpy centre, strict model": (lambda: ControlVariate(LinearRegression(on_strict(X), on_strict(Y)), 5, centre=np.zeros(3)), TypeError, "`centre` is a numpy array"),
    "torch prior_mean, numpy y": (lambda: Gaussian(X, prior_mean=torch.zeros(3, dtype=torch.float64)), TypeError, "`prior_mean` is a torch array but `y` is a numpy array"),
    "strict cov, numpy mean": (lambda: GaussianTarget(np.zeros(2), on_strict(np.eye(2))), TypeError, "`cov` is a array_api_strict array but `mean` is a numpy array"),
    "X cpu, y device1": (lambda: LinearRegression(on_strict(X), on_strict(Y, DEV1)), ValueError, r"`X` is on device .*CPU_DEVICE.* but `y` is on device .*device1.*explicitly"),
    "init device1, model cpu": (lambda: run(LinearRegression(on_strict(X), on_strict(Y)), init=on_strict(np.zeros(3), DEV1)), ValueError, r"`init` is on device .*device1.* but `model data` is on device .*CPU_DEVICE"),
    "theta cpu, model device1": (lambda: LinearRegression(on_strict(X, DEV1), on_strict(Y, DEV1)).grad_log_posterior(on_strict(np.zeros(3))), ValueError, "`theta` is on device"),
    "centre cpu, model device1": (lambda: ControlVariate(LinearRegression(on_strict(X, DEV1), on_strict(Y, DEV1)), 5, centre=on_strict(np.zeros(3))), ValueError, "`centre` is on device"),
    "cov cpu, y device1": (lambda: Gaussian(on_strict(X, DEV1), cov=on_strict(np.eye(3))), ValueError, r"`cov` is on device .*CPU_DEVICE.* but `y` is on device .*device1"),
    "rng bad type": (lambda: run(rng="seed"), TypeError, "`rng` must be None, a non-negative int"),
    "rng negative": (lambda: run(rng=-3), ValueError, r"`rng` \(a seed\) must be a non-negative integer"),
    "unknown backend": (lambda: backends.get_backend("mxnet"), ValueError, "unknown backend 'mxnet'"),
    # -- step sizes ---------------------------------------------------------------------------------------
    "step_size negative": (lambda: run(step_size=-1e-3), ValueError, "`step_size` must be positive and finite; got -0.001"),
    "step_size zero": (lambda: run(step_size=0.0), ValueError, "`step_size` must be positive and finite; got 0.0"),
    "step_size NaN": (lambda: run(step_size=float("nan")), ValueError, "`step_size` must be positive and finite; got nan"),
    "step_size inf": (lambda: run(step_size=float("inf")), ValueError, "`step_size` must be positive and finite"),
    "step_size string": (lambda: run(step_size="0.1"), TypeError, "`step_size` must be a positive number, a schedule or a sequence; got str"),
    "step_size None": (lambda: run(step_size=None), TypeError, "`step_size` must be a positive number"),
    "step_size bool": (lambda: run(step_size=True), TypeError, "`step_size` must be a positive number"),
    "schedule negative": (lambda: run(step_size=lambda k: 0.1 - 0.04 * k), ValueError, r"`step_size` must be positive and finite at every iteration; got -0\.0\d+ at iteration 3"),
    "schedule NaN": (lambda: run(step_size=lambda k: float("nan")), ValueError, "`step_size` must be positive and finite at every iteration; got nan at iteration 0"),
    "schedule non-number": (lambda: run(step_size=lambda k: "big"), ValueError, "`step_size` must be positive and finite at every iteration; got 'big'"),
    "sequence length": (lambda: run(step_size=[1e-3] * 4), ValueError, "`step_size` as a sequence must have n_iter=5 entries; got 4"),
    "sequence entry": (lambda: run(step_size=[1e-3, -1.0, 1e-3, 1e-3, 1e-3]), ValueError, "got -1.0 at iteration 1"),
    "constant bad": (lambda: constant(-1.0), ValueError, "`step_size` must be positive"),
    "polynomial a": (lambda: polynomial(0.0), ValueError, "`a` must be positive"),
    "polynomial b": (lambda: polynomial(1.0, b=-1.0), ValueError, "`b` must be positive"),
    "polynomial gamma": (lambda: polynomial(1.0, gamma=-0.5), ValueError, "`gamma` must be non-negative"),
    "stationary cov h too large": (lambda: TARGET.sgld_stationary_cov(4.5), ValueError, r"`step_size`=4.5 is not below 4 \* smallest variance"),
    "stationary cov noise": (lambda: TARGET.sgld_stationary_cov(0.1, -0.01), ValueError, "`grad_noise_var` must be a non-negative number"),
    # -- batch sizes --------------------------------------------------------------------------------------
    "batch larger than N": (lambda: run(batch_size=51), ValueError, "`batch_size`=51 is larger than the number of data n_data=50"),
    "batch 0": (lambda: run(batch_size=0), ValueError, "`batch_size` must be at least 1; got 0"),
    "batch negative": (lambda: Minibatch(MODEL, -2), ValueError, "`batch_size` must be at least 1"),
    "batch float > 1": (lambda: run(batch_size=1.5), TypeError, r"`batch_size` must be a positive int \(or a fraction in \(0, 1\)\); got 1.5"),
    "batch string": (lambda: run(batch_size="10"), TypeError, "`batch_size` must be a positive int"),
    "cv batch too large": (lambda: ControlVariate(MODEL, 100, centre=np.zeros(3)), ValueError, "`batch_size`=100 is larger"),
    "minibatch on a data-free target": (lambda: run(TARGET, estimator="minibatch"), ValueError, "GaussianTarget has no data to subsample"),
    # -- names and run settings ---------------------------------------------------------------------------
    "unknown sampler": (lambda: run(sampler="sgxx"), ValueError, r"unknown sampler 'sgxx'; choose one of \['badodab', 'baoab', 'mala', 'psgld', 'recipe', 'scir', 'sghmc', 'sghmc_corrected', 'sgld', 'sgld_corrected', 'sgnht', 'sgrhmc', 'sgrld', 'ula'\]"),
    "unknown estimator": (lambda: run(estimator="bogus"), ValueError, r"unknown estimator 'bogus'; choose one of \['adaptive-cv', 'adaptive-cv-ps', 'buffered', 'chunked', 'cv', 'cv-ps', 'cv-switch', 'dpp', 'full', 'minibatch', 'minibatch-noise', 'noisy', 'ps', 'saga', 'svrg'\]"),
    "sampler not a sampler": (lambda: make_sampler(42), TypeError, "`sampler` must be a name in"),
    "estimator not callable": (lambda: make_estimator(42, MODEL), TypeError, "`estimator` must be a name in"),
    "model not a model": (lambda: run(object()), TypeError, r"`model` must follow the sgmc model protocol.*lacks"),
    "exact sampler with cv": (lambda: run(sampler="ula", estimator="cv"), ValueError, r"sampler 'ula' uses the exact gradient; got estimator='cv'"),
    "exact sampler with object": (lambda: run(sampler="mala", estimator=Minibatch(MODEL, 5)), ValueError, "sampler 'mala' uses the exact gradient"),
    "burn_in = n_iter": (lambda: run(burn_in=5), ValueError, "`burn_in`=5 must be smaller than `n_iter`=5"),
    "burn_in > n_iter": (lambda: run(burn_in=9), ValueError, "`burn_in`=9 must be smaller"),
    "burn_in negative": (lambda: run(burn_in=-1), ValueError, "`burn_in` must be at least 0"),
    "n_iter 0": (lambda: run(n_iter=0), ValueError, "`n_iter` must be at least 1; got 0"),
    "n_iter float": (lambda: run(n_iter=5.5), TypeError, "`n_iter` must be an int; got 5.5"),
    "chains 0": (lambda: run(chains=0), ValueError, "`chains` must be at least 1"),
    "thin 0": (lambda: run(thin=0), ValueError, "`thin` must be at least 1"),
    "check_every 0": (lambda: run(check_every=0), ValueError, "`check_every` must be at least 1"),
    "store_grads bad": (lambda: run(store_grads="yes"), ValueError, "`store_grads` must be one of False, True, 'estimate', 'full'; got 'yes'"),
    # -- sampler and estimator options --------------------------------------------------------------------
    "friction negative": (lambda: SGHMC(friction=-1.0), ValueError, "`friction` must be positive and finite; got -1.0"),
    "friction NaN": (lambda: SGHMC(friction=float("nan")), ValueError, "`friction` must be positive"),
    "n_leapfrog 0": (lambda: SGHMC(n_leapfrog=0), ValueError, "`n_leapfrog` must be an integer of at least 1; got 0"),
    "n_leapfrog fraction": (lambda: SGHMC(n_leapfrog=2.5), ValueError, "`n_leapfrog` must be an integer of at least 1; got 2.5"),
    "noise estimate too large": (lambda: run(sampler="sghmc", step_size=0.1, sampler_options={"noise_estimate": 100.0}), ValueError, r"step_size=0.1 and friction=1.0.*lower the step size"),
    "diffusion 0": (lambda: SGNHT(diffusion=0.0), ValueError, "`diffusion` must be positive and finite; got 0.0"),
    "psgld alpha": (lambda: PSGLD(alpha=1.0), ValueError, r"`alpha` must be in \[0, 1\); got 1.0"),
    "psgld lam": (lambda: PSGLD(lam=0.0), ValueError, "`lam` must be positive"),
    "noise_sd negative": (lambda: NoisyGradient(TARGET, -0.1), ValueError, "`noise_sd` must be a non-negative number; got -0.1"),
    "noise_sd string": (lambda: NoisyGradient(TARGET, "a"), TypeError, "`noise_sd` must be a non-negative number"),
    "noise_sd missing": (lambda: run(TARGET, estimator="noisy"), TypeError, "noise_sd"),
    "svrg update_every": (lambda: SVRG(MODEL, 10, update_every=0), ValueError, "`update_every` must be at least 1; got 0"),
    "cv optimizer": (lambda: ControlVariate(MODEL, 10, optimizer="lbfgs"), ValueError, "`optimizer` must be one of 'adam', 'sgd'; got 'lbfgs'"),
    "cv opt_steps": (lambda: ControlVariate(MODEL, 10, opt_steps=0), ValueError, "`opt_steps` must be at least 1; got 0"),
    "cv without centre": (lambda: ControlVariate(MODEL, 10).init(backends.default_rng(0), np.zeros((1, 3))), ValueError, "ControlVariate has no centre: pass `centre=`"),
    "find_mode method": (lambda: find_mode(MODEL, 0, np.zeros(3), method="newton"), ValueError, "`method` must be one of 'adam', 'sgd'; got 'newton'"),
    "find_mode n_steps": (lambda: find_mode(MODEL, 0, np.zeros(3), n_steps=0), ValueError, "`n_steps` must be at least 1; got 0"),
    "find_mode step_size": (lambda: find_mode(MODEL, 0, np.zeros(3), step_size=-1.0), ValueError, r"`step_size` must be positive and finite; got -1\.0"),
    "mala needs a log density": (lambda: MALA().init(backends.default_rng(0), np.zeros((1, 2)), FullGradient(TARGET)), TypeError, r"MALA needs the exact log density from its estimator, and FullGradient does not report it; use sgmc.estimators.FullGradient\(model, log_density=True\)"),
    "mala model without a log density": (lambda: FullGradient(_GradOnly(), log_density=True), TypeError, r"FullGradient\(log_density=True\) needs the model method\(s\) log_posterior_and_grad, which _GradOnly does not provide"),
    "minibatch model lacks grad_log_lik_sum": (lambda: Minibatch(_GradOnly(), 5), TypeError, r"the minibatch estimator needs the model method\(s\) grad_log_lik_sum, which _GradOnly does not provide"),
    "curvature bound without lipschitz": (lambda: curvature_bound(_GradOnly()), TypeError, r"a curvature bound needs the model method\(s\) lipschitz, which _GradOnly does not provide"),
    "curvature bound on a Model without lipschitz": (lambda: curvature_bound(_NoLipschitz()), TypeError, r"a curvature bound needs the model method\(s\) lipschitz, which _NoLipschitz does not provide"),
    "no Hessian": (lambda: TARGET.hess_log_lik(np.zeros((1, 2))), NotImplementedError, "GaussianTarget does not provide per-datum Hessians"),
    "step_sizes direct": (lambda: step_sizes(object(), 3), TypeError, "got object"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_error(case):
    fn, exc, pattern = CASES[case]
    with pytest.raises(exc, match=pattern):
        fn()


def test_diverging_step_size_raises_floating_point_error(xb):
    """SGLD is unstable on the review's Gaussian for h > 4 * smallest variance = 4: at h = 10 the slow
    direction's coefficient is 1 - h / 2 = -4, so positions overflow after about 500 iterations."""
    if xb.float_dtype == "float32":
        n_iter = 200  # overflows after about 65 iterations
    else:
        n_iter = 800
    target = GaussianTarget(xb.asarray(np.zeros(2)), xb.asarray(np.array([[1.5, 0.5], [0.5, 1.5]])))
    with pytest.raises(FloatingPointError, match=r"sgld chain diverged by iteration \d+: positions are no longer finite with step_size=10"):
        sgmc.sample(target, "sgld", "noisy", step_size=10.0, n_iter=n_iter, check_every=50, rng=xb.rng(0), progress=False,
                    estimator_options={"noise_sd": 0.1})


def test_divergence_is_reported_at_the_first_check_after_it():
    with pytest.raises(FloatingPointError, match=r"diverged by iteration 600:") as info:
        sgmc.sample(TARGET, "sgld", "full", step_size=10.0, n_iter=1000, check_every=100, rng=0, progress=False)
    assert "decrease the step size" in str(info.value)
