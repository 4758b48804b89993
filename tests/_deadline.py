"""A deadline for tests that wait on other processes: a hang becomes a failure that says so.

Tests that wait for worker processes (a process pool, a Dask cluster) could wait forever if a run
hangs. :func:`deadline` arms a timer in the main thread; when it fires, :class:`TestHung` is raised
in the waiting thread (a blocked wait on a lock, a future or a socket is interrupted by the signal),
so the test fails with a message naming what hung, for how long, and where each of this process's
threads stood. Where timers cannot interrupt the main thread (Windows, or a test run
outside the main thread) the body runs without a deadline.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import traceback
from typing import Iterator

__all__ = ["TestHung", "deadline"]


class TestHung(AssertionError):
    """A test did not finish within its deadline."""

    __test__ = False  # not a test class, whatever its name


def _can_interrupt() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def _stacks() -> str:
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame)[-12:])
        parts.append(f"--- thread {names.get(ident, ident)}\n{stack}")
    return "\n".join(parts)


@contextlib.contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """Fail with :class:`TestHung` when the body runs longer than ``seconds``.

    Parameters
    ----------
    seconds : float
        The most the body may take (well above its normal time on a loaded machine).
    what : str
        What the body is, for the message (a test's node id).
    """
    if not _can_interrupt():
        yield
        return

    def expire(signum, frame):
        signal.setitimer(signal.ITIMER_REAL, 0)
        msg = f"{what} did not finish within {seconds:.0f} s: it hangs. Where this process's threads stood:\n"
        raise TestHung(msg + _stacks())

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
