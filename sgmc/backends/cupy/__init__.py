"""CuPy backend (NVIDIA GPUs), registered lazily: ``import sgmc`` never imports CuPy.

This package is the only place that imports ``cupy``. Random numbers are drawn on the GPU with
``cupy.random.Generator`` (XORWOW bit generator) seeded from a NumPy ``SeedSequence``: a generator's
:meth:`~CupyGenerator.spawn` spawns the sequence, so chain groups get independent streams exactly as
on the host backends, though the numbers differ from NumPy's for the same seed (cross-backend tests
pass pre-drawn numbers instead of seeds). Every draw, conversion and kernel launch happens on the
generator's or the arrays' device.

``Backend.native`` maps the names of hot functions to hand-written CUDA kernels (``kernels/*.cu``,
compiled by NVRTC on first use; see :mod:`sgmc.backends.cupy._native` for the host side):

===========================  ===================================================================
name                         array-API twin that defines the result
===========================  ===================================================================
``resample_systematic``      :func:`sgmc.ssm.resampling.systematic_ancestors`
``resample_stratified``      :func:`sgmc.ssm.resampling.stratified_ancestors`
``resample_multinomial``     :func:`sgmc.ssm.resampling.multinomial_ancestors`
``resample_residual``        :func:`sgmc.ssm.resampling.residual_ancestors`
``stein_row_sums``           :func:`sgmc.diagnostics._stein.row_sums_twin` (KSD pair sums)
``glm_grad_log_lik_sum``     ``_GLM._grad_log_lik_sum`` of the logistic and linear regressions
``stochvol_step``            :func:`sgmc.ssm.fused.sv_bootstrap_step_twin` (SV filter step)
``subsample``                :func:`sgmc._sampling.subsample_twin` (minibatch indices)
===========================  ===================================================================
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .. import _scatter
from .._base import Backend, Generator, numpy_dtype, set_rows_inplace

__all__ = ["CupyGenerator", "device_available", "device_status", "make_backend", "INSTALL_HINT"]

#: How to install what this backend needs.
INSTALL_HINT = 'pip install "sgmc[gpu]"'


def device_status() -> tuple[bool, str]:
    """``(usable, reason)``: whether CuPy imports and sees a CUDA device, and if not, why. Never raises."""
    try:
        import cupy
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken installation
        return False, f"CuPy does not import ({type(exc).__name__}: {exc}); install it with {INSTALL_HINT}"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # noqa: BLE001 - no driver, no device, driver too old ...
        return False, (
            f"CuPy {cupy.__version__} is installed but no CUDA device is usable "
            f"({type(exc).__name__}: {exc}); run on a machine with an NVIDIA GPU and its driver, with the "
            f"CuPy build for its CUDA version ({INSTALL_HINT} installs the one for CUDA 12)"
        )
    if count < 1:
        return False, f"CuPy {cupy.__version__} is installed but the CUDA runtime reports no device"
    return True, ""


def device_available() -> bool:
    """True when CuPy imports and a CUDA device can be used; never raises."""
    return device_status()[0]


def _device(device: Any) -> Any:
    """A ``cupy.cuda.Device`` for ``None`` (the current device), an int or a Device."""
    import cupy

    if device is None:
        return cupy.cuda.Device()
    if isinstance(device, cupy.cuda.Device):
        return device
    if isinstance(device, (int, np.integer)) and not isinstance(device, bool):
        return cupy.cuda.Device(int(device))
    msg = f"a CuPy device must be None, an int or a cupy.cuda.Device; got {device!r}"
    raise TypeError(msg)


class CupyGenerator(Generator):
    """Generator drawing on one CUDA device with ``cupy.random.Generator``."""

    def __init__(self, backend: Backend, seed_seq: np.random.SeedSequence, device: Any = None):
        import cupy

        self.backend = backend
        self.device = _device(device)
        self._seed_seq = seed_seq
        seed = int(seed_seq.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))
        with self.device:
            self._gen = cupy.random.Generator(cupy.random.XORWOW(seed))

    def normal(self, shape, dtype=None):
        dt = np.float64 if dtype is None else numpy_dtype(dtype)
        with self.device:
            return self._gen.standard_normal(shape, dtype=dt)

    def uniform(self, shape, dtype=None):
        dt = np.float64 if dtype is None else numpy_dtype(dtype)
        with self.device:
            return self._gen.random(shape, dtype=dt)

    def integers(self, high, shape, dtype=None):
        dt = np.int64 if dtype is None else numpy_dtype(dtype)
        with self.device:
            # drawn as int64 so that the values do not depend on ``dtype``
            out = self._gen.integers(0, high, size=shape, dtype=np.int64)
            return out if dt == np.int64 else out.astype(dt)

    def spawn(self, n):
        return [CupyGenerator(self.backend, s, self.device) for s in self._seed_seq.spawn(n)]

    # Checkpoints pickle generators: the cuRAND state lives in device memory (the bit generator's
    # ``_state`` bytes), so it travels as a host copy and is written back into a generator built
    # from the same seed sequence.
    def __getstate__(self):
        import cupy

        device = getattr(self.device, "id", self.device)
        state = cupy.asnumpy(self._gen.bit_generator._state)
        return {"backend": self.backend, "device": device, "seed_seq": self._seed_seq, "state": state}

    def __setstate__(self, st):
        import cupy

        device = st["device"]
        if isinstance(device, int):
            device = cupy.cuda.Device(device)
        self.__init__(st["backend"], st["seed_seq"], device)
        self._gen.bit_generator._state[...] = cupy.asarray(st["state"])


_RUNTIME: list = []


def _runtime() -> Any:
    if not _RUNTIME:
        from ._compile import CupyRuntime

        _RUNTIME.append(CupyRuntime())
    return _RUNTIME[0]


def _device_of_args(args: tuple) -> Any:
    """The device of the first CuPy array among ``args`` (or inside a NamedTuple argument)."""
    import cupy

    for a in args:
        if isinstance(a, cupy.ndarray):
            return a.device
        if isinstance(a, CupyGenerator):
            return a.device
        if isinstance(a, tuple) and hasattr(a, "_fields"):
            for v in a:
                if isinstance(v, cupy.ndarray):
                    return v.device
    return None


def _kernel_path(fn):
    """Bind a host function of :mod:`._native` to the process's CUDA runtime (created on first call).

    The call runs on the device of its input arrays, so outputs are allocated and kernels launched
    (and compiled modules loaded) there, whichever device is current.
    """

    @functools.wraps(fn)
    def call(*args, **kwargs):
        device = _device_of_args(args)
        if device is None:
            return fn(_runtime(), *args, **kwargs)
        with device:
            return fn(_runtime(), *args, **kwargs)

    return call


def native_table() -> dict:
    """The CUDA fast paths by dispatch name (see the module docstring)."""
    from . import _native

    names = (
        "resample_systematic",
        "resample_stratified",
        "resample_multinomial",
        "resample_residual",
        "stein_row_sums",
        "glm_grad_log_lik_sum",
        "glm_grad_log_lik_diff_sum",
        "stochvol_step",
        "subsample",
    )
    return {name: _kernel_path(getattr(_native, name)) for name in names}


def make_backend() -> Backend:
    import cupy
    from array_api_compat import cupy as cupy_compat

    def to_host(a):
        return cupy.asnumpy(a)

    def from_host(a, dtype, device):
        if dtype is not None:
            a = np.asarray(a, dtype=numpy_dtype(dtype))
        with _device(device):
            return cupy.asarray(a)

    def sync():
        cupy.cuda.Device().synchronize()  # all streams of the current device

    def why():
        return device_status()[1]

    backend = Backend(
        name="cupy",
        xp=cupy_compat,
        make_generator=lambda ss, device: CupyGenerator(backend, ss, device),
        to_host=to_host,
        from_host=from_host,
        default_device=None,
        synchronize=sync,
        native={**native_table(), "set_rows": set_rows_inplace, "scatter_add": _scatter.scatter_add_cupy},
        is_available=device_available,
        unavailable_reason=why,
        on_cpu=lambda device: False,
    )
    return backend
