"""The simulated cluster: simulated time, workload states, and core decisions carried out.

Both simulated-time drivers run on it: `gpupool what-if` (a scenario's timeline, checked against
its expectations) and `gpupool simulate` (a trace, measured). What differs between them is a
`ClusterSettings` value or a hook (`ClusterHooks`), never a copy of this loop.

Time. Time jumps to the next queued event (`EventQueue`); an instant is processed in this order:

  1. the instant's events, by kind: grace periods that end (the workload goes back to pending
     if preemptible, else fails with its eviction's reason), then completions (running ->
     succeeded), each kind in submission order; then the driver's events in the order pushed
     (submissions, timeline events); then cycle wake-ups. A completion or stop whose workload
     changed since it was queued (a later `generation`) is stale and ignored;
  2. cycles, if anything changed (or at every instant, `cycle_every_instant`) and the last ran at
     least `min_cycle_interval_s` ago, else a wake-up is queued for when they may: `cycle` on a
     snapshot of the pending and running workloads, its decisions applied, until a cycle decides
     nothing; then `confirming_cycles` more must decide nothing too (else ping-pong). At most
     `max_cycles_per_instant` cycles;
  3. `on_instant_end`.

Decisions. Bind: running from now (a running workload only gains tasks); its completion is
queued at `now + duration_s - progress_s`. Evict of some tasks: those placements go. A whole
Evict: the workload keeps the progress of its last checkpoint (`checkpoint_interval_s`; 1 = all
of it) and loses the rest (`lost_gpu_milli_s`); with a grace period it is stopping until the
period ends, else at once pending (preemptible) or failed. Move: that task's placement is
replaced; with `restart_on_consolidation` a consolidation move restarts the workload from its
last checkpoint (counted in `restarts`). A decision about a workload that is not pending or
running (or a move of a task that does not run) is a `CoreContractError`.

States. Every change of a workload's state goes through `SimulatedCluster._change_state`, which
names a lifecycle event and lets the core's tables (`gpupool.core.lifecycle`) decide the new
status: a change they refuse raises `TransitionError` (a bug in the driver or the cluster; a
decision about a workload outside the core's snapshot is a `CoreContractError` before that).
Submit, bind, succeed, suspend, resume, delete (then remove) are the table's events; an evicted
workload is at once at the eviction's end (`PREEMPT`: pending, or `FAIL` if it is not
preemptible) while its tasks stop, printed stopping, until the tasks' `END` after the grace
period; a restart after a consolidation move changes no state (the table's `PREEMPT` then
`BIND`, which end where they began). The printed `State` follows from the status (see
`records.printed_state`).

Stopping, succeeded, failed, suspended and deleted workloads are not in the core's snapshot: a
stopping workload's devices may be bound again at once, as an executor starts the new task only
once the old one is gone. The snapshot is kept incrementally (only changed workloads are
replaced). No clock and no randomness: the same inputs give the same run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gpupool.core.decisions import Bind, CycleResult, Decision, Evict, Move, MoveCause
from gpupool.core.lifecycle import FINISHED, TaskEvent, WorkloadEvent
from gpupool.core.model import Node, Project, Snapshot, Workload
from gpupool.simcluster.events import Event, EventKind, EventQueue
from gpupool.simcluster.hooks import (
    ClusterHooks,
    ClusterSettings,
    CoreContractError,
    CycleFunction,
    QuietHooks,
    RunEnd,
    SettleResult,
    SettleStatus,
)
from gpupool.simcluster.records import (
    ACTIVE,
    State,
    WorkloadRecord,
    checkpointed_s,
    held_gpu_milli,
    status_after,
)
from gpupool.simcluster.words import describe_decision

__all__ = ["SimulatedCluster"]


class SimulatedCluster:
    """Nodes, projects and workload records in simulated time; see the module docstring."""

    def __init__(
        self,
        nodes: Sequence[Node],
        projects: Sequence[Project],
        settings: ClusterSettings,
        cycle: CycleFunction,
    ) -> None:
        self._nodes = tuple(nodes)
        self._projects: dict[str, Project] = {p.name: p for p in projects}
        self._project_tuple = tuple(self._projects.values())
        self._settings = settings
        self._cycle = cycle
        self._memory = {n.name: n.gpu_memory_mib for n in self._nodes}
        self._records: dict[str, WorkloadRecord] = {}
        self._index: dict[str, int] = {}
        self._active: dict[str, Workload] = {}
        """Pending and running workloads, as the core sees them, in record order."""
        self._queue = EventQueue()
        self._now_s = 0
        self._dirty = False
        self._wakeup_queued = False
        self._last_cycle_s: int | None = None
        self.last_result: CycleResult | None = None
        self.cycles = 0
        self.instants = 0

    # --- what drivers read ---------------------------------------------------------------------

    @property
    def settings(self) -> ClusterSettings:
        return self._settings

    @property
    def records(self) -> Mapping[str, WorkloadRecord]:
        """Every workload added, in the order added."""
        return self._records

    @property
    def projects(self) -> tuple[Project, ...]:
        return self._project_tuple

    def project(self, name: str) -> Project:
        return self._projects[name]

    def snapshot(self, now_s: int) -> Snapshot:
        return Snapshot(
            nodes=self._nodes,
            projects=self._project_tuple,
            workloads=tuple(self._active.values()),
            now_s=now_s,
            settings=self._settings.scheduler,
        )

    # --- what drivers change -------------------------------------------------------------------

    def add(self, workload: Workload, duration_s: int | None, state: State) -> None:
        """A workload enters, pending or running (on `workload.placements` since
        `started_at_s`): submitted, then bound."""
        if state not in ACTIVE:
            raise ValueError(f"a workload enters pending or running, not {state.value}")
        self._index.setdefault(workload.name, len(self._index))
        record = self._change_state(
            WorkloadRecord(workload, None, duration_s), WorkloadEvent.SUBMIT
        )
        if state is State.RUNNING:
            started = workload.started_at_s
            record = self._change_state(
                record,
                WorkloadEvent.BIND,
                run_started_s=started,
                generation=1,
                first_start_s=started,
            )
            self._queue_completion(record, self._now_s)

    def set_project(self, project: Project) -> None:
        """Replace a project (by name), e.g. with a new quota."""
        self._projects[project.name] = project
        self._project_tuple = tuple(self._projects.values())

    def stop(
        self, name: str, event: WorkloadEvent, now_s: int, reason: str | None
    ) -> WorkloadRecord:
        """`name` stops running (or waiting) by `event` (e.g. `SUSPEND`, `RESUME`, `SUCCEED`,
        `DELETE`); all its progress is kept. `TransitionError` if the table refuses it."""
        record = self._records[name]
        return self._stop(record, event, now_s, progress_s=record.run_time_s(now_s), reason=reason)

    def apply(
        self, decisions: Iterable[Decision], now_s: int, hooks: ClusterHooks | None = None
    ) -> None:
        """Carry out `decisions` at `now_s` outside the loop (one cycle's, by hand)."""
        self._apply(decisions, now_s, hooks or QuietHooks())

    def push_driver_event(self, time_s: int, *, workload: str = "", ref: int = 0) -> None:
        self._queue.push(time_s, EventKind.DRIVER, workload, ref=ref)

    def push_wakeup(self, time_s: int) -> None:
        """Make `time_s` an instant even if nothing else happens then."""
        self._queue.push(time_s, EventKind.CYCLE)

    # --- the loop ------------------------------------------------------------------------------

    def run(
        self, hooks: ClusterHooks, *, until_s: int | None = None, max_instants: int | None = None
    ) -> RunEnd:
        """Process instants until no event is left, `until_s` or `max_instants`."""
        done = 0
        while True:
            if self._settings.skip_stale_instants:
                self._drop_stale()
            upcoming = self._queue.next_time_s()
            if upcoming is None:
                return RunEnd(self._now_s)
            if until_s is not None and upcoming > until_s:
                self._now_s = until_s
                return RunEnd(until_s)
            if max_instants is not None and done >= max_instants:
                return RunEnd(upcoming, exhausted=True)
            self._now_s = upcoming
            self._instant(upcoming, self._queue.pop_instant(), hooks)
            done += 1

    def _drop_stale(self) -> None:
        while (event := self._queue.peek()) is not None and not self._live(event):
            self._queue.drop_next()

    def _live(self, event: Event) -> bool:
        if event.kind is EventKind.STOP:
            return self._current(event, State.STOPPING) is not None
        if event.kind is EventKind.COMPLETE:
            return self._current(event, State.RUNNING) is not None
        return True

    def _current(self, event: Event, state: State) -> WorkloadRecord | None:
        """The record `event` is about, if it is still in `state` and of the event's run."""
        record = self._records.get(event.workload)
        if record is None or record.state is not state or record.generation != event.generation:
            return None
        return record

    def _event_order(self, event: Event) -> tuple[int, int]:
        if event.kind <= EventKind.COMPLETE:
            return (event.kind, self._index.get(event.workload, -1))
        return (event.kind, event.seq)

    def _instant(self, now: int, events: list[Event], hooks: ClusterHooks) -> None:
        self.instants += 1
        changed = False
        events.sort(key=self._event_order)
        for event in events:
            if event.kind is EventKind.STOP:
                changed |= self._finish_stop(event, now, hooks)
            elif event.kind is EventKind.COMPLETE:
                changed |= self._complete(event, now, hooks)
            elif event.kind is EventKind.DRIVER:
                changed |= hooks.on_driver_event(event, now)
            else:
                self._wakeup_queued = False
        self._dirty |= changed
        snapshot: Snapshot | None = None
        if self._dirty or self._settings.cycle_every_instant:
            interval = self._settings.min_cycle_interval_s
            if self._last_cycle_s is None or now >= self._last_cycle_s + interval:
                settled = self._settle(now, hooks)
                hooks.on_settled(now, settled)
                snapshot = settled.snapshot
                changed = True  # fair shares are new even when nothing was decided
                self._dirty = False
            elif not self._wakeup_queued:
                self._queue.push(self._last_cycle_s + interval, EventKind.CYCLE)
                self._wakeup_queued = True
        hooks.on_instant_end(now, snapshot, changed)

    def _settle(self, now: int, hooks: ClusterHooks) -> SettleResult:
        """Cycles until a fixed point, then `confirming_cycles` that must decide nothing."""
        self._last_cycle_s = now
        quiet = 0
        for _ in range(self._settings.max_cycles_per_instant):
            snapshot = self.snapshot(now)
            result = self._cycle(snapshot)
            self.cycles += 1
            self.last_result = result
            if not result.decisions:
                quiet += 1
                if quiet > self._settings.confirming_cycles:
                    return SettleResult(SettleStatus.SETTLED, snapshot)
                continue
            self._apply(result.decisions, now, hooks)
            if quiet:
                return SettleResult(
                    SettleStatus.PING_PONG, self.snapshot(now), quiet, result.decisions
                )
        return SettleResult(SettleStatus.UNSETTLED, self.snapshot(now))

    # --- events --------------------------------------------------------------------------------

    def _finish_stop(self, event: Event, now: int, hooks: ClusterHooks) -> bool:
        record = self._current(event, State.STOPPING)
        if record is None:
            return False
        # Its status is already pending (preempted) or failed: only its tasks end now.
        reason = None if record.workload.is_preemptible else record.reason
        stopped = self._stop(
            record, TaskEvent.END, now, progress_s=record.progress_s, reason=reason
        )
        hooks.on_stop_finished(stopped, now)
        return True

    def _complete(self, event: Event, now: int, hooks: ClusterHooks) -> bool:
        record = self._current(event, State.RUNNING)
        if record is None:
            return False
        done = self._stop(
            record,
            WorkloadEvent.SUCCEED,
            now,
            progress_s=record.run_time_s(now),
            reason=f"completed after {record.duration_s} s",
        )
        hooks.on_completed(done, now)
        return True

    def _queue_completion(self, record: WorkloadRecord, now: int) -> None:
        completes = record.completes_at_s()
        if completes is None:
            return
        at = max(completes, now)
        until = self._settings.completions_until_s
        if until is None or at <= until:
            self._queue.push(at, EventKind.COMPLETE, record.name, record.generation)

    # --- decisions -----------------------------------------------------------------------------

    def _apply(self, decisions: Iterable[Decision], now: int, hooks: ClusterHooks) -> None:
        for decision in decisions:
            hooks.on_decision(now, self.cycles, decision)
            record = self._records.get(decision.workload)
            if record is None or record.state not in ACTIVE:
                state = "unknown" if record is None else record.state.value
                raise CoreContractError(
                    f"the core decided {describe_decision(decision)} at t={now}, but that "
                    f"workload is {state}, not pending or running"
                )
            if isinstance(decision, Bind):
                self._bind(record, decision, now)
            elif isinstance(decision, Evict):
                self._evict(record, decision, now)
            elif isinstance(decision, Move):
                self._move(record, decision, now)

    def _bind(self, record: WorkloadRecord, bind: Bind, now: int) -> None:
        placements = tuple(
            sorted(record.workload.placements + bind.placements, key=lambda p: p.task_index)
        )
        if record.state is State.RUNNING:  # more tasks: a bind that keeps it running
            self._change_state(
                record,
                WorkloadEvent.BIND,
                workload=replace(record.workload, placements=placements),
            )
            return
        record = self._change_state(
            record,
            WorkloadEvent.BIND,
            workload=replace(record.workload, placements=placements, started_at_s=now),
            run_started_s=now,
            generation=record.generation + 1,
            first_start_s=now if record.first_start_s is None else record.first_start_s,
            reason=None,
        )
        self._queue_completion(record, now)

    def _evict(self, record: WorkloadRecord, evict: Evict, now: int) -> None:
        settings = self._settings
        if record.state is not State.RUNNING:
            raise CoreContractError(
                f"the core decided {describe_decision(evict)} at t={now}, but that workload is "
                f"{record.state.value}, not running"
            )
        if settings.count_partial_evictions:
            record = replace(record, evictions=record.evictions + 1)
        if evict.task_indices:
            gone = set(evict.task_indices)
            kept = tuple(p for p in record.workload.placements if p.task_index not in gone)
            if kept:
                self._store(replace(record, workload=replace(record.workload, placements=kept)))
                return
        if not settings.count_partial_evictions:
            record = replace(record, evictions=record.evictions + 1)
        progress = record.run_time_s(now)
        kept_s = checkpointed_s(progress, settings.checkpoint_interval_s)
        record = self._lose(record, progress - kept_s)
        why = f"evicted at t={now}: {evict.reason}"
        event = WorkloadEvent.PREEMPT if record.workload.is_preemptible else WorkloadEvent.FAIL
        if settings.grace_period_s > 0:  # at the eviction's end at once; its tasks stop
            ends_s = now + settings.grace_period_s
            record = self._stop(
                record, event, now, progress_s=kept_s, reason=why, stops_at_s=ends_s
            )
            self._queue.push(ends_s, EventKind.STOP, record.name, record.generation)
        else:
            if event is WorkloadEvent.FAIL:
                why += settings.not_preemptible_words
            self._stop(record, event, now, progress_s=kept_s, reason=why)

    def _move(self, record: WorkloadRecord, move: Move, now: int) -> None:
        index = move.target.task_index
        if all(p.task_index != index for p in record.workload.placements):
            raise CoreContractError(
                f"the core moved task {index} of {record.name} at t={now}, which is not running"
            )
        placements = tuple(
            move.target if p.task_index == index else p for p in record.workload.placements
        )
        record = replace(record, workload=replace(record.workload, placements=placements))
        if move.cause is not MoveCause.CONSOLIDATE or not self._settings.restart_on_consolidation:
            self._store(record)
            return
        progress = record.run_time_s(now)
        kept_s = checkpointed_s(progress, self._settings.checkpoint_interval_s)
        # A restart is the table's PREEMPT then BIND: running again, no state changes.
        record = replace(
            self._lose(record, progress - kept_s),
            progress_s=kept_s,
            run_started_s=now,
            generation=record.generation + 1,
            restarts=record.restarts + 1,
        )
        self._store(record)
        self._queue_completion(record, now)

    def _lose(self, record: WorkloadRecord, lost_s: int) -> WorkloadRecord:
        if lost_s == 0:
            return record
        held = held_gpu_milli(record.workload, self._memory)
        return replace(record, lost_gpu_milli_s=record.lost_gpu_milli_s + lost_s * held)

    # --- state changes -------------------------------------------------------------------------

    def _stop(
        self,
        record: WorkloadRecord,
        event: WorkloadEvent | TaskEvent,
        now: int,
        *,
        progress_s: int,
        reason: str | None,
        stops_at_s: int | None = None,
    ) -> WorkloadRecord:
        """`record` stops running (or waiting) by `event`, with `progress_s` kept; with
        `stops_at_s`, its tasks stop until then."""
        status = status_after(record.status, record.tasks, event)  # `_change_state` checks it
        finished = stops_at_s is None and status in FINISHED
        return self._change_state(
            record,
            event,
            workload=replace(record.workload, placements=(), started_at_s=None),
            progress_s=progress_s,
            run_started_s=None,
            generation=record.generation + 1,
            stops_at_s=stops_at_s,
            finish_s=now if finished else None,
            reason=reason,
        )

    def _change_state(
        self, record: WorkloadRecord, event: WorkloadEvent | TaskEvent, **changes: Any
    ) -> WorkloadRecord:
        """The one place a workload's state changes: `event`'s new status is the lifecycle
        table's (`TransitionError` if it refuses, and nothing changes)."""
        status = status_after(record.status, record.tasks, event)
        changed = replace(record, status=status, **changes)
        self._store(changed)
        return changed

    def _store(self, record: WorkloadRecord) -> None:
        name = record.name
        self._records[name] = record
        if record.state not in ACTIVE:
            self._active.pop(name, None)
        elif (
            name in self._active
            or not self._active
            or self._index[name] > self._index[next(reversed(self._active))]
        ):
            self._active[name] = record.workload
        else:  # back in line (resumed, stopped): keep the snapshot in record order
            self._active = {n: r.workload for n, r in self._records.items() if r.state in ACTIVE}
