"""Reported costs are true: every per-datum evaluation a step makes is in ``StepInfo`` and the trace.

An independent count: a logistic regression whose every per-datum computation goes through one method
(``_terms``, the compiled fast paths switched off) counts the data it touches. Each sampler's steps
must report exactly what the model saw, the sampler's own passes (SGRLD's Fisher metric, MALA's log
density on a model that computes it in a separate pass) as well as the estimator's.
"""

from __future__ import annotations

import numpy as np
import pytest

import sgmc
from sgmc import backends
from sgmc.datasets import logistic_regression_data
from sgmc.estimators import FullGradient, make_estimator
from sgmc.models import LogisticRegression
from sgmc.models.base import Model
from sgmc.samplers import SGRHMC, Metric, make_sampler

DATA = logistic_regression_data(n=400, dim=3, n_test=10, rng=0)
CHAINS, STEPS = 3, 6


class Counting(LogisticRegression):
    """A logistic regression that counts the per-datum terms it evaluates (all chains together)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._native_kind = None  # no compiled fast path: every datum goes through _terms
        self.count = 0

    def _terms(self, eta, y, want):
        self.count += int(np.prod(eta.shape))
        return super()._terms(eta, y, want)


class TwoPass(Counting):
    """The same model with the base class's log density and gradient: two passes (log_lik, then the gradient)."""

    log_posterior_and_grad = Model.log_posterior_and_grad


def _steps(sampler, estimator, model, h):
    """Per-chain evaluations the model counted during STEPS steps, and what the steps reported."""
    rng = backends.default_rng(3)
    x = rng.normal((CHAINS, model.dim), dtype=np.float64) * 0.1
    state = sampler.init(rng, x, estimator)
    model.count = 0
    reported = 0.0
    for _ in range(STEPS):
        state, info = sampler.step(rng, state, estimator, h)
        reported += float(np.mean(np.broadcast_to(np.asarray(info.n_evals, dtype=float), (CHAINS,))))
    return model.count / CHAINS, reported


CASES = [
    ("sgld", "minibatch", 1e-3, 20),
    ("psgld", "minibatch", 1e-3, 20),
    ("sghmc", "minibatch", 1e-3, 5 * 20),
    ("sgnht", "minibatch", 1e-3, 20),
    ("sgrld", "minibatch", 0.05, 20 + 400),          # the Fisher metric: one full pass per step
    ("sgrld", "svrg", 0.05, 2 * 20 + 400),
    ("ula", "full", 1e-3, 400),
    ("mala", "full", 1e-3, 400),                      # GLM: log density and gradient in one pass
    ("sgld_corrected", "minibatch-noise", 1e-5, 20),
]


@pytest.mark.parametrize("name, est, h, per_step", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_reported_evaluations_equal_the_model_count(name, est, h, per_step):
    model = Counting(DATA.X, DATA.y)
    sampler = make_sampler(name, model)
    if sampler.exact:
        estimator = FullGradient(model, log_density=sampler.needs_log_density)
    else:
        estimator = make_estimator(est, model, 20)
    seen, reported = _steps(sampler, estimator, model, h)
    assert seen == pytest.approx(reported, rel=1e-12)
    # and the count is what the method costs (SVRG refreshes its snapshot only every N / n steps)
    assert reported == pytest.approx(STEPS * per_step, rel=1e-12)


def test_mala_counts_a_separate_log_density_pass():
    model = TwoPass(DATA.X, DATA.y)
    sampler = make_sampler("mala", model)
    seen, reported = _steps(sampler, FullGradient(model, log_density=True), model, 1e-3)
    assert seen == pytest.approx(reported) == STEPS * 2 * 400


def test_sgrhmc_and_a_users_metric_report_its_declared_cost():
    model = Counting(DATA.X, DATA.y)
    calls = []

    def G(theta):
        calls.append(theta.shape[0])
        return np.ones_like(theta) * 2.0

    metric = Metric(G, grad=lambda th: np.zeros_like(th), diagonal=True, n_evals=7.0)
    sampler = SGRHMC(metric=metric)
    seen, reported = _steps(sampler, make_estimator("minibatch", model, 20), model, 0.01)
    assert seen == STEPS * 20
    assert reported == STEPS * (20 + 7)
    assert calls  # the metric was evaluated at every step


def test_trace_data_passes_count_the_metric():
    model = Counting(DATA.X, DATA.y)
    trace = sgmc.sample(model, "sgrld", "minibatch", step_size=0.05, batch_size=20, n_iter=50, chains=2,
                        rng=1, progress=False)
    # per chain and step: 20 data for the estimate and 400 for the metric
    assert trace.stats["data_passes"][:, -1] == pytest.approx([50 * 420 / 400] * 2)
    # every per-datum evaluation of the run: sampler init (one estimate), then the steps
    assert model.count / 2 == pytest.approx(20 + 50 * 420)


@pytest.mark.parametrize("name", ["cv", "ps"])
def test_mode_search_cost_is_what_the_model_saw(name):
    # the set-up of the mode-finding estimators: optimiser minibatches, Newton steps with every log density
    # of their line search, the mode check and (PS) the weights at the mode
    model = Counting(DATA.X, DATA.y)
    est = make_estimator(name, model, 20, opt_steps=50)
    prepared = est.prepare(backends.default_rng(0), np.zeros((1, 3)))
    assert prepared.n_evals == model.count
