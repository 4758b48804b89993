"""NumPy backend (CPU)."""

from __future__ import annotations

import numpy as np
from array_api_compat import numpy as np_compat

from ._base import Backend, HostGenerator


def _from_host(a, dtype, device):
    return np.asarray(a) if dtype is None else np.asarray(a, dtype=dtype)


def make_backend() -> Backend:
    backend = Backend(
        name="numpy",
        xp=np_compat,
        make_generator=lambda ss, device: HostGenerator(backend, ss, device),
        to_host=np.asarray,
        from_host=_from_host,
        quiet_float=lambda: np.errstate(over="ignore", invalid="ignore", divide="ignore"),
        default_device="cpu",
    )
    return backend
