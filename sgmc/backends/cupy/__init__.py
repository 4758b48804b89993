"""CuPy backend (NVIDIA GPUs), registered lazily: importing sgmc never imports CuPy.

This is the only module that imports ``cupy``. Random numbers are drawn on the GPU with CuPy's own
generator seeded from the SeedSequence, so streams differ from the NumPy backend's for the same seed;
cross-backend tests pass pre-drawn numbers instead of seeds. ``Backend.kernels`` is filled with native
CUDA fast paths only when a CUDA device is usable.
"""

from __future__ import annotations

import math

import numpy as np

from .._base import Backend, Generator, numpy_dtype


class CupyGenerator(Generator):
    """Generator drawing on the current CUDA device with ``cupy.random.Generator``."""

    def __init__(self, backend: Backend, seed_seq: np.random.SeedSequence, device=None):
        import cupy

        self.backend = backend
        self.device = device
        self._seed_seq = seed_seq
        seed = int(seed_seq.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))
        self._gen = cupy.random.default_rng(seed)
        self._cp = cupy

    def normal(self, shape, dtype=None):
        dt = np.float64 if dtype is None else numpy_dtype(dtype)
        return self._gen.standard_normal(shape, dtype=dt)

    def uniform(self, shape, dtype=None):
        dt = np.float64 if dtype is None else numpy_dtype(dtype)
        return self._gen.random(shape, dtype=dt)

    def integers(self, high, shape):
        return self._gen.integers(0, high, size=shape, dtype=np.int64)

    def subsample(self, n_data, size, batch, replace=False):
        cp = self._cp
        if replace:
            return self.integers(n_data, (batch, size))
        if size == n_data or size * 4 > n_data:
            keys = self._gen.random((batch, n_data))
            return cp.argsort(keys, axis=1)[:, :size].astype(cp.int64)
        # Same first-distinct-in-draw-order construction as the host generator, on the device.
        dups = size * size / (2.0 * n_data)
        m = size + int(math.ceil(2.0 * dups + 8.0 * math.sqrt(dups + 1.0) + 4.0))
        draws = self.integers(n_data, (batch, m))
        # Break ties by draw position so the first occurrence sorts first.
        key = draws * m + cp.arange(m, dtype=cp.int64)[None, :]
        order = cp.argsort(key, axis=1)
        srt = cp.take_along_axis(draws, order, axis=1)
        dup_sorted = cp.zeros(srt.shape, dtype=cp.bool_)
        dup_sorted[:, 1:] = srt[:, 1:] == srt[:, :-1]
        dup = cp.empty_like(dup_sorted)
        rows = cp.arange(batch)[:, None]
        dup[rows, order] = dup_sorted
        if bool(cp.any((m - dup.sum(axis=1)) < size)):
            # Vanishingly rare: fall back to random keys for exactness.
            keys = self._gen.random((batch, n_data))
            return cp.argsort(keys, axis=1)[:, :size].astype(cp.int64)
        pos_key = dup.astype(cp.int64) * m + cp.arange(m, dtype=cp.int64)[None, :]
        keep = cp.argsort(pos_key, axis=1)[:, :size]
        return cp.take_along_axis(draws, keep, axis=1)

    def spawn(self, n):
        return [CupyGenerator(self.backend, s, self.device) for s in self._seed_seq.spawn(n)]


def device_available() -> bool:
    """True when CuPy imports and a CUDA device can be used."""
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

    kernels: dict = {"_device_available": device_available()}
    backend = Backend(
        name="cupy",
        xp=cupy_compat,
        make_generator=lambda ss, device: CupyGenerator(backend, ss, device),
        to_host=to_host,
        from_host=from_host,
        default_device=None,
        synchronize=sync,
        kernels=kernels,
    )
    return backend
