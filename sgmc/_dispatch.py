"""One dispatch seam: ``native(xp, name)`` finds a backend's fast path for a hot function.

Algorithms are written once against the array API; where a library offers something faster (a CUDA
kernel on CuPy, a packed-integer sort on NumPy), its backend lists it in ``Backend.native`` under the
name of the array-API function it replaces. The array-API version is the twin that defines the
result: a native path must return the same values for the same inputs, and the tests compare them.
No code outside :mod:`sgmc.backends` asks which library it runs on; it asks this module for a name.

>>> import numpy as np
>>> from sgmc._dispatch import native
>>> native(np, "subsample") is not None        # NumPy has a native subset draw
True
>>> native(np, "no_such_kernel") is None
True
"""

from __future__ import annotations

from typing import Any, Callable

from .backends import get_backend

__all__ = ["native"]

_TABLES: dict[int, tuple[Any, dict]] = {}
_EMPTY: dict = {}


def _table(xp: Any) -> dict:
    key = id(xp)
    hit = _TABLES.get(key)
    if hit is not None and hit[0] is xp:
        return hit[1]
    try:
        table = get_backend(xp).native
    except (TypeError, ValueError, ImportError):
        table = _EMPTY  # a namespace no backend claims: only the array-API twins run
    _TABLES[key] = (xp, table)
    return table


def native(xp: Any, name: str) -> Callable | None:
    """The native fast path ``name`` of the backend that owns namespace ``xp``, or ``None``.

    The lookup is cached per namespace, so calling it inside a loop costs a dictionary access.
    """
    return _table(xp).get(name)
