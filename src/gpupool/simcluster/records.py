"""The simulated cluster's record of one workload: its state, its run and its history."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.core.model import Workload

__all__ = ["ACTIVE", "State", "WorkloadRecord", "checkpointed_s", "held_gpu_milli"]


class State(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    """Evicted, inside its grace period; its devices may be bound again at once."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SUSPENDED = "suspended"
    DELETED = "deleted"


ACTIVE = frozenset((State.PENDING, State.RUNNING))
"""The states the core sees: only pending and running workloads are in its snapshot."""


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    """The simulated cluster's view of one workload; `workload` is what the core sees.

    `progress_s` is the progress the current run started from (accumulated running time, or the
    last checkpoint after an eviction); the current run started at `run_started_s`.
    """

    workload: Workload
    state: State
    duration_s: int | None = None
    """Seconds of running it needs to finish; `None` = until something stops it."""
    progress_s: int = 0
    run_started_s: int | None = None
    generation: int = 0
    """Counts runs and stops: completion and stop events of an older generation are stale."""
    stops_at_s: int | None = None
    """While stopping: when its grace period ends."""
    first_start_s: int | None = None
    finish_s: int | None = None
    """When it succeeded or failed."""
    evictions: int = 0
    restarts: int = 0
    """Consolidation moves that restarted it from its last checkpoint."""
    lost_gpu_milli_s: int = 0
    """Work redone after evictions and restarts, in milli-GPU seconds."""
    reason: str | None = None
    """Why it is not running (pending, failed, stopping, suspended, succeeded), in words."""

    @property
    def name(self) -> str:
        return self.workload.name

    def run_time_s(self, now_s: int) -> int:
        """Its progress at `now_s`: what it had, plus the current run's time."""
        if self.state is State.RUNNING and self.run_started_s is not None:
            return self.progress_s + now_s - self.run_started_s
        return self.progress_s

    def completes_at_s(self) -> int | None:
        started = self.run_started_s
        if self.state is not State.RUNNING or self.duration_s is None or started is None:
            return None
        return started + self.duration_s - self.progress_s


def checkpointed_s(progress_s: int, interval_s: int) -> int:
    """Progress kept after a stop: the last checkpoint (none when `interval_s` is 0)."""
    return 0 if interval_s <= 0 else progress_s // interval_s * interval_s


def held_gpu_milli(workload: Workload, memory_mib_by_node: Mapping[str, int]) -> int:
    """GPU charged for `workload`'s running tasks, in milli-GPU."""
    return sum(workload.gpu.milli_on(memory_mib_by_node[p.node]) for p in workload.placements)
