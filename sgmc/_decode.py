"""Rebuilding objects from a document of :mod:`sgmc._codec`: nothing the file names outside sgmc is run.

:class:`Decoder` builds only what the encoder's list allows: plain values and containers, NumPy
arrays (from members read without pickle), scalars, dtypes, seed sequences and generators of the
listed bit generators, arrays, dtypes, devices and namespaces of registered backends by name, and
classes and functions of sgmc found again by module and qualified name inside the package (not
the command line, the experiments or the file machinery), rebuilt through ``__setstate__`` or
their ``__dict__``. Placeholders take the caller's objects (``supplied=``); anything else raises
``ValueError``.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from . import backends
from ._codec import _BIT_GENERATORS, _DTYPES, _devices, _resolve

__all__ = ["Decoder", "MissingObject"]


class Decoder:
    """Rebuilds what :class:`Encoder` stored; ``arrays`` maps member names to host arrays.

    ``supplied`` maps placeholder roles to the caller's objects; ``table`` and ``start`` continue
    the numbering of an earlier document. Raises ``ValueError`` for anything it will not build.
    """

    def __init__(self, arrays: dict, supplied: dict | None = None, table: dict | None = None):
        self.arrays = arrays
        self.supplied = dict(supplied or {})
        self.table: dict = dict(table or {})
        self.used_roles: set = set()

    def decode(self, doc: Any) -> Any:
        """The object for ``doc``."""
        return self._dec(doc)

    def _array(self, name: Any) -> np.ndarray:
        arr = self.arrays.get(name)
        if not isinstance(arr, np.ndarray):
            msg = f"the array member {name!r} is missing"
            raise ValueError(msg)
        return arr

    def _keep(self, n: Any, obj: Any) -> Any:
        if not isinstance(n, int) or n in self.table:
            msg = f"object number {n!r} is invalid or used twice"
            raise ValueError(msg)
        self.table[n] = obj
        return obj

    def _dec(self, doc: Any) -> Any:
        if doc is None or type(doc) in (str, int, float, bool):
            return doc
        if type(doc) is list:
            return [self._dec(v) for v in doc]
        if type(doc) is not dict:
            msg = f"unexpected {type(doc).__name__} in the document"
            raise ValueError(msg)
        if "$r" in doc:
            if doc["$r"] not in self.table:
                msg = f"reference to unknown object {doc['$r']!r}"
                raise ValueError(msg)
            return self.table[doc["$r"]]
        tag = doc.get("$t")
        method = getattr(self, "_tag_" + tag, None) if isinstance(tag, str) and tag.isidentifier() else None
        if method is None:
            msg = f"unknown entry type {tag!r}"
            raise ValueError(msg)
        return method(doc)

    # -- one method per entry type ---------------------------------------------------------------
    def _tag_f(self, d):
        return float(d["v"]) if d["v"] in ("nan", "inf", "-inf") else _bad(d)

    def _tag_c(self, d):
        return complex(float(d["v"][0]), float(d["v"][1]))

    def _tag_dict(self, d):
        out = self._keep(d["$id"], {})
        for k, v in zip(self._dec(d["k"]), d["v"], strict=True):
            out[k] = self._dec(v)
        return out

    def _tag_tuple(self, d):
        return tuple(self._dec(v) for v in d["v"])

    def _tag_nd(self, d):
        return self._keep(d["$id"], self._array(d["m"]))

    def _tag_nums(self, d):
        return [float(v) for v in self._array(d["m"]).astype(np.float64, copy=False)]

    def _tag_ints(self, d):
        return [int(v) for v in self._array(d["m"]).astype(np.int64, copy=False)]

    def _tag_npsc(self, d):
        dt = _dtype(d["d"])
        return np.frombuffer(bytes.fromhex(d["h"]), dtype=dt, count=1)[0]

    def _tag_npdt(self, d):
        return _dtype(d["v"])

    def _tag_nptype(self, d):
        return _dtype(d["v"]).type

    def _tag_backend(self, d):
        return backends.get_backend(str(d["b"]))

    def _tag_xp(self, d):
        return backends.get_backend(str(d["b"])).xp

    def _tag_xdt(self, d):
        if d["v"] not in _DTYPES:
            _bad(d)
        return getattr(backends.get_backend(str(d["b"])).xp, d["v"])

    def _tag_dev(self, d):
        be = backends.get_backend(str(d["b"]))
        if str(be.default_device) == d["s"]:
            return be.default_device
        for dev in _devices(be):
            if str(dev) == d["s"]:
                return dev
        msg = f"backend {be.name!r} has no device {d['s']!r} here"
        raise ValueError(msg)

    def _tag_seedseq(self, d):
        entropy = self._dec(d["entropy"])
        if not (isinstance(entropy, int) or isinstance(entropy, list) and all(isinstance(e, int) for e in entropy)):
            _bad(d)
        seq = np.random.SeedSequence(entropy, spawn_key=tuple(int(k) for k in d["key"]), pool_size=int(d["pool"]),
                                     n_children_spawned=int(d["spawned"]))
        return self._keep(d["$id"], seq)

    def _tag_bitgen(self, d):
        if d["cls"] not in _BIT_GENERATORS:
            _bad(d)
        seq = self._dec(d["seq"])
        if not isinstance(seq, np.random.SeedSequence):
            _bad(d)
        bg = getattr(np.random, d["cls"])(seq)
        self._keep(d["$id"], bg)
        bg.state = self._dec(d["state"])
        return bg

    def _tag_npgen(self, d):
        n = d["$id"]
        bg = self._dec(d["bg"])
        if not isinstance(bg, np.random.BitGenerator):
            _bad(d)
        return self._keep(n, np.random.Generator(bg))

    def _tag_xa(self, d):
        be = backends.get_backend(str(d["b"]))
        host = self._array(d["m"])
        dev = self._dec(d["dev"])
        dtype = getattr(be.xp, host.dtype.name)
        return self._keep(d["$id"], be.from_host(np.array(host), dtype, dev if dev is not None else be.default_device))

    def _tag_meth(self, d):
        owner, name = self._dec(d["self"]), d["name"]
        if not isinstance(name, str) or name.startswith("__"):
            _bad(d)
        method = getattr(owner, name, None)
        if not (isinstance(method, types.MethodType) and method.__self__ is owner):
            msg = f"{type(owner).__name__} has no method {name!r}"
            raise ValueError(msg)
        return method

    def _tag_cls(self, d):
        obj = _resolve(str(d["m"]), str(d["q"]))
        if not isinstance(obj, type):
            _bad(d)
        return obj

    def _tag_fn(self, d):
        obj = _resolve(str(d["m"]), str(d["q"]))
        if isinstance(obj, type) or not callable(obj):
            _bad(d)
        return obj

    def _tag_nt(self, d):
        cls = self._tag_cls({"m": d["c"][0], "q": d["c"][1]})
        if not (issubclass(cls, tuple) and hasattr(cls, "_fields")):
            _bad(d)
        return cls(*(self._dec(v) for v in d["v"]))

    def _tag_obj(self, d):
        cls = self._tag_cls({"m": d["c"][0], "q": d["c"][1]})
        obj = self._keep(d["$id"], cls.__new__(cls))
        state = self._dec(d["s"])
        if getattr(cls, "__setstate__", None) is not None and hasattr(obj, "__setstate__"):
            obj.__setstate__(state)
        elif isinstance(state, dict):
            obj.__dict__.update(state)
        elif state is None:  # an object with no attributes
            pass
        elif isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):  # __slots__
            obj.__dict__.update(state[0] or {})
            for key, value in state[1].items():
                object.__setattr__(obj, key, value)
        else:
            _bad(d)
        return obj

    def _tag_supplied(self, d):
        role = d["role"]
        if role not in self.supplied:
            msg = f"needs the {role} again"
            raise MissingObject(role, d.get("check") or {}, msg)
        self.used_roles.add(role)
        return self._keep(d["$id"], self.supplied[role])

    def _tag_rows(self, d):
        n = int(d["n"])
        cls = self._tag_cls({"m": d["c"][0], "q": d["c"][1]})
        if not (issubclass(cls, tuple) and hasattr(cls, "_fields")):
            _bad(d)
        cols = [self._col(c, n) for c in d["cols"]]
        return [cls(*row) for row in zip(*cols, strict=True)] if cols else [cls() for _ in range(n)]

    def _col(self, c: Any, n: int) -> list:
        tag = c.get("$t") if type(c) is dict else None
        if tag == "none":
            return [None] * n
        if tag == "rows":
            return self._tag_rows(c)
        if tag == "dictcol":
            cols = [self._col(x, n) for x in c["cols"]]
            return [dict(zip(c["k"], vals, strict=True)) for vals in zip(*cols, strict=True)]
        if tag == "stack":
            a = self._dec(c["a"])
            return [a[i, ...] for i in range(n)]
        if tag == "each":
            return [self._dec(v) for v in c["v"]]
        out = self._dec(c)
        if not isinstance(out, list) or len(out) != n:
            _bad(c)
        return out


class MissingObject(ValueError):
    """A placeholder whose object the caller did not supply."""

    def __init__(self, role: str, check: dict, msg: str):
        super().__init__(msg)
        self.role = role
        self.check = check


def _dtype(s: Any) -> np.dtype:
    dt = np.dtype(str(s))
    if dt.hasobject or dt.fields is not None:
        msg = f"the dtype {s!r} is not stored as data"
        raise ValueError(msg)
    return dt


def _bad(d: Any) -> Any:
    msg = f"an invalid entry {str(d)[:80]}"
    raise ValueError(msg)
