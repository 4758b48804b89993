"""array-api-strict backend: the reference namespace the test suite runs every algorithm on.

Its second device (``Device("device1")``) stands in for a GPU: mixing devices or converting to NumPy
implicitly raises, which catches forgotten ``device=`` arguments and hidden host copies.
"""

from __future__ import annotations

import array_api_strict as xp
import numpy as np

from ._base import Backend, HostGenerator, numpy_dtype


def _to_host(a) -> np.ndarray:
    return np.asarray(a.to_device(xp.Device("CPU_DEVICE")))


def _from_host(a: np.ndarray, dtype, device):
    if dtype is not None:
        a = np.asarray(a, dtype=numpy_dtype(dtype))
    return xp.asarray(a, device=device)


# Every backend's make_backend fills the same Backend fields with its own values.
def make_backend() -> Backend:
    backend = Backend(
        name="array_api_strict",
        xp=xp,
        make_generator=lambda ss, device: HostGenerator(backend, ss, device),
        to_host=_to_host,
        from_host=_from_host,
        quiet_float=lambda: np.errstate(over="ignore", invalid="ignore", divide="ignore"),
        default_device=xp.Device("CPU_DEVICE"),
    )
    return backend
