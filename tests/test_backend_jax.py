"""The JAX backend: its generator, the ``at`` update helper, and runs on ``jax.numpy`` arrays.

The statistical tests of the library run on JAX through the ``xb`` fixture (tests/conftest.py); this
module checks what is JAX's own: keys seeded and spawned from the seed's ``SeedSequence`` (same
streams in this process and in worker processes), immutable arrays updated through
:func:`sgmc._array_api.at`, ``backend="jax"``, the posterior summary and ArviZ export of a JAX
trace, and float32 without 64-bit mode (in a fresh interpreter, since the mode is global; a slow
test: ``pytest -m slow tests/test_backend_jax.py``).
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import numpy as np
from scipy import stats
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import sgmc  # noqa: E402
from sgmc import backends  # noqa: E402
from sgmc._array_api import at  # noqa: E402
from sgmc.backends._jax import JaxGenerator  # noqa: E402
from sgmc.models import LogisticRegression  # noqa: E402

from _helpers import Z_TOL  # noqa: E402

pytestmark = pytest.mark.skipif(not jax.config.jax_enable_x64, reason="the suite runs JAX in 64-bit mode")


def _logistic(n=2000, d=3, seed=0):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, d))
    y = (r.random(n) < 1.0 / (1.0 + np.exp(-X @ np.array([0.5, -1.0, 0.25])))).astype(np.float64)
    return X, y


# -- registry -------------------------------------------------------------------------------------
def test_jax_arrays_find_their_backend():
    x = jnp.ones(3)
    be = backends.get_backend(x)
    assert be.name == "jax" and be is backends.get_backend("jax") is backends.get_backend("jax.numpy")
    assert "jax" in backends.available_backends()
    assert pickle.loads(pickle.dumps(be)) is be
    y = backends.asarray(np.arange(3.0), backend="jax")
    assert isinstance(y, jax.Array) and y.dtype == jnp.float64
    np.testing.assert_array_equal(backends.to_numpy(y), np.arange(3.0))


# -- random numbers -------------------------------------------------------------------------------
def test_same_seed_same_draws_and_dtype_does_not_change_integers():
    a, b = backends.default_rng(11, backend="jax"), backends.default_rng(11, backend="jax")
    assert isinstance(a, JaxGenerator)
    np.testing.assert_array_equal(np.asarray(a.normal((5, 3))), np.asarray(b.normal((5, 3))))
    ia = a.integers(1000, (40,))
    ib = b.integers(1000, (40,), dtype=jnp.int32)
    assert ia.dtype == jnp.int64 and ib.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(ia), np.asarray(ib))
    # and the streams go on alike after draws of different dtypes
    np.testing.assert_array_equal(np.asarray(a.uniform((7,))), np.asarray(b.uniform((7,))))
    assert a.uniform((4,), dtype=jnp.float32).dtype == jnp.float32


@pytest.mark.parametrize("high", [7, 1000, 2**32 + 5])  # the scaled draw, and randint beyond its range
def test_integers_are_uniform_over_the_whole_range(high):
    g = backends.default_rng(21, backend="jax")
    x = np.asarray(g.integers(high, (140_000,)))
    assert x.min() >= 0 and x.max() < high
    bins = 7 if high == 7 else 20
    counts = np.bincount(np.minimum(x * bins // high, bins - 1).astype(np.int64), minlength=bins)
    # equal-width bins of the range (uneven by at most one value in `high`): a chi-square test, fixed seed
    expected = np.array([len(range(-(-b * high // bins), -(-(b + 1) * high // bins))) for b in range(bins)]) / high
    assert stats.chisquare(counts, expected * x.size).pvalue > 1e-3
    if high == 7:
        assert counts.min() > 0   # the top value is drawn too


def test_spawned_streams_are_reproducible_and_independent():
    g = backends.default_rng(3, backend="jax")
    g.normal((10,))  # draws made before spawning do not change the children (SPEC 7, as on the host)
    kids = g.spawn(3)
    again = backends.default_rng(3, backend="jax").spawn(3)
    n = 20000
    draws = [np.asarray(k.normal((n,))) for k in kids]
    for k, d in zip(again, draws):
        np.testing.assert_array_equal(np.asarray(k.normal((n,))), d)
    parent = np.asarray(g.normal((n,)))
    # independent standard normal streams: every correlation is within Z_TOL / sqrt(n) of 0
    streams = draws + [parent]
    for i in range(len(streams)):
        assert abs(streams[i].mean()) < Z_TOL / np.sqrt(n)
        assert abs(streams[i].var() - 1.0) < Z_TOL * np.sqrt(2.0 / n)
        for j in range(i):
            assert abs(np.corrcoef(streams[i], streams[j])[0, 1]) < Z_TOL / np.sqrt(n)


def test_generator_pickles_mid_stream():
    g = backends.default_rng(5, backend="jax")
    g.uniform((3,))
    h = pickle.loads(pickle.dumps(g))
    assert h.backend == g.backend and h.device == g.device
    np.testing.assert_array_equal(np.asarray(h.normal((6,))), np.asarray(g.normal((6,))))
    np.testing.assert_array_equal(np.asarray(h.spawn(1)[0].uniform((4,))), np.asarray(g.spawn(1)[0].uniform((4,))))


def test_64_bit_arrays_keep_their_dtype_through_pickle():
    for a in (jnp.arange(4.0), jnp.arange(4), jnp.ones(2, dtype=jnp.float32)):
        b = pickle.loads(pickle.dumps(a))
        assert b.dtype == a.dtype and isinstance(b, jax.Array)
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a))


# -- the one in-place helper ----------------------------------------------------------------------
def test_at_writes_in_place_where_it_can_and_copies_where_it_cannot():
    x = np.zeros((2, 3))
    y = at(x, (slice(None), 1)).set(1.0)
    assert y is x and x[:, 1].tolist() == [1.0, 1.0]
    y = at(x, 0).add(2.0)
    assert y is x and x.tolist() == [[2.0, 3.0, 2.0], [0.0, 1.0, 0.0]]
    j = jnp.zeros((2, 3))
    k = at(j, (slice(None), 1)).set(1.0)
    k = at(k, 0).add(2.0)
    np.testing.assert_array_equal(np.asarray(k), x)
    assert float(jnp.sum(j)) == 0.0  # JAX arrays are immutable: the original is unchanged
    ro = np.zeros(3)
    ro.flags.writeable = False
    out = at(ro, 1).set(5.0)
    assert out is not ro and out.tolist() == [0.0, 5.0, 0.0] and ro.tolist() == [0.0, 0.0, 0.0]


# -- runs -----------------------------------------------------------------------------------------
def test_process_workers_give_the_same_draws():
    # each group's key comes from the run's spawned SeedSequence, so a worker process draws what this
    # process draws, and 64-bit arrays arrive 64-bit in a worker that starts without 64-bit mode
    X, y = _logistic()
    m = LogisticRegression(jnp.asarray(X), jnp.asarray(y))
    kw = dict(step_size=1e-4, batch_size=50, n_iter=30, chains=4, group_size=2, rng=3, progress=False,
              store_grads=True, estimator_options={"update_every": 7})
    here = sgmc.sample(m, "sgld", "svrg", **kw)
    there = sgmc.sample(m, "sgld", "svrg", executor="processes", **kw)
    assert isinstance(here.draws, jax.Array) and here.draws.dtype == jnp.float64
    assert type(there.draws) is type(here.draws) and there.draws.dtype == here.draws.dtype
    np.testing.assert_array_equal(backends.to_numpy(here.draws), backends.to_numpy(there.draws))
    np.testing.assert_array_equal(backends.to_numpy(here.grads), backends.to_numpy(there.grads))
    # groups of one chain spawn different streams than groups of two: the draws do change
    other = sgmc.sample(m, "sgld", "svrg", **{**kw, "group_size": 1})
    assert not np.array_equal(backends.to_numpy(other.draws), backends.to_numpy(here.draws))


def test_backend_jax_moves_a_numpy_model_and_the_trace_summarises():
    X, y = _logistic()
    m = LogisticRegression(X, y)
    kw = dict(step_size=1e-3, batch_size=100, n_iter=300, burn_in=100, chains=4, rng=1, progress=False)
    tr = sgmc.sample(m, "sgld", "cv", backend="jax", **kw)
    assert backends.get_backend(tr.draws).name == "jax" and tr.draws.shape == (4, 200, 3)
    ref = sgmc.sample(m, "sgld", "cv", **kw)
    # different generators, one posterior: chain means agree within their Monte Carlo error
    a = backends.to_numpy(tr.draws).mean(axis=1)
    b = ref.draws.mean(axis=1)
    se = np.sqrt(a.var(axis=0, ddof=1) / 4 + b.var(axis=0, ddof=1) / 4)
    assert np.all(np.abs(a.mean(axis=0) - b.mean(axis=0)) < Z_TOL * se + 1e-3)
    table = tr.summary()
    assert len(table.index) == 3
    np.testing.assert_allclose(np.asarray(table["mean"]), backends.to_numpy(tr.draws).mean(axis=(0, 1)), rtol=1e-12)
    assert np.all(np.isfinite(np.asarray(table["ess_bulk"]))) and np.all(np.asarray(table["r_hat"]) < 1.2)
    az = pytest.importorskip("arviz")
    idata = tr.to_arviz()
    assert isinstance(idata, az.InferenceData)
    post = idata.posterior
    name = next(iter(post.data_vars))
    assert post[name].shape[:2] == (4, 200)


_FLOAT32_SCRIPT = textwrap.dedent(
    """
    import warnings
    warnings.simplefilter("error")
    # outside the sampling loop JAX says (rightly) that int64 indices are computed as int32
    warnings.filterwarnings("ignore", message="Explicitly requested dtype int64", category=UserWarning)
    import numpy as np
    import jax, jax.numpy as jnp
    import sgmc
    from sgmc.diagnostics import ess, ksd
    from sgmc.models import LogisticRegression
    assert not jax.config.jax_enable_x64
    r = np.random.default_rng(0)
    X = r.standard_normal((1000, 3)).astype(np.float32)
    y = (r.random(1000) < 0.5).astype(np.float32)
    m = LogisticRegression(jnp.asarray(X), jnp.asarray(y))
    tr = sgmc.sample(m, "sgld", "cv", step_size=1e-3, batch_size=50, n_iter=200, burn_in=50, chains=2,
                     rng=0, progress=False, store_grads=True)
    assert tr.draws.dtype == jnp.float32, tr.draws.dtype
    assert bool(jnp.all(jnp.isfinite(tr.draws)))
    k = ksd(tr.draws[0], tr.grads[0])
    e = ess(tr.draws)
    print("ok", float(k), np.asarray(e).min())
    """
)


@pytest.mark.slow  # a fresh interpreter compiles every operation again in 32-bit mode: about 35 s of CPU
def test_float32_without_64_bit_mode():
    out = subprocess.run([sys.executable, "-c", _FLOAT32_SCRIPT], capture_output=True, text=True, timeout=600,
                         env={**__import__("os").environ, "JAX_ENABLE_X64": "0"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok")
