"""CuPy backend (NVIDIA GPUs), registered lazily: ``import sgmc`` never imports CuPy.

This package is the only place that imports ``cupy``. Random numbers are drawn on the GPU with
``cupy.random.Generator`` (XORWOW bit generator) seeded from a NumPy ``SeedSequence``: a generator's
:meth:`~CupyGenerator.spawn` spawns the sequence, so chain groups get independent streams exactly as
on the host backends, though the numbers differ from NumPy's for the same seed (cross-backend tests
pass pre-drawn numbers instead of seeds). Every generator keeps :data:`STATE_SIZE` cuRAND states,
whatever the card, so its saved state resumes on another GPU. Every draw, conversion, allocation and
kernel launch happens on the generator's or the arrays' device. :func:`device_status` calls the GPU
usable only when the NVRTC library that compiles the kernels loads too.

``Backend.native`` maps the names of hot functions to hand-written CUDA kernels (``kernels/*.cu``,
compiled by NVRTC on first use; see :mod:`sgmc.backends.cupy._native` for the host side):

===============================  ====================================================================
name                             array-API twin that defines the result
===============================  ====================================================================
``resample_systematic``          :func:`sgmc.ssm.resampling.systematic_ancestors`
``resample_stratified``          :func:`sgmc.ssm.resampling.stratified_ancestors`
``resample_multinomial``         :func:`sgmc.ssm.resampling.multinomial_ancestors`
``resample_residual``            :func:`sgmc.ssm.resampling.residual_ancestors`
``stein_row_sums``               :func:`sgmc.diagnostics._stein.row_sums_twin` (KSD pair sums)
``glm_grad_log_lik_sum``         ``_GLM._grad_log_lik_sum`` of the logistic and linear regressions
``glm_grad_log_lik_diff_sum``    ``_GLM._grad_diff_sum`` (the control-variate difference, one launch)
``stochvol_step``                :func:`sgmc.ssm.fused.sv_bootstrap_step_twin` (SV filter step)
``subsample``                    :func:`sgmc._sampling.subsample_twin` (minibatch indices)
``contiguous``                   none: a C-contiguous copy, made once when a model is built or moved
===============================  ====================================================================
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .. import _scatter
from .._base import Backend, Generator, numpy_dtype, set_rows_inplace

__all__ = ["CupyGenerator", "device_available", "device_status", "nvrtc_status", "make_backend", "INSTALL_HINT",
           "STATE_SIZE"]

#: How to install what this backend needs.
INSTALL_HINT = 'pip install "sgmc[gpu]"'


def device_status() -> tuple[bool, str]:
    """``(usable, reason)``: whether CuPy imports, sees a CUDA device and can compile kernels; never raises.

    "Usable" needs the NVRTC library as well as a device: a machine with the driver but without
    NVRTC would otherwise pass this check and fail on the first kernel. The reason starts with
    "unusable" when CuPy is installed but the GPU cannot run sgmc's kernels.
    """
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
    why = nvrtc_status()
    if why:
        return False, f"unusable: CuPy {cupy.__version__} sees {count} CUDA device(s) but {why}"
    return True, ""


def nvrtc_status() -> str:
    """Why the NVRTC library (run-time compiler of the kernels) cannot load, or "" when it can."""
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # noqa: BLE001 - missing or broken library
        return (f"the NVRTC library does not load ({type(exc).__name__}: {exc}); install the CUDA runtime "
                f"compiler matching CuPy's CUDA (for CUDA 12: pip install nvidia-cuda-nvrtc-cu12)")
    return ""


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


#: cuRAND states of every generator: a fixed number, so that a generator's numbers and its saved
#: state do not depend on the card (CuPy's default is meant to follow the SM count). With this many
#: states, a draw of up to 32,768 numbers uses one state per number.
STATE_SIZE = 32768


def _seed_sequence_state(ss: np.random.SeedSequence) -> dict:
    """A SeedSequence as plain data (ints and lists of ints)."""
    entropy = ss.entropy
    if not isinstance(entropy, (int, np.integer)):
        entropy = [int(e) for e in entropy]
    else:
        entropy = int(entropy)
    return {"entropy": entropy, "spawn_key": [int(k) for k in ss.spawn_key], "pool_size": int(ss.pool_size),
            "n_children_spawned": int(ss.n_children_spawned)}


def _seed_sequence(st: dict) -> np.random.SeedSequence:
    return np.random.SeedSequence(st["entropy"], spawn_key=tuple(st["spawn_key"]), pool_size=st["pool_size"],
                                  n_children_spawned=st["n_children_spawned"])


class CupyGenerator(Generator):
    """Generator drawing on one CUDA device with ``cupy.random.Generator`` (XORWOW, :data:`STATE_SIZE` states)."""

    def __init__(self, backend: Backend, seed_seq: np.random.SeedSequence, device: Any = None):
        import cupy

        self.backend = backend
        self.device = _device(device)
        self._seed_seq = seed_seq
        seed = int(seed_seq.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))
        with self.device:
            self._gen = cupy.random.Generator(cupy.random.XORWOW(seed, size=STATE_SIZE))

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

    # Checkpoints store generators as data: the backend's name, the device's number, the seed
    # sequence as ints, and the cuRAND states (device memory) as a host copy of their bytes, which
    # are written back into a generator built from the same seed sequence. The states' size is
    # fixed (STATE_SIZE), so a state saved on one card resumes on another.
    def __getstate__(self) -> dict:
        import cupy

        with self.device:
            state = cupy.asnumpy(self._gen.bit_generator._state)
        return {"backend": "cupy", "device": int(self.device.id), "seed_seq": _seed_sequence_state(self._seed_seq),
                "state_size": STATE_SIZE, "state": state}

    def __setstate__(self, st: dict) -> None:
        import cupy

        if int(st.get("state_size", STATE_SIZE)) != STATE_SIZE:
            msg = (f"the saved generator has {st['state_size']} cuRAND states; this version of sgmc uses "
                   f"{STATE_SIZE}, so the state cannot be resumed")
            raise ValueError(msg)
        device = int(st["device"])
        if device >= cupy.cuda.runtime.getDeviceCount():
            device = None  # saved on a device this machine lacks: resume on the current one
        self.__init__(_MADE[0] if _MADE else make_backend(), _seed_sequence(st["seed_seq"]), device)
        state = np.asarray(st["state"])
        current = self._gen.bit_generator._state
        if state.dtype != np.dtype(current.dtype) or state.shape != tuple(current.shape):
            msg = (f"the saved cuRAND state is {state.dtype} {state.shape}; this CuPy keeps "
                   f"{current.dtype} {tuple(current.shape)}")
            raise ValueError(msg)
        with self.device:
            current[...] = cupy.asarray(state)


_RUNTIME: list = []
_MADE: list = []  # the backend made by make_backend (the registry makes it once per process)


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

    return {name: _kernel_path(getattr(_native, name)) for name in _native.KERNELS}


def make_backend() -> Backend:
    import cupy
    from array_api_compat import cupy as cupy_compat

    def to_host(a):
        return cupy.asnumpy(a)

    def from_host(a, dtype, device):
        if dtype is not None:
            a = np.asarray(a, dtype=numpy_dtype(dtype))
        with _device(device):
            # C order on the device, once: the kernels read rows contiguously
            return cupy.ascontiguousarray(cupy.asarray(a))

    def contiguous(a):
        """The array itself when C-contiguous, else a C-contiguous copy on its own device."""
        if a.flags.c_contiguous:
            return a
        with a.device:
            return cupy.ascontiguousarray(a)

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
        native={**native_table(), "set_rows": set_rows_inplace, "scatter_add": _scatter.scatter_add_cupy,
                "contiguous": contiguous},
        is_available=device_available,
        unavailable_reason=why,
        on_cpu=lambda device: False,
    )
    if not _MADE:
        _MADE.append(backend)
    return backend
