"""The ``backend=`` switch, the registry's ``register``/``require``/``move``, and the CuPy backend
on a machine that may have CuPy but no GPU."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import sgmc
from sgmc import backends
from sgmc.backends import Backend, HostGenerator
from sgmc.datasets import linear_regression_data, logistic_regression_data
from sgmc.diagnostics import ksd
from sgmc.models import Gaussian, GaussianTarget, LinearRegression, LogisticRegression


@pytest.fixture
def registry():
    """Restore the backend registry after a test registers toys."""
    saved = (dict(backends._LOADERS), dict(backends._OWNS), dict(backends._CACHE), dict(backends._INSTALL))
    yield backends
    for store, old in zip((backends._LOADERS, backends._OWNS, backends._CACHE, backends._INSTALL), saved):
        store.clear()
        store.update(old)


def _toy_loader(name="toy", available=True):
    def load():
        strict = backends.get_backend("array_api_strict")
        be = Backend(
            name=name,
            xp=strict.xp,
            make_generator=lambda seq, device: HostGenerator(be, seq, device),
            to_host=strict.to_host,
            from_host=strict.from_host,
            default_device=strict.default_device,
            is_available=lambda: available,
            unavailable_reason=lambda: "" if available else "the toy accelerator is switched off",
        )
        return be

    return load


def _data(n=300, dim=3, seed=0):
    d = logistic_regression_data(n=n, dim=dim, n_test=10, rng=seed)
    return d.X, d.y


# ------------------------------------------------------------------------------------------------
# registering a backend


def test_register_a_toy_backend_and_use_it_everywhere(registry):
    registry.register("toy", _toy_loader(), install="pip install toy-arrays")
    assert "toy" in registry.registered()
    be = registry.get_backend("toy")
    assert be.name == "toy" and registry.require("toy") is be
    X, y = _data()
    model = LogisticRegression(X, y, backend="toy")
    assert type(model.X).__module__.startswith("array_api_strict")
    rng = registry.default_rng(3, backend="toy")
    assert rng.backend.name == "toy" and type(rng.normal((2,))).__module__.startswith("array_api_strict")
    trace = sgmc.sample(LogisticRegression(X, y), step_size=1e-3, n_iter=30, chains=2, batch_size=30, rng=1,
                        progress=False, backend="toy")
    assert trace.draws.shape == (2, 30, 3)
    ref = sgmc.sample(LogisticRegression(X, y), step_size=1e-3, n_iter=30, chains=2, batch_size=30, rng=1,
                      progress=False)
    # host draws: the same stream, so the same chains (to rounding of the library's matmuls)
    np.testing.assert_allclose(backends.to_numpy(trace.draws), ref.draws, rtol=1e-10, atol=1e-12)


def test_register_reports_a_missing_library_with_its_install_hint(registry):
    def load():
        import sgmc_no_such_array_library  # noqa: F401

    registry.register("absent", load, install="pip install absent-arrays")
    with pytest.raises(ImportError, match="pip install absent-arrays"):
        registry.get_backend("absent")
    with pytest.raises(ImportError, match="pip install absent-arrays"):
        sgmc.sample(LinearRegression(np.eye(3), np.ones(3)), step_size=0.1, backend="absent")


def test_an_unavailable_backend_is_refused_with_its_reason(registry):
    registry.register("offline", _toy_loader("offline", available=False))
    X, y = _data()
    with pytest.raises(RuntimeError, match="toy accelerator is switched off"):
        registry.require("offline")
    with pytest.raises(RuntimeError, match="toy accelerator is switched off"):
        LogisticRegression(X, y, backend="offline")
    with pytest.raises(RuntimeError, match="'offline' cannot compute"):
        ksd(X, -X, backend="offline")
    assert "offline" not in registry.available_backends()


def test_loader_must_return_its_name(registry):
    registry.register("misnamed", _toy_loader("other"))
    with pytest.raises(ValueError, match="returned a backend named 'other'"):
        registry.get_backend("misnamed")


# ------------------------------------------------------------------------------------------------
# the switch on each entry point (array-api-strict stands in for a device library)


def test_model_constructors_move_their_data():
    X, y = _data()
    for model in (LogisticRegression(X, y, backend="array_api_strict"),
                  LinearRegression(X, y, backend="array_api_strict"),
                  Gaussian(X, cov=np.eye(3), backend="array_api_strict"),
                  GaussianTarget([0.0, 1.0], [[1.0, 0.2], [0.2, 1.0]], backend="array_api_strict")):
        assert backends.get_backend(model.xp).name == "array_api_strict"
    # the NumPy inputs are untouched: a move is a copy
    assert isinstance(X, np.ndarray)


def test_loaders_return_arrays_on_the_backend(tmp_path):
    for load in (logistic_regression_data, linear_regression_data):
        d = load(n=50, dim=2, n_test=5, rng=0, backend="array_api_strict")
        ref = load(n=50, dim=2, n_test=5, rng=0)
        assert type(d) is type(ref)
        for got, want in zip(d, ref):
            assert backends.get_backend(got).name == "array_api_strict"
            np.testing.assert_array_equal(backends.to_numpy(got), want)
    path = tmp_path / "t.csv"
    path.write_text("a,b,y\n1,2,0\n3,4,1\n5,6,1\n")
    table = sgmc.datasets.load_csv(path, backend="array_api_strict")
    assert backends.get_backend(table.X).name == "array_api_strict" and table.feature_names == ["a", "b"]


def test_sample_ksd_and_tuning_move_once_and_agree_with_numpy():
    X, y = _data(n=400)
    kw = dict(step_size=1e-3, n_iter=40, chains=2, batch_size=40, rng=4, progress=False)
    a = sgmc.sample(LogisticRegression(X, y), backend="array_api_strict", **kw)
    b = sgmc.sample(LogisticRegression(X, y), **kw)
    assert a.info["backend"] == "array_api_strict" and b.info["backend"] == "numpy"
    np.testing.assert_allclose(backends.to_numpy(a.draws), b.draws, rtol=1e-10, atol=1e-12)
    x = np.random.default_rng(0).normal(size=(120, 2))
    k = ksd(x, -x, backend="array_api_strict", preconditioner=np.array([1.0, 2.0]))
    assert backends.get_backend(k).name == "array_api_strict"
    assert float(k) == pytest.approx(float(ksd(x, -x, preconditioner=np.array([1.0, 2.0]))), rel=1e-12)
    res = sgmc.tune_step_size(LogisticRegression(X, y), grid=[1e-4, 1e-3], pilot_iters=40, chains=2,
                              batch_size=40, n_ksd=40, rng=0, backend="array_api_strict")
    ref = sgmc.tune_step_size(LogisticRegression(X, y), grid=[1e-4, 1e-3], pilot_iters=40, chains=2,
                              batch_size=40, n_ksd=40, rng=0)
    assert res.best == ref.best


def test_move_leaves_data_already_there_alone():
    model = LinearRegression(np.eye(3), np.ones(3))
    assert backends.move(model, "numpy") is model
    x = np.ones(3)
    assert backends.move(x, "numpy") is x
    moved = backends.move({"a": x, "b": [x, 2.0]}, "array_api_strict")
    assert backends.get_backend(moved["b"][0]).name == "array_api_strict" and moved["b"][1] == 2.0
    with pytest.raises(TypeError, match="`obj` must be an array, a model"):
        backends.move(object(), "numpy")


def test_moved_glm_forgets_cpu_blocking_on_a_device(registry):
    registry.register("gpu-ish", lambda: _device_like())
    model = LogisticRegression(*_data(), backend="gpu-ish")
    assert model.block_elements is None
    back = backends.move(model, "numpy")
    assert back.block_elements == LogisticRegression.block_elements


def _device_like():
    be = _toy_loader("gpu-ish")()
    import dataclasses

    return dataclasses.replace(be, on_cpu=lambda device: False)


# ------------------------------------------------------------------------------------------------
# CuPy on this machine (installed or not, with or without a GPU)


def test_import_sgmc_never_imports_cupy():
    code = "import sys, sgmc, sgmc.backends; sgmc.backends.registered(); print('cupy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_cupy_availability_never_raises(monkeypatch):
    from sgmc.backends.cupy import device_available, device_status

    ok, why = device_status()
    assert isinstance(ok, bool) and device_available() is ok
    if not ok:
        assert why and ("no CUDA device" in why or "does not import" in why or "reports no device" in why)
    monkeypatch.setitem(sys.modules, "cupy", None)  # CuPy missing altogether
    ok, why = device_status()
    assert not ok and 'pip install "sgmc[gpu]"' in why


def test_backend_cupy_without_cupy_says_what_to_install(monkeypatch, registry):
    monkeypatch.setitem(sys.modules, "cupy", None)
    registry._CACHE.pop("cupy", None)
    with pytest.raises(ImportError, match=r'pip install "sgmc\[gpu\]"'):
        LogisticRegression(*_data(), backend="cupy")


def _cupy_installed():
    try:
        import cupy  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _cupy_installed(), reason='CuPy is not installed (pip install "sgmc[gpu]")')
def test_cupy_backend_without_a_device_is_refused_clearly(capsys):
    from sgmc.backends.cupy import device_available

    if device_available():
        pytest.skip("a CUDA device is usable here; the gpu tests cover it")
    be = backends.get_backend("cupy")  # loads without a device
    assert not be.is_available()
    X, y = _data()
    with pytest.raises(RuntimeError, match="no CUDA device is usable"):
        sgmc.sample(LogisticRegression(X, y), step_size=1e-3, backend="cupy")
    with pytest.raises(RuntimeError, match="no CUDA device is usable"):
        logistic_regression_data(n=10, dim=2, n_test=2, backend="cupy")
    from sgmc.cli import main

    assert main(["run", "--backend", "cupy", "--n-data", "200", "--no-progress"]) != 0
    assert "cannot compute on this machine" in capsys.readouterr().err


@pytest.mark.skipif(not _cupy_installed(), reason='CuPy is not installed (pip install "sgmc[gpu]")')
def test_cupy_backend_lists_a_kernel_for_every_dispatch_name():
    from pathlib import Path
    import re

    table = backends.get_backend("cupy").native
    root = Path(sgmc.__file__).parent
    names = set()
    for path in root.rglob("*.py"):
        if "backends" in path.parts:
            continue
        names |= set(re.findall(r'(?:native|dispatch)\(\s*\w+(?:\.\w+)*\s*,\s*"(\w+)"', path.read_text()))
    names |= {"resample_" + s for s in ("systematic", "stratified", "multinomial", "residual")}
    names -= {"no_such_kernel", "resample_"}  # a docstring example; the prefix of the names added above
    names.discard("categorical")
    # the exact SSM recursions are compiled on NumPy only; on CuPy their parallel-in-time scans
    # (sgmc.ssm.hmm_scan, sgmc.ssm.kalman_scan) are the fast path, by design
    names -= {"hmm_messages", "kalman_stats"}
    # the fused GLM blocks serve the interpreted loop's overhead on the CPU; on a GPU each step is
    # already a few kernel launches over the whole minibatch, so the blocks are NumPy-only by design
    names -= {"glm_fused_block", "glm_fused_draws"}
    # the one-pass control-variate set-up (gradient and residual table at the centre) feeds those blocks;
    # elsewhere the estimator takes the model's own full-data gradient, one pass as well
    names.discard("glm_centre_terms")
    # CuPy's resampling kernels run whole schemes, so the ancestors-from-counts step has none of its own
    names.discard("ancestors_from_counts")
    # CuPy's subset kernel completes short rows itself; the device-side completion after the twin's draw
    # serves backends whose subset draw is the twin (JAX under tracing)
    names.discard("complete_rows")
    # compiled blocks of iterations are JAX's (jit of a scan); on CuPy each step is a few kernel launches
    names.discard("block_runner")
    # the rank normalisation of the end-of-run diagnostics runs on the host copy of the draws (scipy's
    # quantile); a CuPy array would take the array-API twin
    names.discard("rank_normal")
    assert names <= set(table), sorted(names - set(table))


def test_move_carries_a_state_space_model():
    """Models without a ``backend=`` constructor argument still move whole (what sample(backend=) does)."""
    from sgmc.ssm import LGSSM

    y = np.random.default_rng(0).normal(size=(40, 1))
    model = LGSSM(y, P0=1.0)
    theta = np.array([[0.9, 1.4, 1.0]])
    moved = backends.move(model, "array_api_strict")
    assert backends.get_backend(moved.y).name == "array_api_strict"
    got = moved.log_lik(backends.asarray(theta, backend="array_api_strict"))
    np.testing.assert_allclose(backends.to_numpy(got), model.log_lik(theta), rtol=1e-12)
