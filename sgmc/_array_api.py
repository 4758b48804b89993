"""Array API plumbing shared by every algorithm in sgmc.

This is the only module outside :mod:`sgmc.backends` that touches ``array_api_compat``. Public
functions start with ``xp = array_namespace(*arrays)``: the namespace and device of the inputs decide
where the computation runs, mixed namespaces or devices raise with a message that names the fix, and
nothing is copied between host and device behind the user's back.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import array_api_compat

Array = Any
Namespace = ModuleType

__all__ = [
    "Array",
    "Namespace",
    "array_namespace",
    "device_of",
    "check_same_device",
    "is_array",
    "float_dtype",
    "is_floating",
    "check_finite",
    "as_float_array",
    "check_real_dtype",
    "namespace_name",
    "at",
]

# Library predicates from array-api-compat, in the order they are tried. They never import the
# library they test for, so asking about CuPy on a machine without it is free.
_LIBRARIES = (
    ("numpy", array_api_compat.is_numpy_namespace),
    ("array_api_strict", array_api_compat.is_array_api_strict_namespace),
    ("torch", array_api_compat.is_torch_namespace),
    ("cupy", array_api_compat.is_cupy_namespace),
    ("jax", array_api_compat.is_jax_namespace),
    ("dask", array_api_compat.is_dask_namespace),
)


def is_array(x: Any) -> bool:
    """Return True when ``x`` is an array of a library that array-api-compat knows."""
    # Python scalars are not arrays, but NumPy scalars (np.float64 subclasses float) are 0-d arrays.
    return array_api_compat.is_array_api_obj(x) and type(x) not in (int, float, complex, bool)


def namespace_name(xp: Namespace) -> str:
    """Short library name of a namespace (``"numpy"``, ``"array_api_strict"``, ``"torch"``, ``"cupy"``)."""
    for name, owns in _LIBRARIES:
        if owns(xp):
            return name
    return getattr(xp, "__name__", str(xp))


def array_namespace(*arrays: Any, names: tuple[str, ...] | None = None) -> Namespace:
    """Return the common array namespace of ``arrays`` and check they share a device.

    ``None`` entries and Python scalars are ignored. ``names`` (same length as ``arrays``) are used
    in the error message when namespaces or devices differ.

    Raises
    ------
    TypeError
        If the arrays come from different libraries.
    ValueError
        If they live on different devices.
    """
    pairs = [(a, (names[i] if names else f"argument {i}")) for i, a in enumerate(arrays)]
    pairs = [(a, n) for a, n in pairs if a is not None and is_array(a)]
    if not pairs:
        if names:
            given = ", ".join(f"`{n}` ({type(a).__name__})" for a, n in zip(arrays, names))
            msg = f"expected arrays (NumPy, CuPy, torch or array-api-strict); got {given}"
        else:
            msg = "no arrays were given to infer the array namespace from"
        raise TypeError(msg)
    spaces = []
    for a, n in pairs:
        spaces.append((array_api_compat.array_namespace(a), n))
    first_xp, first_name = spaces[0]
    for xp, n in spaces[1:]:
        if xp is not first_xp:
            msg = (
                f"`{first_name}` is a {namespace_name(first_xp)} array but `{n}` is a "
                f"{namespace_name(xp)} array; convert explicitly with "
                f"sgmc.backends.asarray(..., backend={namespace_name(first_xp)!r})"
            )
            raise TypeError(msg)
    check_same_device(*[a for a, _ in pairs], names=tuple(n for _, n in pairs))
    return first_xp


def device_of(x: Array) -> Any:
    """Device of an array (``"cpu"`` for NumPy); ``None`` for a JAX value being traced.

    A value inside ``jax.jit``, ``jax.grad`` or ``jax.vmap`` has no device yet: the compiled
    computation places it, so it matches any device.
    """
    return array_api_compat.device(x)


def check_same_device(*arrays: Array, names: tuple[str, ...] | None = None) -> Any:
    """Raise ``ValueError`` unless all arrays are on one device; return that device.

    Traced JAX values (device ``None``) match every device.
    """
    devs = [device_of(a) for a in arrays]
    placed = [(i, d) for i, d in enumerate(devs) if d is not None]
    for i, d in placed[1:]:
        # CuPy devices are not hashable, so compare pairwise.
        if d != placed[0][1]:
            i0, d0 = placed[0]
            n0 = names[i0] if names else f"argument {i0}"
            ni = names[i] if names else f"argument {i}"
            msg = (
                f"`{n0}` is on device {d0!r} but `{ni}` is on device {d!r}; move one of them "
                "explicitly (sgmc never copies between devices silently)"
            )
            raise ValueError(msg)
    return placed[0][1] if placed else None


def is_floating(xp: Namespace, dtype: Any) -> bool:
    """True for real floating dtypes."""
    return xp.isdtype(dtype, "real floating")


def float_dtype(xp: Namespace, *arrays: Array, names: tuple[str, ...] | None = None) -> Any:
    """Working floating dtype: the widest floating dtype among ``arrays``, else float64.

    With ``names``, each array's dtype is checked first (:func:`check_real_dtype`), so that an error
    names the array at fault rather than another one cast to the common dtype.
    """
    if names is not None:
        for a, name in zip(arrays, names):
            if not is_array(a):
                msg = f"`{name}` must be an array (NumPy, CuPy, torch or array-api-strict); got {type(a).__name__}"
                raise TypeError(msg)
            check_real_dtype(xp, a.dtype, name)
    floats = [a.dtype for a in arrays if a is not None and is_floating(xp, a.dtype)]
    if not floats:
        return xp.float64
    return xp.result_type(*floats)


def check_real_dtype(xp: Namespace, dtype: Any, name: str) -> None:
    """Raise ``TypeError`` naming ``name`` unless ``dtype`` is one sgmc computes in or converts from.

    Integers and booleans are converted to a float; float32 and float64 are used as given. Complex
    dtypes would lose their imaginary part, and half precision (float16, bfloat16) cannot hold the
    sums the algorithms form, so both are refused rather than converted behind the caller's back.
    """
    if xp.isdtype(dtype, "complex floating"):
        msg = (
            f"`{name}` is complex (dtype {dtype}); sgmc computes with real numbers: pass the real part "
            "(x.real) if that is what is meant"
        )
        raise TypeError(msg)
    if xp.isdtype(dtype, "real floating") and dtype not in (xp.float32, xp.float64):
        msg = (
            f"`{name}` has dtype {dtype}; sgmc computes in float32 or float64: convert it first, "
            "e.g. x.astype('float32')"
        )
        raise TypeError(msg)
    if not (xp.isdtype(dtype, "numeric") or dtype == xp.bool):
        msg = f"`{name}` must be numeric; got dtype {dtype}"
        raise TypeError(msg)


def as_float_array(xp: Namespace, x: Array, dtype: Any, name: str) -> Array:
    """Cast ``x`` to the floating ``dtype`` (same device), checking it is real and numeric.

    Raises ``TypeError`` naming ``name`` for complex, half-precision and non-numeric arrays
    (:func:`check_real_dtype`).
    """
    check_real_dtype(xp, x.dtype, name)
    check_real_dtype(xp, dtype, name)
    if x.dtype != dtype:
        x = xp.astype(x, dtype)
    return x


def check_finite(xp: Namespace, x: Array, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` if ``x`` holds NaN or infinite values."""
    if xp.isdtype(x.dtype, "real floating") and not bool(xp.all(xp.isfinite(x))):
        bad = int(xp.sum(xp.astype(~xp.isfinite(x), xp.int64)))
        msg = f"`{name}` contains {bad} non-finite value(s) (NaN or inf); clean the data first"
        raise ValueError(msg)


class _At:
    """The target of :func:`at`: ``set`` or ``add`` values at one index of one array."""

    __slots__ = ("_x", "_idx")

    def __init__(self, x: Array, idx: Any):
        self._x = x
        self._idx = idx

    def _writeable(self) -> Array | None:
        x = self._x
        if array_api_compat.is_writeable_array(x):
            return x
        if array_api_compat.is_jax_array(x):
            return None
        # a read-only array of a mutable library (a NumPy view of a memory map): update a copy
        return array_api_compat.array_namespace(x).asarray(x, copy=True)

    def set(self, values: Any) -> Array:
        """``x[idx] = values``; returns the updated array (``x`` itself where it could be written)."""
        x = self._writeable()
        if x is None:
            return self._x.at[self._idx].set(values)
        x[self._idx] = values
        return x

    def add(self, values: Any) -> Array:
        """``x[idx] += values`` (``idx`` without repeats); returns the updated array."""
        x = self._writeable()
        if x is None:
            return self._x.at[self._idx].add(values)
        x[self._idx] = x[self._idx] + values
        return x


def at(x: Array, idx: Any) -> _At:
    """Update part of an array on any backend: ``x = at(x, idx).set(v)`` or ``.add(v)``.

    The one way sgmc writes into part of an array. Where the library's arrays are writeable (NumPy,
    CuPy, PyTorch, array-api-strict) the update is made in place and ``x`` is returned; JAX arrays are
    immutable, so a new array is returned (``x.at[idx].set(v)``); a read-only array is copied first.
    Callers therefore always use the returned array and never rely on other references to ``x``
    seeing the change. ``add`` expects an index without repeated positions (repeats would add once
    in place and every time on JAX; :func:`sgmc._scatter.scatter_add` sums repeats).

    Parameters
    ----------
    x : array
    idx : index
        Anything ``x[idx]`` accepts: integers, slices, tuples of them, boolean or integer arrays.

    Returns
    -------
    object with ``set(values)`` and ``add(values)``, each returning the updated array

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc._array_api import at
    >>> x = np.zeros((2, 3))
    >>> x = at(x, (slice(None), 1)).set(1.0)
    >>> at(x, 0).add(2.0).tolist()
    [[2.0, 3.0, 2.0], [0.0, 1.0, 0.0]]
    """
    return _At(x, idx)
