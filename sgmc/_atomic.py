"""Atomic file writes: a file is either its old complete self or the new complete one, never a part.

Every file sgmc writes over (saved traces, the command line's ``--output``, checkpoints, the data
cache) goes through :func:`atomic_write`: the bytes go to a temporary file in the destination's
folder, are flushed and synced to disk, and the temporary file then replaces the destination in one
``os.replace``, which is atomic on POSIX and Windows within one file system. A process killed while
writing leaves the earlier file intact and a hidden temporary file beside it, named after the host
and process that wrote it and marked as sgmc's (``.NAME.HOST.PID.TOKEN.sgmc-part``); the next write
into that folder removes such leftovers whose process is gone (or, when that cannot be told, that
have not changed for an hour), and never the file of a writer that is still at work, nor any file
without sgmc's mark (another program's ``.NAME.X.part`` stays).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
import time
from typing import IO, Iterator

__all__ = ["atomic_write", "remove_stale_parts", "STALE_AGE", "SUFFIX"]

#: Seconds after which a temporary file that cannot be tied to a live process counts as left over.
STALE_AGE = 3600.0

#: The ending that marks a temporary file as written by :func:`atomic_write` (no other program's is touched).
SUFFIX = ".sgmc-part"
_OURS = re.compile(r"^\..+\.(?P<host>[A-Za-z0-9_-]+)\.(?P<pid>\d+)\.[0-9a-f]{12}" + re.escape(SUFFIX) + "$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname())[:60] or "host"


def _alive(pid: int) -> bool | None:
    """Whether process ``pid`` exists here; None where that cannot be asked safely (Windows)."""
    if os.name == "nt":  # os.kill(pid, 0) would send Ctrl-C there
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # it exists (owned by someone else) or cannot be asked: keep its file
    return True


def remove_stale_parts(folder: str, now: float | None = None) -> list[str]:
    """Remove temporary files of killed writes from ``folder``; return the names removed.

    Only files named by :func:`atomic_write` (ending in :data:`SUFFIX`) are considered. One written by
    this host is removed when its process no longer exists; one written by another host when it has
    not changed for :data:`STALE_AGE` seconds. Errors (a file removed meanwhile, no permission) are
    ignored.
    """
    now = time.time() if now is None else now
    host, removed = _host(), []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        ours = _OURS.match(name)
        if ours is None:
            continue
        try:
            alive = _alive(int(ours["pid"])) if ours["host"] == host else None
            if alive is not None:
                stale = not alive and int(ours["pid"]) != os.getpid()
            else:
                stale = now - entry.stat(follow_symlinks=False).st_mtime > STALE_AGE
            if stale and entry.is_file(follow_symlinks=False):
                os.remove(entry.path)
                removed.append(name)
        except OSError:
            continue
    return removed


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[IO[bytes]]:
    """Open a binary file handle whose contents replace ``path`` only once they are complete.

    Parameters
    ----------
    path : str or path-like
        The destination. Its folder must exist; the temporary file is created there so that the
        final rename stays within one file system.

    Yields
    ------
    file object
        Opened for binary writing. When the ``with`` block ends normally the data are flushed,
        synced and moved to ``path``; when it raises, the temporary file is removed and ``path`` is
        left as it was.

    Examples
    --------
    >>> import os, tempfile
    >>> from sgmc._atomic import atomic_write
    >>> path = os.path.join(tempfile.mkdtemp(), "out.bin")
    >>> with atomic_write(path) as fh:
    ...     _ = fh.write(b"complete")
    >>> open(path, "rb").read()
    b'complete'
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    remove_stale_parts(folder)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{_host()}.{os.getpid()}.{secrets.token_hex(6)}{SUFFIX}")
    # a new file gets the mode the umask allows (the system applies it); one that replaces a file keeps its mode
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        if os.path.exists(path):
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    if hasattr(os, "O_DIRECTORY"):  # make the rename itself durable (POSIX)
        with contextlib.suppress(OSError):
            dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
