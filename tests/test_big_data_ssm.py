"""State space models on a series read from disk (memmap, zarr, Dask) give their in-memory draws.

The buffered estimator reads only the rows of its windows (window plus buffer), so its draws on a
series on disk equal, bit for bit, those on the same series in memory, for every model of
:mod:`sgmc.ssm` that samples by buffered windows. The exact full-series paths (the Kalman filter or
forward-backward over all of ``y``) need the series in memory and say so. The last test runs
buffered SGLD in a process whose address space is limited below the size of the series.
"""

import os
import sys

import numpy as np
import pytest

import sgmc
from _limits import check_held, run_child
from sgmc import ssm
from sgmc._blocks import LaggedRows, RowSource


def _series(T=600, m=1, seed=0):
    """An AR(1) state seen in noise: ``(T,)`` for ``m = 1``, else ``(T, m)``."""
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(T, m))
    x = np.empty((T, m))
    x[0] = e[0]
    for t in range(1, T):
        x[t] = 0.9 * x[t - 1] + e[t]
    y = x + rng.normal(size=(T, m))
    return y[:, 0] if m == 1 else y


def _memmap(folder, y, name="y"):
    path = os.path.join(folder, name)
    y.tofile(path)
    return np.memmap(path, dtype=y.dtype, mode="r", shape=y.shape)


_MODELS = {
    "lgssm": (lambda y: ssm.LGSSM(y), {}),
    "hmm": (lambda y: ssm.GaussianHMM(y, 2), {}),
    "arhmm": (lambda y: ssm.ARHMM(y, 2, order=2), {}),
    "slds": (lambda y: ssm.SLDS(y, 2), {}),
    "stochvol": (lambda y: ssm.StochasticVolatility(y), {"n_particles": 40}),
    "garch": (lambda y: ssm.GARCH(y), {"n_particles": 40}),
}


@pytest.mark.parametrize("name", list(_MODELS))
def test_buffered_draws_equal_the_in_memory_draws(tmp_path, name):
    make, opts = _MODELS[name]
    y = _series()
    disk, mem = make(_memmap(str(tmp_path), y)), make(y)
    assert isinstance(disk.y, (RowSource, LaggedRows)) and disk.device is None
    kw = dict(step_size=1e-4, batch_size=10, n_iter=8 if name == "slds" else 30, chains=2, rng=3, progress=False,
              estimator_options={"buffer": 5, **opts})
    a = sgmc.sample(disk, "sgld", "buffered", **kw)
    b = sgmc.sample(mem, "sgld", "buffered", **kw)
    assert np.isfinite(np.asarray(b.draws)).all()
    np.testing.assert_array_equal(np.asarray(a.draws), np.asarray(b.draws))


def test_zarr_and_dask_series_and_the_preconditioned_sampler(tmp_path):
    y = _series(m=2)
    mem = ssm.LGSSM(y)
    da = pytest.importorskip("dask.array")
    series = [da.from_array(y, chunks=(100, 2))]
    try:
        import zarr
    except ImportError:
        zarr = None
    if zarr is not None:
        z = zarr.create_array(store={}, shape=y.shape, chunks=(100, 2), dtype="f8")
        z[...] = y
        series.append(z)
    kw = dict(step_size=1e-4, batch_size=10, n_iter=20, chains=2, rng=5, progress=False,
              estimator_options={"buffer": 5})
    ref = {s: np.asarray(sgmc.sample(mem, s, "buffered", **kw).draws) for s in ("sgld", "sgrld")}
    for s in series:
        model = ssm.LGSSM(s)
        assert model.y.kind in ("dask", "zarr") and model.y.shape == (600, 2)
        for sampler in ("sgld", "sgrld"):
            np.testing.assert_array_equal(np.asarray(sgmc.sample(model, sampler, "buffered", **kw).draws), ref[sampler])


@pytest.mark.parametrize("name, p", [("lgssm", 0), ("arhmm", 2)])
def test_a_window_reads_only_its_rows(tmp_path, monkeypatch, name, p):
    y = _series()
    model = _MODELS[name][0](_memmap(str(tmp_path), y))
    windows = ssm.subsequence.windows_at(np.array([[40, 400], [45, 100]]), T=model.T, S=10, B=5)
    read = []
    real = os.preadv

    def spy(fd, buffers, offset):
        read.append(sum(len(b) for b in buffers))
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", spy)
    model.window_score(None, np.random.default_rng(0).normal(size=(2, model.dim)), windows)
    times = {t + j for s in (35, 40, 95, 395) for t in [s] for j in range(20 + p)}
    assert len(read) == 3                       # one read per run of times: 35-(59+p) | 95.. | 395..
    assert sum(read) == len(times) * 8          # each time of a window (and its p lags) once


def test_lagged_rows_of_a_series_on_disk_equal_the_lagged_series(tmp_path):
    y = _series(m=2)
    src = RowSource(_memmap(str(tmp_path), y), "y", layout="series")
    lag = LaggedRows(src, 3)
    lag.block_rows = 70                                      # several blocks, a ragged last one
    want = ssm.arhmm.lagged(np, y, 3)
    assert lag.shape == want.shape
    np.testing.assert_array_equal(np.concatenate([b for _, _, b in lag.blocks()]), want)
    idx = np.array([[0, 596, 5], [5, 5, 300]])
    np.testing.assert_array_equal(lag.take(idx), want[idx.reshape(-1)])


def test_the_exact_full_series_paths_say_they_need_the_series_in_memory(tmp_path):
    y = _series()
    mm = _memmap(str(tmp_path), y)
    model = ssm.LGSSM(mm)
    theta = np.array([[0.5, 1.0, 1.0]])
    with pytest.raises(NotImplementedError, match="`y` is read from disk by rows, and its exact log_posterior"):
        model.log_posterior(theta)
    with pytest.raises(TypeError, match="series `y` is read from disk by rows; the exact likelihood needs it"):
        sgmc.sample(model, "sgld", "full", step_size=1e-3, n_iter=2, progress=False)
    with pytest.raises(TypeError, match="`y` is read from disk by rows .* needs all of it in memory"):
        model.log_lik(theta)
    with pytest.raises(TypeError, match="`y` is read from disk by rows"):
        ssm.AR(mm, 2)
    ssm.LGSSM(y).log_posterior(theta)           # in memory, the same call works


def test_bad_series_on_disk_are_refused_by_name(tmp_path):
    y = _series(T=60)
    folder = str(tmp_path)
    path = os.path.join(folder, "y")
    y.tofile(path)
    with pytest.raises(TypeError, match="`y` must hold float32 or float64 observations; got dtype int64"):
        ssm.LGSSM(np.memmap(path, dtype=np.int64, mode="r", shape=y.shape))
    with pytest.raises(ValueError, match=r"`y` must be 1-D \(T,\) or 2-D \(T, obs_dim\); got shape \(15, 2, 2\)"):
        ssm.GaussianHMM(np.memmap(path, dtype=np.float64, mode="r", shape=(15, 2, 2)), 2)
    with pytest.raises(ValueError, match=r"`y` must have 1 column\(s\) \(obs_dim\); got shape \(30, 2\)"):
        ssm.StochasticVolatility(np.memmap(path, dtype=np.float64, mode="r", shape=(30, 2)))
    y[33] = np.nan
    with pytest.raises(ValueError, match=r"`y` contains non-finite value\(s\).*row 33"):
        ssm.GARCH(_memmap(folder, y, "bad"))


_CHILD = """
    import sgmc
    from sgmc import ssm
    warnings.simplefilter("ignore")
    path, T, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    kw = dict(step_size=1e-8, batch_size=50, n_iter=200, chains=2, rng=seed, progress=False,
              estimator_options={"buffer": 20})
    makers = {"lgssm": lambda y: ssm.LGSSM(y), "hmm": lambda y: ssm.GaussianHMM(y, 2)}
    small = np.random.default_rng(0).normal(size=500)
    for make in makers.values():                     # compiled code and caches made before the limit
        sgmc.sample(make(small), "sgld", "buffered", **kw)
    base = held_base()
    models = {k: make(np.memmap(path, dtype=np.float64, mode="r", shape=(T,))) for k, make in makers.items()}
    gc.collect()
    kept = held(base, [path])
    data = T * 8
    limit = limit_below(data)
    no = refused([path])
    for name, model in models.items():
        np.save(f"{path}.{name}.npy", np.asarray(sgmc.sample(model, "sgld", "buffered", **kw).draws))
    print(json.dumps({"refused": no, "held": kept, "limit": limit, "data": data, "vm_end": vm()}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status are Linux's")
def test_buffered_sgld_runs_under_an_address_space_limit_smaller_than_the_series(tmp_path):
    from scipy.signal import lfilter

    T = 5_000_000                                             # 40 MB of float64 observations
    rng = np.random.default_rng(5)
    y = lfilter([1.0], [1.0, -0.9], rng.normal(size=T)) + rng.normal(size=T)
    path = str(tmp_path / "y.f64")
    y.tofile(path)
    res = run_child(_CHILD, path, T, 3)
    check_held(res)                                          # the model keeps no map and no copy of its data
    assert res["limit"] - res["vm_end"] < res["data"]        # the series never fit in what was left
    assert res["vm_end"] <= res["limit"]
    assert res["refused"] == ["read", "map"]                 # loading or mapping the file fails there
    kw = dict(step_size=1e-8, batch_size=50, n_iter=200, chains=2, rng=3, progress=False,
              estimator_options={"buffer": 20})
    for name, model in (("lgssm", ssm.LGSSM(y)), ("hmm", ssm.GaussianHMM(y, 2))):
        ref = np.asarray(sgmc.sample(model, "sgld", "buffered", **kw).draws)
        np.testing.assert_array_equal(np.load(f"{path}.{name}.npy"), ref)
