"""The Bayesian neural network on inputs read from disk (memmap, zarr, Dask) gives its in-memory results.

The oracle is the same model on the same data in memory: the minibatch gradients are equal bit for
bit (the same rows, the same arithmetic), the full-data passes, summed block by block, agree to
rounding, and so do the draws of SGLD, SGLD-CV and SVRG. The last test runs SGLD and SGLD-CV in a
process whose address space is limited below the size of the inputs.
"""

import os
import sys
import warnings

import numpy as np
import pytest

import sgmc
from _limits import check_held, run_child
from sgmc._blocks import RowSource
from sgmc.models import BayesianNeuralNetwork
from sgmc.optimize import ModeNotFoundWarning


def _data(n=2000, D=6, K=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, D))
    W = rng.normal(size=(D, K))
    y = np.argmax(X @ W + rng.gumbel(size=(n, K)), axis=1)
    return X, y


@pytest.fixture
def on_disk(tmp_path):
    X, y = _data()
    path = str(tmp_path / "X.f64")
    X.tofile(path)
    return X, y, path


def _memmap(path, X):
    return np.memmap(path, dtype=X.dtype, mode="r", shape=X.shape)


def test_methods_equal_the_in_memory_model(on_disk):
    X, y, path = on_disk
    mem = BayesianNeuralNetwork(X, y, n_hidden=5)
    disk = BayesianNeuralNetwork(_memmap(path, X), y, n_hidden=5)
    assert isinstance(disk.X, RowSource) and disk.Y is None and disk.stream_rows == disk.X.block_rows
    assert mem.stream_rows is None
    disk.X.block_rows = 700                                  # several blocks, a ragged last one
    rng = np.random.default_rng(1)
    theta = 0.3 * rng.normal(size=(3, mem.dim))
    idx = rng.integers(0, X.shape[0], size=(3, 40))
    w = rng.uniform(size=(3, 40))
    np.testing.assert_array_equal(disk.grad_log_lik_sum(theta, idx, w), mem.grad_log_lik_sum(theta, idx, w))
    np.testing.assert_array_equal(disk.grad_log_lik_diff_sum(theta, 0.5 * theta, idx, w),
                                  mem.grad_log_lik_diff_sum(theta, 0.5 * theta, idx, w))
    np.testing.assert_array_equal(disk.log_lik(theta, idx), mem.log_lik(theta, idx))
    np.testing.assert_allclose(disk.grad_log_posterior(theta), mem.grad_log_posterior(theta), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(disk.log_posterior(theta), mem.log_posterior(theta), rtol=1e-13)
    np.testing.assert_array_equal(disk.log_lik(theta), mem.log_lik(theta))        # per datum: concatenated
    wf = rng.uniform(size=X.shape[0])
    np.testing.assert_allclose(disk.grad_log_lik_sum(theta, None, wf), mem.grad_log_lik_sum(theta, None, wf),
                               rtol=1e-12, atol=1e-12)


def test_a_minibatch_reads_only_its_rows(on_disk, monkeypatch):
    X, y, path = on_disk
    disk = BayesianNeuralNetwork(_memmap(path, X), y, n_hidden=4)
    read = []
    real = os.preadv

    def spy(fd, buffers, offset):
        read.append(sum(len(b) for b in buffers))
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", spy)
    idx = np.array([[5, 6, 7, 1999, 5], [42, 7, 0, 3, 3]])
    disk.grad_log_lik_sum(np.zeros((2, disk.dim)), idx)
    assert sum(read) == np.unique(idx).size * X.shape[1] * 8          # each needed row once, nothing else


@pytest.mark.parametrize("estimator", ["minibatch", "cv", "svrg"])
def test_draws_equal_the_in_memory_draws(on_disk, estimator):
    X, y, path = on_disk
    kw = dict(step_size=1e-4, batch_size=50, n_iter=150, chains=2, rng=4, progress=False)
    if estimator == "cv":
        kw["estimator_options"] = {"opt_steps": 300}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModeNotFoundWarning)
        a = sgmc.sample(BayesianNeuralNetwork(_memmap(path, X), y, n_hidden=5), "sgld", estimator, **kw)
        b = sgmc.sample(BayesianNeuralNetwork(X, y, n_hidden=5), "sgld", estimator, **kw)
    np.testing.assert_allclose(np.asarray(a.draws), np.asarray(b.draws), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(a.stats["data_passes"], b.stats["data_passes"])


def test_zarr_and_dask_inputs_are_read_by_rows(on_disk):
    X, y, _ = on_disk
    da = pytest.importorskip("dask.array")
    arrays = [da.from_array(X, chunks=(500, X.shape[1]))]
    try:
        import zarr
    except ImportError:
        zarr = None
    if zarr is not None:
        z = zarr.create_array(store={}, shape=X.shape, chunks=(500, X.shape[1]), dtype="f8")
        z[...] = X
        arrays.append(z)
    mem = BayesianNeuralNetwork(X, y, n_hidden=4)
    rng = np.random.default_rng(2)
    theta = 0.3 * rng.normal(size=(2, mem.dim))
    idx = rng.integers(0, X.shape[0], size=(2, 30))
    for arr in arrays:
        model = BayesianNeuralNetwork(arr, da.from_array(y, chunks=500), n_hidden=4)   # labels from Dask too
        assert model.X.kind in ("dask", "zarr")
        np.testing.assert_array_equal(model.grad_log_lik_sum(theta, idx), mem.grad_log_lik_sum(theta, idx))
        np.testing.assert_allclose(model.grad_log_posterior(theta), mem.grad_log_posterior(theta), rtol=1e-12,
                                   atol=1e-12)


def test_bad_inputs_on_disk_are_refused_by_name(tmp_path):
    X, y = _data(n=50)
    path = str(tmp_path / "X")
    X.tofile(path)
    with pytest.raises(TypeError, match="`X` must hold float32 or float64 values; got dtype int64"):
        BayesianNeuralNetwork(np.memmap(path, dtype=np.int64, mode="r", shape=X.shape), y)
    with pytest.raises(ValueError, match=r"`X` must be 2-D \(n_data, dim\); got shape \(300,\)"):
        BayesianNeuralNetwork(np.memmap(path, dtype=np.float64, mode="r", shape=(X.size,)), y)
    with pytest.raises(ValueError, match="`y` must be 1-D with 50 labels"):
        BayesianNeuralNetwork(_memmap(path, X), y[:-1])
    with pytest.raises(ValueError, match="`backend`="):
        BayesianNeuralNetwork(_memmap(path, X), y, backend="array_api_strict")
    X[17, 2] = np.inf
    X.tofile(path)
    with pytest.raises(ValueError, match=r"`X` contains non-finite value\(s\).*row 17"):
        BayesianNeuralNetwork(_memmap(path, X), y)


_CHILD = """
    import sgmc
    from sgmc.models import BayesianNeuralNetwork
    warnings.simplefilter("ignore")
    path, n, D, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    y = np.load(path + ".y.npy")
    runs = {"sgld": ("minibatch", {}), "sgld-cv": ("cv", {"opt_steps": 300})}
    kw = dict(step_size=1e-5, batch_size=100, n_iter=200, chains=2, rng=seed, progress=False)
    small = BayesianNeuralNetwork(np.random.default_rng(0).random((500, D)), y[:500], n_hidden=8, n_classes=3)
    for est, opts in runs.values():                  # compiled code and caches made before the limit
        sgmc.sample(small, "sgld", est, estimator_options=opts, **kw)
    base = held_base()
    model = BayesianNeuralNetwork(np.memmap(path, dtype=np.float64, mode="r", shape=(n, D)), y, n_hidden=8,
                                  n_classes=3)
    gc.collect()
    kept = held(base, [path])
    data = n * D * 8
    limit = limit_below(data)
    no = refused([path])
    out = {}
    for name, (est, opts) in runs.items():
        trace = sgmc.sample(model, "sgld", est, estimator_options=opts, **kw)
        np.save(f"{path}.{name}.npy", np.asarray(trace.draws))
        out[name] = trace.info.get("setup_data_passes", 0.0)
    print(json.dumps({"refused": no, "held": kept, "limit": limit, "data": data, "vm_end": vm(), "passes": out}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status are Linux's")
def test_sgld_and_sgld_cv_run_under_an_address_space_limit_smaller_than_the_inputs(tmp_path):
    n, D = 200_000, 25                                        # 40 MB of float64 inputs
    rng = np.random.default_rng(5)
    W = rng.normal(size=(D, 3))
    X = np.empty((n, D))
    for a in range(0, n, 50_000):                             # written in blocks, as a real data set would be
        X[a:a + 50_000] = rng.random((50_000, D))
    y = np.argmax(X @ W + rng.gumbel(size=(n, 3)), axis=1)
    path = str(tmp_path / "X.f64")
    X.tofile(path)
    np.save(path + ".y.npy", y)
    res = run_child(_CHILD, path, n, D, 3)
    check_held(res)                                          # the model keeps no map and no copy of its data
    assert res["limit"] - res["vm_end"] < res["data"]        # the inputs never fit in what was left
    assert res["vm_end"] <= res["limit"]
    assert res["refused"] == ["read", "map"]                 # loading or mapping the file fails there
    kw = dict(step_size=1e-5, batch_size=100, n_iter=200, chains=2, rng=3, progress=False)
    mem = BayesianNeuralNetwork(X, y, n_hidden=8, n_classes=3)
    for name, est, opts in (("sgld", "minibatch", {}), ("sgld-cv", "cv", {"opt_steps": 300})):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ModeNotFoundWarning)
            ref = sgmc.sample(mem, "sgld", est, estimator_options=opts, **kw)
        np.testing.assert_allclose(np.load(f"{path}.{name}.npy"), np.asarray(ref.draws), rtol=1e-12, atol=1e-12)
        assert res["passes"][name] == pytest.approx(ref.info.get("setup_data_passes", 0.0))
