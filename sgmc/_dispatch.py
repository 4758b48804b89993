"""One dispatch seam: ``native(xp, name)`` finds a backend's fast path for a hot function.

Algorithms are written once against the array API; where a library offers something faster (a CUDA
kernel on CuPy, a packed-integer sort on NumPy), its backend lists it in ``Backend.native`` under the
name of the array-API function it replaces. The array-API version is the twin that defines the
result: a native path must return the same values for the same inputs, and the tests compare them.
No code outside :mod:`sgmc.backends` asks which library it runs on; it asks this module for a name.

The layers, from the bottom: natives (in :mod:`sgmc.backends`) are leaf functions of arrays and
pre-drawn random numbers that import no algorithm module and may return ``NotImplemented`` for a
case they do not take; the registry (:mod:`sgmc.backends`) collects them by name; this seam looks
them up; the algorithms, each with its twin beside it, call the seam. :func:`dispatch` joins a
native to its twin, so that a declined call runs the twin. tests/test_imports.py checks that the
package's imports have no cycle.

>>> import numpy as np
>>> from sgmc._dispatch import native
>>> native(np, "subsample") is not None        # NumPy has a native subset draw
True
>>> native(np, "no_such_kernel") is None
True
>>> dispatch(np, "no_such_kernel", abs)(-2)    # no native: the twin itself
2
"""

from __future__ import annotations

from typing import Any, Callable

from .backends import get_backend

__all__ = ["native", "dispatch"]

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


_JOINED: dict[tuple, Callable] = {}


def dispatch(xp: Any, name: str, twin: Callable) -> Callable:
    """``twin``'s replacement for namespace ``xp``: the native ``name`` backed by the twin, or the twin.

    The returned callable takes ``twin``'s arguments. It calls the native path, and where that
    returns ``NotImplemented`` (a case it does not take), the twin with the same arguments; without
    a native it is ``twin`` itself. Resolve it once outside a loop, or call it each time (cached).
    """
    fast = native(xp, name)
    if fast is None:
        return twin
    key = (fast, twin)
    joined = _JOINED.get(key)
    if joined is None:

        def joined(*args, **kwargs):
            out = fast(*args, **kwargs)
            return twin(*args, **kwargs) if out is NotImplemented else out

        joined.__name__ = f"{name}_or_twin"
        joined.__doc__ = f"The native {name!r} path, or {getattr(twin, '__name__', 'the twin')} where it declines."
        _JOINED[key] = joined
    return joined
