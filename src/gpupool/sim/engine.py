"""A discrete-event simulation of the scheduling core over a workload, in simulated seconds.

Events sit in a heap ordered by `(time_s, kind, seq)`: at one instant completions come before
submissions before cycle wake-ups, and events of one kind in the order they were pushed (`seq`).
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

The snapshot is updated incrementally: nodes and projects are fixed tuples, workloads live in a
dict and only those that change are replaced (`dataclasses.replace`). The engine has no clock
and no randomness: the same inputs give the same result.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import Bind, CycleResult, Decision, Evict, Move, MoveCause
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


class EventKind(enum.IntEnum):
    """Order of events at one instant: capacity is freed before new work is queued."""

    COMPLETE = 0
    SUBMIT = 1
    CYCLE = 2


@dataclass(frozen=True, slots=True, order=True)
class Event:
    time_s: int
    kind: EventKind
    seq: int
    workload: str = field(default="", compare=False)
    generation: int = field(default=0, compare=False)
    """For a completion: the run it belongs to; a later run makes it stale."""


class EventQueue:
    """A heap of events; `seq` is the push order and breaks every tie."""

    def __init__(self) -> None:
        self._heap: list[Event] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, time_s: int, kind: EventKind, workload: str = "", generation: int = 0) -> None:
        heapq.heappush(self._heap, Event(time_s, kind, self._seq, workload, generation))
        self._seq += 1

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


class OutcomeState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


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


def checkpointed_s(progress_s: int, interval_s: int) -> int:
    """Progress kept after a stop: the last checkpoint (none when `interval_s` is 0)."""
    return 0 if interval_s <= 0 else progress_s // interval_s * interval_s


def held_gpu_milli(workload: Workload, memory_mib_by_node: dict[str, int]) -> int:
    """GPU charged for `workload`'s running tasks, in milli-GPU."""
    return sum(workload.gpu.milli_on(memory_mib_by_node[p.node]) for p in workload.placements)


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
    return engine.run()


# --- the engine ----------------------------------------------------------------------------------


class _State(enum.Enum):
    PENDING = enum.auto()
    RUNNING = enum.auto()
    SUCCEEDED = enum.auto()
    FAILED = enum.auto()


@dataclass(frozen=True, slots=True)
class _Job:
    """The engine's bookkeeping for one workload; `workload` is the core's view of it.

    `progress_s` is the progress the current run started from (a checkpoint); the current run
    started at `run_started_s`.
    """

    spec: SimWorkload
    workload: Workload
    state: _State = _State.PENDING
    progress_s: int = 0
    run_started_s: int | None = None
    generation: int = 0
    first_start_s: int | None = None
    finish_s: int | None = None
    evictions: int = 0
    restarts: int = 0
    lost_gpu_milli_s: int = 0
    reason: str | None = None


class _Engine:
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
        self._cycle = cycle
        self._fragmentation = fragmentation
        self._observer = observer
        self._progress = progress
        self._memory = {n.name: n.gpu_memory_mib for n in nodes}
        self._default_memory_mib = nodes[0].gpu_memory_mib if nodes else 81920
        parents = {p.parent for p in projects if p.parent is not None}
        self._leaves = tuple(p.name for p in projects if p.name not in parents)
        self._leaf_index = {name: i for i, name in enumerate(self._leaves)}
        self._specs: dict[str, SimWorkload] = {}
        self._queue = EventQueue()
        for workload in workloads:
            if workload.project not in self._leaf_index:
                raise ValueError(
                    f"workload {workload.name!r}: project {workload.project!r} is not a leaf "
                    f"project of the cluster ({', '.join(self._leaves)})"
                )
            if workload.name in self._specs:
                raise ValueError(f"workload name {workload.name!r} appears twice")
            self._specs[workload.name] = workload
            self._queue.push(workload.submit_s, EventKind.SUBMIT, workload.name)
        self._jobs: dict[str, _Job] = {}
        self._active: dict[str, Workload] = {}
        """Pending and running workloads, as the core sees them, in submission order."""
        self._submitted = 0
        self._cycles = 0
        self._instants = 0
        self._unsettled = 0
        self._dirty = False
        self._wakeup_queued = False
        self._last_cycle_s: int | None = None
        self._last_result: CycleResult | None = None
        self._samples: list[Sample] = []

    def run(self) -> SimResult:
        until = self._settings.until_s
        now = 0
        self._sample(0, self._snapshot(0))
        while self._queue:
            upcoming = self._queue.next_time_s()
            assert upcoming is not None
            if until is not None and upcoming > until:
                now = until
                break
            now = upcoming
            self._instant(now, self._queue.pop_instant())
        return SimResult(
            projects=self._leaves,
            quota_milli=tuple(
                p.quota.gpu_milli for p in self._projects if p.name in self._leaf_index
            ),
            capacity_milli=sum(n.gpu_count for n in self._nodes) * MILLI_PER_GPU,
            samples=tuple(self._samples),
            outcomes=tuple(self._outcome(job) for job in self._jobs.values()),
            end_s=now,
            instants=self._instants,
            cycles=self._cycles,
            unsettled_instants=self._unsettled,
        )

    # --- one instant ---------------------------------------------------------------------------

    def _instant(self, now: int, events: list[Event]) -> None:
        self._instants += 1
        changed = False
        for event in events:
            if event.kind is EventKind.COMPLETE:
                changed |= self._complete(event, now)
            elif event.kind is EventKind.SUBMIT:
                self._submit(self._specs[event.workload])
                changed = True
            else:
                self._wakeup_queued = False
        self._dirty |= changed
        snapshot: Snapshot | None = None
        if self._dirty:
            interval = self._settings.min_cycle_interval_s
            if self._last_cycle_s is None or now >= self._last_cycle_s + interval:
                snapshot = self._settle(now)
                changed = True  # fair shares are new even when nothing was decided
                self._dirty = False
            elif not self._wakeup_queued:
                self._queue.push(self._last_cycle_s + interval, EventKind.CYCLE)
                self._wakeup_queued = True
        if changed:
            self._sample(now, snapshot or self._snapshot(now))
        if self._progress is not None:
            self._progress(now)

    def _snapshot(self, now: int) -> Snapshot:
        return Snapshot(
            nodes=self._nodes,
            projects=self._projects,
            workloads=tuple(self._active.values()),
            now_s=now,
            settings=self._settings.scheduler,
        )

    def _settle(self, now: int) -> Snapshot:
        """Cycles until one decides nothing; the snapshot of the cluster after them."""
        self._last_cycle_s = now
        for _ in range(self._settings.max_cycles_per_instant):
            snapshot = self._snapshot(now)
            with collector_paused():
                result = self._cycle(snapshot)
            self._cycles += 1
            self._last_result = result
            if not result.decisions:
                return snapshot
            self._apply(result.decisions, now)
        self._unsettled += 1
        return self._snapshot(now)

    # --- events --------------------------------------------------------------------------------

    def _submit(self, spec: SimWorkload) -> None:
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
        self._jobs[spec.name] = _Job(spec, workload)
        self._active[spec.name] = workload

    def _complete(self, event: Event, now: int) -> bool:
        job = self._jobs[event.workload]
        if job.state is not _State.RUNNING or job.generation != event.generation:
            return False
        self._stop(job, _State.SUCCEEDED, now, progress_s=job.spec.duration_s)
        return True

    # --- decisions -----------------------------------------------------------------------------

    def _apply(self, decisions: tuple[Decision, ...], now: int) -> None:
        for decision in decisions:
            job = self._jobs.get(decision.workload)
            if job is None or decision.workload not in self._active:
                raise SimulationError(
                    f"the core decided about {decision.workload!r} at t={now}, which is neither "
                    "pending nor running"
                )
            if isinstance(decision, Bind):
                self._bind(job, decision, now)
            elif isinstance(decision, Evict):
                self._evict(job, decision, now)
            else:
                self._move(job, decision, now)

    def _set(self, job: _Job) -> None:
        self._jobs[job.spec.name] = job
        if job.state in (_State.PENDING, _State.RUNNING):
            self._active[job.spec.name] = job.workload
        else:
            self._active.pop(job.spec.name, None)

    def _bind(self, job: _Job, bind: Bind, now: int) -> None:
        placements = tuple(
            sorted(job.workload.placements + bind.placements, key=lambda p: p.task_index)
        )
        if job.state is _State.RUNNING:
            self._set(replace(job, workload=replace(job.workload, placements=placements)))
            return
        generation = job.generation + 1
        self._set(
            replace(
                job,
                workload=replace(job.workload, placements=placements, started_at_s=now),
                state=_State.RUNNING,
                run_started_s=now,
                generation=generation,
                first_start_s=now if job.first_start_s is None else job.first_start_s,
                reason=None,
            )
        )
        self._queue.push(
            now + job.spec.duration_s - job.progress_s,
            EventKind.COMPLETE,
            job.spec.name,
            generation,
        )

    def _evict(self, job: _Job, evict: Evict, now: int) -> None:
        if job.state is not _State.RUNNING:
            raise SimulationError(f"the core evicted {job.spec.name!r} at t={now}; not running")
        if evict.task_indices:
            gone = set(evict.task_indices)
            kept = tuple(p for p in job.workload.placements if p.task_index not in gone)
            if kept:
                self._set(replace(job, workload=replace(job.workload, placements=kept)))
                return
        job = replace(job, evictions=job.evictions + 1)
        progress = self._progress_s(job, now)
        kept_s = checkpointed_s(progress, self._settings.checkpoint_interval_s)
        job = self._lose(job, progress - kept_s)
        why = f"evicted at t={now}: {evict.reason}"
        if job.workload.is_preemptible:
            self._stop(job, _State.PENDING, now, progress_s=kept_s, reason=why)
        else:
            self._stop(
                job, _State.FAILED, now, progress_s=kept_s, reason=f"{why} (not preemptible)"
            )

    def _move(self, job: _Job, move: Move, now: int) -> None:
        index = move.target.task_index
        if all(p.task_index != index for p in job.workload.placements):
            raise SimulationError(
                f"the core moved task {index} of {job.spec.name!r} at t={now}; it is not running"
            )
        placements = tuple(
            move.target if p.task_index == index else p for p in job.workload.placements
        )
        job = replace(job, workload=replace(job.workload, placements=placements))
        if move.cause is not MoveCause.CONSOLIDATE:
            self._set(job)
            return
        progress = self._progress_s(job, now)
        kept_s = checkpointed_s(progress, self._settings.checkpoint_interval_s)
        job = self._lose(job, progress - kept_s)
        generation = job.generation + 1
        self._set(
            replace(
                job,
                progress_s=kept_s,
                run_started_s=now,
                generation=generation,
                restarts=job.restarts + 1,
            )
        )
        self._queue.push(
            now + job.spec.duration_s - kept_s, EventKind.COMPLETE, job.spec.name, generation
        )

    def _progress_s(self, job: _Job, now: int) -> int:
        started = job.run_started_s if job.run_started_s is not None else now
        return job.progress_s + now - started

    def _lose(self, job: _Job, lost_s: int) -> _Job:
        held = held_gpu_milli(job.workload, self._memory)
        return replace(job, lost_gpu_milli_s=job.lost_gpu_milli_s + lost_s * held)

    def _stop(
        self, job: _Job, state: _State, now: int, *, progress_s: int, reason: str | None = None
    ) -> None:
        finished = state in (_State.SUCCEEDED, _State.FAILED)
        self._set(
            replace(
                job,
                workload=replace(job.workload, placements=(), started_at_s=None),
                state=state,
                progress_s=progress_s,
                run_started_s=None,
                generation=job.generation + 1,
                finish_s=now if finished else None,
                reason=reason,
            )
        )

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
        shares: dict[str, int] = {}
        if self._last_result is not None:
            shares = {p.name: p.fair_share.gpu_milli for p in self._last_result.projects}
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

    def _outcome(self, job: _Job) -> WorkloadOutcome:
        spec = job.spec
        reason = job.reason
        if job.state is _State.PENDING and self._last_result is not None:
            reason = self._last_result.pending_reasons.get(spec.name, reason)
        return WorkloadOutcome(
            name=spec.name,
            project=spec.project,
            type=spec.type.value,
            submit_s=spec.submit_s,
            gpu_milli=spec.tasks * spec.gpu.milli_on(self._default_memory_mib),
            duration_s=spec.duration_s,
            state=OutcomeState(job.state.name.lower()),
            first_start_s=job.first_start_s,
            finish_s=job.finish_s,
            evictions=job.evictions,
            restarts=job.restarts,
            lost_gpu_milli_s=job.lost_gpu_milli_s,
            reason=reason,
        )
