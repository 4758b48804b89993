"""BPMF on ratings read from disk (memmap, zarr, Dask) gives its in-memory results.

The oracle is the same model on the same ratings in memory: a minibatch's gradients are equal bit for
bit (the ratings it reads go through the same code), full-data passes, summed block by block, agree to
rounding, and so do the draws of SGLD, SGLD-CV and SVRG. The last test runs SGLD and SGLD-CV in a
process whose address space is limited below the size of the ratings.
"""

import os
import sys
import warnings

import numpy as np
import pytest

import sgmc
from _limits import check_held, run_child
from sgmc._blocks import RowSource
from sgmc.models import BPMF
from sgmc.optimize import ModeNotFoundWarning


def _ratings(n=3000, n_users=60, n_items=40, seed=0):
    rng = np.random.default_rng(seed)
    u = rng.integers(0, n_users, n)
    i = rng.integers(0, n_items, n)
    r = rng.integers(1, 6, n).astype(np.float64)
    return u, i, r


def _to_disk(folder, arrays):
    out = []
    for name, a in zip(("users", "items", "ratings"), arrays):
        path = os.path.join(folder, name)
        a.tofile(path)
        out.append(np.memmap(path, dtype=a.dtype, mode="r", shape=a.shape))
    return out


@pytest.mark.parametrize("centre", [False, True])
def test_methods_equal_the_in_memory_model(tmp_path, centre):
    data = _ratings()
    mem = BPMF(*data, d=3, centre=centre)
    disk = BPMF(*_to_disk(str(tmp_path), data), d=3, centre=centre)
    assert all(isinstance(a, RowSource) for a in (disk.users, disk.items, disk.ratings))
    assert mem.stream_rows is None and disk.stream_rows > 0
    assert (disk.n_users, disk.n_items, disk.dim) == (mem.n_users, mem.n_items, mem.dim)
    assert disk.offset == pytest.approx(mem.offset, rel=1e-15)
    rng = np.random.default_rng(1)
    theta = 0.3 * rng.normal(size=(3, mem.dim))
    idx = rng.integers(0, data[0].size, size=(3, 40))
    w = rng.uniform(size=(3, 40))
    np.testing.assert_array_equal(disk.grad_log_lik_sum(theta, idx, w), mem.grad_log_lik_sum(theta, idx, w))
    np.testing.assert_array_equal(disk.grad_log_lik_diff_sum(theta, 0.5 * theta, idx, w),
                                  mem.grad_log_lik_diff_sum(theta, 0.5 * theta, idx, w))
    np.testing.assert_allclose(disk.log_lik(theta, idx), mem.log_lik(theta, idx), rtol=1e-14)
    for model in (disk, _Blocks(disk, 700)):          # one block; blocks of 700 ratings, a ragged last one
        np.testing.assert_allclose(model.grad_log_posterior(theta), mem.grad_log_posterior(theta), rtol=1e-12,
                                   atol=1e-12)
        np.testing.assert_allclose(model.log_posterior(theta), mem.log_posterior(theta), rtol=1e-13)
        np.testing.assert_allclose(model.log_lik(theta), mem.log_lik(theta), rtol=1e-14)


class _Blocks(BPMF):
    """A model on disk whose full passes take ``rows`` ratings at a time (several blocks, a ragged last one)."""

    def __init__(self, model, rows):
        self.__dict__.update(model.__dict__)
        self._rows = rows

    @property
    def stream_rows(self):
        return self._rows


def test_a_minibatch_reads_only_its_ratings(tmp_path, monkeypatch):
    data = _ratings()
    disk = BPMF(*_to_disk(str(tmp_path), data), d=3)
    read = []
    real = os.preadv

    def spy(fd, buffers, offset):
        read.append(sum(len(b) for b in buffers))
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", spy)
    idx = np.array([[5, 6, 7, 2999, 5], [42, 7, 0, 3, 3]])
    disk.grad_log_lik_sum(np.zeros((2, disk.dim)), idx)
    assert sum(read) == np.unique(idx).size * 3 * 8        # user, item and rating of each rating, once


@pytest.mark.parametrize("estimator", ["minibatch", "cv", "svrg"])
def test_draws_equal_the_in_memory_draws(tmp_path, estimator):
    data = _ratings()
    kw = dict(step_size=1e-4, batch_size=50, n_iter=150, chains=2, rng=4, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModeNotFoundWarning)
        a = sgmc.sample(BPMF(*_to_disk(str(tmp_path), data), d=3, centre=True), "sgld", estimator, **kw)
        b = sgmc.sample(BPMF(*data, d=3, centre=True), "sgld", estimator, **kw)
    np.testing.assert_allclose(np.asarray(a.draws), np.asarray(b.draws), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(a.stats["data_passes"], b.stats["data_passes"])


def test_zarr_dask_and_mixed_ratings(tmp_path):
    data = _ratings()
    mem = BPMF(*data, d=3)
    da = pytest.importorskip("dask.array")
    sets = [[da.from_array(a, chunks=700) for a in data],
            [data[0], da.from_array(data[1], chunks=700), data[2]]]        # only some arrays on disk
    try:
        import zarr
    except ImportError:
        zarr = None
    if zarr is not None:
        zs = []
        for a in data:
            z = zarr.create_array(store={}, shape=a.shape, chunks=(700,), dtype=a.dtype)
            z[...] = a
            zs.append(z)
        sets.append(zs)
    rng = np.random.default_rng(2)
    theta = 0.3 * rng.normal(size=(2, mem.dim))
    idx = rng.integers(0, data[0].size, size=(2, 30))
    for arrays in sets:
        model = BPMF(*arrays, d=3)
        assert model.stream_rows is not None
        np.testing.assert_array_equal(model.grad_log_lik_sum(theta, idx), mem.grad_log_lik_sum(theta, idx))
        np.testing.assert_allclose(model.grad_log_posterior(theta), mem.grad_log_posterior(theta), rtol=1e-12,
                                   atol=1e-12)


def test_bad_ratings_on_disk_are_refused_by_name(tmp_path):
    u, i, r = _ratings(n=50)
    folder = str(tmp_path)
    mu, mi, mr = _to_disk(folder, (u, i, r))
    as_float = np.memmap(os.path.join(folder, "ratings"), dtype=np.float64, mode="r", shape=r.shape)
    with pytest.raises(TypeError, match="`users` must hold integer indices; got dtype float64"):
        BPMF(as_float, mi, mr)
    with pytest.raises(TypeError, match="`items` must hold integer indices"):
        BPMF(mu, i.astype(float), mr)
    with pytest.raises(ValueError, match=r"`ratings` must be 1-D \(n_data,\); got shape \(25, 2\)"):
        BPMF(mu, mi, np.memmap(os.path.join(folder, "ratings"), dtype=np.float64, mode="r", shape=(25, 2)))
    with pytest.raises(ValueError, match=r"`items` must be 1-d with one entry per rating \(50\); got shape \(49,\)"):
        BPMF(mu, mi[:-1], mr)
    with pytest.raises(ValueError, match=r"`users` must lie in \[0, 10\)"):
        BPMF(mu, mi, mr, n_users=10)
    r[7] = np.nan
    _, _, bad = _to_disk(folder, (u, i, r))
    with pytest.raises(ValueError, match=r"`ratings` contains non-finite value\(s\).*row 7"):
        BPMF(mu, mi, bad)


_CHILD = """
    import sgmc
    from sgmc.models import BPMF
    warnings.simplefilter("ignore")
    folder, n, nu, ni, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    runs = {"sgld": ("minibatch", {}), "sgld-cv": ("cv", {"opt_steps": 200})}
    kw = dict(step_size=2e-5, batch_size=500, n_iter=100, chains=2, rng=seed, progress=False)
    r0 = np.random.default_rng(0)
    small = BPMF(r0.integers(0, nu, 500), r0.integers(0, ni, 500), r0.random(500), nu, ni, d=4, centre=True)
    for est, opts in runs.values():                  # compiled code and caches made before the limit
        sgmc.sample(small, "sgld", est, estimator_options=opts, **kw)
    base = held_base()
    paths = [f"{folder}/{name}" for name in ("users", "items", "ratings")]
    arrays = [np.memmap(p, dtype=dt, mode="r", shape=(n,)) for p, dt in zip(paths, (np.int64, np.int64, np.float64))]
    model = BPMF(*arrays, d=4, centre=True)
    del arrays
    gc.collect()
    kept = held(base, paths)
    data = 3 * n * 8
    limit = limit_below(data)
    no = refused(paths)
    out = {}
    for name, (est, opts) in runs.items():
        trace = sgmc.sample(model, "sgld", est, estimator_options=opts, **kw)
        np.save(f"{folder}/{name}.npy", np.asarray(trace.draws))
        out[name] = trace.info.get("setup_data_passes", 0.0)
    print(json.dumps({"refused": no, "held": kept, "limit": limit, "data": data, "vm_end": vm(), "passes": out}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status are Linux's")
def test_sgld_and_sgld_cv_run_under_an_address_space_limit_smaller_than_the_ratings(tmp_path):
    n, nu, ni = 1_500_000, 400, 300                           # 36 MB of (user, item, rating) triples
    rng = np.random.default_rng(5)
    U, V = rng.normal(size=(nu, 4)), rng.normal(size=(ni, 4))
    u, i = rng.integers(0, nu, n), rng.integers(0, ni, n)
    r = np.einsum("nk,nk->n", U[u], V[i]) + 3.0 + 0.5 * rng.normal(size=n)
    _to_disk(str(tmp_path), (u, i, r))
    res = run_child(_CHILD, str(tmp_path), n, nu, ni, 3)
    check_held(res)                                          # the model keeps no map and no copy of its data
    assert res["limit"] - res["vm_end"] < res["data"]        # the ratings never fit in what was left
    assert res["vm_end"] <= res["limit"]
    assert res["refused"] == ["read", "map"]                 # loading or mapping the files fails there
    kw = dict(step_size=2e-5, batch_size=500, n_iter=100, chains=2, rng=3, progress=False)
    mem = BPMF(u, i, r, d=4, centre=True)
    for name, est, opts in (("sgld", "minibatch", {}), ("sgld-cv", "cv", {"opt_steps": 200})):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ModeNotFoundWarning)
            ref = sgmc.sample(mem, "sgld", est, estimator_options=opts, **kw)
        np.testing.assert_allclose(np.load(f"{tmp_path}/{name}.npy"), np.asarray(ref.draws), rtol=1e-12, atol=1e-12)
        assert res["passes"][name] == pytest.approx(ref.info.get("setup_data_passes", 0.0))
