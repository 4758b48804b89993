"""Data larger than memory: models on memmap, zarr and Dask arrays read only the rows they need.

The oracle is the same model on the same data in memory. The last test runs SGLD with control
variates in a subprocess whose address space is limited below the size of the data file, so that
neither reading the file nor mapping it can succeed there, and compares its draws with the
in-memory run's.
"""

import os
import sys
import warnings

import numpy as np
import pytest

import sgmc
from _limits import check_held, run_child
from sgmc._blocks import RowSource
from sgmc.models import LinearRegression, LogisticRegression
from sgmc.optimize import ModeNotFoundWarning


def _data(n=3000, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-X @ np.linspace(-1, 1, d)))).astype(float)
    return X, y


@pytest.fixture
def on_disk(tmp_path):
    X, y = _data()
    path = tmp_path / "X.f64"
    X.tofile(path)
    return X, y, str(path)


def test_a_gather_reads_only_the_rows_it_needs_in_increasing_order(on_disk, monkeypatch):
    X, y, path = on_disk
    src = RowSource(np.memmap(path, dtype=np.float64, mode="r", shape=X.shape))
    assert src.kind == "file"
    reads = []
    real = os.preadv

    def spy(fd, buffers, offset):
        reads.append((offset, sum(len(b) for b in buffers)))
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", spy)
    idx = np.array([[2999, 5, 6, 7, 100], [5, 42, 41, 0, 2999]])
    rows = src.take(idx)
    np.testing.assert_array_equal(rows, X[idx.reshape(-1)])
    row_bytes = X.shape[1] * 8
    unique = np.unique(idx)
    assert sum(n for _, n in reads) == unique.size * row_bytes         # each needed row once, nothing else
    offsets = [o for o, _ in reads]
    assert offsets == sorted(offsets)
    assert len(reads) == 5                                              # runs: 0 | 5-7 | 41-42 | 100 | 2999


def test_memmap_model_equals_the_in_memory_model(on_disk):
    X, y, path = on_disk
    mem = LogisticRegression(X, y)
    disk = LogisticRegression(np.memmap(path, dtype=np.float64, mode="r", shape=X.shape), y)
    disk.X.block_rows = 700                                             # several blocks, a ragged last one
    rng = np.random.default_rng(1)
    theta = rng.normal(size=(3, X.shape[1]))
    idx = rng.integers(0, X.shape[0], size=(3, 64))
    w = rng.uniform(size=(3, 64))
    np.testing.assert_allclose(disk.grad_log_posterior(theta), mem.grad_log_posterior(theta), rtol=1e-12)
    np.testing.assert_allclose(disk.log_posterior(theta), mem.log_posterior(theta), rtol=1e-12)
    np.testing.assert_allclose(disk.log_lik(theta), mem.log_lik(theta), rtol=1e-12)
    np.testing.assert_allclose(disk.lipschitz(), mem.lipschitz(), rtol=1e-14)
    np.testing.assert_allclose(disk.lipschitz(idx), mem.lipschitz(idx), rtol=1e-14)
    np.testing.assert_allclose(disk.grad_log_lik_sum(theta, idx, w), mem.grad_log_lik_sum(theta, idx, w), rtol=1e-12)
    np.testing.assert_allclose(disk.grad_log_lik_diff_sum(theta, 0.5 * theta, idx, w),
                               mem.grad_log_lik_diff_sum(theta, 0.5 * theta, idx, w), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(disk.hess_log_lik(theta[:1], idx[:1]), mem.hess_log_lik(theta[:1], idx[:1]), rtol=1e-12)
    lin_mem, lin_disk = LinearRegression(X, y), LinearRegression(np.load(_npy(path, X), mmap_mode="r"), y)
    for a, b in zip(lin_disk.posterior(), lin_mem.posterior()):
        np.testing.assert_allclose(a, b, rtol=1e-10)


def _npy(path, X):
    out = path + ".npy"
    np.save(out, X)
    return out


@pytest.mark.parametrize("sampler, estimator", [("sgld", "minibatch"), ("sghmc", "minibatch"), ("sgld", "svrg")])
def test_minibatch_runs_on_a_memmap_give_the_in_memory_draws(on_disk, sampler, estimator):
    X, y, path = on_disk
    disk = LogisticRegression(np.memmap(path, dtype=np.float64, mode="r", shape=X.shape), y)
    kw = dict(step_size=1e-3, batch_size=50, n_iter=200, chains=3, rng=4, progress=False)
    a = sgmc.sample(disk, sampler, estimator, **kw)       # SVRG: its snapshot gradients stream in blocks
    b = sgmc.sample(LogisticRegression(X, y), sampler, estimator, **kw)   # compiled blocks where installed
    np.testing.assert_allclose(np.asarray(a.draws), np.asarray(b.draws), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(a.stats["data_passes"], b.stats["data_passes"])


def test_zarr_and_dask_arrays_are_read_by_rows(on_disk):
    X, y, _ = on_disk
    mem = LogisticRegression(X, y)
    arrays = []
    da = pytest.importorskip("dask.array")
    arrays.append(da.from_array(X, chunks=(500, X.shape[1])))
    try:
        import zarr
    except ImportError:
        zarr = None
    if zarr is not None:
        z = zarr.create_array(store={}, shape=X.shape, chunks=(500, X.shape[1]), dtype="f8")
        z[...] = X
        arrays.append(z)
    rng = np.random.default_rng(2)
    theta = rng.normal(size=(2, X.shape[1]))
    idx = rng.integers(0, X.shape[0], size=(2, 50))
    for arr in arrays:
        model = LogisticRegression(arr, y)
        assert isinstance(model.X, RowSource) and model.X.kind in ("dask", "zarr")
        np.testing.assert_allclose(model.grad_log_posterior(theta), mem.grad_log_posterior(theta), rtol=1e-12)
        np.testing.assert_allclose(model.grad_log_lik_sum(theta, idx), mem.grad_log_lik_sum(theta, idx), rtol=1e-12)


def test_bad_out_of_core_data_is_refused_by_name(tmp_path):
    X, y = _data(n=50)
    X[17, 2] = np.nan
    path = tmp_path / "bad.f64"
    X.tofile(path)
    mm = np.memmap(path, dtype=np.float64, mode="r", shape=X.shape)
    with pytest.raises(ValueError, match=r"`X` contains non-finite value\(s\).*row 17"):
        LogisticRegression(mm, y)
    with pytest.raises(ValueError, match="`y` must be 1-D with 50 entries"):
        LinearRegression(np.memmap(path, dtype=np.float64, mode="r", shape=X.shape), y[:-1])
    with pytest.raises(ValueError, match="`backend`="):
        LinearRegression(mm, y, backend="array_api_strict")
    with pytest.raises(ValueError, match="must be 2-D"):
        RowSource(np.memmap(path, dtype=np.float64, mode="r", shape=(X.size,)))


_CHILD = """
    import sgmc
    from sgmc.models import LogisticRegression

    warnings.simplefilter("ignore")
    path, n, d, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    y = np.load(path + ".y.npy")
    kw = dict(step_size=2e-6, batch_size=200, n_iter=300, chains=2, rng=seed, progress=False,
              estimator_options={"polish": False, "opt_steps": 500})
    small = LogisticRegression(np.random.default_rng(0).normal(size=(500, d)), y[:500])
    sgmc.sample(small, "sgld", "cv", **kw)           # compiled code and caches made before the limit
    base = held_base()
    X = np.memmap(path, dtype=np.float64, mode="r", shape=(n, d))
    model = LogisticRegression(X, y)
    del X
    kept = held(base, [path])                        # what the model keeps of the data: neither a map nor a copy
    data = n * d * 8
    limit = limit_below(data)
    no = refused([path])
    trace = sgmc.sample(model, "sgld", "cv", **kw)
    print(json.dumps({"refused": no, "held": kept, "limit": limit, "data": data, "vm_end": vm(),
                      "draws": np.asarray(trace.draws).tolist(),
                      "setup_passes": trace.info["setup_data_passes"]}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status are Linux's")
def test_sgld_cv_runs_under_an_address_space_limit_smaller_than_the_data(tmp_path):
    n, d = 2_000_000, 5                                      # 80 MB of float64 rows
    rng = np.random.default_rng(5)
    path = str(tmp_path / "X.f64")
    beta = np.linspace(-1, 1, d)
    X = np.empty((n, d))
    y = np.empty(n)
    for a in range(0, n, 500_000):                           # written in blocks, as a real data set would be
        b = min(a + 500_000, n)
        X[a:b] = rng.normal(size=(b - a, d))
        y[a:b] = rng.uniform(size=b - a) < 1 / (1 + np.exp(-X[a:b] @ beta))
    X.tofile(path)
    np.save(path + ".y.npy", y)
    res = run_child(_CHILD, path, n, d, 3)
    check_held(res)                                          # the model keeps no map and no copy of X
    assert res["limit"] - res["vm_end"] < res["data"]        # the data never fit in what was left
    assert res["vm_end"] <= res["limit"]
    assert res["refused"] == ["read", "map"]                 # loading or mapping the file fails there
    kw = dict(step_size=2e-6, batch_size=200, n_iter=300, chains=2, rng=3, progress=False,
              estimator_options={"polish": False, "opt_steps": 500})
    with warnings.catch_warnings():                          # 500 Adam steps stop short of the mode here
        warnings.simplefilter("ignore", ModeNotFoundWarning)
        ref = sgmc.sample(LogisticRegression(X, y), "sgld", "cv", **kw)
    np.testing.assert_allclose(np.asarray(res["draws"]), np.asarray(ref.draws), rtol=1e-9, atol=1e-9)
    assert res["setup_passes"] == pytest.approx(ref.info["setup_data_passes"])
