"""A loaded scenario: core model objects plus the timeline and expectations, all checked.

This is what `loader` produces and `runner` consumes. Unlike the pydantic schema it holds no
raw user input: GPU amounts are milli-GPU, names are known to exist, and every event and
expectation remembers the line it came from so that reports can point at it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gpupool.core.model import Node, Project, SchedulerSettings, Workload


@dataclass(frozen=True, slots=True)
class WorkloadSetup:
    """A workload as the scenario introduces it.

    `workload` carries `submit_seq`, and for `running_on` workloads their placements and
    `started_at_s`. `duration_s` of `None` means it runs until something stops it.
    """

    workload: Workload
    duration_s: int | None
    line: int


@dataclass(frozen=True, slots=True)
class ShareExpectation:
    """Expected fair share of a project; `None` fields are not compared."""

    gpu_milli: int | None = None
    cpu_milli: int | None = None
    memory_mib: int | None = None


@dataclass(frozen=True, slots=True)
class Expectations:
    """What should hold at a moment (an `expect` event) or at the end. `None` = not checked."""

    line: int
    running: tuple[str, ...] | None = None
    pending: tuple[str, ...] | None = None
    evicted: tuple[str, ...] | None = None
    not_evicted: tuple[str, ...] | None = None
    count_running: int | None = None
    count_pending: int | None = None
    count_evicted: int | None = None
    placements: tuple[tuple[str, tuple[str, ...]], ...] = ()
    same_device: tuple[tuple[str, ...], ...] = ()
    different_devices: tuple[tuple[str, ...], ...] = ()
    fair_share: tuple[tuple[str, ShareExpectation], ...] = ()
    key_lines: tuple[tuple[str, int], ...] = ()
    """Line of each expectation key (`running`, `count`, ...), for precise failure reports."""

    def line_of(self, key: str) -> int:
        return dict(self.key_lines).get(key, self.line)


class Lifecycle(enum.Enum):
    """User actions on one workload, as timeline events."""

    COMPLETE = "complete"
    DELETE = "delete"
    SUSPEND = "suspend"
    RESUME = "resume"


@dataclass(frozen=True, slots=True)
class Submit:
    setup: WorkloadSetup


@dataclass(frozen=True, slots=True)
class LifecycleAction:
    action: Lifecycle
    workload: str


@dataclass(frozen=True, slots=True)
class SetQuota:
    """Change a project's quota; `None` fields keep their current value."""

    project: str
    gpu_milli: int | None = None
    cpu_milli: int | None = None
    memory_mib: int | None = None


Action = Submit | LifecycleAction | SetQuota | Expectations


@dataclass(frozen=True, slots=True)
class Event:
    at_s: int
    action: Action
    line: int


@dataclass(frozen=True, slots=True)
class Scenario:
    path: str
    name: str
    settings: SchedulerSettings
    grace_period_s: int
    nodes: tuple[Node, ...]
    projects: tuple[Project, ...]
    workloads: tuple[WorkloadSetup, ...]
    """The initial workloads, in submission order (`submit_seq`)."""
    events: tuple[Event, ...]
    """The timeline, sorted by time; events at the same time keep their file order."""
    expect: Expectations | None
