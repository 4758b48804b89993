"""Steps and models under JAX's transforms: keys as values, ``jit``, ``lax.scan``, ``vmap`` and ``grad``.

A sampler's ``init``/``step`` and an estimator's ``init``/``estimate`` take a JAX key as ``rng`` and split
it functionally (sgmc._keys), so a step compiled with ``jax.jit``, run inside ``jax.lax.scan`` or mapped
with ``jax.vmap`` makes exactly the eager call's draws for the same key. Positions agree to rounding
(XLA fuses the arithmetic differently), so they are compared at 1e-12; the noise itself is compared
exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from sgmc import estimators as E  # noqa: E402
from sgmc import models, samplers as S  # noqa: E402
from sgmc._keys import as_generator  # noqa: E402
from sgmc.backends._jax import JaxGenerator  # noqa: E402
from sgmc import backends  # noqa: E402

pytestmark = pytest.mark.skipif(not jax.config.jax_enable_x64, reason="the suite runs JAX in 64-bit mode")

N, D, CH = 400, 3, 2


def _model():
    r = np.random.default_rng(3)
    X = r.standard_normal((N, D))
    y = (r.random(N) < 1.0 / (1.0 + np.exp(-X @ np.array([0.5, -1.0, 0.25])))).astype(np.float64)
    return models.LogisticRegression(jnp.asarray(X), jnp.asarray(y))


MODEL = _model()
START = jnp.asarray(np.random.default_rng(4).normal(scale=0.1, size=(CH, D)))
CENTRE = jnp.asarray([0.4, -0.9, 0.2])

SAMPLERS = {
    "sgld": S.SGLD, "ula": S.ULA, "psgld": S.PSGLD, "sghmc": S.SGHMC, "sgnht": S.SGNHT,
    "sgrld": lambda: S.SGRLD(model=MODEL), "sgrhmc": lambda: S.SGRHMC(metric=S.GLMFisherMetric(MODEL).value(CENTRE[None, :])[0]),
    "recipe": lambda: S.Recipe(D=jnp.eye(D)), "baoab": S.BAOAB, "badodab": S.BADODAB,
}
ESTIMATORS = {
    "minibatch": lambda: E.Minibatch(MODEL, 40),
    "minibatch-replace": lambda: E.Minibatch(MODEL, 40, replace=True),
    "full": lambda: E.FullGradient(MODEL),
    "cv": lambda: E.ControlVariate(MODEL, 40, centre=CENTRE),
    "svrg": lambda: E.SVRG(MODEL, 40, update_every=2),
    "saga": lambda: E.SAGA(MODEL, 40),
    "ps": lambda: E.PreferentialSubsampling(MODEL, 40, centre=CENTRE),
    "cv-ps": lambda: E.ControlVariatePS(MODEL, 40, centre=CENTRE),
}


def _prepared(est):
    if hasattr(est, "prepare"):
        return est.prepare(jax.random.key(99), START).estimator
    return est


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-13)


def _eager_and_jit(sampler, est, h=0.01):
    key = jax.random.key(7)
    k0, k1 = jax.random.split(key)
    state = sampler.init(k0, START, est)
    eager, _ = sampler.step(k1, state, est, h)
    jitted, _ = jax.jit(lambda k, s: sampler.step(k, s, est, h))(k1, state)
    return state, eager, jitted


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_every_fixed_shape_sampler_compiles_to_the_eager_draws(name):
    sampler = SAMPLERS[name]()
    est = E.FullGradient(MODEL, log_density=True) if name in ("ula",) else E.Minibatch(MODEL, 40)
    _, eager, jitted = _eager_and_jit(sampler, est)
    _close(eager.position, jitted.position)
    assert not np.allclose(np.asarray(eager.position), np.asarray(START))


def test_mala_compiles_to_the_eager_draws_and_acceptances():
    sampler, est = S.MALA(), E.FullGradient(MODEL, log_density=True)
    key = jax.random.key(5)
    state = sampler.init(key, START, est)
    eager, e_info = sampler.step(key, state, est, 0.05)
    jitted, j_info = jax.jit(lambda k, s: sampler.step(k, s, est, 0.05))(key, state)
    _close(eager.position, jitted.position)
    np.testing.assert_array_equal(np.asarray(e_info.accepted), np.asarray(j_info.accepted))


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_fixed_shape_estimator_compiles_to_the_eager_draws(name):
    est = _prepared(ESTIMATORS[name]())
    _, eager, jitted = _eager_and_jit(S.SGLD(), est)
    _close(eager.position, jitted.position)
    _close(eager.grad, jitted.grad)


@pytest.mark.parametrize("name", ["minibatch", "svrg", "saga", "cv-ps"])
def test_scan_over_iterations_equals_the_eager_loop(name):
    est = _prepared(ESTIMATORS[name]())
    sampler = S.SGHMC()
    keys = jax.random.split(jax.random.key(11), 6)
    state = sampler.init(keys[0], START, est)
    s = state
    eager = []
    for k in keys[1:]:
        s, _ = sampler.step(k, s, est, 0.01)
        eager.append(s.position)

    def body(carry, k):
        nxt, _ = sampler.step(k, carry, est, 0.01)
        return nxt, nxt.position

    _, scanned = jax.jit(lambda s0, ks: jax.lax.scan(body, s0, ks))(state, keys[1:])
    _close(jnp.stack(eager), scanned)


def test_vmap_over_keys_gives_each_keys_eager_step():
    est = E.Minibatch(MODEL, 40)
    sampler = S.SGLD()
    state = sampler.init(jax.random.key(0), START, est)
    keys = jax.random.split(jax.random.key(1), 3)
    mapped, _ = jax.vmap(lambda k: sampler.step(k, state, est, 0.01))(keys)
    for i in range(3):
        one, _ = sampler.step(keys[i], state, est, 0.01)
        _close(one.position, mapped.position[i])


def test_a_key_draws_what_the_generator_at_that_key_draws():
    gen = JaxGenerator(backends.get_backend("jax"), np.random.SeedSequence(3))
    key = gen.key
    stream = as_generator(key)
    a, b = stream.normal((4,)), stream.normal((4,))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(gen.normal((4,))))
    np.testing.assert_array_equal(np.asarray(b), np.asarray(gen.normal((4,))))
    assert not np.allclose(np.asarray(a), np.asarray(b))


def test_raw_and_typed_keys_give_the_same_draws():
    raw = jax.random.PRNGKey(3)
    typed = jax.random.wrap_key_data(raw)
    est, sampler = E.Minibatch(MODEL, 40), S.SGLD()
    state = sampler.init(typed, START, est)
    a, _ = sampler.step(raw, state, est, 0.01)
    b, _ = sampler.step(typed, state, est, 0.01)
    np.testing.assert_array_equal(np.asarray(a.position), np.asarray(b.position))


def test_a_numpy_generator_is_refused_with_its_fix():
    with pytest.raises(TypeError, match="HostGenerator.from_numpy"):
        S.SGLD().init(np.random.default_rng(0), START, E.Minibatch(MODEL, 40))


def test_sgld_in_a_scan_samples_a_gaussian_with_its_stationary_variance():
    """SGLD's noise must be fresh at every iteration: with a key reused, the chain would not diffuse."""
    target = models.GaussianTarget(jnp.zeros(1), jnp.ones((1, 1)))
    est, sampler, h, n = E.FullGradient(target), S.ULA(), 0.1, 20000
    start = jnp.zeros((1, 1))
    state = sampler.init(jax.random.key(0), start, est)

    def body(s, k):
        s, _ = sampler.step(k, s, est, h)
        return s, s.position[0, 0]

    _, xs = jax.jit(lambda s, ks: jax.lax.scan(body, s, ks))(state, jax.random.split(jax.random.key(1), n))
    xs = np.asarray(xs)[1000:]
    # ULA on N(0, 1): AR(1) with coefficient 1 - h/2 and stationary variance 1 / (1 - h/4).
    want = 1.0 / (1.0 - h / 4.0)
    rho = 1.0 - h / 2.0
    n_eff = xs.size * (1 - rho) / (1 + rho)
    se = want * np.sqrt(2.0 / n_eff)
    assert abs(xs.var() - want) < 5 * se
    assert abs(xs.mean()) < 5 * np.sqrt(want / n_eff)


@pytest.mark.parametrize("name", ["sgld_corrected", "sghmc-noise", "cv-switch"])
def test_checks_that_stay_on_the_device_trace(name):
    if name == "cv-switch":
        sampler, est = S.SGLD(), _prepared(E.SwitchingControlVariate(MODEL, 40, centre=CENTRE, radius=0.5))
    elif name == "sgld_corrected":
        sampler, est = S.VollmerSGLD(), E.MinibatchNoise(MODEL, 40)
    else:
        sampler, est = S.SGHMC(noise_estimate="minibatch"), E.MinibatchNoise(MODEL, 40)
    _, eager, jitted = _eager_and_jit(sampler, est, h=1e-3)
    _close(eager.position, jitted.position)
    assert np.isfinite(np.asarray(jitted.position)).all()


def test_a_failed_noise_correction_off_numpy_stops_the_chain_for_the_runner():
    sampler, est = S.VollmerSGLD(), E.MinibatchNoise(MODEL, 40)
    key = jax.random.key(2)
    state = sampler.init(key, START, est)
    bad, _ = jax.jit(lambda k, s: sampler.step(k, s, est, 50.0))(key, state)  # h far beyond 4 / V_hat
    assert np.isnan(np.asarray(bad.position)).all()
    assert "clip=True" in sampler.step_note


@pytest.mark.parametrize("what", ["dpp", "adaptive", "scir"])
def test_steps_whose_shapes_depend_on_values_say_so_under_tracing(what):
    from sgmc._keys import TracingError

    if what == "scir":
        simplex = models.DirichletCategorical(jnp.asarray(np.eye(3)[[0, 0, 1, 0, 2, 0]]), alpha=0.5)
        sampler, est, start = S.SCIR(), E.Minibatch(simplex, 3), jnp.full((1, 3), 1.0)
    else:
        sampler, start = S.SGLD(), START
        est = (E.DPPSubsampling(MODEL, 10) if what == "dpp"
               else _prepared(E.AdaptiveControlVariate(MODEL, 40, centre=CENTRE, v0=1.0)))
    state = sampler.init(jax.random.key(0), start, est)
    with pytest.raises(TracingError, match="cannot run under jax.jit"):
        jax.jit(lambda k, s: sampler.step(k, s, est, 1e-3))(jax.random.key(1), state)


def test_a_generator_with_its_key_in_python_is_refused_under_jit():
    gen = JaxGenerator(backends.get_backend("jax"), np.random.SeedSequence(1))
    est, sampler = E.Minibatch(MODEL, 40), S.SGLD()
    state = sampler.init(gen, START, est)
    before = gen.key
    with pytest.raises(TypeError, match="pass a JAX key"):
        jax.jit(lambda s: sampler.step(gen, s, est, 0.01))(state)
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(gen.key)), np.asarray(jax.random.key_data(before)))


def test_the_buffered_state_space_estimator_compiles_to_the_eager_draws():
    from sgmc import ssm

    r = np.random.default_rng(0)
    y = np.cumsum(r.normal(size=300)) * 0.1 + r.normal(size=300)
    model = ssm.LGSSM(jnp.asarray(y[:, None]), 1)
    est, sampler = ssm.Buffered(model, 20, buffer=5), S.SGLD()
    key = jax.random.key(0)
    state = sampler.init(key, jnp.full((2, model.dim), 0.1), est)
    eager, _ = sampler.step(key, state, est, 1e-3)
    jitted, _ = jax.jit(lambda k, s: sampler.step(k, s, est, 1e-3))(key, state)
    _close(eager.position, jitted.position)


def test_a_control_variate_prepares_its_centre_from_a_key():
    prepared = E.ControlVariate(MODEL, 40).prepare(jax.random.key(0), START)
    state = S.SGLD().init(jax.random.key(1), START, prepared.estimator)
    assert np.isfinite(np.asarray(state.grad)).all()
