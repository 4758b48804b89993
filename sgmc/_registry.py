"""The classes a checkpoint may name, and the constructor options that rebuild an object of one.

A file never names code: it names an entry of this registry, and loading calls only that entry's
public constructor. Two kinds are registered, found once by walking sgmc's own packages of
samplers, estimators, models and state space models, plus the run's record types:

* **constructors**: the classes of samplers, estimators, metrics and models. An object is stored as
  its class's name and the options its constructor takes (read from the constructor's signature and
  the values the object holds under those names, or ``_name``); :func:`options` rebuilds the object
  from them at once and compares it with the original, attribute by attribute, so an object whose
  options do not rebuild it exactly is not stored at all (the caller passes it again on resume).
* **records**: ``NamedTuple`` classes (sampler and estimator states, step infos, the run's tasks and
  results), rebuilt from their fields by position.

:func:`build` checks the options read from a file against the signature (names, and the type of
options annotated as plain ``bool``, ``int``, ``float`` or ``str``, or None) before calling the
constructor. Two small tables name the exceptions: options a class keeps in another form
(:data:`_HELD_AS`) and attributes a method sets after construction (:data:`_SET_AFTER`).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import pkgutil
import types
import warnings
from typing import Any

from . import backends, chains, estimators, executors, models, samplers, ssm
from ._array_api import is_array
from ._names import _named_parameters

__all__ = ["constructors", "records", "name_of", "options", "build", "record", "same", "NotRebuildable"]

_PACKAGES = (samplers, estimators, models, ssm)
_MODULES = (chains, executors)
_CACHE: dict = {}
# Attributes that a method sets after construction and that the rebuilt object may lack: a cache that
# ``init`` recomputes bit for bit, and a set-up cost the run counted when it started. Compared objects
# skip them (the registry's only exception to "the constructor rebuilds the object exactly").
_SET_AFTER = {"sgmc.estimators.control_variates:ControlVariate": ("_terms", "init_cost")}
# Options that a class keeps in another form than it was given: how to read them back from what it holds.
# (The rebuilt object is still compared with the original, so a reading that is not exact stores nothing.)
_HELD_AS = {
    "sgmc.models.bnn:BayesianNeuralNetwork": {"y": lambda m: m.labels},
    "sgmc.models.bpmf:BPMF": {"ratings": lambda m: m.ratings + m.offset if m.offset else m.ratings,
                             "centre": lambda m: m.offset},
}


class NotRebuildable(TypeError):
    """An object whose constructor options cannot be read back from it exactly."""


def _modules() -> list:
    found = []
    for pkg in _PACKAGES:
        found.append(pkg)
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            with contextlib.suppress(ImportError):  # a module needing an optional package that is missing
                found.append(importlib.import_module(info.name))
    return found + list(_MODULES)


def _key(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _scan() -> tuple[dict, dict]:
    if not _CACHE:
        cons, recs = {}, {}
        for mod in _modules():
            for obj in vars(mod).values():
                if not isinstance(obj, type) or obj.__module__ != mod.__name__ or "<" in obj.__qualname__:
                    continue
                if issubclass(obj, tuple) and hasattr(obj, "_fields"):
                    recs[_key(obj)] = obj
                elif not (issubclass(obj, BaseException) or getattr(obj, "_is_protocol", False)
                          or obj.__qualname__.startswith("_") or mod.__name__.rsplit(".", 1)[-1].startswith("_")):
                    cons[_key(obj)] = obj
        _CACHE["cons"], _CACHE["recs"] = cons, recs
    return _CACHE["cons"], _CACHE["recs"]


def constructors() -> dict:
    """``{name: class}`` of the registered constructors."""
    return _scan()[0]


def records() -> dict:
    """``{name: NamedTuple class}`` of the registered records."""
    return _scan()[1]


def name_of(cls: type) -> str | None:
    """The registry name of ``cls`` (constructor or record), or None when it is not registered."""
    key = _key(cls) if isinstance(cls, type) else None
    cons, recs = _scan()
    return key if key is not None and (cons.get(key) is cls or recs.get(key) is cls) else None


def _parameters(cls: type) -> tuple[list, dict]:
    """The constructor's keyword names (through forwarded ``**options``) and their parameters."""
    names, _ = _named_parameters(cls)
    params: dict = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        for p in list(inspect.signature(init).parameters.values())[1:]:
            if p.kind is p.VAR_POSITIONAL:
                msg = f"the constructor of {cls.__qualname__} takes *{p.name}, which cannot be read back"
                raise NotRebuildable(msg)
            if p.kind is not p.VAR_KEYWORD and p.name not in params:
                params[p.name] = p
    return names, params


_PLAIN_TYPES = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,), "None": (type(None),)}


def _declared_types(p: inspect.Parameter) -> tuple | None:
    """The plain types a parameter's annotation allows (``"int | None"``), or None when it allows others."""
    ann = p.annotation
    text = ann if isinstance(ann, str) else getattr(ann, "__name__", None) if isinstance(ann, type) else None
    if not text:
        return None
    parts = [t.strip() for t in text.split("|")]
    if not all(t in _PLAIN_TYPES for t in parts):
        return None
    return tuple(k for t in parts for k in _PLAIN_TYPES[t])


def options(obj: Any) -> tuple[str, dict]:
    """``(name, options)`` with ``type(obj)(**options)`` equal to ``obj``; :class:`NotRebuildable` otherwise."""
    cls = type(obj)
    name = name_of(cls)
    if name is None or name not in constructors():
        msg = f"an object of type {cls.__module__}.{cls.__qualname__} is not part of sgmc"
        raise NotRebuildable(msg)
    held = getattr(obj, "__dict__", None)
    if not isinstance(held, dict):
        msg = f"{cls.__qualname__} keeps no attributes to read its options from"
        raise NotRebuildable(msg)
    names, params = _parameters(cls)
    opts = {}
    readers = _HELD_AS.get(name, {})
    for p in names:
        if p in readers:
            try:
                opts[p] = readers[p](obj)
            except (AttributeError, TypeError, ValueError) as err:
                msg = f"{cls.__qualname__} does not keep its option `{p}` in a form it can be read from"
                raise NotRebuildable(msg) from err
            continue
        for attr in (p, "_" + p):
            if attr in held:
                opts[p] = held[attr]
                break
        else:
            if p not in params or params[p].default is inspect.Parameter.empty:
                msg = f"{cls.__qualname__} does not keep its option `{p}`, so it cannot be rebuilt"
                raise NotRebuildable(msg)
    try:
        again = _construct(cls, opts)
    except Exception as err:  # noqa: BLE001 - any failure means: not rebuildable from its options
        msg = f"{cls.__qualname__} cannot be rebuilt from its options ({type(err).__name__}: {err})"
        raise NotRebuildable(msg) from err
    skip = {a for klass in cls.__mro__ for a in _SET_AFTER.get(_key(klass), ())}
    if not same({k: v for k, v in held.items() if k not in skip},
                {k: v for k, v in again.__dict__.items() if k not in skip}):
        msg = f"{cls.__qualname__} rebuilt from its options differs from the original"
        raise NotRebuildable(msg)
    return name, opts


def _construct(cls: type, opts: dict) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the original construction warned the user already
        return cls(**opts)


def build(name: Any, opts: Any) -> Any:
    """The object of the registered constructor ``name`` with ``opts``; ``ValueError`` for anything else."""
    cls = constructors().get(name) if isinstance(name, str) else None
    if cls is None:
        msg = f"{str(name)[:80]!r} is not a registered sgmc class"
        raise ValueError(msg)
    if not isinstance(opts, dict) or not all(isinstance(k, str) for k in opts):
        msg = f"the options of {name} are not a mapping of names"
        raise ValueError(msg)
    names, params = _parameters(cls)
    unknown = sorted(set(opts) - set(names))
    missing = [p for p in names if p not in opts and (p not in params or params[p].default is inspect.Parameter.empty)]
    if unknown or missing:
        what = f"unknown option {unknown[0]!r}" if unknown else f"no option {missing[0]!r}"
        msg = f"{name} has {what}"
        raise ValueError(msg)
    for p, value in opts.items():
        kinds = _declared_types(params[p]) if p in params else None
        if kinds is not None and not (type(value) in kinds or _scalar_of(value, kinds)):
            msg = f"option {p!r} of {name} must be {params[p].annotation}; got {type(value).__name__}"
            raise ValueError(msg)
    return _construct(cls, opts)


def _scalar_of(value: Any, kinds: tuple) -> bool:
    """A NumPy scalar of one of ``kinds`` (an option kept as ``np.float64``, say)."""
    item = getattr(value, "item", None)
    return getattr(value, "shape", None) == () and callable(item) and type(item()) in kinds and type(value) is not bool


def record(name: Any, values: Any) -> Any:
    """The registered record ``name`` built from ``values`` by position; ``ValueError`` for anything else."""
    cls = records().get(name) if isinstance(name, str) else None
    if cls is None:
        msg = f"{str(name)[:80]!r} is not a registered sgmc record"
        raise ValueError(msg)
    if not isinstance(values, list) or len(values) != len(cls._fields):
        msg = f"{name} has {len(cls._fields)} fields"
        raise ValueError(msg)
    return cls(*values)


def same(a: Any, b: Any, seen: set | None = None) -> bool:
    """Whether ``a`` and ``b`` hold the same data: arrays equal in type, dtype, shape, device and values."""
    if a is b:
        return True
    seen = set() if seen is None else seen
    if (id(a), id(b)) in seen:
        return True
    if type(a) is not type(b):
        return False
    if is_array(a):
        return _same_array(a, b)
    if isinstance(a, dict):
        seen.add((id(a), id(b)))
        return a.keys() == b.keys() and all(same(a[k], b[k], seen) for k in a)
    if isinstance(a, (list, tuple)):
        seen.add((id(a), id(b)))
        return len(a) == len(b) and all(same(x, y, seen) for x, y in zip(a, b))
    if isinstance(a, types.MethodType):
        return a.__func__ is b.__func__ and same(a.__self__, b.__self__, seen)
    if isinstance(a, (types.FunctionType, types.BuiltinFunctionType, types.ModuleType, type)):
        return False  # distinct functions, modules or classes (the same one returned above)
    if isinstance(a, float) and a != a:
        return b != b
    if isinstance(a, (str, bytes, int, float, complex, bool)):
        return a == b
    held = getattr(a, "__dict__", None)
    if isinstance(held, dict) and type(a).__eq__ is object.__eq__:
        seen.add((id(a), id(b)))
        return same(held, b.__dict__, seen)
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - objects that cannot be compared are not the same
        return False


def _same_array(a: Any, b: Any) -> bool:
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape) or str(a.device) != str(b.device):
        return False
    ha, hb = backends.to_numpy(a), backends.to_numpy(b)
    return bool((ha == hb).all() or ((ha == hb) | ((ha != ha) & (hb != hb))).all())
