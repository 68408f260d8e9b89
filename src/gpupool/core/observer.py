"""A seam for drivers to watch a cycle's phases (timings, tracing); the core reads no clock."""

from __future__ import annotations

from typing import Protocol


class CycleObserver(Protocol):
    def phase_started(self, phase: str) -> None: ...

    def phase_finished(self, phase: str) -> None: ...


class NullObserver:
    """Observes nothing: the default."""

    def phase_started(self, phase: str) -> None:
        return None

    def phase_finished(self, phase: str) -> None:
        return None


PHASES = ("snapshot", "fair_share", "allocate", "consolidate", "reclaim", "preempt", "node_level")
"""Phase names, in the order a cycle runs them."""
