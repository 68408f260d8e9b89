"""The core's output: decisions for drivers to carry out, and why work waits."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gpupool.core.model import Resources, TaskPlacement


class EvictionCause(enum.Enum):
    RECLAIM = "reclaim"
    """Over-quota / over-fair-share work yields to another project (G4)."""
    PREEMPT = "preempt"
    """Lower-priority work of the same project yields (G6)."""


class MoveCause(enum.Enum):
    CONSOLIDATE = "consolidate"
    """Restart elsewhere so a pending workload fits (against fragmentation)."""
    SPREAD = "spread"
    """Node-level: a dynamic fraction moves onto an idle device of its node to burst."""
    PACK = "pack"
    """Node-level: a spread dynamic fraction returns to the device it is charged to."""


@dataclass(frozen=True, slots=True)
class Bind:
    """Start `placements` of `workload` (tasks not yet running)."""

    workload: str
    placements: tuple[TaskPlacement, ...]
    reason: str

    def __init__(self, workload: str, placements: tuple[TaskPlacement, ...], reason: str) -> None:
        # Written out for the compiled core, as `TaskPlacement.__init__` is.
        object.__setattr__(self, "workload", workload)
        object.__setattr__(self, "placements", placements)
        object.__setattr__(self, "reason", reason)


@dataclass(frozen=True, slots=True)
class Evict:
    """Stop tasks of `workload`. `task_indices` empty means the whole workload."""

    workload: str
    cause: EvictionCause
    reason: str
    task_indices: tuple[int, ...] = ()
    for_workload: str | None = None


@dataclass(frozen=True, slots=True)
class Move:
    """Move one running task to a new placement."""

    workload: str
    cause: MoveCause
    source: TaskPlacement
    target: TaskPlacement
    reason: str


Decision = Bind | Evict | Move


@dataclass(frozen=True, slots=True)
class ProjectShare:
    """A project's standing this cycle, after the decisions (shown to users)."""

    name: str
    quota: Resources
    fair_share: Resources
    holding: Resources
    demand: Resources


@dataclass(frozen=True, slots=True)
class CycleResult:
    decisions: tuple[Decision, ...]
    pending_reasons: dict[str, str]
    """Why each workload still pending after this cycle waits, in plain words."""
    projects: tuple[ProjectShare, ...]
