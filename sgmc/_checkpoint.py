"""Checkpoint files of :func:`sgmc.sample`: data, never code; damage detected; the data set written once.

A checkpoint is two files in the :mod:`sgmc._safefile` container, each member checksummed:

* ``NAME.HASH.data`` holds what does not change during a run: the model (with its data set), the
  sampler, the estimator, the step sizes and the run's settings. It is written once per run, named
  by the SHA-256 of its contents (``HASH`` is its first 16 hex digits), and read back only if the
  checkpoint names that digest.
* ``NAME`` itself holds what changes: every group's sampler and estimator state, generators, the
  draws so far and per-iteration statistics, and refers to objects of the data file by number. So
  a write costs the state and the draws, not the data set.

Both hold a JSON document and arrays in the schema of :mod:`sgmc._codec` (its name and version are in
the file, :data:`VERSION` for the checkpoint format). The model, the sampler and the estimator are
stored only as registered sgmc classes with the options of their public constructor; otherwise (a
user's model class, say) the file keeps a placeholder with the object's type, and :func:`read` needs
the object again from the caller (``sgmc.resume(path, model=...)``). Either way the file records the
model's fingerprint (:func:`fingerprint`: class, parameter names, N, d and a SHA-256 of its data
arrays, read block by block), and :func:`read` refuses a model that does not match it, saying what
differs. With a ``key`` both files are signed (HMAC-SHA256), and reading them needs the same key.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import backends
from ._array_api import is_array
from ._blocks import is_reader
from ._codec import SCHEMA, SCHEMA_VERSION, Encoder, NotStorable
from ._decode import Decoder, MissingObject, budget_for
from ._param_names import model_param_names
from ._safefile import array_digest, check_key, read_container, write_container

__all__ = ["RunFile", "prepare", "write", "read", "fingerprint", "NotStorable", "FORMAT", "VERSION"]

FORMAT = "sgmc checkpoint"
VERSION = 3
ROLES = ("model", "sampler", "estimator")
_BLOCK_BYTES = 1 << 22


@dataclass
class RunFile:
    """What a run keeps between checkpoint writes: its data file and the numbering of its objects."""

    name: str
    digest: str
    memo: dict
    next: int
    roles: dict
    key: bytes | None = None


def _folder(path: Any) -> str:
    return os.path.dirname(os.path.abspath(os.fspath(path)))


def _check_info(role: str, obj: Any) -> dict:
    t = type(obj)
    info = {"type": f"{t.__module__}.{t.__qualname__}"}
    if role == "model":
        for key in ("n_data", "dim"):
            value = getattr(obj, key, None)
            if isinstance(value, int):
                info[key] = value
        names = model_param_names(obj)  # plain strings, kept as data: the resumed trace's names
        if names is not None and all(isinstance(n, str) for n in names):
            info["param_names"] = list(names)
    return info


def fingerprint(model: Any) -> dict:
    """What identifies a model's posterior: class, parameter names, N, d and a SHA-256 of its data.

    The data are the arrays the model holds (and those of models it wraps) with one row per datum
    (all of them for a model without data), and rows it reads from disk; each is hashed block by
    block, so data on disk are never read into memory at once.
    """
    t = type(model)
    names = model_param_names(model)
    n_data = getattr(model, "n_data", None)
    sha = hashlib.sha256()
    _hash_data(sha, "model", model, n_data if isinstance(n_data, int) else None, set())
    return {"class": f"{t.__module__}.{t.__qualname__}",
            "param_names": [str(n) for n in names] if names is not None else None,
            "n_data": n_data if isinstance(n_data, int) else None,
            "dim": getattr(model, "dim", None) if isinstance(getattr(model, "dim", None), int) else None,
            "data_sha256": sha.hexdigest()}


def _hash_data(sha: Any, where: str, obj: Any, n: int | None, seen: set) -> None:
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, type):
        return
    if is_array(obj) or is_reader(obj):
        rows = int(obj.shape[0]) if getattr(obj, "ndim", len(getattr(obj, "shape", ()))) else None
        if n == 0 or (rows is not None and rows == n):
            _hash_rows(sha, where, obj)
        return
    if isinstance(obj, dict):
        for k in sorted(obj, key=str):
            _hash_data(sha, f"{where}.{k}", obj[k], n, seen)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _hash_data(sha, f"{where}[{i}]", v, n, seen)
    elif where == "model" or hasattr(obj, "n_data") and hasattr(obj, "dim"):  # the model, or one it wraps
        held = getattr(obj, "__dict__", None)
        if isinstance(held, dict):
            _hash_data(sha, where, held, n, seen)


def _hash_rows(sha: Any, where: str, a: Any) -> None:
    """Hash ``a`` (an array of any backend, or a reader of rows on disk) a block of rows at a time."""
    sha.update(f"{where}|{tuple(int(s) for s in a.shape)}|{getattr(a.dtype, 'name', a.dtype)}|".encode())
    if not a.shape:
        sha.update(np.ascontiguousarray(backends.to_numpy(a)).reshape(1).view(np.uint8))
        return
    if is_reader(a):
        for _, _, block in a.blocks():
            sha.update(np.ascontiguousarray(block).view(np.uint8).reshape(-1))
        return
    row = max(1, int(np.prod(a.shape[1:], dtype=np.int64)) * int(getattr(a.dtype, "itemsize", 8) or 8))
    step = max(1, _BLOCK_BYTES // row)
    n = int(a.shape[0])
    for start in range(0, n, step):
        block = np.ascontiguousarray(backends.to_numpy(a[start:min(start + step, n), ...]))
        sha.update(block.view(np.uint8).reshape(-1))


def prepare(path: Any, shared: dict, roles: dict, key: bytes | None = None) -> RunFile:
    """Write the run's data file beside ``path`` (once) and return what later writes refer to.

    ``roles`` maps ``"model"``, ``"sampler"`` and ``"estimator"`` to the run's objects; each is stored
    when it can be, else as a placeholder. ``shared`` is the rest of what does not change. With
    ``key`` the file is signed.
    """
    key = check_key(key)
    enc = Encoder("d")
    role_docs, checks = {}, {}
    for role in ROLES:
        obj = roles[role]
        mark = enc.mark()
        try:
            role_docs[role] = enc.encode(obj)
        except NotStorable as err:
            enc.undo(mark)
            checks[role] = {**_check_info(role, obj), "reason": str(err)}
            role_docs[role] = enc.placeholder(obj, role, checks[role])
    body = json.dumps({"roles": role_docs, "shared": enc.encode(shared)}, separators=(",", ":"),
                      allow_nan=False).encode()
    model_print = fingerprint(roles["model"])
    sha = hashlib.sha256(body)
    sha.update(json.dumps(model_print, sort_keys=True).encode())
    for name, arr in enc.arrays:
        sha.update(f"{name}:{array_digest(arr)}".encode())
    digest = sha.hexdigest()
    name = f"{os.path.basename(os.fspath(path))}.{digest[:16]}.data"
    target = os.path.join(_folder(path), name)
    if not _holds(target, digest, key):
        meta = {"format": FORMAT, "version": VERSION, "schema": [SCHEMA, SCHEMA_VERSION], "sha256": digest,
                "fingerprint": model_print}
        write_container(target, "checkpoint data", meta, [("doc", body), *enc.arrays], key=key)
    return RunFile(name, digest, enc.memo, enc.next, checks, key)


def _holds(target: str, digest: str, key: bytes | None) -> bool:
    """Whether ``target`` is already a complete data file with ``digest`` (then it is not rewritten)."""
    try:
        meta, _ = read_container(target, "checkpoint data", "a checkpoint's data file", key=key)
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("sha256") == digest


def write(path: Any, shared: dict, roles: dict, state: dict, run: RunFile | None, key: bytes | None = None) -> RunFile:
    """Write the checkpoint ``path`` (and the run's data file when it is missing); return the run's file."""
    key = check_key(key)
    if run is None or run.key != key or not os.path.exists(os.path.join(_folder(path), run.name)):
        run = prepare(path, shared, roles, key)
    enc = Encoder("s", run.memo, run.next)
    body = json.dumps(enc.encode(state), separators=(",", ":"), allow_nan=False).encode()
    meta = {"format": FORMAT, "version": VERSION, "schema": [SCHEMA, SCHEMA_VERSION],
            "data": {"file": run.name, "sha256": run.digest}, "supplied": run.roles}
    write_container(path, "checkpoint", meta, [("doc", body), *enc.arrays], key=key)
    _remove_other_data(path, run.name)
    return run


def _remove_other_data(path: Any, keep: str) -> None:
    """Remove data files of earlier runs that wrote to the same checkpoint path."""
    pattern = re.compile(re.escape(os.path.basename(os.fspath(path))) + r"\.[0-9a-f]{16}\.data$")
    with contextlib.suppress(OSError):
        for entry in os.scandir(_folder(path)):
            if entry.name != keep and pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.remove(entry.path)


def _check_meta(where: str, meta: Any) -> None:
    found = meta.get("version") if isinstance(meta, dict) else None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or found != VERSION:
        msg = (f"{where!r} is not a checkpoint of this version of sgmc (format version {str(found)[:20]}, expected "
               f"{VERSION}); rerun the sampling with this version")
        raise ValueError(msg)
    if meta.get("schema") != [SCHEMA, SCHEMA_VERSION]:
        msg = (f"{where!r} holds objects in schema {str(meta.get('schema'))[:40]}, not [{SCHEMA!r}, "
               f"{SCHEMA_VERSION}] that this version of sgmc reads")
        raise ValueError(msg)


def read(path: Any, supplied: dict, key: bytes | None = None) -> tuple[dict, dict, RunFile]:
    """Read the checkpoint ``path``: ``(shared, state, run)``, with ``roles`` inside ``shared``.

    ``supplied`` maps roles (``"model"``, ...) to the caller's objects for those the file does not
    store. Raises ``ValueError`` naming the file for anything damaged, foreign or inconsistent, for
    a model that does not match the run's fingerprint, and naming the keyword for an object that
    must be passed again (or that the file already stores). ``key`` is the key the files were
    signed with (needed for signed files, refused for unsigned ones).
    """
    key = check_key(key)
    where = os.fspath(path)
    with open(path, "rb") as fh:
        if fh.read(1) == b"\x80":  # the pickle of earlier versions: never loaded, since loading it could run code
            msg = (f"cannot read the checkpoint {where!r}: it is a pickle (a checkpoint of an earlier sgmc version or "
                   "another program), which is not loaded because loading it could run code; rerun the sampling")
            raise ValueError(msg)
    meta, members = read_container(path, "checkpoint", "an sgmc checkpoint", key=key)
    _check_meta(where, meta)
    data = meta.get("data") if isinstance(meta.get("data"), dict) else {}
    name, digest = data.get("file"), data.get("sha256")
    if not (isinstance(name, str) and isinstance(digest, str) and os.path.basename(name) == name
            and re.fullmatch(r".+\.[0-9a-f]{16}\.data", name)):
        msg = f"cannot read the checkpoint {where!r}: it does not name its data file"
        raise ValueError(msg)
    target = os.path.join(_folder(path), name)
    try:
        dmeta, dmembers = read_container(target, "checkpoint data", "a checkpoint's data file", key=key)
    except FileNotFoundError as err:
        msg = f"the checkpoint {where!r} needs its data file {target!r}, which is missing"
        raise ValueError(msg) from err
    if not isinstance(dmeta, dict) or dmeta.get("sha256") != digest:
        msg = f"the data file {target!r} does not belong to the checkpoint {where!r} (its digest differs)"
        raise ValueError(msg)
    _check_meta(target, dmeta)
    checks = meta.get("supplied") if isinstance(meta.get("supplied"), dict) else {}
    extra = [k for k, v in supplied.items() if v is not None and k not in checks]
    if extra:
        msg = (f"the checkpoint {where!r} stores its {extra[0]}; `{extra[0]}=` is only for objects that are not "
               "part of sgmc, which a checkpoint does not store")
        raise ValueError(msg)
    size = os.path.getsize(path) + os.path.getsize(target)
    dec = Decoder(dmembers, {k: v for k, v in supplied.items() if v is not None}, budget=budget_for(size))
    try:
        doc = json.loads(dmembers["doc"])
        roles = {role: dec.decode(doc["roles"][role]) for role in ROLES}
        shared = dec.decode(doc["shared"])
        sdec = Decoder(members, table=dec.table, budget=dec.budget)
        sdec.supplied = dec.supplied
        state = sdec.decode(json.loads(members["doc"]))
    except MissingObject as err:
        kind, why = err.check.get("type", "an object"), err.check.get("reason", "it is not part of sgmc")
        msg = (f"the checkpoint {where!r} does not store its {err.role}, a {kind} ({why}; checkpoints hold data, "
               f"not code); pass it again: sgmc.resume({where!r}, {err.role}=...)")
        raise ValueError(msg) from None
    except RecursionError as err:
        msg = f"cannot read the checkpoint {where!r}: it is not a valid sgmc checkpoint (its document is nested too deeply)"
        raise ValueError(msg) from err
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError, MemoryError, ImportError,
            RuntimeError) as err:
        msg = f"cannot read the checkpoint {where!r}: it is not a valid sgmc checkpoint ({type(err).__name__}: {err})"
        raise ValueError(msg) from err
    if not isinstance(shared, dict):
        msg = f"cannot read the checkpoint {where!r}: it is not a valid sgmc checkpoint (no run settings)"
        raise ValueError(msg)
    _check_model(where, roles["model"], dmeta.get("fingerprint"), "model" in supplied and supplied["model"] is not None)
    _check_supplied(where, roles, checks)
    shared["roles"] = roles
    run = RunFile(name, digest, {id(o): (n, o) for n, o in dec.table.items()},
                  max(dec.table, default=-1) + 1, checks, key)
    return shared, state, run


def _check_model(where: str, model: Any, recorded: Any, given: bool) -> None:
    """Refuse a model whose fingerprint differs from the run's, saying what differs."""
    if not isinstance(recorded, dict):
        msg = f"cannot read the checkpoint {where!r}: it records no fingerprint of its model"
        raise ValueError(msg)
    now = fingerprint(model)
    labels = (("class", "class is"), ("n_data", "n_data is"), ("dim", "dim is"), ("param_names", "param_names are"),
              ("data_sha256", "data (SHA-256 of its data arrays) are"))
    for field, label in labels:
        if now.get(field) != recorded.get(field):
            who = "`model`" if given else "the model rebuilt from the file"
            msg = (f"{who} does not match the checkpoint {where!r}: its {label} {_shown(now.get(field))!r}, the "
                   f"run's {'were' if label.endswith('are') else 'was'} {_shown(recorded.get(field))!r}")
            raise ValueError(msg)
def _shown(value: Any) -> Any:
    return value[:8] if isinstance(value, list) else value


def _check_supplied(where: str, roles: dict, checks: dict) -> None:
    for role, check in checks.items():
        obj = roles[role]
        for key in ("n_data", "dim"):
            if key in check and getattr(obj, key, None) != check[key]:
                msg = (f"`{role}` does not match the checkpoint {where!r}: its {key} is "
                       f"{getattr(obj, key, None)!r}, the run's was {check[key]!r} (a {check.get('type')})")
                raise ValueError(msg)
        names = model_param_names(obj) if role == "model" else None
        if "param_names" in check and names is not None and list(names) != check["param_names"]:
            msg = (f"`{role}` does not match the checkpoint {where!r}: its param_names are {list(names)[:8]!r}, "
                   f"the run's were {check['param_names'][:8]!r}")
            raise ValueError(msg)
