"""A file of named members that loads without running code and refuses any damage.

Checkpoints (and the data they share between writes) are stored in one simple container: the
members, one after another, then a JSON header that lists every member's name, size and SHA-256,
the header's own SHA-256, its keyed signature (HMAC-SHA256, zeros when unsigned), its length, and a
closing mark::

    MAGIC | member 0 | member 1 | ... | header (JSON) | sha256(header) | hmac(header) | len(header) | END

The last two bytes of ``MAGIC`` are the container's version (:data:`CONTAINER_VERSION`). Members are
either NumPy ``.npy`` bytes (written and read with ``allow_pickle=False``, so an object array can
neither be written nor read) or raw bytes such as a JSON document. Reading checks the marks, the
header's checksum, that every declared size is non-negative and that the members exactly fill the
bytes present (before anything is allocated), and every member's checksum before anything is parsed,
so a truncated file, a flipped bit or a zeroed block anywhere raises a ``ValueError`` that names the
file and what is wrong.

Checksums detect damage, not tampering: anyone can recompute them. With a ``key`` (bytes the user
keeps) the header, and through it every member's checksum, is signed with HMAC-SHA256, and reading
with the key refuses a file whose signature is missing or wrong. Writing streams each member through
its hash, so a large array is never copied to build the file, and goes through
:func:`sgmc._atomic.atomic_write`.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import struct
from typing import IO, Any, Iterable

import numpy as np

from ._atomic import atomic_write

__all__ = ["MAGIC", "CONTAINER_VERSION", "write_container", "read_container", "array_digest", "check_key",
           "DamagedFileError", "SignatureError"]

#: Version of the container layout; files of another version are refused with both numbers named.
CONTAINER_VERSION = 2
_MARK = b"\x93SGMC-FILE\r\n\x1a\n"
MAGIC = _MARK + struct.pack(">H", CONTAINER_VERSION)
_END = b"\x00SGMC-END"
_TAIL = 32 + 32 + 8 + len(_END)
_CHUNK = 1 << 22
_MAX_MEMBERS = 100_000
_MAX_HEADER = 64 << 20
_MAX_NPY_HEADER = 1 << 16
_MAX_DIMS = 32


class DamagedFileError(ValueError):
    """A file that is not a complete, undamaged sgmc container; the message names the file."""


class SignatureError(ValueError):
    """A signed file read without its key, an unsigned one read with a key, or a wrong signature."""


def check_key(key: Any, name: str = "key") -> bytes | None:
    """``key`` as bytes (a ``str`` is UTF-8 encoded), or None; ``ValueError``/``TypeError`` naming ``name``."""
    if key is None:
        return None
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, (bytes, bytearray, memoryview)):
        msg = f"`{name}` must be bytes or a str (the secret that signs the file); got {type(key).__name__}"
        raise TypeError(msg)
    key = bytes(key)
    if not key:
        msg = f"`{name}` must not be empty; got {key!r}"
        raise ValueError(msg)
    return key


def _sign(key: bytes | None, header: bytes) -> bytes:
    return bytes(32) if key is None else hmac.new(key, header, hashlib.sha256).digest()


class _HashingWriter:
    """A write-only file object that hashes and counts what passes through it."""

    def __init__(self, fh: IO[bytes]):
        self.fh = fh
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.sha.update(view)
        self.size += len(view)
        self.fh.write(view)
        return len(view)


def array_digest(a: np.ndarray) -> str:
    """SHA-256 of an array's dtype, shape and values (C order): equal arrays give equal digests."""
    a = np.asarray(a)
    sha = hashlib.sha256(f"{a.dtype.str}|{a.shape}|".encode())
    flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8) if a.size else np.zeros(0, np.uint8)
    for start in range(0, flat.size, _CHUNK):
        sha.update(flat[start:start + _CHUNK])
    return sha.hexdigest()


def write_container(path: Any, kind: str, meta: dict, members: Iterable[tuple[str, Any]],
                    key: bytes | None = None) -> int:
    """Write ``members`` (``(name, ndarray or bytes)`` pairs) atomically to ``path``; return its size.

    ``kind`` names what the file holds (``"checkpoint"``); ``meta`` is JSON-able and is returned
    by :func:`read_container` as it was given. With ``key`` the header is signed (HMAC-SHA256).
    """
    key = check_key(key)
    entries = []
    with atomic_write(path) as fh:
        fh.write(MAGIC)
        for name, value in members:
            w = _HashingWriter(fh)
            if isinstance(value, (bytes, bytearray, memoryview)):
                w.write(value)
                form = "bytes"
            else:
                arr = np.asarray(value)
                if arr.dtype.hasobject:
                    msg = f"member {name!r} of {os.fspath(path)!r} is an object array, which cannot be stored as data"
                    raise TypeError(msg)
                np.lib.format.write_array(w, arr, allow_pickle=False)
                form = "npy"
            entries.append([name, form, w.size, w.sha.hexdigest()])
        header = json.dumps({"kind": kind, "signed": key is not None, "members": entries, "meta": meta},
                            separators=(",", ":"), allow_nan=False).encode()
        fh.write(header)
        fh.write(hashlib.sha256(header).digest())
        fh.write(_sign(key, header))
        fh.write(struct.pack("<Q", len(header)))
        fh.write(_END)
        total = len(MAGIC) + sum(e[2] for e in entries) + len(header) + _TAIL
    return total


def _damaged(path: Any, what: str) -> DamagedFileError:
    return DamagedFileError(f"cannot read {os.fspath(path)!r}: {what}")


def read_container(path: Any, kind: str, what: str, key: bytes | None = None) -> tuple[dict, dict]:
    """Read and verify a file written by :func:`write_container`; return ``(meta, members)``.

    ``members`` maps names to NumPy arrays (``npy`` members) or bytes. ``what`` describes the file
    for messages (``"an sgmc checkpoint"``). Raises :class:`DamagedFileError` (a ``ValueError``)
    naming ``path`` for a foreign, truncated or damaged file, :class:`SignatureError` when the
    signature does not match ``key`` (or one of them is missing); ``FileNotFoundError`` when it is
    missing. Every size is checked against the bytes present before anything is allocated.
    """
    key = check_key(key)
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(len(MAGIC))
        if head[:len(_MARK)] != _MARK:
            raise _damaged(path, f"it is not {what} (it does not start with the sgmc file mark)")
        if head != MAGIC:
            found = struct.unpack(">H", head[len(_MARK):])[0] if len(head) == len(MAGIC) else None
            raise _damaged(path, f"it is an sgmc file of container version {found!r}, which this version of sgmc "
                                 f"does not read (it reads version {CONTAINER_VERSION}); rerun the sampling")
        if size < len(MAGIC) + _TAIL:
            raise _damaged(path, f"it is truncated ({size} bytes)")
        fh.seek(size - _TAIL)
        tail = fh.read(_TAIL)
        if tail[-len(_END):] != _END:
            raise _damaged(path, "it is truncated or damaged (the closing mark is missing)")
        digest, signature, (length,) = tail[:32], tail[32:64], struct.unpack("<Q", tail[64:72])
        start = size - _TAIL - length
        if length <= 0 or length > _MAX_HEADER or start < len(MAGIC):
            raise _damaged(path, "it is truncated or damaged (the header length is impossible)")
        fh.seek(start)
        header = fh.read(length)
        if hashlib.sha256(header).digest() != digest:
            raise _damaged(path, "it is damaged (the header's checksum does not match)")
        entries, meta, found, signed = _header(path, header, start - len(MAGIC))
        if found != kind:
            raise _damaged(path, f"it is an sgmc {found} file, not {what}")
        _check_signature(path, key, signed, signature, header)
        fh.seek(len(MAGIC))
        members = {}
        for name, form, nbytes, sha in entries:
            buf = bytearray(nbytes)  # nbytes is at most the bytes present (checked above)
            if fh.readinto(buf) != nbytes:
                raise _damaged(path, f"it is truncated in member {name!r}")
            if hashlib.sha256(buf).hexdigest() != sha:
                raise _damaged(path, f"member {name!r} is damaged (its checksum does not match)")
            members[name] = _parse(path, name, form, buf)
    return meta, members


def _header(path: Any, header: bytes, room: int) -> tuple[list, Any, Any, bool]:
    """The header's members, meta, kind and signed flag; every size checked against the ``room`` present."""
    try:
        info = json.loads(header)
        raw = info["members"]
        if not isinstance(raw, list) or len(raw) > _MAX_MEMBERS:
            raise ValueError(f"a list of at most {_MAX_MEMBERS} members is expected")
        entries = []
        for item in raw:
            n, f, s, h = item
            if not (type(n) is str and type(f) is str and type(s) is int and type(h) is str):
                raise ValueError(f"member entry {str(item)[:60]!r} is not (name, form, size, sha256)")
            entries.append((n, f, s, h))
        meta, found, signed = info["meta"], info["kind"], info.get("signed", False)
    except RecursionError as err:
        raise _damaged(path, "its header is nested too deeply") from err
    except (ValueError, TypeError, KeyError) as err:
        raise _damaged(path, f"its header is not valid ({err})") from err
    used = 0
    for name, _, nbytes, _ in entries:
        if nbytes < 0 or nbytes > room - used:
            raise _damaged(path, f"it is damaged (member {name!r} declares {nbytes} bytes; {room - used} are left)")
        used += nbytes
    if used != room:
        raise _damaged(path, "it is damaged (its members do not fill the file)")
    if len({e[0] for e in entries}) != len(entries):
        raise _damaged(path, "it is damaged (a member name is used twice)")
    return entries, meta, found, signed is True


def _check_signature(path: Any, key: bytes | None, signed: bool, signature: bytes, header: bytes) -> None:
    where = os.fspath(path)
    if not signed and signature != bytes(32):
        raise _damaged(path, "it is damaged (the signature field of an unsigned file is not blank)")
    if key is None and signed:
        msg = f"{where!r} is signed: pass the key it was signed with (`key=`) to read it"
        raise SignatureError(msg)
    if key is not None and not signed:
        msg = (f"{where!r} is not signed, but a key was given: it was written without a key or its signature "
               "was removed; read it without `key=` only if you trust where it came from")
        raise SignatureError(msg)
    if key is not None and not hmac.compare_digest(signature, _sign(key, header)):
        msg = f"{where!r} does not match its signature with this key: it was altered, or signed with another key"
        raise SignatureError(msg)


def _parse(path: Any, name: str, form: str, buf: bytearray) -> Any:
    if form == "bytes":
        return bytes(buf)
    if form != "npy":
        raise _damaged(path, f"member {name!r} has an unknown form {form!r}")
    try:
        f = io.BytesIO(memoryview(buf)[:min(len(buf), _MAX_NPY_HEADER)])
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        if dtype.hasobject or dtype.fields is not None:
            raise ValueError("object and structured arrays are not read")
        offset = f.tell()
        if len(shape) > _MAX_DIMS or any(type(n) is not int or n < 0 for n in shape):
            raise ValueError(f"the shape {shape!r} is impossible")
        count = 1
        for n in shape:
            count *= n
        if count * dtype.itemsize != len(buf) - offset:
            raise ValueError(f"the shape {shape!r} of {dtype} needs {count * dtype.itemsize} bytes; "
                             f"{len(buf) - offset} are present")
        arr = np.frombuffer(buf, dtype=dtype, count=count, offset=offset)
        return arr.reshape(shape, order="F" if fortran else "C")
    except (ValueError, TypeError) as err:
        raise _damaged(path, f"member {name!r} is not a valid array ({err})") from err
