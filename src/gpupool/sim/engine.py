"""A discrete-event simulation of the scheduling core over a workload, in simulated seconds.

Events sit in a heap ordered by `(time_s, kind, seq)`: at one instant completions come before
submissions before cycle wake-ups; submissions in the order they were pushed (`seq`).
Each instant, in this order:

  1. every event of the instant is processed: a completion ends its workload (succeeded) and
     frees its GPUs; a submission adds a pending workload;
  2. if anything changed and the last cycles ran at least `min_cycle_interval_s` ago, cycles
     run: `run_cycle` on a snapshot of the pending and running workloads, its decisions applied,
     until a cycle decides nothing (at most `max_cycles_per_instant`). Otherwise a cycle
     wake-up is queued for the first instant cycles may run again; events in between queue;
  3. a `Sample` is recorded if allocation, utilization, fair shares, the queue or
     fragmentation changed (the samples are step functions).

Decisions take effect at once (zero grace period). Bind: running from now; the completion is
queued at `now + duration_s - progress_s`. Evict: the workload loses the progress made since its
last checkpoint (every `checkpoint_interval_s` seconds of its own running; 0 = never) and, if
preemptible, waits again, resuming from the checkpoint when bound again; a non-preemptible one
fails, as in the what-if runner. Move: a consolidation move restarts the workload elsewhere from
its last checkpoint (it loses the same progress, but is not counted as preempted); node-level
spread and pack moves are live and lose nothing. A stale completion (its workload was evicted
or restarted since) is recognised by its run `generation` and ignored.

The instants, decisions and bookkeeping are those of the one simulated cluster,
`gpupool.simcluster`, under the simulator's settings (no grace period, the checkpoint interval,
consolidation moves restart, only whole evictions counted, cycles only where something changed);
this module turns a trace into its submissions and its run into samples and outcomes. No clock
and no randomness: the same inputs give the same result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import CycleResult, Decision
from gpupool.core.model import (
    MILLI_PER_GPU,
    Node,
    Project,
    SchedulerSettings,
    Snapshot,
    Workload,
)
from gpupool.gcpause import collector_paused
from gpupool.sim.errors import SimulationError
from gpupool.sim.workload import SimWorkload
from gpupool.simcluster import (
    ClusterSettings,
    CoreContractError,
    Event,
    EventKind,
    EventQueue,
    SettleResult,
    SettleStatus,
    SimulatedCluster,
    State,
    WorkloadRecord,
    checkpointed_s,
    held_gpu_milli,
)

__all__ = [
    "CycleFunction",
    "EngineSettings",
    "Event",
    "EventKind",
    "EventQueue",
    "FragmentationFunction",
    "InstantObserver",
    "OutcomeState",
    "ProgressFunction",
    "Sample",
    "SimResult",
    "WorkloadOutcome",
    "checkpointed_s",
    "held_gpu_milli",
    "run_simulation",
]

CycleFunction = Callable[[Snapshot], CycleResult]
FragmentationFunction = Callable[[Snapshot], tuple[int, int]]
"""(fragmented milli-GPU, idle milli-GPU) of the cluster in a snapshot."""
ProgressFunction = Callable[[int], None]
"""Told the simulated time reached, once per instant."""


class InstantObserver(Protocol):
    """Sees the cluster as it stands at the end of every instant (tests check invariants here)."""

    def __call__(self, snapshot: Snapshot) -> None: ...


@dataclass(frozen=True, slots=True)
class EngineSettings:
    checkpoint_interval_s: int = 1800
    """A workload checkpoints every this many seconds of its own progress; 0 = never."""
    min_cycle_interval_s: int = 0
    """Cycles run at most this often; 0 = at every instant where something changed."""
    max_cycles_per_instant: int = 50
    until_s: int | None = None
    """Stop here (work still running stays running); None = when no event is left."""
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)

    def __post_init__(self) -> None:
        if self.checkpoint_interval_s < 0 or self.min_cycle_interval_s < 0:
            raise ValueError("checkpoint_interval_s and min_cycle_interval_s must be >= 0")
        if self.max_cycles_per_instant < 1:
            raise ValueError("max_cycles_per_instant must be at least 1")

    def cluster_settings(self) -> ClusterSettings:
        """The simulated cluster as the simulator runs it."""
        return ClusterSettings(
            scheduler=self.scheduler,
            grace_period_s=0,
            checkpoint_interval_s=self.checkpoint_interval_s,
            restart_on_consolidation=True,
            count_partial_evictions=False,
            not_preemptible_words=" (not preemptible)",
            max_cycles_per_instant=self.max_cycles_per_instant,
            confirming_cycles=0,
            min_cycle_interval_s=self.min_cycle_interval_s,
            cycle_every_instant=False,
            completions_until_s=None,
            skip_stale_instants=False,
        )


OutcomeState = State
"""A workload's state at the end: the simulated cluster's states. With no grace period and no
user actions, a simulated workload ends pending, running, succeeded or failed."""


@dataclass(frozen=True, slots=True)
class WorkloadOutcome:
    """What happened to one workload. `lost_gpu_milli_s`: work redone after evictions/restarts."""

    name: str
    project: str
    type: str
    submit_s: int
    gpu_milli: int
    """Its whole request (all tasks), in milli-GPU."""
    duration_s: int
    state: OutcomeState
    first_start_s: int | None
    finish_s: int | None
    """When it succeeded or failed."""
    evictions: int
    restarts: int
    """Consolidation moves, each a restart from the last checkpoint."""
    lost_gpu_milli_s: int
    reason: str | None = None
    """Why it failed, or why it still waited at the end."""

    @property
    def queueing_delay_s(self) -> int | None:
        return None if self.first_start_s is None else self.first_start_s - self.submit_s

    @property
    def completion_time_s(self) -> int | None:
        if self.state is not OutcomeState.SUCCEEDED or self.finish_s is None:
            return None
        return self.finish_s - self.submit_s


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster from `time_s` until the next sample; per-project tuples follow `projects`."""

    time_s: int
    allocated_milli: tuple[int, ...]
    utilized_milli: tuple[int, ...]
    """Allocated milli-GPU times each running workload's mean utilization."""
    fair_share_milli: tuple[int, ...]
    """From the last cycle run (stale while cycles are held back by the min interval)."""
    pending: tuple[int, ...]
    """Workloads waiting."""
    fragmented_milli: int = 0
    idle_milli: int = 0


@dataclass(frozen=True, slots=True)
class SimResult:
    projects: tuple[str, ...]
    """The leaf projects, in cluster order."""
    quota_milli: tuple[int, ...]
    capacity_milli: int
    samples: tuple[Sample, ...]
    outcomes: tuple[WorkloadOutcome, ...]
    """In submission order."""
    end_s: int
    instants: int
    cycles: int
    unsettled_instants: int
    """Instants whose cycles still decided something after `max_cycles_per_instant`."""


def run_simulation(
    nodes: Sequence[Node],
    projects: Sequence[Project],
    workloads: Iterable[SimWorkload],
    settings: EngineSettings | None = None,
    *,
    cycle: CycleFunction | None = None,
    fragmentation: FragmentationFunction | None = None,
    observer: InstantObserver | None = None,
    progress: ProgressFunction | None = None,
) -> SimResult:
    """Simulate `workloads` on the cluster; ties in submit time keep the input order."""
    engine = _Engine(
        tuple(nodes),
        tuple(projects),
        sorted(workloads, key=lambda w: w.submit_s),
        settings or EngineSettings(),
        cycle or run_cycle,
        fragmentation,
        observer,
        progress,
    )
    try:
        return engine.run()
    except CoreContractError as error:
        raise SimulationError(str(error)) from error


# --- the driver ----------------------------------------------------------------------------------


def _paused(cycle: CycleFunction) -> CycleFunction:
    """`cycle` with the garbage collector paused: a cycle allocates much and frees it all."""

    def call(snapshot: Snapshot) -> CycleResult:
        with collector_paused():
            return cycle(snapshot)

    return call


class _Engine:
    """The simulator's driver: submissions in, samples and outcomes out (the cluster's hooks)."""

    def __init__(
        self,
        nodes: tuple[Node, ...],
        projects: tuple[Project, ...],
        workloads: list[SimWorkload],
        settings: EngineSettings,
        cycle: CycleFunction,
        fragmentation: FragmentationFunction | None,
        observer: InstantObserver | None,
        progress: ProgressFunction | None,
    ) -> None:
        self._nodes = nodes
        self._projects = projects
        self._settings = settings
        self._fragmentation = fragmentation
        self._observer = observer
        self._progress = progress
        self._memory = {n.name: n.gpu_memory_mib for n in nodes}
        self._default_memory_mib = nodes[0].gpu_memory_mib if nodes else 81920
        parents = {p.parent for p in projects if p.parent is not None}
        self._leaves = tuple(p.name for p in projects if p.name not in parents)
        self._leaf_index = {name: i for i, name in enumerate(self._leaves)}
        self._cluster = SimulatedCluster(
            nodes, projects, settings.cluster_settings(), _paused(cycle)
        )
        self._specs: dict[str, SimWorkload] = {}
        for workload in workloads:
            if workload.project not in self._leaf_index:
                raise ValueError(
                    f"workload {workload.name!r}: project {workload.project!r} is not a leaf "
                    f"project of the cluster ({', '.join(self._leaves)})"
                )
            if workload.name in self._specs:
                raise ValueError(f"workload name {workload.name!r} appears twice")
            self._specs[workload.name] = workload
            self._cluster.push_driver_event(workload.submit_s, workload=workload.name)
        self._submitted = 0
        self._unsettled = 0
        self._samples: list[Sample] = []

    def run(self) -> SimResult:
        self._sample(0, self._cluster.snapshot(0))
        end = self._cluster.run(self, until_s=self._settings.until_s)
        return SimResult(
            projects=self._leaves,
            quota_milli=tuple(
                p.quota.gpu_milli for p in self._projects if p.name in self._leaf_index
            ),
            capacity_milli=sum(n.gpu_count for n in self._nodes) * MILLI_PER_GPU,
            samples=tuple(self._samples),
            outcomes=tuple(self._outcome(r) for r in self._cluster.records.values()),
            end_s=end.end_s,
            instants=self._cluster.instants,
            cycles=self._cluster.cycles,
            unsettled_instants=self._unsettled,
        )

    # --- the hooks the simulated cluster calls -------------------------------------------------

    def on_driver_event(self, event: Event, now_s: int) -> bool:
        spec = self._specs[event.workload]
        workload = Workload(
            name=spec.name,
            project=spec.project,
            type=spec.type,
            gpu=spec.gpu,
            tasks=spec.tasks,
            cpu_milli=spec.cpu_milli,
            memory_mib=spec.memory_mib,
            submit_seq=self._submitted,
        )
        self._submitted += 1
        self._cluster.add(workload, spec.duration_s, State.PENDING)
        return True

    def on_decision(self, now_s: int, cycle: int, decision: Decision) -> None:
        return None

    def on_stop_finished(self, record: WorkloadRecord, now_s: int) -> None:
        return None  # no grace period: evictions stop at once

    def on_completed(self, record: WorkloadRecord, now_s: int) -> None:
        return None

    def on_settled(self, now_s: int, result: SettleResult) -> None:
        if result.status is SettleStatus.UNSETTLED:
            self._unsettled += 1

    def on_instant_end(self, now_s: int, snapshot: Snapshot | None, changed: bool) -> None:
        if changed:
            self._sample(now_s, snapshot or self._cluster.snapshot(now_s))
        if self._progress is not None:
            self._progress(now_s)

    # --- results -------------------------------------------------------------------------------

    def _sample(self, now: int, snapshot: Snapshot) -> None:
        count = len(self._leaves)
        allocated = [0] * count
        utilized = [0] * count
        pending = [0] * count
        for workload in snapshot.workloads:
            index = self._leaf_index[workload.project]
            if not workload.placements:
                pending[index] += 1
                continue
            held = held_gpu_milli(workload, self._memory)
            allocated[index] += held
            utilized[index] += held * self._specs[workload.name].mean_gpu_util_permille
        last = self._cluster.last_result
        shares: dict[str, int] = {}
        if last is not None:
            shares = {p.name: p.fair_share.gpu_milli for p in last.projects}
        fragmented, idle = (0, 0) if self._fragmentation is None else self._fragmentation(snapshot)
        sample = Sample(
            time_s=now,
            allocated_milli=tuple(allocated),
            utilized_milli=tuple(u // 1000 for u in utilized),
            fair_share_milli=tuple(shares.get(name, 0) for name in self._leaves),
            pending=tuple(pending),
            fragmented_milli=fragmented,
            idle_milli=idle,
        )
        if self._observer is not None:
            self._observer(snapshot)
        if self._samples and self._samples[-1].time_s == now:
            self._samples.pop()
        if self._samples and replace(self._samples[-1], time_s=now) == sample:
            return
        self._samples.append(sample)

    def _outcome(self, record: WorkloadRecord) -> WorkloadOutcome:
        spec = self._specs[record.name]
        reason = record.reason
        last = self._cluster.last_result
        if record.state is State.PENDING and last is not None:
            reason = last.pending_reasons.get(spec.name, reason)
        elif record.state is State.SUCCEEDED:
            reason = None  # the outcome's reason says why it failed or waits, nothing else
        return WorkloadOutcome(
            name=spec.name,
            project=spec.project,
            type=spec.type.value,
            submit_s=spec.submit_s,
            gpu_milli=spec.tasks * spec.gpu.milli_on(self._default_memory_mib),
            duration_s=spec.duration_s,
            state=record.state,
            first_start_s=record.first_start_s,
            finish_s=record.finish_s,
            evictions=record.evictions,
            restarts=record.restarts,
            lost_gpu_milli_s=record.lost_gpu_milli_s,
            reason=reason,
        )
