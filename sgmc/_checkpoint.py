"""Checkpoint files of :func:`sgmc.sample`: data, never code; damage detected; the data set written once.

A checkpoint is two files in the :mod:`sgmc._safefile` container, each member checksummed:

* ``NAME.HASH.data`` holds what does not change during a run: the model (with its data set), the
  sampler, the estimator, the step sizes and the run's settings. It is written once per run, named
  by the SHA-256 of its contents (``HASH`` is its first 16 hex digits), and read back only if the
  checkpoint names that digest.
* ``NAME`` itself holds what changes: every group's sampler and estimator state, generators, the
  draws so far and per-iteration statistics, and refers to objects of the data file by number. So
  a write costs the state and the draws, not the data set.

Both hold a JSON document and arrays (:mod:`sgmc._codec`) with a format name and version. The
model, the sampler and the estimator are stored only when they are made of sgmc's own classes and
plain data; otherwise (a user's model class, say) the file keeps a placeholder with the object's
type, and :func:`read` needs the object again from the caller (``sgmc.resume(path, model=...)``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from ._codec import Encoder, NotStorable
from ._decode import Decoder, MissingObject
from ._param_names import model_param_names
from ._safefile import array_digest, read_container, write_container

__all__ = ["RunFile", "prepare", "write", "read", "NotStorable", "FORMAT", "VERSION"]

FORMAT = "sgmc checkpoint"
VERSION = 2
ROLES = ("model", "sampler", "estimator")


@dataclass
class RunFile:
    """What a run keeps between checkpoint writes: its data file and the numbering of its objects."""

    name: str
    digest: str
    memo: dict
    next: int
    roles: dict


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


def prepare(path: Any, shared: dict, roles: dict) -> RunFile:
    """Write the run's data file beside ``path`` (once) and return what later writes refer to.

    ``roles`` maps ``"model"``, ``"sampler"`` and ``"estimator"`` to the run's objects; each is stored
    when it can be, else as a placeholder. ``shared`` is the rest of what does not change.
    """
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
    sha = hashlib.sha256(body)
    for name, arr in enc.arrays:
        sha.update(f"{name}:{array_digest(arr)}".encode())
    digest = sha.hexdigest()
    name = f"{os.path.basename(os.fspath(path))}.{digest[:16]}.data"
    target = os.path.join(_folder(path), name)
    if not _holds(target, digest):
        meta = {"format": FORMAT, "version": VERSION, "sha256": digest}
        write_container(target, "checkpoint data", meta, [("doc", body), *enc.arrays])
    return RunFile(name, digest, enc.memo, enc.next, checks)


def _holds(target: str, digest: str) -> bool:
    """Whether ``target`` is already a complete data file with ``digest`` (then it is not rewritten)."""
    try:
        meta, _ = read_container(target, "checkpoint data", "a checkpoint's data file")
    except (OSError, ValueError):
        return False
    return meta.get("sha256") == digest


def write(path: Any, shared: dict, roles: dict, state: dict, run: RunFile | None) -> RunFile:
    """Write the checkpoint ``path`` (and the run's data file when it is missing); return the run's file."""
    if run is None or not os.path.exists(os.path.join(_folder(path), run.name)):
        run = prepare(path, shared, roles)
    enc = Encoder("s", run.memo, run.next)
    body = json.dumps(enc.encode(state), separators=(",", ":"), allow_nan=False).encode()
    meta = {"format": FORMAT, "version": VERSION, "data": {"file": run.name, "sha256": run.digest},
            "supplied": run.roles}
    write_container(path, "checkpoint", meta, [("doc", body), *enc.arrays])
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


def read(path: Any, supplied: dict) -> tuple[dict, dict, RunFile]:
    """Read the checkpoint ``path``: ``(shared, state, run)``, with ``roles`` inside ``shared``.

    ``supplied`` maps roles (``"model"``, ...) to the caller's objects for those the file does not
    store. Raises ``ValueError`` naming the file for anything damaged, foreign or inconsistent, and
    naming the keyword for an object that must be passed again (or that the file already stores).
    """
    where = os.fspath(path)
    with open(path, "rb") as fh:
        if fh.read(1) == b"\x80":  # the pickle of earlier versions: never loaded, since loading it could run code
            msg = (f"cannot read the checkpoint {where!r}: it is a pickle (a checkpoint of an earlier sgmc version or "
                   "another program), which is not loaded because loading it could run code; rerun the sampling")
            raise ValueError(msg)
    meta, members = read_container(path, "checkpoint", "an sgmc checkpoint")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        found = meta.get("version") if isinstance(meta, dict) else None
        msg = f"{where!r} is not a checkpoint of this version of sgmc (format version {found!r}, expected {VERSION})"
        raise ValueError(msg)
    data = meta.get("data") or {}
    name, digest = data.get("file"), data.get("sha256")
    if not (isinstance(name, str) and isinstance(digest, str) and os.path.basename(name) == name):
        msg = f"cannot read the checkpoint {where!r}: it does not name its data file"
        raise ValueError(msg)
    target = os.path.join(_folder(path), name)
    try:
        dmeta, dmembers = read_container(target, "checkpoint data", "a checkpoint's data file")
    except FileNotFoundError as err:
        msg = f"the checkpoint {where!r} needs its data file {target!r}, which is missing"
        raise ValueError(msg) from err
    if dmeta.get("sha256") != digest:
        msg = f"the data file {target!r} does not belong to the checkpoint {where!r} (its digest differs)"
        raise ValueError(msg)
    extra = [k for k, v in supplied.items() if v is not None and k not in (meta.get("supplied") or {})]
    if extra:
        msg = (f"the checkpoint {where!r} stores its {extra[0]}; `{extra[0]}=` is only for objects that are not "
               "part of sgmc, which a checkpoint does not store")
        raise ValueError(msg)
    dec = Decoder(dmembers, {k: v for k, v in supplied.items() if v is not None})
    try:
        doc = json.loads(dmembers["doc"])
        roles = {role: dec.decode(doc["roles"][role]) for role in ROLES}
        shared = dec.decode(doc["shared"])
        state = Decoder(members, table=dec.table).decode(json.loads(members["doc"]))
    except MissingObject as err:
        kind, why = err.check.get("type", "an object"), err.check.get("reason", "it is not part of sgmc")
        msg = (f"the checkpoint {where!r} does not store its {err.role}, a {kind} ({why}; checkpoints hold data, "
               f"not code); pass it again: sgmc.resume({where!r}, {err.role}=...)")
        raise ValueError(msg) from None
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, ImportError) as err:
        msg = f"cannot read the checkpoint {where!r}: it is not a valid sgmc checkpoint ({type(err).__name__}: {err})"
        raise ValueError(msg) from err
    _check_supplied(where, roles, meta.get("supplied") or {})
    shared["roles"] = roles
    run = RunFile(name, digest, {id(o): (n, o) for n, o in dec.table.items()},
                  max(dec.table, default=-1) + 1, meta.get("supplied") or {})
    return shared, state, run


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
