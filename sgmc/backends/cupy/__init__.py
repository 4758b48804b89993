"""CuPy backend (NVIDIA GPUs), registered lazily: importing sgmc never imports CuPy.

This is the only module that imports ``cupy``. Random numbers are drawn on the GPU with CuPy's own
generator seeded from the SeedSequence, so streams differ from the NumPy backend's for the same seed;
cross-backend tests pass pre-drawn numbers instead of seeds. ``Backend.native`` holds CUDA fast paths
(none yet: every algorithm runs through its array-API twin on CuPy).
"""

from __future__ import annotations

import numpy as np

from .._base import Backend, Generator, numpy_dtype, set_rows_inplace


class CupyGenerator(Generator):
    """Generator drawing on the current CUDA device with ``cupy.random.Generator``."""

    def __init__(self, backend: Backend, seed_seq: np.random.SeedSequence, device=None):
        import cupy

        self.backend = backend
        self.device = device
        self._seed_seq = seed_seq
        seed = int(seed_seq.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))
        self._gen = cupy.random.default_rng(seed)

    def normal(self, shape, dtype=None):
        dt = np.float64 if dtype is None else numpy_dtype(dtype)
        return self._gen.standard_normal(shape, dtype=dt)

    def uniform(self, shape, dtype=None):
        dt = np.float64 if dtype is None else numpy_dtype(dtype)
        return self._gen.random(shape, dtype=dt)

    def integers(self, high, shape, dtype=None):
        dt = np.int64 if dtype is None else numpy_dtype(dtype)
        return self._gen.integers(0, high, size=shape, dtype=dt)

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


def device_available() -> bool:
    """True when CuPy imports and a CUDA device can be used; never raises."""
    try:
        import cupy

        return bool(cupy.cuda.is_available())
    except Exception:  # noqa: BLE001 - any failure means "no usable device"
        return False


def make_backend() -> Backend:
    import cupy
    from array_api_compat import cupy as cupy_compat

    def to_host(a):
        return cupy.asnumpy(a)

    def from_host(a, dtype, device):
        if dtype is not None:
            a = np.asarray(a, dtype=numpy_dtype(dtype))
        return cupy.asarray(a)

    def sync():
        cupy.cuda.get_current_stream().synchronize()

    backend = Backend(
        name="cupy",
        xp=cupy_compat,
        make_generator=lambda ss, device: CupyGenerator(backend, ss, device),
        to_host=to_host,
        from_host=from_host,
        default_device=None,
        synchronize=sync,
        is_available=device_available,
        on_cpu=lambda device: False,
        native={"set_rows": set_rows_inplace},
    )
    return backend
