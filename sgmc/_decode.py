"""Rebuilding objects from a document of :mod:`sgmc._codec`: data in, public constructors only.

:class:`Decoder` builds only what the schema allows: plain values and containers, NumPy arrays (from
members read without pickle), scalars, dtypes, seed sequences and generators of the listed bit
generators, backend generators (made by the backend's own ``make_generator`` and moved to the stored
position of their stream), arrays, dtypes, devices and namespaces of registered backends by name,
records of :mod:`sgmc._registry` by field, and objects of its registered constructors, by calling
the public constructor with the stored options (checked against its signature). No attribute is set
from the file and nothing the file names outside the registry is called. Placeholders take the
caller's objects (``supplied=``).

Everything is bounded before it is built: the document's nesting (:data:`MAX_DEPTH`), the number of
values built (``budget``, which the caller sizes from the bytes of the file), the sizes of seed
sequences and the length of every row list, so a small forged file cannot make a huge object.
Anything else raises ``ValueError``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from . import _registry, backends
from ._codec import _BIT_GENERATORS, _DTYPES, METHODS, _devices
from .backends._base import HostGenerator

__all__ = ["Decoder", "MissingObject", "MAX_DEPTH", "MAX_POOL", "budget_for"]

#: Deepest nesting of a document (a run's is about 20 levels).
MAX_DEPTH = 200
#: Largest seed-sequence pool, spawn key and entropy list (NumPy's pool is 4 words).
MAX_POOL = 64
_MAX_INT_BITS = 4096
_DTYPE_STR = re.compile(r"^[<>|=]?[biufc][1-9][0-9]?$")


def budget_for(n_bytes: int) -> int:
    """How many values a document read from ``n_bytes`` of files may build: ample for sgmc's own."""
    return 1_000_000 + 64 * int(n_bytes)


class Decoder:
    """Rebuilds what :class:`Encoder` stored; ``arrays`` maps member names to host arrays.

    ``supplied`` maps placeholder roles to the caller's objects; ``table`` continues the numbering
    of an earlier document; ``budget`` caps the number of values built. Raises ``ValueError`` for
    anything it will not build.
    """

    def __init__(self, arrays: dict, supplied: dict | None = None, table: dict | None = None,
                 budget: int = 1_000_000):
        self.arrays = arrays
        self.supplied = dict(supplied or {})
        self.table: dict = dict(table or {})
        self.used_roles: set = set()
        self.budget = int(budget)
        self.depth = 0

    def decode(self, doc: Any) -> Any:
        """The object for ``doc``."""
        return self._dec(doc)

    def _charge(self, n: int) -> None:
        if not isinstance(n, int) or n < 0 or n > self.budget:
            msg = f"the document asks for {n!r} more values than its size allows"
            raise ValueError(msg)
        self.budget -= n

    def _array(self, name: Any) -> np.ndarray:
        arr = self.arrays.get(name) if isinstance(name, str) else None
        if not isinstance(arr, np.ndarray):
            msg = f"the array member {name!r} is missing"
            raise ValueError(msg)
        return arr

    def _keep(self, n: Any, obj: Any) -> Any:
        if type(n) is not int or n in self.table:
            msg = f"object number {n!r} is invalid or used twice"
            raise ValueError(msg)
        self.table[n] = obj
        return obj

    def _dec(self, doc: Any) -> Any:
        self._charge(1)
        if doc is None or type(doc) in (str, int, float, bool):
            return doc
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                msg = f"the document is nested more than {MAX_DEPTH} levels deep"
                raise ValueError(msg)
            if type(doc) is list:
                return [self._dec(v) for v in doc]
            if type(doc) is not dict:
                msg = f"unexpected {type(doc).__name__} in the document"
                raise ValueError(msg)
            if "$r" in doc:
                if len(doc) != 1 or type(doc["$r"]) is not int or doc["$r"] not in self.table:
                    msg = f"reference to unknown object {str(doc['$r'])[:40]!r}"
                    raise ValueError(msg)
                return self.table[doc["$r"]]
            tag = doc.get("$t")
            method = _TAGS.get(tag) if isinstance(tag, str) else None
            if method is None:
                msg = f"unknown entry type {str(tag)[:40]!r}"
                raise ValueError(msg)
            return method(self, doc)
        finally:
            self.depth -= 1

    def _list_of(self, d: Any, key: str) -> list:
        value = d.get(key)
        if type(value) is not list:
            _bad(d)
        return value

    # -- one method per entry type ---------------------------------------------------------------
    def _tag_f(self, d):
        return float(d["v"]) if d.get("v") in ("nan", "inf", "-inf") else _bad(d)

    def _tag_c(self, d):
        v = self._list_of(d, "v")
        if len(v) != 2 or not all(type(x) is str and len(x) < 40 for x in v):
            _bad(d)
        return complex(float(v[0]), float(v[1]))

    def _tag_dict(self, d):
        out = self._keep(d.get("$id"), {})
        keys, values = self._list_of(d, "k"), self._list_of(d, "v")
        if len(keys) != len(values):
            _bad(d)
        for k, v in zip(keys, values):
            key = self._dec(k)
            if not isinstance(key, (str, int, float, bool, tuple, type(None))):
                _bad(d)
            out[key] = self._dec(v)
        return out

    def _tag_tuple(self, d):
        return tuple(self._dec(v) for v in self._list_of(d, "v"))

    def _tag_nd(self, d):
        return self._keep(d.get("$id"), self._array(d.get("m")))

    def _tag_nums(self, d):
        arr = self._array(d.get("m"))
        self._charge(arr.size)
        return [float(v) for v in arr.reshape(-1).astype(np.float64, copy=False)]

    def _tag_ints(self, d):
        arr = self._array(d.get("m"))
        if arr.dtype.kind not in "iu":
            _bad(d)
        self._charge(arr.size)
        return [int(v) for v in arr.reshape(-1).astype(np.int64, copy=False)]

    def _tag_npsc(self, d):
        dt, h = _dtype(d.get("d")), d.get("h")
        if type(h) is not str or len(h) != 2 * dt.itemsize:
            _bad(d)
        return np.frombuffer(bytes.fromhex(h), dtype=dt, count=1)[0]

    def _tag_npdt(self, d):
        return _dtype(d.get("v"))

    def _tag_nptype(self, d):
        return _dtype(d.get("v")).type

    def _tag_backend(self, d):
        return _backend(d)

    def _tag_xp(self, d):
        return _backend(d).xp

    def _tag_xdt(self, d):
        if d.get("v") not in _DTYPES:
            _bad(d)
        return getattr(_backend(d).xp, d["v"])

    def _tag_dev(self, d):
        be = _backend(d)
        if str(be.default_device) == d.get("s"):
            return be.default_device
        for dev in _devices(be):
            if str(dev) == d.get("s"):
                return dev
        msg = f"backend {be.name!r} has no device {str(d.get('s'))[:40]!r} here"
        raise ValueError(msg)

    def _tag_seedseq(self, d):
        entropy = self._dec(d.get("entropy"))
        key, pool, spawned = d.get("key"), d.get("pool"), d.get("spawned")
        seq = _seed_sequence(entropy, key, pool, spawned, d)
        return self._keep(d.get("$id"), seq)

    def _tag_bitgen(self, d):
        if d.get("cls") not in _BIT_GENERATORS:
            _bad(d)
        seq = self._dec(d.get("seq"))
        if not isinstance(seq, np.random.SeedSequence):
            _bad(d)
        bg = getattr(np.random, d["cls"])(seq)
        self._keep(d.get("$id"), bg)
        bg.state = _plain_state(self._dec(d.get("state")), d)
        return bg

    def _tag_npgen(self, d):
        n = d.get("$id")
        bg = self._dec(d.get("bg"))
        if not isinstance(bg, np.random.BitGenerator):
            _bad(d)
        return self._keep(n, np.random.Generator(bg))

    def _tag_gen(self, d):
        be = _backend(d)
        n = d.get("$id")
        dev = self._dec(d.get("dev"))
        seq = self._dec(d.get("seq"))
        if not isinstance(seq, np.random.SeedSequence):
            _bad(d)
        if d.get("k") == "HostGenerator":
            # a host stream on any backend (a NumPy Generator given as `rng`, or a file written
            # before the backend drew with a generator of its own)
            gen = HostGenerator(be, seq, dev if dev is not None else be.default_device)
        else:
            gen = be.make_generator(seq, dev)  # the backend's own constructor
        if type(gen).__name__ != d.get("k"):
            msg = f"backend {be.name!r} makes a {type(gen).__name__} here, not a {str(d.get('k'))[:40]}"
            raise ValueError(msg)
        self._keep(n, gen)
        state = self._dec(d.get("st"))
        if type(gen) is HostGenerator:
            gen._np.bit_generator.state = _plain_state(state, d)  # NumPy checks the state it is given
        else:
            fresh = gen.__getstate__()
            if not isinstance(state, dict) or state.keys() != fresh.keys() or not all(
                    _like(fresh[k], state[k]) for k in fresh):
                _bad(d)
            gen.__setstate__(state)
        return gen

    def _tag_xa(self, d):
        be = _backend(d)
        host = self._array(d.get("m"))
        if host.dtype.name not in _DTYPES:
            _bad(d)
        dev = self._dec(d.get("dev"))
        dtype = getattr(be.xp, host.dtype.name)
        return self._keep(d.get("$id"), be.from_host(np.array(host), dtype, dev if dev is not None else be.default_device))

    def _tag_meth(self, d):
        owner, name = self._dec(d.get("self")), d.get("name")
        if name not in METHODS or _registry.name_of(type(owner)) is None and not any(
                owner is v for v in self.supplied.values()):
            _bad(d)
        return getattr(owner, name)

    def _tag_rec(self, d):
        return _registry.record(d.get("c"), [self._dec(v) for v in self._list_of(d, "v")])

    def _tag_obj(self, d):
        n = d.get("$id")
        opts = d.get("o")
        if type(opts) is not dict:
            _bad(d)
        built = {k: self._dec(v) for k, v in opts.items()}
        for k, v in built.items():  # a size option may not ask for more than the file could describe
            if type(v) is int and abs(v) > self.budget:
                msg = f"option {k!r} of {str(d.get('c'))[:80]} is {v}, more than the file's size allows"
                raise ValueError(msg)
        return self._keep(n, _registry.build(d.get("c"), built))

    def _tag_supplied(self, d):
        role = d.get("role")
        if role not in self.supplied:
            msg = f"needs the {role} again"
            raise MissingObject(str(role), d.get("check") if isinstance(d.get("check"), dict) else {}, msg)
        self.used_roles.add(role)
        return self._keep(d.get("$id"), self.supplied[role])

    def _tag_rows(self, d):
        n = d.get("n")
        cls = _registry.records().get(d.get("c")) if isinstance(d.get("c"), str) else None
        if cls is None or type(n) is not int:
            _bad(d)
        cols = self._list_of(d, "cols")
        if len(cols) != len(cls._fields):
            _bad(d)
        self._charge(n * (len(cols) + 1))  # before anything of that length is made
        cols = [self._col(c, n) for c in cols]
        return [_registry.record(d["c"], list(row)) for row in zip(*cols)] if cols else [cls() for _ in range(n)]

    def _col(self, c: Any, n: int) -> list:
        tag = c.get("$t") if type(c) is dict else None
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                msg = f"the document is nested more than {MAX_DEPTH} levels deep"
                raise ValueError(msg)
            if tag == "none":
                return [None] * n
            if tag == "rows":
                out = self._tag_rows(c)
            elif tag == "dictcol":
                keys, cols = self._list_of(c, "k"), self._list_of(c, "cols")
                if len(keys) != len(cols) or not all(type(k) is str for k in keys):
                    _bad(c)
                cols = [self._col(x, n) for x in cols]
                out = [dict(zip(keys, vals)) for vals in zip(*cols)] if cols else [{} for _ in range(n)]
            elif tag == "stack":
                a = self._dec(c.get("a"))
                if getattr(a, "ndim", 0) < 1 or int(a.shape[0]) != n:
                    _bad(c)
                out = [a[i, ...] for i in range(n)]
            elif tag == "each":
                out = [self._dec(v) for v in self._list_of(c, "v")]
            else:
                out = self._dec(c)
            if not isinstance(out, list) or len(out) != n:
                _bad(c)
            return out
        finally:
            self.depth -= 1


_TAGS = {name[len("_tag_"):]: fn for name, fn in vars(Decoder).items() if name.startswith("_tag_")}


class MissingObject(ValueError):
    """A placeholder whose object the caller did not supply."""

    def __init__(self, role: str, check: dict, msg: str):
        super().__init__(msg)
        self.role = role
        self.check = check


def _backend(d: dict) -> Any:
    name = d.get("b")
    if not isinstance(name, str) or len(name) > 40:
        _bad(d)
    return backends.get_backend(name)


def _small_int(v: Any, d: Any, lo: int = 0) -> int:
    if type(v) is not int or v < lo or v.bit_length() > 64:
        _bad(d)
    return v


def _seed_sequence(entropy: Any, key: Any, pool: Any, spawned: Any, d: Any) -> np.random.SeedSequence:
    """A SeedSequence from plain values, each bounded (a pool of a million words would take minutes)."""
    if type(entropy) is int:
        if entropy < 0 or entropy.bit_length() > _MAX_INT_BITS:
            _bad(d)
    elif not (type(entropy) is list and 0 < len(entropy) <= MAX_POOL and all(
            type(e) is int and 0 <= e and e.bit_length() <= 64 for e in entropy)):
        _bad(d)
    if type(key) is not list or len(key) > MAX_POOL:
        _bad(d)
    if type(pool) is not int or not 4 <= pool <= MAX_POOL:
        msg = f"a seed sequence's pool size must be in [4, {MAX_POOL}]; got {str(pool)[:40]}"
        raise ValueError(msg)
    return np.random.SeedSequence(entropy, spawn_key=tuple(_small_int(k, d) for k in key), pool_size=pool,
                                  n_children_spawned=_small_int(spawned, d))


def _plain_state(state: Any, d: Any) -> dict:
    """A NumPy bit generator's state: a small dict of plain values (NumPy checks the rest)."""
    if not isinstance(state, dict) or len(state) > 8:
        _bad(d)
    return state


def _like(template: Any, value: Any) -> bool:
    """Whether ``value`` has the form of ``template``: the same keys, types, and array shapes and dtypes."""
    if isinstance(template, dict):
        if not (isinstance(value, dict) and value.keys() == template.keys()):
            return False
        if set(template) == {"entropy", "spawn_key", "pool_size", "n_children_spawned"}:
            try:
                _seed_sequence(value["entropy"], value["spawn_key"], value["pool_size"], value["n_children_spawned"], value)
            except ValueError:
                return False
            return True
        return all(_like(template[k], value[k]) for k in template)
    if isinstance(template, (list, tuple)):
        return type(value) is type(template) and len(value) == len(template) and all(
            _like(a, b) for a, b in zip(template, value))
    if hasattr(template, "shape") and hasattr(template, "dtype"):
        return type(value) is type(template) and value.shape == template.shape and value.dtype == template.dtype
    return type(value) is type(template) or template is None


def _dtype(s: Any) -> np.dtype:
    if not isinstance(s, str) or not _DTYPE_STR.match(s):
        msg = f"the dtype {str(s)[:40]!r} is not stored as data"
        raise ValueError(msg)
    dt = np.dtype(s)
    if dt.name not in _DTYPES:
        msg = f"the dtype {s!r} is not stored as data"
        raise ValueError(msg)
    return dt


def _bad(d: Any) -> Any:
    msg = f"an invalid entry {str(d)[:80]}"
    raise ValueError(msg)
