"""PyTorch backend through array-api-compat (CPU tensors; CUDA tensors work where torch has CUDA).

Random numbers are drawn on the tensors' device by :class:`~sgmc.backends._torch_random.TorchGenerator`.
"""

from __future__ import annotations

import numpy as np
import torch
from array_api_compat import torch as torch_compat

from . import _scatter
from ._base import Backend, set_rows_inplace
from ._torch_random import TorchGenerator


def _to_host(a) -> np.ndarray:
    return a.detach().cpu().numpy()


def _from_host(a: np.ndarray, dtype, device):
    a = np.ascontiguousarray(a)
    if not a.flags.writeable:  # torch shares memory and warns on read-only arrays
        a = a.copy()
    t = torch.from_numpy(a)
    if dtype is not None:
        t = t.to(dtype)
    if device is not None and str(device) != "cpu":
        t = t.to(device)
    return t


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _on_cpu(device) -> bool:
    return torch.device(device).type == "cpu" if device is not None else True


# Every backend's make_backend fills the same Backend fields with its own values.
def make_backend() -> Backend:
    backend = Backend(
        name="torch",
        xp=torch_compat,
        make_generator=lambda ss, device: TorchGenerator(backend, ss, device),
        to_host=_to_host,
        from_host=_from_host,
        default_device=torch.device("cpu"),
        synchronize=_sync,
        on_cpu=_on_cpu,
        native={"set_rows": set_rows_inplace, "scatter_add": _scatter.scatter_add_torch},
    )
    return backend
