"""Time behind a seam: the service and executors read `Clock.now_s()`; tests move a fake clock.

The scheduling core never reads a clock (a snapshot carries `now_s` as data); this module is for
the drivers around it.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["Clock", "FakeClock", "SystemClock"]


class Clock(Protocol):
    def now_s(self) -> float:
        """Seconds since the Unix epoch."""
        ...


class SystemClock:
    def now_s(self) -> float:
        return time.time()


class FakeClock:
    """A clock that moves only when told to. Thread-safe."""

    def __init__(self, start_s: float = 1_700_000_000.0) -> None:
        self._now_s = start_s
        self._lock = threading.Lock()

    def now_s(self) -> float:
        with self._lock:
            return self._now_s

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now_s += seconds
