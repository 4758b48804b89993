"""Data stored in chunks (zarr, Dask): each touched chunk read once per gather, and the chunk-aware estimator.

The reads are counted at the storage: a zarr store that records every key it is asked for, and a
Dask array over an object that records every slice taken from it. The estimator's unbiasedness is
checked datum by datum: over many independent draws (one per row of a wide ``chains`` axis), the
weight each datum receives must average 1, within Monte Carlo error, for every datum; the gradient
estimates must average the exact full-data gradient, and their variance must be the one stated in
the docstring (its standard error from the fourth moment). A weight that ignores the chunks' sizes
fails the first check.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

import sgmc
from _helpers import Z_TOL
from sgmc._blocks import RowSource
from sgmc.backends import default_rng
from sgmc.estimators import ChunkedMinibatch, make_estimator
from sgmc.models import LinearRegression, LogisticRegression

zarr = pytest.importorskip("zarr")
da = pytest.importorskip("dask.array")


class _CountingStore(zarr.storage.WrapperStore):
    """A zarr store that counts the reads of every key."""

    def __init__(self, store):
        super().__init__(store)
        self.reads = collections.Counter()

    async def get(self, key, prototype, byte_range=None):
        self.reads[key] += 1
        return await super().get(key, prototype, byte_range)


class _CountingArray:
    """What ``dask.array.from_array`` reads from: an array that counts the row slices taken from it."""

    def __init__(self, a):
        self.a, self.shape, self.dtype, self.ndim = a, a.shape, a.dtype, a.ndim
        self.reads = collections.Counter()

    def __getitem__(self, key):
        rows = key[0] if isinstance(key, tuple) else key
        if isinstance(rows, slice) and rows.stop != rows.start:       # dask's (0, 0) probe of the dtype is no read
            self.reads[(rows.start, rows.stop)] += 1
        return self.a[key]


def _zarr(X, chunk_rows):
    store = _CountingStore(zarr.storage.MemoryStore())
    z = zarr.create_array(store, shape=X.shape, chunks=(chunk_rows, X.shape[1]), dtype=X.dtype)
    z[:] = X
    store.reads.clear()
    return z, store


def _chunk_reads(store):
    """Reads of the chunk keys (``c/<row chunk>/0``), by row chunk."""
    out = collections.Counter()
    for key, k in store.reads.items():
        parts = key.split("/")
        if "c" in parts:
            out[int(parts[parts.index("c") + 1])] += k
    return out


def test_a_zarr_gather_reads_each_touched_chunk_once():
    X = np.random.default_rng(0).normal(size=(5000, 3))
    z, store = _zarr(X, 400)                                   # 13 chunks, the last one ragged
    src = RowSource(z)
    src.block_rows = 900                                       # gathers go in groups of about 900 rows
    np.testing.assert_array_equal(src.chunk_bounds, np.append(np.arange(0, 5000, 400), 5000))
    idx = np.array([[4999, 3, 3, 401, 4000], [12, 4999, 2500, 2501, 10]])
    np.testing.assert_array_equal(src.take(idx), X[idx.reshape(-1)])
    touched = set((np.unique(idx) // 400).tolist())
    assert _chunk_reads(store) == {c: 1 for c in touched}


def test_a_dask_gather_reads_each_touched_chunk_once():
    X = np.random.default_rng(1).normal(size=(3000, 2))
    raw = _CountingArray(X)
    src = RowSource(da.from_array(raw, chunks=(250, 2)))
    src.block_rows = 600
    rows = np.random.default_rng(2).integers(0, 3000, size=(3, 40))
    np.testing.assert_array_equal(src.take(rows), X[rows.reshape(-1)])
    touched = {(250 * c, 250 * c + 250) for c in np.unique(rows // 250).tolist()}
    assert dict(raw.reads) == {t: 1 for t in touched}


def test_an_iteration_on_zarr_reads_each_chunk_once_and_the_chunked_one_few():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(6000, 3))
    y = (rng.uniform(size=6000) < 0.5).astype(float)
    z, store = _zarr(X, 200)                                   # 30 chunks
    model = LogisticRegression(z, y)
    theta = np.zeros((200, 3))                                 # enough chains for the GLMs' chain blocks in memory
    for name, opts in [("minibatch", {}), ("cv", {"centre": np.zeros(3)}), ("chunked", {"n_chunks": 2})]:
        est = make_estimator(name, model, 300, **opts)
        state = est.init(default_rng(0), theta)
        store.reads.clear()
        est.estimate(default_rng(1), state, theta)             # one iteration's gradient, all chains
        reads = _chunk_reads(store)
        assert max(reads.values()) == 1, name                  # each touched chunk once
        if name == "chunked":
            assert len(reads) <= 2 * 200
        else:
            assert len(reads) == 30, name                       # a uniform minibatch touches them all
    store.reads.clear()
    sgmc.sample(model, "sgld", "chunked", batch_size=300, step_size=1e-4, n_iter=3, chains=2, rng=0, progress=False,
                burn_in=0, estimator_options={"n_chunks": 2})
    assert len(_chunk_reads(store)) <= 2 * 2 * 4                 # three iterations and the start's gradient


def _design():
    """Ragged chunks whose data differ: a response and a column that grow along the rows."""
    rng = np.random.default_rng(4)
    n = 60
    X = np.column_stack([np.ones(n), np.linspace(-2, 2, n) + 0.3 * rng.normal(size=n)])
    y = 0.5 * X[:, 1] + np.linspace(0, 3, n) + rng.normal(size=n)
    return LinearRegression(X, y), [0, 7, 20, 33, 45, 60]


def _weights_per_datum(est, rng, draws):
    idx, w = est.draw(rng, draws)
    idx, w = np.asarray(idx), np.asarray(w)
    c = np.zeros((draws, est.model.n_data))
    np.add.at(c, (np.repeat(np.arange(draws), idx.shape[1]), idx.reshape(-1)), w.reshape(-1))
    return c


def _max_z(samples, target):
    mean = samples.mean(axis=0)
    se = samples.std(axis=0, ddof=1) / np.sqrt(samples.shape[0])
    return float(np.max(np.abs(mean - target) / se))


@pytest.mark.parametrize("probs", [None, "size", [1.0, 3.0, 0.5, 2.0, 1.0]])
def test_every_datum_has_expected_weight_one(probs):
    model, bounds = _design()
    est = ChunkedMinibatch(model, 8, n_chunks=2, chunks=bounds, chunk_probs=probs)
    c = _weights_per_datum(est, default_rng(5), 40_000)
    assert _max_z(c, 1.0) < Z_TOL


def test_a_weight_that_ignores_the_chunk_sizes_is_caught():
    model, bounds = _design()
    est = ChunkedMinibatch(model, 8, n_chunks=2, chunks=bounds)
    xp = model.xp
    # the broken weight: every row weighs (K / m) (mean chunk size / r), as if the chunks were equal
    est._row_weight = xp.full((5,), (5 / 2) * (60 / 5) / 4, dtype=xp.float64)
    c = _weights_per_datum(est, default_rng(5), 40_000)
    assert _max_z(c, 1.0) > Z_TOL                          # the check of the estimator rejects it


def _stated_variance(model, theta, bounds, m, r, probs):
    """The docstring's variance of the likelihood part, per coordinate, from the per-datum gradients."""
    g = np.asarray(model.grad_log_lik(theta[None, :]))[0]        # (N, dim)
    sizes = np.diff(bounds)
    K = sizes.size
    T = np.array([g[a:b].sum(axis=0) for a, b in zip(bounds[:-1], bounds[1:])])
    s2 = np.array([g[a:b].var(axis=0) for a, b in zip(bounds[:-1], bounds[1:])])
    within = sizes[:, None] ** 2 * s2 / r
    if probs is None:
        Sb2 = T.var(axis=0, ddof=1)
        return K**2 * (1 - m / K) * Sb2 / m + (K / m) * within.sum(axis=0)
    p = np.asarray(probs, dtype=float) / np.sum(probs)
    return ((T**2 / p[:, None]).sum(axis=0) - T.sum(axis=0) ** 2) / m + (within / p[:, None]).sum(axis=0) / m


@pytest.mark.parametrize("probs", [None, [1.0, 3.0, 0.5, 2.0, 1.0]])
def test_gradient_estimates_are_unbiased_with_the_stated_variance(probs):
    model, bounds = _design()
    m, r = 2, 4
    est = ChunkedMinibatch(model, m * r, n_chunks=m, chunks=bounds, chunk_probs=probs)
    theta = np.array([0.3, -0.2])
    draws = 100_000
    pos = np.broadcast_to(theta, (draws, 2)).copy()
    g, _, info = est.estimate(default_rng(6), None, pos)
    g = np.asarray(g)
    assert info.n_evals == m * r
    exact = np.asarray(model.grad_log_posterior(theta))
    assert _max_z(g, exact) < Z_TOL
    lik = g - np.asarray(model.grad_log_prior(pos))
    dev2 = (lik - lik.mean(axis=0)) ** 2
    var = dev2.mean(axis=0)
    se = np.sqrt((np.mean(dev2**2, axis=0) - var**2) / draws)
    stated = _stated_variance(model, theta, np.asarray(bounds), m, r, probs)
    assert np.all(np.abs(var - stated) < Z_TOL * se), (var, stated, se)


def test_the_estimator_by_name_and_from_the_models_chunks():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(2000, 2))
    y = X @ np.array([1.0, -1.0]) + rng.normal(size=2000)
    model = LinearRegression(da.from_array(X, chunks=(300, 2)), y)
    est = make_estimator("chunked", model, 100, n_chunks=4)
    assert isinstance(est, ChunkedMinibatch)
    assert est.bounds == (0, 300, 600, 900, 1200, 1500, 1800, 2000)
    idx, _ = est.draw(default_rng(0), 5)
    per_chain = [np.unique(np.asarray(i) // 300).size for i in idx]
    assert max(per_chain) <= 4


def test_bad_arguments_are_refused_by_name():
    model, bounds = _design()
    with pytest.raises(ValueError, match="`chunks`: LinearRegression's data are not stored in chunks"):
        ChunkedMinibatch(model, 8)
    with pytest.raises(ValueError, match="`batch_size` must be a multiple of `n_chunks`=3"):
        ChunkedMinibatch(model, 8, n_chunks=3, chunks=bounds)
    with pytest.raises(ValueError, match="`n_chunks`=6 is more than the 5 chunks"):
        ChunkedMinibatch(model, 12, n_chunks=6, chunks=bounds)
    with pytest.raises(ValueError, match="`chunks` must be increasing row boundaries from 0 to n_data=60"):
        ChunkedMinibatch(model, 8, chunks=[0, 30, 30, 60])
    with pytest.raises(TypeError, match="`chunks` must be rows per chunk"):
        ChunkedMinibatch(model, 8, chunks="rows")
    with pytest.raises(ValueError, match="`chunk_probs` must hold 5 finite positive numbers"):
        ChunkedMinibatch(model, 8, chunks=bounds, chunk_probs=[1.0, 0.0, 1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="`chunk_probs` must be None, 'size'"):
        ChunkedMinibatch(model, 8, chunks=bounds, chunk_probs="rows")
    with pytest.raises(ValueError, match="`n_chunks` must be"):
        ChunkedMinibatch(model, 8, n_chunks=0, chunks=bounds)


def test_every_datum_has_expected_weight_one_on_every_backend(xb):
    _, bounds = _design()
    rng = np.random.default_rng(4)
    X = rng.normal(size=(60, 2))
    model = LinearRegression(xb.asarray(X), xb.asarray(X[:, 0] + rng.normal(size=60)))
    est = ChunkedMinibatch(model, 6, n_chunks=3, chunks=bounds, chunk_probs=[1.0, 3.0, 0.5, 2.0, 1.0])
    idx, w = est.draw(xb.rng(5), 20_000)
    idx, w = xb.to_numpy(idx), xb.to_numpy(w).astype(np.float64)
    c = np.zeros((20_000, 60))
    np.add.at(c, (np.repeat(np.arange(20_000), idx.shape[1]), idx.reshape(-1)), w.reshape(-1))
    assert _max_z(c, 1.0) < Z_TOL
    g, _, _ = est.estimate(xb.rng(6), None, xb.asarray(np.zeros((4, 2))))
    assert tuple(g.shape) == (4, 2) and np.all(np.isfinite(xb.to_numpy(g)))


def test_any_arguments_give_an_estimator_or_an_error_naming_one():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    model, _ = _design()
    values = st.one_of(st.none(), st.integers(-3, 70), st.floats(allow_nan=True, allow_infinity=True),
                       st.text(max_size=4), st.lists(st.integers(-5, 70), max_size=7),
                       st.lists(st.floats(-1, 5), min_size=5, max_size=5), st.just("size"))

    @hypothesis.settings(max_examples=100, deadline=None, database=None, derandomize=True,
                         suppress_health_check=[hypothesis.HealthCheck.too_slow])
    @hypothesis.given(batch_size=values, n_chunks=values, chunks=values, chunk_probs=values)
    def check(batch_size, n_chunks, chunks, chunk_probs):
        try:
            est = ChunkedMinibatch(model, batch_size, n_chunks=n_chunks, chunks=chunks, chunk_probs=chunk_probs)
        except (TypeError, ValueError) as exc:
            assert any(f"`{a}`" in str(exc) for a in ("batch_size", "n_chunks", "chunks", "chunk_probs")), str(exc)
            return
        idx, w = est.draw(default_rng(0), 2)
        assert idx.shape == (2, est.batch_size) and np.all(np.asarray(w) > 0)

    check()
