"""Progress bars for the phases people wait on: sampling, the mode search, reference runs, tuning grids.

:func:`progress_bar` returns a tqdm bar when tqdm is installed and a small built-in text bar
otherwise, so progress shows with the core install. Bars are quiet when standard error is not a
terminal (a log file, a pipe, a test run) unless asked for with ``progress="always"``; ``False``
turns them off. A call that runs other phases sets the default for them with
:func:`progress_scope`: inside ``sgmc.sample(..., progress=False)`` the mode search is quiet too.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import time
from typing import Any, Iterator

__all__ = ["progress_bar", "progress_scope", "TextBar", "wants_progress"]

_SCOPE: contextvars.ContextVar = contextvars.ContextVar("sgmc_progress", default=None)


@contextlib.contextmanager
def progress_scope(progress: Any) -> Iterator[None]:
    """Phases run inside take ``progress`` as their setting: False silences them, "always" forces them."""
    token = _SCOPE.set(progress)
    try:
        yield
    finally:
        _SCOPE.reset(token)

_CHOICES = (True, False, "always", "auto")


def wants_progress(progress: Any, stream: Any = None) -> bool:
    """Whether a bar is shown for the ``progress`` argument: ``True``/``"auto"`` on a terminal only.

    Raises
    ------
    ValueError
        Naming ``progress``, for any other value than True, False, "auto" or "always".
    """
    if progress not in _CHOICES or (progress in (0, 1) and not isinstance(progress, bool)):
        msg = f"`progress` must be True, False, 'auto' or 'always'; got {progress!r}"
        raise ValueError(msg)
    outer = _SCOPE.get()
    if progress is False or outer is False:
        return False
    if progress == "always" or outer == "always":
        return True
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class TextBar:
    """A minimal tqdm-like bar on standard error: ``update(n)``, ``n``, ``close()``.

    Redraws at most every ``mininterval`` seconds, on one line, with the fraction done, the count,
    the elapsed time and an estimate of the time left.

    Examples
    --------
    >>> import io
    >>> from sgmc._progress import TextBar
    >>> out = io.StringIO()
    >>> bar = TextBar(total=10, desc="demo", file=out, mininterval=0.0)
    >>> bar.update(10)
    >>> bar.close()
    >>> "demo" in out.getvalue() and "10/10" in out.getvalue()
    True
    """

    def __init__(self, total: int, desc: str = "", *, initial: int = 0, file: Any = None,
                 mininterval: float = 0.5, width: int = 24):
        self.total = max(int(total), 1)
        self.desc = desc
        self.n = int(initial)
        self.file = sys.stderr if file is None else file
        self.mininterval = mininterval
        self.width = width
        self._t0 = time.perf_counter()
        self._start_n = self.n
        self._last = -float("inf")
        self._shown = False

    def update(self, n: int = 1) -> None:
        self.n += int(n)
        now = time.perf_counter()
        if now - self._last >= self.mininterval or self.n >= self.total:
            self._draw(now)

    def _draw(self, now: float) -> None:
        frac = min(self.n / self.total, 1.0)
        filled = int(round(frac * self.width))
        elapsed = now - self._t0
        rate = (self.n - self._start_n) / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.n) / rate if rate > 0 else float("nan")
        eta = _clock(left) if left == left else "?"
        line = (f"\r{self.desc}: {frac:4.0%} |{'#' * filled}{'.' * (self.width - filled)}| "
                f"{self.n}/{self.total} [{_clock(elapsed)}<{eta}]")
        self.file.write(line)
        self.file.flush()
        self._last = now
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.file.write("\n")
            self.file.flush()


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def progress_bar(progress: Any, total: int, desc: str, *, initial: int = 0) -> Any:
    """A bar over ``total`` steps, or None when ``progress`` (see :func:`wants_progress`) says no."""
    if not wants_progress(progress):
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return TextBar(total, desc, initial=initial)
    return tqdm(total=total, desc=desc, leave=False, mininterval=0.5, initial=initial)
