"""Scalar argument checks shared by every public function.

Each check returns the validated value in a canonical Python type and raises ``TypeError`` (wrong
kind of value) or ``ValueError`` (right kind, out of range) with a message that names the argument,
what was expected and what was given. Array checks (shape, dtype, finiteness, backend) live in
:mod:`sgmc._array_api`, next to the namespace logic they need.
"""

from __future__ import annotations

import difflib
import math
import operator
import os
import reprlib
from typing import Any

__all__ = ["did_you_mean", "check_int", "check_step_size", "check_positive", "check_nonnegative", "check_batch_size", "check_choice",
           "check_file", "check_alloc", "memory_bytes", "check_model", "describe"]


def did_you_mean(value: Any, choices: Any) -> str:
    """``" did you mean 'x'?"`` for the closest of ``choices`` to a mistyped name, else ``""``."""
    if not isinstance(value, str):
        return ""
    lower = {str(c).lower(): c for c in choices}
    close = difflib.get_close_matches(value.lower().replace("-", "_"), list(lower), n=1, cutoff=0.6)
    return f" did you mean {lower[close[0]]!r}?" if close else ""


def check_int(value: Any, name: str, minimum: int = 1) -> int:
    """An integer (bools and floats are refused) of at least ``minimum``."""
    try:
        if isinstance(value, bool):
            raise TypeError
        v = operator.index(value)
    except TypeError:
        msg = f"`{name}` must be an int; got {value!r}"
        raise TypeError(msg) from None
    if v < minimum:
        msg = f"`{name}` must be at least {minimum}; got {v}"
        raise ValueError(msg)
    return v


def _as_float(value: Any, name: str, expected: str) -> float:
    if isinstance(value, (bool, str, bytes)):
        msg = f"`{name}` must be {expected}; got {value!r}"
        raise TypeError(msg)
    try:
        return float(value)
    except (TypeError, ValueError):
        msg = f"`{name}` must be {expected}; got {value!r}"
        raise TypeError(msg) from None


def check_positive(value: Any, name: str) -> float:
    """A positive finite number, as a float."""
    v = _as_float(value, name, "a positive number")
    if not (math.isfinite(v) and v > 0):
        msg = f"`{name}` must be positive and finite; got {value!r}"
        raise ValueError(msg)
    return v


def check_nonnegative(value: Any, name: str) -> float:
    """A non-negative finite number, as a float."""
    v = _as_float(value, name, "a non-negative number")
    if not (math.isfinite(v) and v >= 0):
        msg = f"`{name}` must be a non-negative number; got {value!r}"
        raise ValueError(msg)
    return v


def check_step_size(h: Any, name: str = "step_size") -> float:
    """A scalar step size: positive and finite."""
    try:
        v = float(h) if not isinstance(h, (bool, str, bytes)) else None
    except (TypeError, ValueError):
        v = None
    if v is None:
        msg = f"`{name}` must be a positive number or a schedule; got {h!r}"
        raise TypeError(msg)
    if not math.isfinite(v) or v <= 0:
        msg = f"`{name}` must be positive and finite; got {v}"
        raise ValueError(msg)
    return v


def check_batch_size(batch_size: Any, n_data: int, name: str = "batch_size") -> int:
    """A subsample size as an int in [1, n_data]; a float in (0, 1) is a fraction of ``n_data``."""
    if isinstance(batch_size, float) and 0.0 < batch_size < 1.0:
        batch_size = max(1, int(round(batch_size * n_data)))
    try:
        n = check_int(batch_size, name, minimum=1)
    except TypeError:
        msg = f"`{name}` must be a positive int (or a fraction in (0, 1)); got {batch_size!r}"
        raise TypeError(msg) from None
    if n > n_data:
        msg = f"`{name}`={n} is larger than the number of data n_data={n_data}"
        raise ValueError(msg)
    return n


def check_choice(value: Any, name: str, choices: tuple) -> Any:
    """``value`` if it is one of ``choices`` (an array or other unhashable value is never one)."""
    try:
        known = not (getattr(value, "ndim", 0) or 0) and bool(value in choices)
    except (TypeError, ValueError):
        known = False
    if not known:
        msg = f"`{name}` must be one of {', '.join(map(repr, choices))}; got {value!r}"
        raise ValueError(msg)
    return value


def check_file(path: Any, name: str, what: str = "file", error: type = ValueError) -> str:
    """``path`` as a string, when it names an existing file (not a folder) that can be opened for reading.

    ``name`` is the argument (``"path"``) or command-line flag (``"--data"``) the message names;
    ``what`` says which file is wanted (``"CSV file"``). A value that is not a path raises
    ``TypeError``; an empty name, a folder (``".."`` among them), a missing or unreadable file raise
    ``error`` (``ValueError`` by default).
    """
    label = name if name.startswith("-") else f"`{name}`"
    if isinstance(path, bool) or not isinstance(path, (str, bytes, os.PathLike)):
        msg = f"cannot read {what}: {label} must be the path of a {what} (a str or os.PathLike); got {path!r}"
        raise TypeError(msg)
    try:
        path = os.fsdecode(os.fspath(path))
    except (TypeError, UnicodeDecodeError) as exc:
        msg = f"cannot read {what}: {label} must be the path of a {what}; got {path!r} ({exc})"
        raise TypeError(msg) from None
    if "\x00" in path:
        why = "the name holds a NUL character"
    elif not path.strip():
        why = "the name is empty"
    elif os.path.isdir(path):
        why = "that is a folder, not a file"
    elif not os.path.exists(path):
        why = "no such file"
    elif not os.access(path, os.R_OK):
        why = "the file is not readable (permission denied)"
    else:
        return path
    msg = f"cannot read {what} {path!r}: {label} must be the path of an existing {what}; {why}"
    raise error(msg)


def memory_bytes() -> int:
    """This machine's physical memory in bytes (``SGMC_MAX_BYTES`` overrides it; 1 TiB where unknown)."""
    override = os.environ.get("SGMC_MAX_BYTES")
    if override is not None:
        try:
            return check_int(int(override), "SGMC_MAX_BYTES")
        except (TypeError, ValueError):
            msg = f"the environment variable SGMC_MAX_BYTES must be a positive integer (bytes); got {override!r}"
            raise ValueError(msg) from None
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 2**40


def _bytes_text(n: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} bytes"


def check_alloc(n_bytes: int, name: str, value: Any, what: str) -> None:
    """Refuse a size argument whose allocation would not fit in this machine's memory, before allocating.

    ``n_bytes`` is what ``name`` = ``value`` asks for (computed with Python integers, so it cannot
    overflow), ``what`` says for what (``"the (m,) index array"``). Raises ``ValueError`` naming the
    argument, the bytes needed and the memory there is; ``SGMC_MAX_BYTES`` sets another limit.
    """
    limit = memory_bytes()
    if n_bytes > limit:
        label = name if name.startswith("-") else f"`{name}`"
        where = "the limit SGMC_MAX_BYTES" if "SGMC_MAX_BYTES" in os.environ else "this machine's memory"
        msg = (f"{label}={value!r} is too large: {what} would need about {_bytes_text(n_bytes)}, more than "
               f"{where} ({_bytes_text(limit)}); give a smaller {label}")
        raise ValueError(msg)


_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxlevel = 40, 40, 4, 2


def describe(value: Any) -> str:
    """A short description of what was given: its type and a clipped repr."""
    return f"{type(value).__name__} {_SHORT.repr(value)}"


def _has_method(model: Any, name: str) -> bool:
    attr = getattr(model, name, None)
    return callable(attr) and not getattr(attr, "_sgmc_placeholder", False)


def check_model(model: Any, name: str = "model", methods: tuple = (), purpose: str = "") -> Any:
    """``model`` when it is an sgmc model: ``xp``, a positive int ``dim``, ``dtype``, and ``methods``.

    The one check of a ``model=`` argument shared by the public functions that take one: anything
    else (``None``, a string, an array, an object without a model's attributes) raises ``TypeError``
    naming ``name``, what a model needs and what was given; a model without one of ``methods`` (a
    base-class placeholder counts as absent) raises ``TypeError`` naming the methods and ``purpose``.
    """
    missing = [a for a in ("xp", "dim", "dtype") if not hasattr(model, a)]
    if missing or isinstance(model, (str, bytes, int, float, complex, list, tuple, dict, type)):
        msg = (f"`{name}` must be an sgmc model (a sgmc.models.Model, or an object with xp, dim, dtype and the "
               f"model methods, see sgmc.models.Target); got {describe(model)}")
        raise TypeError(msg)
    dim = model.dim
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        try:
            ok = not isinstance(dim, bool) and operator.index(dim) >= 1
        except TypeError:
            ok = False
        if not ok:
            msg = f"`{name}` must be an sgmc model with a positive int `dim`; {type(model).__name__}.dim is {dim!r}"
            raise TypeError(msg)
    absent = [m for m in methods if not _has_method(model, m)]
    if absent:
        why = {getattr(getattr(model, m, None), "_sgmc_reason", "") for m in absent} - {""}
        msg = (f"{purpose or 'this function'} needs the model method(s) {', '.join(absent)}, which "
               f"{type(model).__name__} does not provide (`{name}`); implement them (see sgmc.models.Model) or "
               "choose a method that does not need them" + (" (" + "; ".join(sorted(why)) + ")" if why else ""))
        raise TypeError(msg)
    return model
