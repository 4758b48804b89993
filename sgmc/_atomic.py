"""Atomic file writes: a file is either its old complete self or the new complete one, never a part.

Every file sgmc writes over (saved traces, the command line's ``--output``, checkpoints, the data
cache) goes through :func:`atomic_write`: the bytes go to a temporary file in the destination's
folder, are flushed and synced to disk, and the temporary file then replaces the destination in one
``os.replace``, which is atomic on POSIX and Windows within one file system. A process killed while
writing leaves the earlier file intact (and at worst a hidden temporary file beside it).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import IO, Iterator

__all__ = ["atomic_write"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_MODE = 0o666 & ~_umask()


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
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".part", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp creates the file readable by its owner only; give it the mode a new file gets
        if os.path.exists(path):
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        else:
            os.chmod(tmp, _MODE)
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
