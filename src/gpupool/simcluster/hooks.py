"""What a driver of the simulated cluster sees: its settings, the hooks it implements, outcomes.

`ClusterHooks` is the seam: the cluster calls it at each step of an instant; what-if records a
timeline and checks expectations there, the simulator samples metrics. `QuietHooks` does nothing
(tests, and drivers that only want the end state).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from gpupool.core.decisions import CycleResult, Decision
from gpupool.core.model import SchedulerSettings, Snapshot
from gpupool.simcluster.events import Event
from gpupool.simcluster.records import WorkloadRecord

__all__ = [
    "ClusterHooks",
    "ClusterSettings",
    "CoreContractError",
    "CycleFunction",
    "QuietHooks",
    "RunEnd",
    "SettleResult",
    "SettleStatus",
]

CycleFunction = Callable[[Snapshot], CycleResult]


class CoreContractError(RuntimeError):
    """The core returned a decision the cluster cannot apply (a bug in the core, not the input)."""


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """How the simulated cluster behaves; what-if and the simulator differ only here."""

    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    grace_period_s: int = 0
    """An evicted workload stops this long after the eviction (stopping meanwhile); 0 = at once."""
    checkpoint_interval_s: int = 1
    """Progress kept on an eviction or restart: the last multiple of this. 1 = every simulated
    second, so nothing is lost (what-if: time run before an eviction counts); 0 = never."""
    restart_on_consolidation: bool = False
    """A consolidation move restarts the workload from its last checkpoint (the simulator);
    otherwise moves are live."""
    count_partial_evictions: bool = True
    """An Evict of some tasks counts as an eviction (what-if), not only a whole one."""
    not_preemptible_words: str = " (not preemptible)"
    """Appended to the eviction reason of a non-preemptible workload that fails at once."""
    max_cycles_per_instant: int = 50
    confirming_cycles: int = 0
    """Cycles after the fixed point that must decide nothing too (what-if: 5, ping-pong check)."""
    min_cycle_interval_s: int = 0
    """Cycles run at most this often; 0 = at every instant where something changed."""
    cycle_every_instant: bool = False
    """Cycles run at every instant (what-if), not only where something changed."""
    completions_until_s: int | None = None
    """Completions after this are not simulated (what-if: the last timeline event)."""
    skip_stale_instants: bool = False
    """An instant holding only stale completions or stops is skipped (what-if), not counted."""

    def __post_init__(self) -> None:
        if (
            self.checkpoint_interval_s < 0
            or self.min_cycle_interval_s < 0
            or self.grace_period_s < 0
            or self.confirming_cycles < 0
        ):
            raise ValueError(
                "checkpoint_interval_s, min_cycle_interval_s, grace_period_s and "
                "confirming_cycles must be >= 0"
            )
        if self.max_cycles_per_instant < 1:
            raise ValueError("max_cycles_per_instant must be at least 1")


class SettleStatus(enum.Enum):
    SETTLED = enum.auto()
    """A cycle decided nothing (and so did the confirming cycles after it)."""
    PING_PONG = enum.auto()
    """A confirming cycle decided something after a fixed point."""
    UNSETTLED = enum.auto()
    """Every one of `max_cycles_per_instant` cycles decided something."""


@dataclass(frozen=True, slots=True)
class SettleResult:
    status: SettleStatus
    snapshot: Snapshot
    """The cluster after the cycles (settled: the snapshot the last quiet cycle saw)."""
    quiet_cycles: int = 0
    """Ping-pong: the quiet cycles before the one that decided again."""
    decisions: tuple[Decision, ...] = ()
    """Ping-pong: what that cycle decided."""


@dataclass(frozen=True, slots=True)
class RunEnd:
    end_s: int
    exhausted: bool = False
    """The instant bound was reached with events still queued (`end_s`: the next one)."""


class ClusterHooks(Protocol):
    """What a driver observes and adds; called by `SimulatedCluster.run`, in instant order."""

    def on_driver_event(self, event: Event, now_s: int) -> bool:
        """The driver's own event is due; True if it changed the cluster."""
        ...

    def on_decision(self, now_s: int, cycle: int, decision: Decision) -> None:
        """A core decision, before it is applied (`cycle`: numbered in the run, from 1)."""
        ...

    def on_stop_finished(self, record: WorkloadRecord, now_s: int) -> None:
        """A grace period ended; `record` is the workload after it (pending or failed)."""
        ...

    def on_completed(self, record: WorkloadRecord, now_s: int) -> None: ...

    def on_settled(self, now_s: int, result: SettleResult) -> None: ...

    def on_instant_end(self, now_s: int, snapshot: Snapshot | None, changed: bool) -> None:
        """The instant is over; `snapshot` is the settled cluster if cycles ran."""
        ...


class QuietHooks:
    """Hooks that observe nothing: submissions are the driver's business, so none is expected."""

    def on_driver_event(self, event: Event, now_s: int) -> bool:
        return False

    def on_decision(self, now_s: int, cycle: int, decision: Decision) -> None:
        return None

    def on_stop_finished(self, record: WorkloadRecord, now_s: int) -> None:
        return None

    def on_completed(self, record: WorkloadRecord, now_s: int) -> None:
        return None

    def on_settled(self, now_s: int, result: SettleResult) -> None:
        return None

    def on_instant_end(self, now_s: int, snapshot: Snapshot | None, changed: bool) -> None:
        return None
