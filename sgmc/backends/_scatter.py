"""Native ``scatter_add`` paths (see :mod:`sgmc._scatter`, whose array-API twin defines the result)."""

from __future__ import annotations

from typing import Any


def scatter_add_numpy(m: int, index: Any, values: Any) -> Any:
    """NumPy: one ``bincount`` over the flattened ``(row, column)`` cells (faster than ``np.add.at``)."""
    import numpy as np

    k, d = values.shape
    if k == 0 or d == 0:
        return np.zeros((m, d), dtype=values.dtype)
    cells = (np.asarray(index, dtype=np.intp)[:, None] * d + np.arange(d)).ravel()
    out = np.bincount(cells, weights=values.ravel(), minlength=m * d).reshape(m, d)
    return out.astype(values.dtype, copy=False)


def scatter_add_numpy_addat(m: int, index: Any, values: Any) -> Any:
    """NumPy with ``np.add.at`` (kept for the benchmark that compares the two)."""
    import numpy as np

    out = np.zeros((m, values.shape[1]), dtype=values.dtype)
    np.add.at(out, index, values)
    return out


def scatter_add_torch(m: int, index: Any, values: Any) -> Any:
    """PyTorch: ``index_add_`` into a zero tensor on the values' device."""
    import torch

    out = torch.zeros((m, values.shape[1]), dtype=values.dtype, device=values.device)
    return out.index_add_(0, index.to(torch.int64), values)


def scatter_add_cupy(m: int, index: Any, values: Any) -> Any:
    """CuPy: ``cupyx.scatter_add`` (atomic adds) into a zero array on the values' device."""
    import cupy as cp
    import cupyx

    with values.device:
        out = cp.zeros((m, values.shape[1]), dtype=values.dtype)
        cupyx.scatter_add(out, index, values)
    return out
