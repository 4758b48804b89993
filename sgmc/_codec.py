"""Objects as data: a JSON document of plain values plus NumPy arrays, in a declared schema.

:class:`Encoder` turns an object graph into a JSON-able document and a list of host arrays;
:class:`sgmc._decode.Decoder` turns them back. The schema (:data:`SCHEMA`, its version
:data:`SCHEMA_VERSION`) holds only: ``None``, booleans, numbers, strings, lists, tuples and dicts of
them; NumPy arrays, scalars and dtypes; arrays, dtypes, devices and namespaces of a registered backend
(by the backend's name, the array as a host copy); NumPy seed sequences and generators and sgmc's
backend generators (by their state); records (``NamedTuple`` classes of :mod:`sgmc._registry`, by
field); and objects of registered constructors, by the class's registry name and the options its
public constructor takes (found by :func:`sgmc._registry.options`, which checks that they rebuild the
object exactly). Anything else raises :class:`NotStorable`: no function, class or attribute set is
ever written. Objects that cannot be stored (a user's model) are left as placeholders that the caller
supplies again (``supplied=``).

Objects keep their identity: an object met twice is stored once and referred to by number, and
numbering can continue from an earlier document, so a second document can refer into a first one
that was written once (the run's data) and is shared by many (the checkpoints).
"""

from __future__ import annotations

import math
import types
import warnings
from typing import Any

import numpy as np

from . import _registry, backends
from ._array_api import is_array
from .backends._base import Generator, HostGenerator

__all__ = ["Encoder", "NotStorable", "SCHEMA", "SCHEMA_VERSION", "METHODS"]

#: Name and version of the document schema; a file of another version is refused naming both.
SCHEMA = "sgmc objects"
SCHEMA_VERSION = 3
#: Bound methods a document may hold, by name, on an object it stores (a run's score function).
METHODS = ("grad_log_posterior",)
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")
_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float32", "float64", "complex64", "complex128")
_PLAIN = (str, int, bool, type(None))
_ROWS_MIN = 2  # lists of this many NamedTuples of one class are stored column by column
_NUMS_MIN = 16  # lists of this many plain floats (or ints) are stored as one array


class NotStorable(TypeError):
    """An object that a checkpoint cannot hold as data (it is not part of sgmc, or holds code)."""


def _backend_of_type(obj: Any) -> Any:
    root = type(obj).__module__.split(".")[0]
    try:
        return backends.get_backend(root)
    except (ValueError, TypeError, ImportError):
        return None


def _devices(be: Any) -> tuple:
    """The backend's default device first, then the devices its namespace lists."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a library may warn about device kinds it enumerates
            return (be.default_device, *be.xp.__array_namespace_info__().devices())
    except (AttributeError, TypeError, RuntimeError):
        return (be.default_device,)


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


class Encoder:
    """Turns objects into a JSON-able document; arrays are collected in :attr:`arrays`.

    ``prefix`` names the array members (``prefix + number``); ``memo`` and ``start`` continue the
    numbering of an earlier document (``{id(obj): (number, obj)}``, the next free number).
    """

    def __init__(self, prefix: str, memo: dict | None = None, start: int = 0):
        self.prefix = prefix
        self.memo = dict(memo or {})
        self.next = start
        self.arrays: list = []

    # -- identity ------------------------------------------------------------------------------
    def _new_id(self, obj: Any) -> int:
        n = self.next
        self.memo[id(obj)] = (n, obj)
        self.next += 1
        return n

    def mark(self) -> tuple:
        """A point to :meth:`undo` to, when encoding an object fails part way."""
        return len(self.memo), self.next, len(self.arrays)

    def undo(self, mark: tuple) -> None:
        n_memo, self.next, n_arrays = mark
        for key in list(self.memo)[n_memo:]:
            del self.memo[key]
        del self.arrays[n_arrays:]

    def placeholder(self, obj: Any, role: str, check: dict) -> dict:
        """Store ``obj`` as a place for the caller's object ``role`` (checked against ``check``)."""
        return {"$t": "supplied", "$id": self._new_id(obj), "role": role, "check": check}

    def _member(self, arr: np.ndarray) -> str:
        if type(arr) is not np.ndarray or arr.dtype.hasobject or arr.dtype.fields is not None:
            raise NotStorable(f"an array of dtype {arr.dtype} ({type(arr).__name__}) cannot be stored as data")
        name = f"{self.prefix}{len(self.arrays)}"
        self.arrays.append((name, arr))
        return name

    # -- encoding ------------------------------------------------------------------------------
    def encode(self, obj: Any) -> Any:
        """The document for ``obj``; raises :class:`NotStorable` naming what cannot be stored."""
        try:
            return self._enc(obj)
        except RecursionError as err:
            raise NotStorable("the object graph is too deep or has a cycle through lists or tuples") from err

    def _enc(self, obj: Any) -> Any:
        t = type(obj)
        if t in _PLAIN:
            return obj
        if t is float:
            return obj if math.isfinite(obj) else {"$t": "f", "v": repr(obj)}
        hit = self.memo.get(id(obj))
        if hit is not None and hit[1] is obj:
            return {"$r": hit[0]}
        if t is list:
            return self._list(obj)
        if t is dict:
            n = self._new_id(obj)
            return {"$t": "dict", "$id": n, "k": [self._enc(k) for k in obj], "v": [self._enc(v) for v in obj.values()]}
        if t is tuple:
            return {"$t": "tuple", "v": [self._enc(v) for v in obj]}
        if t is complex:
            return {"$t": "c", "v": [repr(obj.real), repr(obj.imag)]}
        if isinstance(obj, np.ndarray):
            return {"$t": "nd", "$id": self._new_id(obj), "m": self._member(obj)}
        if isinstance(obj, np.generic):
            arr = np.asarray(obj)
            if arr.dtype.hasobject or arr.dtype.fields is not None:
                raise NotStorable(f"a NumPy scalar of dtype {arr.dtype} cannot be stored as data")
            return {"$t": "npsc", "d": arr.dtype.str, "h": arr.tobytes().hex()}
        if isinstance(obj, np.dtype):
            if obj.hasobject or obj.fields is not None:
                raise NotStorable(f"the dtype {obj} cannot be stored as data")
            return {"$t": "npdt", "v": obj.str}
        if isinstance(obj, type) and issubclass(obj, np.generic):
            return {"$t": "nptype", "v": np.dtype(obj).str}
        if isinstance(obj, backends.Backend):
            return {"$t": "backend", "b": obj.name}
        if isinstance(obj, np.random.SeedSequence):
            n = self._new_id(obj)
            return {"$t": "seedseq", "$id": n, "entropy": self._enc(obj.entropy),
                    "key": [int(k) for k in obj.spawn_key], "pool": int(obj.pool_size),
                    "spawned": int(obj.n_children_spawned)}
        if isinstance(obj, np.random.BitGenerator):
            name = t.__name__
            if t is not getattr(np.random, name, None) or name not in _BIT_GENERATORS:
                raise NotStorable(f"the bit generator {name} cannot be stored as data")
            n = self._new_id(obj)
            return {"$t": "bitgen", "$id": n, "cls": name, "seq": self._enc(obj.seed_seq), "state": self._enc(obj.state)}
        if t is np.random.Generator:
            n = self._new_id(obj)
            return {"$t": "npgen", "$id": n, "bg": self._enc(obj.bit_generator)}
        if isinstance(obj, Generator):
            return self._generator(obj)
        if isinstance(obj, types.ModuleType):
            try:
                return {"$t": "xp", "b": backends.get_backend(obj).name}
            except (TypeError, ValueError) as err:
                raise NotStorable(f"the module {obj.__name__} is not the namespace of a registered backend") from err
        if is_array(obj):
            be = backends.get_backend(obj)
            n = self._new_id(obj)
            return {"$t": "xa", "$id": n, "b": be.name, "dev": self._device(be, obj.device),
                    "m": self._member(np.asarray(be.to_host(obj)))}
        if isinstance(obj, types.MethodType):
            owner = self.memo.get(id(obj.__self__))
            if obj.__func__.__name__ not in METHODS or owner is None or owner[1] is not obj.__self__:
                raise NotStorable(f"the method {obj.__func__.__qualname__} is not data")
            return {"$t": "meth", "self": {"$r": owner[0]}, "name": obj.__func__.__name__}
        dev = self._maybe_device_or_dtype(obj)
        if dev is not None:
            return dev
        if isinstance(obj, type) or callable(obj) and hasattr(obj, "__qualname__"):
            what = "class" if isinstance(obj, type) else "function"
            where = f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', obj)}"
            raise NotStorable(f"the {what} {where} is code, which a file does not hold")
        if _is_namedtuple(obj):
            name = _registry.name_of(t)
            if name is None or name not in _registry.records():
                raise NotStorable(f"a record of type {t.__module__}.{t.__qualname__} is not part of sgmc")
            return {"$t": "rec", "c": name, "v": [self._enc(v) for v in obj]}
        try:
            name, opts = _registry.options(obj)
        except _registry.NotRebuildable as err:
            raise NotStorable(str(err)) from err
        n = self._new_id(obj)
        return {"$t": "obj", "$id": n, "c": name, "o": {k: self._enc(v) for k, v in opts.items()}}

    def _generator(self, gen: Any) -> dict:
        be = backends.get_backend(gen.backend)
        n = self._new_id(gen)
        entry = {"$t": "gen", "$id": n, "b": be.name, "k": type(gen).__name__, "dev": self._enc(gen.device),
                 "seq": self._enc(gen._seed_seq)}
        if type(gen) is HostGenerator:
            entry["st"] = self._enc(gen._np.bit_generator.state)
        else:
            state = gen.__getstate__()
            if not isinstance(state, dict):
                raise NotStorable(f"the generator {type(gen).__name__} has no state to store")
            entry["st"] = self._enc(state)
        return entry

    def _list(self, obj: list) -> Any:
        if len(obj) >= _NUMS_MIN and all(type(v) is float for v in obj):
            return {"$t": "nums", "m": self._member(np.asarray(obj, dtype=np.float64))}
        if len(obj) >= _NUMS_MIN and all(type(v) is int for v in obj) and -2**63 <= min(obj) and max(obj) < 2**63:
            return {"$t": "ints", "m": self._member(np.asarray(obj, dtype=np.int64))}
        if len(obj) >= _ROWS_MIN and _is_namedtuple(obj[0]) and all(type(v) is type(obj[0]) for v in obj):
            return self._rows(obj)
        return [self._enc(v) for v in obj]

    def _rows(self, rows: list) -> dict:
        t = type(rows[0])
        name = _registry.name_of(t)
        if name is None or name not in _registry.records():
            raise NotStorable(f"a record of type {t.__module__}.{t.__qualname__} is not part of sgmc")
        cols = [self._column([r[i] for r in rows]) for i in range(len(rows[0]))]
        return {"$t": "rows", "c": name, "n": len(rows), "cols": cols}

    def _column(self, values: list) -> Any:
        first = values[0]
        if all(v is None for v in values):
            return {"$t": "none"}
        if _is_namedtuple(first) and all(type(v) is type(first) for v in values):
            return self._rows(values)
        if type(first) is dict and all(type(v) is dict and v.keys() == first.keys() for v in values) and all(
                type(k) is str for k in first):
            return {"$t": "dictcol", "k": list(first), "cols": [self._column([v[k] for v in values]) for k in first]}
        if is_array(first) and all(is_array(v) and type(v) is type(first) and v.dtype == first.dtype
                                   and v.shape == first.shape and v.device == first.device for v in values):
            be = backends.get_backend(first)
            stacked = be.xp.stack(values, axis=0)
            return {"$t": "stack", "a": self._enc(stacked)}
        if type(first) in (float, int) and all(type(v) is type(first) for v in values) and len(values) >= _NUMS_MIN:
            return self._list(values)
        return {"$t": "each", "v": [self._enc(v) for v in values]}

    def _device(self, be: Any, dev: Any) -> Any:
        if isinstance(dev, str) or dev is None:
            return dev
        if dev != be.default_device and not any(type(d) is type(dev) and d == dev for d in _devices(be)):
            raise NotStorable(f"the device {dev!r} of backend {be.name!r} is not one it lists")
        return {"$t": "dev", "b": be.name, "s": str(dev)}

    def _maybe_device_or_dtype(self, obj: Any) -> Any:
        be = _backend_of_type(obj)
        if be is None:
            return None
        for name in _DTYPES:
            cand = getattr(be.xp, name, None)
            if cand is not None and type(cand) is type(obj) and cand == obj:
                return {"$t": "xdt", "b": be.name, "v": name}
        if (type(be.default_device) is type(obj) and be.default_device == obj
                or any(type(d) is type(obj) and d == obj for d in _devices(be))):
            return {"$t": "dev", "b": be.name, "s": str(obj)}
        return None
