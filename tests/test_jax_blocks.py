"""``sgmc.sample`` on JAX arrays runs blocks of iterations compiled as one ``jit(lax.scan)``.

The compiled blocks (sgmc.samplers._compiled) must make the step-by-step loop's draws: the same keys in
the same order, the generator left where the loop leaves it. Each test runs both paths (the loop by
switching the compiled plan off) and compares the kept draws to rounding; a key carried wrongly through
the scan would repeat or skip noise and fail at the first kept draw.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import sgmc  # noqa: E402
from sgmc import chains, models  # noqa: E402

pytestmark = pytest.mark.skipif(not jax.config.jax_enable_x64, reason="the suite runs JAX in 64-bit mode")


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Each test compiles its own blocks (compiled blocks are otherwise kept across runs)."""
    from sgmc.backends import _jax_blocks

    _jax_blocks.clear_cache()
    yield
    _jax_blocks.clear_cache()


def _model():
    r = np.random.default_rng(0)
    X = r.standard_normal((600, 3))
    y = (r.random(600) < 1.0 / (1.0 + np.exp(-X @ np.array([1.0, -0.5, 0.25])))).astype(np.float64)
    return models.LogisticRegression(X, y, backend="jax")


MODEL = _model()


def _both(monkeypatch, **kw):
    args = dict(batch_size=30, step_size=2e-3, n_iter=250, chains=2, rng=5, progress=False, check_every=100)
    args.update(kw)
    compiled = sgmc.sample(MODEL, **args)
    with monkeypatch.context() as mp:
        mp.setattr(chains, "compiled_plan", lambda *a: None)
        looped = sgmc.sample(MODEL, **args)
    return compiled, looped


def _same(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("sampler,estimator", [("sgld", "minibatch"), ("sghmc", "svrg"), ("sgnht", "cv"),
                                               ("psgld", "saga")])
def test_compiled_blocks_make_the_step_by_step_draws(monkeypatch, sampler, estimator):
    opts = {"update_every": 7} if estimator == "svrg" else None
    compiled, looped = _both(monkeypatch, sampler=sampler, estimator=estimator, estimator_options=opts)
    assert compiled.info["compile_time"] > 0
    assert "compile_time" not in looped.info
    _same(compiled.draws, looped.draws)
    np.testing.assert_array_equal(compiled.stats["n_evals"], looped.stats["n_evals"])


def test_a_schedule_thinning_and_stored_gradients_compile_alike(monkeypatch):
    compiled, looped = _both(monkeypatch, sampler="sgld", estimator="minibatch",
                             step_size=sgmc.samplers.polynomial(3e-3, 10.0, 0.55), thin=3, burn_in=40,
                             store_grads=True)
    _same(compiled.draws, looped.draws)
    _same(compiled.grads, looped.grads)
    assert compiled.draws.shape == looped.draws.shape == (2, 70, 3)


def test_a_step_that_cannot_be_traced_runs_step_by_step_on_the_same_stream(monkeypatch):
    compiled, looped = _both(monkeypatch, sampler="sgld", estimator="dpp", n_iter=30)
    _same(compiled.draws, looped.draws)
    assert "compile_time" not in compiled.info


def test_a_jax_key_seeds_a_run_reproducibly():
    import jax.random as jr

    args = dict(step_size=1e-3, batch_size=30, n_iter=40, rng=jr.key(3), progress=False, burn_in=0)
    a = sgmc.sample(MODEL, **args)
    b = sgmc.sample(MODEL, **args)
    c = sgmc.sample(MODEL, **{**args, "rng": jr.key(4)})
    np.testing.assert_array_equal(np.asarray(a.draws), np.asarray(b.draws))
    assert not np.allclose(np.asarray(a.draws), np.asarray(c.draws))


def test_window_statistics_computed_in_the_block_equal_the_loops(monkeypatch):
    compiled, looped = _both(monkeypatch, sampler="sgld", estimator="minibatch", n_iter=430, burn_in=150)
    for key in ("abs_max", "stein", "stein_n"):
        assert key in compiled.stats
        _same(compiled.stats[key], looped.stats[key])
    assert compiled.stats["stein_n"].sum() == 2 * (430 - 150 - 1)   # every iteration after the centre, per chain


def _direct(n_iter, stop=None, checkpoint=None, resume=None):
    from sgmc import backends, estimators, samplers

    return chains.run_chains(samplers.SGLD(), estimators.Minibatch(MODEL, 30), backends.default_rng(11, backend="jax"),
                             jax.numpy.zeros((2, 3)), [2e-3] * n_iter, list(range(n_iter)), check_every=100,
                             stop=stop, checkpoint=checkpoint, resume=resume)


def test_a_stop_between_two_windows_of_one_block_ends_there_and_resumes_as_one_run():
    calls, saved = [], []

    def stop():  # consulted once per window: true at the third, inside the first block (500 iterations)
        calls.append(1)
        return len(calls) == 3

    full = _direct(500)
    part = _direct(500, stop=stop, checkpoint=saved.append)
    assert part.n_done == 300 and part.draws.shape == (2, 300, 3)
    _same(part.draws, full.draws[:, :300, :])
    assert [p.k for p in saved] == [300]
    resumed = _direct(500, resume=saved[0])  # the state and generator where window 3 ended
    _same(resumed.draws, full.draws)
    for key in ("abs_max", "stein", "stein_n"):
        _same(resumed.stats[key], full.stats[key])


def test_compiled_blocks_are_kept_across_runs_and_only_for_what_they_were_traced_with(monkeypatch):
    args = dict(batch_size=30, step_size=2e-3, n_iter=250, chains=2, rng=5, progress=False, check_every=100)
    first = sgmc.sample(MODEL, "sghmc", **args)
    again = sgmc.sample(MODEL, "sghmc", **args)               # equal settings: nothing compiles
    assert first.info["compile_time"] > 0 and "compile_time" not in again.info
    np.testing.assert_array_equal(np.asarray(again.draws), np.asarray(first.draws))
    # what the trace reads changed: a sampler setting, the model's data (same shapes): compiled afresh
    r = np.random.default_rng(1)
    other = models.LogisticRegression(r.standard_normal((600, 3)), (r.random(600) < 0.5) * 1.0, backend="jax")
    for model, opts in ((MODEL, {"friction": 2.5}), (other, None)):
        fresh = sgmc.sample(model, "sghmc", sampler_options=opts, **args)
        assert fresh.info["compile_time"] > 0
        with monkeypatch.context() as mp:
            mp.setattr(chains, "compiled_plan", lambda *a: None)
            looped = sgmc.sample(model, "sghmc", sampler_options=opts, **args)
        _same(fresh.draws, looped.draws)
