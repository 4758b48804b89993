"""Checks shared by the fused-block tests of the BNN and BPMF (tests/test_fused_bnn.py, test_fused_bpmf.py).

Three independent references, as for the GLMs (tests/test_fused.py): the twin (the samplers' own
array-API ``step`` fed the same pre-drawn numbers), the unfused loop (``step`` drawing from the
generator itself, with the compiled paths off), and an uninterrupted run for checkpoints.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import sgmc
from sgmc import backends
from sgmc.backends import _numba
from sgmc.estimators import SVRG, ControlVariate, Minibatch
from sgmc.samplers import SGHMC, SGLD, SGNHT
from sgmc.samplers import _fused

SAMPLERS = {
    "sgld": SGLD(),
    "sghmc": SGHMC(friction=1.5, n_leapfrog=3),
    "sghmc-plain": SGHMC(n_leapfrog=2, resample_momentum=False, noise_estimate=0.5),
    "sgnht": SGNHT(diffusion=0.8),
}
ESTIMATORS = ["minibatch", "minibatch-replace", "cv", "svrg"]
BATCH = 20


def estimator(name, model):
    if name == "minibatch":
        return Minibatch(model, BATCH)
    if name == "minibatch-replace":
        return Minibatch(model, BATCH, replace=True)
    if name == "cv":
        return ControlVariate(model, BATCH, centre=np.random.default_rng(7).normal(scale=0.1, size=model.dim))
    return SVRG(model, BATCH, update_every=3)


def close(a, b, tol=1e-12):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    assert np.max(np.abs(a - b)) <= tol * max(1.0, float(np.max(np.abs(b))))


def native_equals_twin(model, smp, est, chains=3, iterations=7):
    """The native block (which must run, not decline) against the twin on the same numbers."""
    sampler, estimator_ = SAMPLERS[smp], estimator(est, model)
    rng = backends.default_rng(3)
    state = sampler.init(rng, np.random.default_rng(1).normal(scale=0.1, size=(chains, model.dim)), estimator_)
    plan = _fused.plan(sampler, estimator_, state.position)
    assert plan is not None
    hs = [1e-3 * (1 + 0.1 * t) for t in range(iterations)]
    z, idx = plan.draw(rng, iterations, chains)
    assert z.shape == (iterations, plan.n_normal, chains, model.dim)
    assert idx.shape == (iterations, plan.n_est, chains, BATCH)
    calls, original = [], plan.fast

    def fast(*args):
        out = original(*args)
        calls.append(out is not NotImplemented)
        return out

    plan.fast = fast
    got = plan.run(state, hs, z, idx, keep_grads=True)
    assert calls == [True]  # the compiled block ran
    twin = _fused.twin_block(sampler, estimator_, state, hs, z, idx, keep_grads=True)
    close(got.positions, twin.positions)
    close(got.grads, twin.grads)
    for a, b in zip(got.state, twin.state):
        if a is None:
            assert b is None
        elif isinstance(a, tuple):  # the estimator's state
            for u, v in zip(a, b):
                close(u, v)
        else:
            close(a, b)
    assert len(got.infos) == len(twin.infos) == iterations
    for a, b in zip(got.infos, twin.infos):
        assert np.all(a.n_evals == b.n_evals) and np.all(a.estimate.batch_size == b.estimate.batch_size)
        assert (a.extras is None) == (b.extras is None)
        if a.extras is not None:
            close(a.extras["thermostat"], b.extras["thermostat"])


def sample(model, smp, est, **kw):
    args = dict(step_size=1e-3, n_iter=60, chains=2, rng=5, progress=False, check_every=25)
    args.update(kw)
    return sgmc.sample(model, SAMPLERS[smp], estimator(est, model), **args)


def run_equals_loop(model, smp, est, monkeypatch):
    """A whole ``sample`` with fused blocks against the one-step loop (and the twin's blocks against both)."""
    kw = dict(thin=3, burn_in=5, store_grads=True)
    fused = sample(model, smp, est, **kw)
    old = _numba.set_enabled(False)
    try:
        twin = sample(model, smp, est, **kw)  # the block loop, each block on the twin
        with monkeypatch.context() as mp:
            mp.setattr(sgmc.chains, "fused_plan", lambda *a: None)
            loop = sample(model, smp, est, **kw)  # one step at a time, drawing from the generator
    finally:
        _numba.set_enabled(old)
    np.testing.assert_array_equal(twin.draws, loop.draws)
    np.testing.assert_array_equal(twin.grads, loop.grads)
    close(fused.draws, loop.draws, 1e-11)
    close(fused.grads, loop.grads, 1e-11)
    assert sorted(fused.stats) == sorted(loop.stats)
    for key in fused.stats:
        if key != "wall_time":
            close(fused.stats[key], loop.stats[key], 1e-11)


def _stop_at(iteration):
    def callback(k, state):
        if k == iteration:
            os.kill(os.getpid(), signal.SIGINT)

    return callback


def resumes_bit_identically(model, smp, est, every, at, tmp_path, n_iter=90):
    """Stopped mid-run (checkpoints every ``every``), resumed: the draws of an uninterrupted run, bit for bit."""
    full = sample(model, smp, est, n_iter=n_iter, store_grads=True)
    ckpt = tmp_path / "run.ckpt"
    with pytest.warns(sgmc.SamplingInterruptedWarning):
        part = sample(model, smp, est, n_iter=n_iter, store_grads=True, checkpoint=str(ckpt),
                      checkpoint_every=every, callback=_stop_at(at - 1))
    assert part.draws.shape[1] < n_iter
    resumed = sgmc.resume(str(ckpt), progress=False)
    np.testing.assert_array_equal(resumed.draws, full.draws)
    np.testing.assert_array_equal(resumed.grads, full.grads)
    for key in full.stats:
        if key != "wall_time":
            np.testing.assert_array_equal(resumed.stats[key], full.stats[key])


def declines_cleanly(model, name):
    """float32 positions get no plan; a native that declines runs the twin."""
    assert _fused.plan(SGLD(), Minibatch(model, BATCH), np.zeros((1, model.dim), dtype=np.float32)) is None
    assert _fused.plan(sgmc.samplers.PSGLD(), Minibatch(model, BATCH), np.zeros((1, model.dim))) is None
    fast = _fused.native(model.xp, name)
    sampler, est = SAMPLERS["sgld"], estimator("minibatch", model)
    rng = backends.default_rng(2)
    state = sampler.init(rng, np.zeros((2, model.dim)), est)
    plan = _fused.plan(sampler, est, state.position)
    assert plan.fast is fast
    z, idx = plan.draw(rng, 3, 2)
    spec = {"x": state.position.astype(np.float32), "g": state.grad, "rho": None, "xi": None}
    assert fast(plan._spec_model, plan._spec_smp, plan._spec_est, spec, [1e-3] * 3, z, idx, False) is NotImplemented
    old = _numba.set_enabled(False)
    try:
        spec["x"] = state.position
        assert fast(plan._spec_model, plan._spec_smp, plan._spec_est, spec, [1e-3] * 3, z, idx, False) is NotImplemented
    finally:
        _numba.set_enabled(old)
    plan.fast = lambda *a: NotImplemented
    got = plan.run(state, [1e-3] * 3, z, idx)
    want = _fused.twin_block(sampler, est, state, [1e-3] * 3, z, idx)
    np.testing.assert_array_equal(got.positions, want.positions)
