"""When a run in this process stops early: Ctrl-C and the ``max_time`` budget.

:class:`StopOnInterrupt` turns the first Ctrl-C into a request that the loop reads at the end of
the current iteration (a second one interrupts at once); :class:`Budget` adds a wall-clock
deadline to it, one per group of chains, which share ``max_time`` equally.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Callable

__all__ = ["StopOnInterrupt", "Budget"]


class StopOnInterrupt:
    """Turns Ctrl-C into a request to stop at the end of the current iteration (main thread only).

    Installed only over Python's default SIGINT handler; the first Ctrl-C restores that handler, so
    a second one interrupts at once.
    """

    def __init__(self, active: bool):
        self.requested = False
        self._old = None
        self._active = active and threading.current_thread() is threading.main_thread()

    def __enter__(self):
        if self._active and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        self.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
        return False

    def __call__(self) -> bool:
        return self.requested


class Budget:
    """A stop request: Ctrl-C (``interrupt``) or ``seconds`` passed since this object was made."""

    def __init__(self, interrupt: Callable[[], bool], seconds: float):
        self.interrupt = interrupt
        self.deadline = time.perf_counter() + seconds

    def __call__(self) -> bool:
        return self.interrupt() or time.perf_counter() >= self.deadline
