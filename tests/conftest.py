"""Shared fixtures: every backend-generic test runs on each installed array library.

The ``xb`` fixture ("cross-backend case") is parametrised over numpy, array_api_strict (default device,
its second device ``device1``, which stands in for a GPU, and float32), torch when installed, jax when
installed (float64 and float32, marked ``jax``; see ``JAX_DEFAULT_FILES``), and cupy
when a CUDA device is usable (marked ``gpu``). Tests build inputs with NumPy, move them with
``xb.asarray`` and compare on the host with ``xb.to_numpy`` (backend isolation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from sgmc import backends


def _have(mod: str) -> bool:
    try:
        __import__(mod)
    except ImportError:
        return False
    return True


def _cupy_ready() -> bool:
    if not _have("cupy"):
        return False
    from sgmc.backends.cupy import device_available

    return device_available()


@dataclass
class BackendCase:
    """One backend/device/dtype combination for a test."""

    id: str
    name: str
    device: Any
    float_dtype: str

    @property
    def backend(self):
        return backends.get_backend(self.name)

    @property
    def xp(self):
        return self.backend.xp

    @property
    def dtype(self):
        return getattr(self.xp, self.float_dtype)

    @property
    def eps(self) -> float:
        return float(np.finfo(self.float_dtype).eps)

    def asarray(self, a: Any, dtype: Any = None) -> Any:
        """NumPy data -> this backend on this device; floats take the case's dtype."""
        a = np.asarray(a)
        if dtype is None and a.dtype.kind == "f":
            a = a.astype(self.float_dtype)
        return backends.asarray(a, backend=self.name, device=self.device, dtype=dtype)

    def to_numpy(self, x: Any) -> np.ndarray:
        return backends.to_numpy(x)

    def rng(self, seed: int = 0):
        return backends.default_rng(seed, backend=self.name, device=self.device)


def _cases() -> list:
    cases = [pytest.param(BackendCase("numpy", "numpy", "cpu", "float64"), id="numpy")]
    if _have("array_api_strict"):
        import array_api_strict as strict

        strict.set_array_api_strict_flags(api_version="2024.12")
        cases += [
            pytest.param(BackendCase("strict", "array_api_strict", strict.Device("CPU_DEVICE"), "float64"), id="array_api_strict"),
            pytest.param(BackendCase("strict:device1", "array_api_strict", strict.Device("device1"), "float64"), id="array_api_strict:device1"),
            pytest.param(BackendCase("strict:float32", "array_api_strict", strict.Device("CPU_DEVICE"), "float32"), id="array_api_strict:float32"),
        ]
    if _have("torch"):
        import torch

        cases.append(pytest.param(BackendCase("torch", "torch", torch.device("cpu"), "float64"), id="torch"))
    if _have("jax"):
        import jax

        jax.config.update("jax_enable_x64", True)  # for the whole session: float64 as on the other backends
        cases += [
            pytest.param(BackendCase("jax", "jax", jax.devices("cpu")[0], "float64"), id="jax", marks=pytest.mark.jax),
            pytest.param(BackendCase("jax:float32", "jax", jax.devices("cpu")[0], "float32"), id="jax:float32",
                         marks=pytest.mark.jax),
        ]
    gpu_skip = pytest.mark.skipif(not _cupy_ready(), reason="CuPy not installed or no usable CUDA device")
    cases.append(pytest.param(BackendCase("cupy", "cupy", None, "float64"), id="cupy", marks=[pytest.mark.gpu, gpu_skip]))
    return cases


BACKEND_CASES = _cases()


@pytest.fixture(params=BACKEND_CASES)
def xb(request) -> BackendCase:
    """A backend case (see module docstring)."""
    return request.param


# JAX runs each array operation eagerly and compiles it once per shape, so a JAX case costs several
# times its NumPy twin: every JAX case of every file (348) takes minutes of CPU. By default only the
# float64 JAX case runs, and only in these files: the generator and subset draws, every sampler's and
# estimator's statistical test, sample(), the summary (ESS, R-hat, MCSE against NumPy), the exact SSM
# recursions, KSD and checkpoint/resume; tests/test_backend_jax.py (float32 without 64-bit mode, worker processes)
# always runs. `pytest -m jax` runs every JAX case, float32 included, of every file.
JAX_DEFAULT_FILES = {"test_backends.py", "test_sampling.py", "test_samplers.py", "test_estimators.py",
                     "test_run.py", "test_summary.py", "test_ssm_exact.py", "test_ksd.py", "test_resilience.py"}


def _jax_outside_default(item) -> bool:
    case = getattr(getattr(item, "callspec", None), "params", {}).get("xb")
    if getattr(case, "name", None) != "jax":
        return False
    return case.float_dtype != "float64" or item.path.name not in JAX_DEFAULT_FILES


def pytest_collection_modifyitems(config, items):
    """Skip ``slow`` tests unless the marker expression asks for them (``pytest -m slow``)."""
    markexpr = config.getoption("-m") or ""
    if "jax" not in markexpr:
        dropped = [item for item in items if _jax_outside_default(item)]
        if dropped:
            items[:] = [item for item in items if not _jax_outside_default(item)]
            config.hook.pytest_deselected(items=dropped)
    if "slow" in markexpr:
        return
    skip = pytest.mark.skip(reason="slow study; run with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _ctrl_c_reaches_python():
    """Give the test process Python's own SIGINT handler.

    A test run started in the background of a non-interactive shell inherits an ignored SIGINT, and so
    do the subprocesses it starts; the tests of Ctrl-C (in process and through the command line)
    need SIGINT delivered as Python delivers it interactively.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)
