"""The fused block of GLM sampler iterations (sgmc.samplers._fused) against its twin and the step loop.

Three independent references: the twin (the samplers' own array-API ``step`` fed the same pre-drawn
numbers), the unfused loop (``step`` drawing from the generator itself, with the compiled paths off),
and an uninterrupted run for checkpoints.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import sgmc
from sgmc import backends
from sgmc._dispatch import native
from sgmc.backends import _numba
from sgmc.estimators import SVRG, ControlVariate, Minibatch
from sgmc.models import LinearRegression, LogisticRegression
from sgmc.samplers import SGHMC, SGLD, SGNHT
from sgmc.samplers import _fused

pytestmark = pytest.mark.skipif(native(backends.get_backend("numpy").xp, "glm_fused_block") is None,
                                reason="the fused native needs Numba (and SGMC_NATIVE not 0)")


def _data(n=600, d=4, seed=0):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, d))
    theta = np.linspace(1.0, -1.0, d)
    return X, (r.random(n) < 1.0 / (1.0 + np.exp(-X @ theta))).astype(float), X @ theta + r.normal(size=n)


X, Y_BIN, Y_LIN = _data()
MODELS = {"logistic": LogisticRegression(X, Y_BIN), "linear": LinearRegression(X, Y_LIN, noise_var=0.7)}
SAMPLERS = {
    "sgld": SGLD(),
    "sghmc": SGHMC(friction=1.5, n_leapfrog=3),
    "sghmc-plain": SGHMC(n_leapfrog=2, resample_momentum=False, noise_estimate=0.5),
    "sgnht": SGNHT(diffusion=0.8),
}


def _estimator(name, model):
    if name == "minibatch":
        return Minibatch(model, 40)
    if name == "minibatch-replace":
        return Minibatch(model, 40, replace=True)
    if name == "cv":
        return ControlVariate(model, 40, centre=np.full(model.dim, 0.1))
    return SVRG(model, 40, update_every=3)


ESTIMATORS = ["minibatch", "minibatch-replace", "cv", "svrg"]


def _close(a, b, tol=1e-12):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    assert np.max(np.abs(a - b)) <= tol * max(1.0, float(np.max(np.abs(b))))


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("smp", sorted(SAMPLERS))
@pytest.mark.parametrize("est", ESTIMATORS)
def test_the_native_block_equals_its_twin_on_the_same_numbers(model, smp, est):
    m, sampler = MODELS[model], SAMPLERS[smp]
    estimator = _estimator(est, m)
    rng = backends.default_rng(3)
    state = sampler.init(rng, np.random.default_rng(1).normal(scale=0.1, size=(3, m.dim)), estimator)
    plan = _fused.plan(sampler, estimator, state.position)
    assert plan is not None
    hs = [1e-3 * (1 + 0.1 * t) for t in range(7)]
    z, idx = plan.draw(rng, len(hs), 3)
    assert z.shape == (7, plan.n_normal, 3, m.dim) and idx.shape == (7, plan.n_est, 3, 40)
    fast = plan.run(state, hs, z, idx, keep_grads=True)
    twin = _fused.twin_block(sampler, estimator, state, hs, z, idx, keep_grads=True)
    _close(fast.positions, twin.positions)
    _close(fast.grads, twin.grads)
    for a, b in zip(fast.state, twin.state):
        if a is None:  # a minibatch estimator has no state
            assert b is None
        elif isinstance(a, tuple):  # the estimator's state
            for u, v in zip(a, b):
                _close(u, v)
        else:
            _close(a, b)
    assert len(fast.infos) == len(twin.infos) == 7
    for a, b in zip(fast.infos, twin.infos):
        assert np.all(a.n_evals == b.n_evals) and np.all(a.estimate.batch_size == b.estimate.batch_size)
        assert (a.extras is None) == (b.extras is None)
        if a.extras is not None:
            _close(a.extras["thermostat"], b.extras["thermostat"])


def _sample(model, smp, est, **kw):
    m = MODELS[model]
    args = dict(step_size=2e-3, n_iter=230, chains=2, rng=5, progress=False, check_every=50)
    args.update(kw)
    return sgmc.sample(m, SAMPLERS[smp], _estimator(est, m), **args)


@pytest.mark.parametrize(("model", "smp", "est"), [
    ("logistic", "sgld", "minibatch"), ("logistic", "sgld", "minibatch-replace"), ("logistic", "sgld", "cv"),
    ("linear", "sghmc", "svrg"), ("logistic", "sghmc-plain", "cv"), ("linear", "sgnht", "minibatch"),
    ("logistic", "sgnht", "svrg"),
])
def test_sample_draws_equal_the_unfused_loop(model, smp, est, monkeypatch):
    kw = dict(thin=3, burn_in=20, store_grads=True)
    fused = _sample(model, smp, est, **kw)
    old = _numba.set_enabled(False)
    try:
        twin = _sample(model, smp, est, **kw)  # the block loop, each block on the twin
        monkeypatch.setattr(sgmc.chains, "fused_plan", lambda *a: None)
        loop = _sample(model, smp, est, **kw)  # one step at a time, drawing from the generator
    finally:
        _numba.set_enabled(old)
    # the twin's blocks consume the pre-drawn numbers exactly as the steps consume the generator
    np.testing.assert_array_equal(twin.draws, loop.draws)
    np.testing.assert_array_equal(twin.grads, loop.grads)
    _close(fused.draws, loop.draws, 1e-11)
    _close(fused.grads, loop.grads, 1e-11)
    assert sorted(fused.stats) == sorted(loop.stats)
    for key in fused.stats:
        if key != "wall_time":
            _close(fused.stats[key], loop.stats[key], 1e-11)
            np.testing.assert_array_equal(twin.stats[key], loop.stats[key])


def test_the_block_loop_keeps_the_generator_where_the_steps_leave_it():
    m, sampler = MODELS["logistic"], SAMPLERS["sghmc"]
    estimator = _estimator("minibatch", m)
    a, b = backends.default_rng(9), backends.default_rng(9)
    state = sampler.init(a, np.zeros((2, m.dim)), estimator)
    sampler.init(b, np.zeros((2, m.dim)), estimator)
    _fused.plan(sampler, estimator, state.position).draw(a, 5, 2)
    for _ in range(5):
        state, _ = sampler.step(b, state, estimator, 1e-3)
    np.testing.assert_array_equal(a.normal((4,)), b.normal((4,)))


def _stop_at(iteration):
    def callback(k, state):
        if k == iteration:
            os.kill(os.getpid(), signal.SIGINT)

    return callback


@pytest.mark.parametrize(("smp", "est", "every", "at"), [
    ("sgld", "minibatch-replace", 50, 100),  # stopped at a block's end
    ("sgnht", "svrg", 40, 70),  # stopped within a block (with a callback, blocks are one iteration)
    ("sghmc", "cv", 30, 133),
])
def test_an_interrupted_fused_run_resumes_bit_identically(tmp_path, smp, est, every, at):
    full = _sample("logistic", smp, est, n_iter=260, store_grads=True)
    ckpt = tmp_path / "run.ckpt"
    with pytest.warns(sgmc.SamplingInterruptedWarning):
        part = _sample("logistic", smp, est, n_iter=260, store_grads=True, checkpoint=str(ckpt),
                       checkpoint_every=every, callback=_stop_at(at - 1))
    assert part.draws.shape[1] < 260
    resumed = sgmc.resume(str(ckpt), progress=False)
    np.testing.assert_array_equal(resumed.draws, full.draws)
    np.testing.assert_array_equal(resumed.grads, full.grads)
    for key in full.stats:
        if key != "wall_time":
            np.testing.assert_array_equal(resumed.stats[key], full.stats[key])


def test_callbacks_see_every_iteration_and_its_state():
    seen = []
    tr = _sample("linear", "sgld", "cv", n_iter=40, chains=1, callback=lambda k, s: seen.append((k, s.position.copy())))
    assert [k for k, _ in seen] == list(range(40))
    np.testing.assert_array_equal(np.stack([p[0] for _, p in seen]), tr.draws[0])


def test_a_declined_block_runs_the_twin(monkeypatch):
    m, sampler = MODELS["logistic"], SAMPLERS["sgld"]
    estimator = _estimator("cv", m)
    rng = backends.default_rng(2)
    state = sampler.init(rng, np.zeros((2, m.dim)), estimator)
    plan = _fused.plan(sampler, estimator, state.position)
    z, idx = plan.draw(rng, 4, 2)
    monkeypatch.setattr(plan, "fast", lambda *a: NotImplemented)
    got = plan.run(state, [1e-3] * 4, z, idx)
    want = _fused.twin_block(sampler, estimator, state, [1e-3] * 4, z, idx)
    np.testing.assert_array_equal(got.positions, want.positions)


def test_combinations_outside_the_fused_set_get_no_plan():
    m = MODELS["logistic"]
    assert _fused.plan(SGHMC(noise_estimate=np.ones(4)), Minibatch(m, 10), np.zeros((1, 4))) is None
    assert _fused.plan(SGLD(), ControlVariate(m, 10), np.zeros((1, 4))) is None  # no centre yet
    assert _fused.plan(SGLD(), Minibatch(m, 10), np.zeros((1, 4), dtype=np.float32)) is None
    assert _fused.plan(sgmc.samplers.PSGLD(), Minibatch(m, 10), np.zeros((1, 4))) is None


def test_a_run_whose_native_declines_steps_one_at_a_time_after_the_first_block(monkeypatch):
    calls = []
    real = _fused.twin_block

    def counted(*a, **kw):
        calls.append(len(a[3]))
        return real(*a, **kw)

    monkeypatch.setattr(_fused, "twin_block", counted)
    monkeypatch.setattr(_fused.FusedPlan, "__init__", _declining(_fused.FusedPlan.__init__))
    declined = _sample("logistic", "sgld", "minibatch", thin=3, burn_in=20, store_grads=True)
    assert calls == [50]  # one block on the twin (up to the first check), then the one-step loop
    monkeypatch.setattr(sgmc.chains, "fused_plan", lambda *a: None)
    loop = _sample("logistic", "sgld", "minibatch", thin=3, burn_in=20, store_grads=True)
    np.testing.assert_array_equal(declined.draws, loop.draws)
    np.testing.assert_array_equal(declined.grads, loop.grads)
    for key in loop.stats:
        if key != "wall_time":
            np.testing.assert_array_equal(declined.stats[key], loop.stats[key])


def _declining(init):
    def wrapped(self, sampler, estimator, fast):
        init(self, sampler, estimator, lambda *a: NotImplemented)

    return wrapped
