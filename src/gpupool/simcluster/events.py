"""The simulated cluster's event queue: what happens at which simulated second, in which order.

Events sit in a heap ordered by `(time_s, kind, seq)`: at one instant grace periods end before
completions, completions before the driver's events (submissions, what-if timeline events),
those before cycle wake-ups; events of one kind in the order they were pushed (`seq`).
"""

from __future__ import annotations

import enum
import heapq
from dataclasses import dataclass, field

__all__ = ["Event", "EventKind", "EventQueue"]


class EventKind(enum.IntEnum):
    """Order of events at one instant: capacity is freed before new work is queued."""

    STOP = 0
    """A grace period ends: the evicted workload's task is gone."""
    COMPLETE = 1
    DRIVER = 2
    """The driver's own event: a submission (`gpupool simulate`), a timeline event (what-if)."""
    CYCLE = 3
    """A wake-up: cycles may run again (they were held back by the minimum cycle interval)."""
    SUBMIT = 2
    """The simulator's name for DRIVER."""


@dataclass(frozen=True, slots=True, order=True)
class Event:
    time_s: int
    kind: EventKind
    seq: int
    workload: str = field(default="", compare=False)
    generation: int = field(default=0, compare=False)
    """For a completion or a stop: the run it belongs to; a later change makes it stale."""
    ref: int = field(default=0, compare=False)
    """For a driver event: the driver's own reference (what-if: the timeline event's index)."""


class EventQueue:
    """A heap of events; `seq` is the push order and breaks every tie."""

    def __init__(self) -> None:
        self._heap: list[Event] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(
        self,
        time_s: int,
        kind: EventKind,
        workload: str = "",
        generation: int = 0,
        ref: int = 0,
    ) -> None:
        heapq.heappush(self._heap, Event(time_s, kind, self._seq, workload, generation, ref))
        self._seq += 1

    def peek(self) -> Event | None:
        return self._heap[0] if self._heap else None

    def drop_next(self) -> None:
        """Drop the earliest event (one known to be stale)."""
        heapq.heappop(self._heap)

    def next_time_s(self) -> int | None:
        return self._heap[0].time_s if self._heap else None

    def pop_instant(self) -> list[Event]:
        """Every event of the earliest instant, in `(kind, seq)` order."""
        if not self._heap:
            return []
        now = self._heap[0].time_s
        out = []
        while self._heap and self._heap[0].time_s == now:
            out.append(heapq.heappop(self._heap))
        return out
