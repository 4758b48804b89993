"""A file of named members that loads without running code and refuses any damage.

Checkpoints (and the data they share between writes) are stored in one simple container: the
members, one after another, then a JSON header that lists every member's name, size and SHA-256,
the header's own SHA-256 and its length, and a closing mark::

    MAGIC | member 0 | member 1 | ... | header (JSON) | sha256(header) | len(header) (8 bytes) | END

Members are either NumPy ``.npy`` bytes (written and read with ``allow_pickle=False``, so an object
array can neither be written nor read) or raw bytes such as a JSON document. Reading checks the
marks, the header's checksum, that the members exactly fill the file, and every member's checksum
before anything is parsed, so a truncated file, a flipped bit or a zeroed block anywhere raises a
``ValueError`` that names the file and what is wrong. Writing streams each member through its hash,
so a large array is never copied to build the file, and goes through :func:`sgmc._atomic.atomic_write`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
from typing import IO, Any, Iterable

import numpy as np

from ._atomic import atomic_write

__all__ = ["MAGIC", "write_container", "read_container", "array_digest", "DamagedFileError"]

MAGIC = b"\x93SGMC-FILE\r\n\x1a\n\x00\x01"
_END = b"\x00SGMC-END"
_TAIL = 32 + 8 + len(_END)
_CHUNK = 1 << 22


class DamagedFileError(ValueError):
    """A file that is not a complete, undamaged sgmc container; the message names the file."""


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


def write_container(path: Any, kind: str, meta: dict, members: Iterable[tuple[str, Any]]) -> int:
    """Write ``members`` (``(name, ndarray or bytes)`` pairs) atomically to ``path``; return its size.

    ``kind`` names what the file holds (``"checkpoint"``); ``meta`` is JSON-able and is returned
    by :func:`read_container` as it was given.
    """
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
        header = json.dumps({"kind": kind, "members": entries, "meta": meta}, separators=(",", ":"),
                            allow_nan=False).encode()
        fh.write(header)
        fh.write(hashlib.sha256(header).digest())
        fh.write(struct.pack("<Q", len(header)))
        fh.write(_END)
        total = len(MAGIC) + sum(e[2] for e in entries) + len(header) + _TAIL
    return total


def _damaged(path: Any, what: str) -> DamagedFileError:
    return DamagedFileError(f"cannot read {os.fspath(path)!r}: {what}")


def read_container(path: Any, kind: str, what: str) -> tuple[dict, dict]:
    """Read and verify a file written by :func:`write_container`; return ``(meta, members)``.

    ``members`` maps names to NumPy arrays (``npy`` members) or bytes. ``what`` describes the file
    for messages (``"an sgmc checkpoint"``). Raises :class:`DamagedFileError` (a ``ValueError``)
    naming ``path`` for a foreign, truncated or damaged file; ``FileNotFoundError`` when it is missing.
    """
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(len(MAGIC))
        if head != MAGIC:
            raise _damaged(path, f"it is not {what} (it does not start with the sgmc file mark)")
        if size < len(MAGIC) + _TAIL:
            raise _damaged(path, f"it is truncated ({size} bytes)")
        fh.seek(size - _TAIL)
        tail = fh.read(_TAIL)
        if tail[-len(_END):] != _END:
            raise _damaged(path, "it is truncated or damaged (the closing mark is missing)")
        digest, (length,) = tail[:32], struct.unpack("<Q", tail[32:40])
        start = size - _TAIL - length
        if length <= 0 or start < len(MAGIC):
            raise _damaged(path, "it is truncated or damaged (the header length is impossible)")
        fh.seek(start)
        header = fh.read(length)
        if hashlib.sha256(header).digest() != digest:
            raise _damaged(path, "it is damaged (the header's checksum does not match)")
        try:
            info = json.loads(header)
            entries = [(str(n), str(f), int(s), str(h)) for n, f, s, h in info["members"]]
            meta = info["meta"]
            found = info["kind"]
        except (ValueError, TypeError, KeyError) as err:
            raise _damaged(path, f"its header is not valid ({err})") from err
        if found != kind:
            raise _damaged(path, f"it is an sgmc {found} file, not {what}")
        if len(MAGIC) + sum(e[2] for e in entries) != start:
            raise _damaged(path, "it is damaged (its members do not fill the file)")
        fh.seek(len(MAGIC))
        members = {}
        for name, form, nbytes, sha in entries:
            buf = bytearray(nbytes)
            if fh.readinto(buf) != nbytes:
                raise _damaged(path, f"it is truncated in member {name!r}")
            if hashlib.sha256(buf).hexdigest() != sha:
                raise _damaged(path, f"member {name!r} is damaged (its checksum does not match)")
            members[name] = _parse(path, name, form, buf)
    return meta, members


def _parse(path: Any, name: str, form: str, buf: bytearray) -> Any:
    if form == "bytes":
        return bytes(buf)
    if form != "npy":
        raise _damaged(path, f"member {name!r} has an unknown form {form!r}")
    try:
        f = io.BytesIO(memoryview(buf)[:min(len(buf), 1 << 16)])
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        if dtype.hasobject:
            raise ValueError("object arrays are not read")
        offset = f.tell()
        count = int(np.prod(shape, dtype=np.int64))
        arr = np.frombuffer(buf, dtype=dtype, count=count, offset=offset)
        return arr.reshape(shape, order="F" if fortran else "C")
    except (ValueError, TypeError) as err:
        raise _damaged(path, f"member {name!r} is not a valid array ({err})") from err
