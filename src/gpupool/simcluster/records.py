"""The simulated cluster's record of one workload: its state, its run and its history.

A record holds the workload's lifecycle status (`gpupool.core.lifecycle`, `None` once it is
removed) and, while its tasks stop within a grace period, `stops_at_s`; its printed `State`
(what what-if shows and the simulator's outcomes name) is derived from these two.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from gpupool.core.lifecycle import (
    TASK,
    WORKLOAD,
    TaskEvent,
    TaskState,
    WorkloadEvent,
    WorkloadStatus,
)
from gpupool.core.model import Workload

__all__ = [
    "ACTIVE",
    "State",
    "WorkloadRecord",
    "checkpointed_s",
    "held_gpu_milli",
    "printed_state",
    "status_after",
]


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

_PRINTED: Final[Mapping[WorkloadStatus | None, State]] = {
    WorkloadStatus.PENDING: State.PENDING,
    WorkloadStatus.RUNNING: State.RUNNING,
    WorkloadStatus.SUSPENDED: State.SUSPENDED,
    WorkloadStatus.COMPLETED: State.SUCCEEDED,
    WorkloadStatus.FAILED: State.FAILED,
    None: State.DELETED,
}
"""A record's lifecycle status as printed. `COMPLETING` and `DELETING` have no entry: the
simulated cluster's tasks of one workload end together, so it never stays in either."""


def printed_state(status: WorkloadStatus | None, stopping: bool) -> State:
    """What-if's and the simulator's word for a lifecycle status: `stopping` while its tasks
    stop (the status is already at the eviction's end, pending or failed); `None` (removed) is
    deleted."""
    return State.STOPPING if stopping else _PRINTED[status]


def status_after(
    status: WorkloadStatus | None, tasks: TaskState | None, event: WorkloadEvent | TaskEvent
) -> WorkloadStatus | None:
    """The lifecycle status after `event`, as the lifecycle tables allow it (else
    `TransitionError`). A task event (its tasks' `END` after a grace period) is checked against
    `tasks` and leaves the status as it is. A deleted workload is removed at once: the
    simulated cluster waits for no task of it, so `DELETE` is followed by `REMOVE`."""
    if isinstance(event, TaskEvent):
        TASK.after(tasks, event)
        return status
    after = WORKLOAD.step(status, event)
    if after is WorkloadStatus.DELETING:
        return WORKLOAD.step(after, WorkloadEvent.REMOVE)
    return after


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    """The simulated cluster's view of one workload; `workload` is what the core sees.

    `status` is its lifecycle status (`None`: removed, after a delete); `state`, its printed
    state, follows from `status` and `stops_at_s` and is never set by hand.

    `progress_s` is the progress the current run started from (accumulated running time, or the
    last checkpoint after an eviction); the current run started at `run_started_s`.
    """

    workload: Workload
    status: WorkloadStatus | None
    duration_s: int | None = None
    """Seconds of running it needs to finish; `None` = until something stops it."""
    progress_s: int = 0
    run_started_s: int | None = None
    generation: int = 0
    """Counts runs and stops: completion and stop events of an older generation are stale."""
    stops_at_s: int | None = None
    """While stopping (its tasks stop within a grace period): when the period ends."""
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
    state: State = field(init=False)
    """Derived from `status` and `stops_at_s` (see `printed_state`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", printed_state(self.status, self.stops_at_s is not None))

    @property
    def tasks(self) -> TaskState | None:
        """Its tasks' state in the task table (they share one; a bound task runs at once):
        stopping within a grace period, running while it runs, else `None` (no live task)."""
        if self.stops_at_s is not None:
            return TaskState.STOPPING
        return TaskState.RUNNING if self.status is WorkloadStatus.RUNNING else None

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
