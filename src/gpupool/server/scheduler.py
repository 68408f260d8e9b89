"""The scheduling loop: snapshot from the database -> the core -> decisions persisted -> executor.

One iteration (`run_once`):

1. **Exits.** Launches the executor reports as ended are written down (task done; workload
   completed, failed, requeued or removed), then acknowledged to the executor.
2. **Cycle.** A snapshot is read in one transaction and `run_cycle` decides. The decisions are
   written in one transaction, each only if its workload's `version` is still the one decided on
   (a user may have suspended or deleted it meanwhile): a bind adds task rows in state
   `starting` with a new launch id; an eviction or move marks tasks `stopping`.
3. **Dispatch.** Stopping tasks are stopped; starting tasks are started once nothing that is
   stopping still holds their devices or their task, then marked `running`.

Every step is safe to repeat: the database says what should happen, launch ids make starts
idempotent, and exits stay reported until acknowledged. So after a crash anywhere, the next
iteration finishes the work and starts nothing twice.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Row, Table, delete, insert, or_, select, update
from sqlalchemy import bindparam as _bind
from sqlalchemy.orm import Session, load_only, sessionmaker

from gpupool.api.schemas import TaskState, WorkloadStatus
from gpupool.clock import Clock
from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import Bind, CycleResult, Evict, EvictionCause, Move, ProjectShare
from gpupool.core.model import MILLI_PER_GPU, SchedulerSettings, TaskPlacement, Workload
from gpupool.executors.base import DiscoversWorkloads, Executor, Exit, Launch, NodeInventory, Stop
from gpupool.gcpause import collector_paused
from gpupool.server import eventlog, external, history, isolation, quarantine, usage
from gpupool.server.db import (
    NodeRow,
    ProjectRow,
    TaskRow,
    WorkloadRow,
    physical_devices,
)
from gpupool.server.dbfaults import Backoff, is_outage
from gpupool.server.metrics import ServerMetrics
from gpupool.server.quarantine import describe
from gpupool.server.rowcheck import launch_problem
from gpupool.server.services import cluster
from gpupool.server.snapshot import (
    SCHEDULED,
    BuiltSnapshot,
    WorkloadKey,
    build_snapshot,
    gpu_request,
)

TASKS = cast(Table, TaskRow.__table__)
WORKLOADS = cast(Table, WorkloadRow.__table__)

_LIVE = (TaskState.STARTING.value, TaskState.RUNNING.value, TaskState.STOPPING.value)
_ACTIVE = (TaskState.STARTING.value, TaskState.RUNNING.value)
_MAX_REST_S = 0.5
_PREEMPTED = "_preempted"
"""Marks a workload change that counts one more preemption."""
COMPLETED = "completed"
"""A task's reason once it has ended by itself with exit code 0."""


_AFTER_END_COLUMNS = load_only(
    WorkloadRow.name,
    WorkloadRow.status,
    WorkloadRow.version,
    WorkloadRow.tasks,
    WorkloadRow.submitted_at,
    WorkloadRow.project_id,
)


@dataclass(frozen=True, slots=True)
class CycleInfo:
    at_s: float
    duration_s: float
    decisions: int


class SchedulingLoop:
    """Runs `run_once` on a thread: at least every `interval_s`, sooner when woken."""

    def __init__(
        self,
        writer: sessionmaker[Session],
        executor: Executor,
        clock: Clock,
        settings: SchedulerSettings,
        metrics: ServerMetrics,
        interval_s: float = 1.0,
        min_gap_s: float = 0.05,
        on_error: Callable[[BaseException], None] | None = None,
        reader: sessionmaker[Session] | None = None,
        is_leader: Callable[[], bool] | None = None,
        announce: Callable[[str], None] | None = None,
    ) -> None:
        self._writer = writer
        self._reader = reader or writer
        self._executor = executor
        self._clock = clock
        self._settings = settings
        self._metrics = metrics
        self._interval_s = interval_s
        self._min_gap_s = min_gap_s
        self._on_error = on_error
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stops_sent: set[str] = set()
        self.shares: dict[str, ProjectShare] = {}
        self.last_cycle: CycleInfo | None = None
        self.iterations = 0
        self._registered: tuple[NodeInventory, ...] = ()
        self._is_leader = is_leader
        self._leading = is_leader is None
        self.history = history.HistoryRecorder()
        self._facts: history.CycleFacts | None = None
        self._announce = announce or (lambda message: None)
        self._start_failures: dict[str, tuple[int, float]] = {}
        self._backoff = Backoff()
        self.last_iteration_s: float | None = None
        """When (clock time) the last iteration completed: what `/ready` looks at."""
        self.last_error: str | None = None
        """The last iteration's error, None once one succeeds."""
        """With leader election, iterations run only while this replica leads; each time it
        starts leading it first takes over (nodes, recovery) as at a start."""

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._is_leader is None:
            self.take_over()
        self._thread = threading.Thread(target=self._run, name="gpupool-scheduler", daemon=True)
        self._thread.start()

    def take_over(self) -> None:
        """What a scheduler does before its first iteration: its nodes, and its tasks that
        the executor no longer knows (lost while nobody scheduled)."""
        self._stops_sent.clear()
        self._registered = tuple(self._executor.inventory())
        self.register_nodes(self._registered)
        self.recover()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            if not self._thread.is_alive():
                try:
                    self._write_history(everything=True)
                except Exception as error:  # shutting down: report it, lose one minute
                    if self._on_error is not None:
                        self._on_error(error)

    def _write_history(self, everything: bool = False) -> None:
        """Write the history minutes that are over (`everything`: the current one too, at
        shutdown). On a failure they stay in memory and are written with the next ones."""
        now = self._clock.now_s()
        minutes = self.history.unwritten() if everything else self.history.complete(now)
        if not minutes:
            return
        with self.history.writing(minutes), self._writer.begin() as session:
            history.write(session, minutes, now)

    def _may_run(self) -> bool:
        """Without leader election: always. With it: while leading, after taking over."""
        if self._is_leader is None:
            return True
        leading = self._is_leader()
        if leading and not self._leading:
            self.take_over()
        self._leading = leading
        return leading

    def wake(self) -> None:
        self._wake.set()

    @property
    def thread_alive(self) -> bool | None:
        """None when the loop was never started (an API-only server)."""
        return None if self._thread is None else self._thread.is_alive()

    @property
    def standing_by(self) -> bool:
        """With leader election, while another replica schedules."""
        return self._is_leader is not None and not self._leading

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                if not self._may_run():
                    self._stop.wait(0.2)
                    continue
                self.run_once()
                if self._backoff.failures:
                    self._announce(
                        f"the database answers again: resumed after {self._backoff.failures} "
                        "failed iteration(s)"
                    )
                self._backoff.reset()
                self.last_error = None
            except Exception as error:  # the loop must outlive one bad iteration
                self.last_error = describe(error)
                if self._on_error is not None:
                    self._on_error(error)
                if is_outage(error):  # the database is away: wait longer each time, capped
                    self._stop.wait(self._backoff.next_s())
                    continue
            took = time.monotonic() - began
            # Rest as long as the iteration took (up to a bound): under a burst of submissions
            # the loop gets about half of the interpreter and each cycle takes a bigger batch,
            # while the work that arrived meanwhile waits at most `_MAX_REST_S` more.
            self._stop.wait(min(_MAX_REST_S, max(self._min_gap_s, took)))
            self._wake.wait(timeout=max(0.0, self._interval_s - took))
            self._wake.clear()

    # -- one iteration -----------------------------------------------------------------------

    def run_once(self) -> None:
        self.collect_exits()
        self.follow_executor()
        self.remove_deleted()
        self.cycle()
        self.dispatch()
        self.collect_exits()
        self.record_usage()
        self.iterations += 1
        self.last_iteration_s = self._clock.now_s()

    def record_usage(self) -> None:
        """Fold the executor's device samples into the per-minute usage history (per
        workload), and record a step of the history store when one is due."""
        samples = self._executor.usage_samples()
        if samples:
            with self._writer.begin() as session:
                usage.record(session, samples, self._clock.now_s())
        self.history.observe(samples)
        now = self._clock.now_s()
        if self._facts is None or not self.history.due(now):
            return
        fresh = self.history.fresh_samples(now)
        with self._reader() as session, session.begin():
            step = history.read_step(session, now, self._facts, fresh)
        self.history.add(step)
        self._metrics.observe_use(self.history.recent())
        self._write_history()

    def follow_executor(self) -> None:
        """Nodes that came, went or changed (Kubernetes), and pods someone else created for
        gpupool: written down before the cycle reads them."""
        nodes = tuple(self._executor.inventory())
        if nodes != self._registered:
            self.register_nodes(nodes)
            self._registered = nodes
        if isinstance(self._executor, DiscoversWorkloads):
            now = self._clock.now_s()
            with self._writer.begin() as session:
                projects = session.scalars(select(ProjectRow.name)).all()
                self._executor.set_projects(projects)
                external.sync(session, self._executor.external_pods(), now)
                reasons = external.waiting_reasons(session, now)
            self._executor.set_waiting_reasons(reasons)

    def register_nodes(self, nodes: Sequence[NodeInventory]) -> None:
        """Record the executor's nodes and devices; its nodes no longer reported go down."""
        now = self._clock.now_s()
        with self._writer.begin() as session:
            known = {
                row.name: row
                for row in session.scalars(
                    select(NodeRow).where(NodeRow.executor == self._executor.name)
                )
            }
            for node in nodes:
                known.pop(node.name, None)
                cluster.register(session, node, self._executor.name, now)
            for row in known.values():
                row.state = "down"

    def recover(self) -> None:
        """After a restart: tasks the executor never heard of are lost; their workloads requeue.

        Starting tasks are left alone (dispatch starts them; a start is idempotent). A running
        or stopping task the executor does not know was lost with the executor's state.
        """
        now = self._clock.now_s()
        with self._writer.begin() as session:
            rows = session.execute(
                select(TaskRow.id, TaskRow.launch_id, TaskRow.workload_id).where(
                    TaskRow.state.in_((TaskState.RUNNING.value, TaskState.STOPPING.value))
                )
            ).all()
            known = self._executor.known([launch_id for _, launch_id, _ in rows])
            lost = [
                (task_id, workload_id)
                for task_id, launch_id, workload_id in rows
                if launch_id not in known
            ]
            for task_id, _ in lost:
                session.execute(
                    update(TaskRow)
                    .where(TaskRow.id == task_id)
                    .values(
                        state=TaskState.DONE.value,
                        finished_at=now,
                        exit_code=-1,
                        reason="lost: the executor does not know this task after a restart",
                    )
                )
            for workload_id in {workload_id for _, workload_id in lost}:
                self._after_task_end(session, workload_id, now, natural_exit=None)

    def collect_exits(self) -> None:
        exits = self._executor.exits()
        if not exits:
            return
        now = self._clock.now_s()
        by_launch = {e.launch_id: e for e in exits}
        with self._writer.begin() as session:
            rows = session.execute(
                select(TaskRow.id, TaskRow.launch_id, TaskRow.workload_id, TaskRow.state).where(
                    TaskRow.launch_id.in_(list(by_launch))
                )
            ).all()
            ended: dict[int, list[Exit]] = defaultdict(list)
            updates = []
            for task_id, launch_id, workload_id, state in rows:
                if state == TaskState.DONE.value:
                    continue
                end = by_launch[launch_id]
                updates.append(
                    {
                        "task_id": task_id,
                        "state": TaskState.DONE.value,
                        "finished_at": end.finished_at_s,
                        "exit_code": end.exit_code,
                        "reason": (
                            COMPLETED if not end.stopped and end.exit_code == 0 else end.reason
                        ),
                    }
                )
                ended[workload_id].append(end)
            if updates:
                session.connection().execute(
                    update(TASKS)
                    .where(TASKS.c.id == _bind("task_id"))
                    .values(
                        state=_bind("state"),
                        finished_at=_bind("finished_at"),
                        exit_code=_bind("exit_code"),
                        reason=_bind("reason"),
                    ),
                    updates,
                )
            for workload_id, ends in ended.items():
                natural = [e for e in ends if not e.stopped]
                failed = [e for e in natural if e.exit_code != 0]
                if failed:
                    self._after_task_end(session, workload_id, now, natural_exit=failed[0])
                elif natural:
                    self._after_task_end(session, workload_id, now, natural_exit=natural[0])
                else:
                    self._after_task_end(session, workload_id, now, natural_exit=None)
        self._executor.acknowledge(list(by_launch))
        self._stops_sent.difference_update(by_launch)

    def _after_task_end(
        self, session: Session, workload_id: int, now: float, natural_exit: Exit | None
    ) -> None:
        """Move a workload on after some of its tasks ended."""
        # Only the columns used here: a JSON column that does not parse must not stop this.
        workload = session.get(WorkloadRow, workload_id, options=[_AFTER_END_COLUMNS])
        if workload is None:
            return
        live = session.scalars(
            select(TaskRow.task_index).where(
                TaskRow.workload_id == workload_id, TaskRow.state.in_(_LIVE)
            )
        ).all()
        if natural_exit is not None and workload.status in (
            WorkloadStatus.RUNNING.value,
            WorkloadStatus.COMPLETING.value,
        ):
            if natural_exit.exit_code != 0:
                self._stop_live(session, workload_id, now, "another task of the workload failed")
                workload.status = WorkloadStatus.FAILED.value
                workload.finished_at = now
                workload.pending_reason = None
                _event(
                    session,
                    now,
                    "failed",
                    workload,
                    f"a task exited with code {natural_exit.exit_code}: {natural_exit.reason}",
                )
            elif live:
                workload.status = WorkloadStatus.COMPLETING.value
            else:
                workload.status = WorkloadStatus.COMPLETED.value
                workload.finished_at = now
                _event(session, now, "completed", workload, "all tasks finished")
            workload.version += 1
            return
        if (
            natural_exit is not None
            and natural_exit.exit_code == 0
            and not live
            and workload.status in (WorkloadStatus.PENDING.value, WorkloadStatus.SUSPENDED.value)
            and self._every_task_completed(session, workload)
        ):
            # The tasks finished by themselves just as they were asked to stop (suspended,
            # preempted, or the server died in between): the work is done, do not run it again.
            workload.status = WorkloadStatus.COMPLETED.value
            workload.finished_at = now
            workload.pending_reason = None
            workload.version += 1
            _event(
                session, now, "completed", workload,
                "all tasks finished before the stop took effect",
            )  # fmt: skip
        elif workload.status == WorkloadStatus.COMPLETING.value and not live:
            workload.status = WorkloadStatus.COMPLETED.value
            workload.finished_at = now
            workload.version += 1
            _event(session, now, "completed", workload, "all tasks finished")
        elif workload.status == WorkloadStatus.RUNNING.value and not live:
            workload.status = WorkloadStatus.PENDING.value
            workload.started_at = None
            workload.pending_reason = "its tasks ended unexpectedly; waiting to run again"
            workload.version += 1
            _event(session, now, "requeued", workload, "its tasks were lost")

    @staticmethod
    def _every_task_completed(session: Session, workload: WorkloadRow) -> bool:
        """Has each task index finished by itself with exit code 0 since the workload started?"""
        done = session.scalars(
            select(TaskRow.task_index).where(
                TaskRow.workload_id == workload.id,
                TaskRow.state == TaskState.DONE.value,
                TaskRow.reason == COMPLETED,
                TaskRow.created_at >= workload.submitted_at,
            )
        ).all()
        return set(done) >= set(range(workload.tasks))

    def remove_deleted(self) -> None:
        with self._writer.begin() as session:
            live = select(TaskRow.workload_id).where(TaskRow.state.in_(_LIVE))
            rows = session.execute(
                select(WorkloadRow.id, WorkloadRow.name, ProjectRow.name, ProjectRow.id)
                .join(ProjectRow, ProjectRow.id == WorkloadRow.project_id)
                .where(
                    WorkloadRow.status == WorkloadStatus.DELETING.value,
                    WorkloadRow.id.not_in(live),
                )
            ).all()
            if not rows:
                return
            now = self._clock.now_s()
            ids = [row[0] for row in rows]
            session.execute(delete(TaskRow).where(TaskRow.workload_id.in_(ids)))
            session.execute(delete(WorkloadRow).where(WorkloadRow.id.in_(ids)))
            session.execute(
                eventlog.INSERT,
                [
                    eventlog.event_row(
                        now,
                        "deleted",
                        "its tasks have stopped",
                        project=project,
                        project_id=project_id,
                        workload=name,
                        workload_id=workload_id,
                    )
                    for workload_id, name, project, project_id in rows
                ],
            )

    def cycle(self) -> CycleResult:
        began = time.perf_counter()
        now = self._clock.now_s()
        with self._reader() as session, session.begin():
            built = build_snapshot(session, now, self._settings)
        # A workload whose row or decisions break a step is failed; the others go on.
        with collector_paused():
            result, snapshot, culprits = isolation.run_isolated(built.snapshot, run_cycle)
        problems = dict(built.bad)
        problems.update({built.keys[name].workload_id: why for name, why in culprits.items()})
        try:
            counts = self._persist(built, result, now)
        except Exception as error:
            if is_outage(error):
                raise
            counts, failed = isolation.persist_apart(
                lambda part: self._persist(built, part, now), result
            )
            counts = defaultdict(int, counts)
            problems.update({built.keys[name].workload_id: why for name, why in failed.items()})
        if problems:
            quarantine.fail_each(self._writer, problems, now, self._announce)
        duration_s = time.perf_counter() - began
        self.shares = {share.name: share for share in result.projects}
        self.last_cycle = CycleInfo(now, duration_s, len(result.decisions))
        self._facts = history.CycleFacts.of(result, snapshot)
        capacity = sum(node.gpu_count for node in snapshot.nodes)
        self._metrics.observe_cycle(result, duration_s, float(capacity))
        for kind in ("bind", "evict", "move"):
            self._metrics.count_decisions(kind, counts[kind])
        for cause in EvictionCause:
            self._metrics.count_evictions(cause.value, counts[cause.value])
        return result

    def _persist(self, built: BuiltSnapshot, result: CycleResult, now: float) -> dict[str, int]:
        counts = {"bind": 0, "evict": 0, "move": 0} | {cause.value: 0 for cause in EvictionCause}
        touched = {d.workload for d in result.decisions}
        with self._writer.begin() as session:
            current = dict(
                session.execute(
                    select(WorkloadRow.id, WorkloadRow.version).where(
                        WorkloadRow.id.in_([built.keys[name].workload_id for name in touched])
                    )
                ).all()
            )
            fresh = {
                name
                for name in touched
                if current.get(built.keys[name].workload_id) == built.keys[name].version
            }
            by_name = {w.name: w for w in built.snapshot.workloads}
            tasks: list[dict[str, object]] = []
            events: list[dict[str, object]] = []
            changed: dict[str, dict[str, object]] = {}
            stops: list[dict[str, object]] = []
            for decision in result.decisions:
                if decision.workload not in fresh:
                    continue
                key = built.keys[decision.workload]
                if isinstance(decision, Bind):
                    counts["bind"] += 1
                    for placement in decision.placements:
                        tasks.append(_task_row(key, placement, now))
                    values = changed.setdefault(decision.workload, {})
                    values["status"] = WorkloadStatus.RUNNING.value
                    values["pending_reason"] = None
                    if not by_name[decision.workload].placements:
                        values["started_at"] = now
                    where = ", ".join(_where(p) for p in decision.placements)
                    message = f"{where}: {decision.reason}" if decision.reason else where
                    node = decision.placements[0].node if decision.placements else None
                    events.append(_event_row(now, "bound", key, message, node))
                elif isinstance(decision, Evict):
                    counts["evict"] += 1
                    counts[decision.cause.value] += 1
                    self._evict(by_name[decision.workload], key, decision, now, changed, stops)
                    events.append(_event_row(now, "evicted", key, decision.reason))
                else:
                    counts["move"] += 1
                    self._move(session, key, decision, now)
                    tasks.append(_task_row(key, decision.target, now))
                    events.append(
                        _event_row(
                            now,
                            "moved",
                            key,
                            f"{decision.cause.value}: {_where(decision.source)} -> "
                            f"{_where(decision.target)}: {decision.reason}",
                            decision.target.node,
                        )
                    )
            if tasks:
                session.execute(insert(TaskRow), tasks)
            if events:
                session.execute(eventlog.INSERT, events)
            if stops:
                session.connection().execute(
                    update(TASKS)
                    .where(
                        TASKS.c.workload_id == _bind("b_workload"),
                        TASKS.c.task_index == _bind("b_index"),
                        or_(*(TASKS.c.state == state for state in _ACTIVE)),
                    )
                    .values(
                        state=TaskState.STOPPING.value, stop_requested_at=now, reason=_bind("why")
                    ),
                    stops,
                )
            _update_workloads(session, {built.keys[n].workload_id: v for n, v in changed.items()})
            self._store_pending_reasons(session, built, result, fresh)
        return counts

    def _evict(
        self,
        workload: Workload,
        key: WorkloadKey,
        decision: Evict,
        now: float,
        changed: dict[str, dict[str, object]],
        stops: list[dict[str, object]],
    ) -> None:
        """Note the tasks to stop and the workload's new state (written in batches)."""
        indices = decision.task_indices or tuple(p.task_index for p in workload.placements)
        why = f"{decision.cause.value}: {decision.reason}"
        stops.extend(
            {"b_workload": key.workload_id, "b_index": index, "why": why} for index in indices
        )
        if decision.task_indices:
            return
        values = changed.setdefault(decision.workload, {})
        if key.external:
            # A pod cannot come back once evicted: its owner makes a new one, a new workload.
            values["status"] = WorkloadStatus.DELETING.value
            values["pending_reason"] = None
            values[_PREEMPTED] = True
        elif workload.is_preemptible:
            values["status"] = WorkloadStatus.PENDING.value
            values["started_at"] = None
            values["pending_reason"] = f"preempted ({decision.cause.value}): {decision.reason}"
            values[_PREEMPTED] = True
        else:
            values["status"] = WorkloadStatus.FAILED.value
            values["finished_at"] = now
            values["pending_reason"] = None

    def _move(self, session: Session, key: WorkloadKey, decision: Move, now: float) -> None:
        session.execute(
            update(TaskRow)
            .where(
                TaskRow.workload_id == key.workload_id,
                TaskRow.task_index == decision.source.task_index,
                TaskRow.state.in_(_ACTIVE),
            )
            .values(
                state=TaskState.STOPPING.value,
                stop_requested_at=now,
                reason=f"moved ({decision.cause.value})",
            )
        )

    def _store_pending_reasons(
        self, session: Session, built: BuiltSnapshot, result: CycleResult, fresh: set[str]
    ) -> None:
        """Write each pending workload's reason where it changed (most cycles: none)."""
        ids = [built.keys[name].workload_id for name in result.pending_reasons]
        if not ids:
            return
        stored: dict[int, str | None] = {}
        for chunk_start in range(0, len(ids), 900):
            chunk = ids[chunk_start : chunk_start + 900]
            stored.update(
                session.execute(
                    select(WorkloadRow.id, WorkloadRow.pending_reason).where(
                        WorkloadRow.id.in_(chunk),
                        WorkloadRow.status == WorkloadStatus.PENDING.value,
                    )
                ).all()
            )
        changes = [
            {"workload_id": built.keys[name].workload_id, "reason": reason}
            for name, reason in result.pending_reasons.items()
            if name not in fresh
            and built.keys[name].workload_id in stored
            and stored[built.keys[name].workload_id] != reason
        ]
        if changes:
            table = WORKLOADS
            session.connection().execute(
                update(table)
                .where(table.c.id == _bind("workload_id"))
                .values(pending_reason=_bind("reason")),
                changes,
            )

    def dispatch(self) -> None:
        """Stop what should stop, then start what may start."""
        stopping = self._stopping()
        stops = [
            Stop(launch_id, grace, reason or "stopped")
            for launch_id, _, _, _, _, _, reason, grace in stopping
            if launch_id not in self._stops_sent
        ]
        unstarted = self._end_unstarted([stop.launch_id for stop in stops])
        stops = [stop for stop in stops if stop.launch_id not in unstarted]
        if stops:
            self._executor.stop(stops)
            self._stops_sent.update(stop.launch_id for stop in stops)
            self.collect_exits()
        if stops or unstarted:
            stopping = self._stopping()
        busy_devices = {
            (node, device)
            for _, _, _, node, devices, burst, _, _ in stopping
            for device in physical_devices(devices, burst)
        }
        busy_tasks = {(workload_id, index) for _, workload_id, index, *_ in stopping}
        self._start_ready(busy_devices, busy_tasks)

    def _stopping(
        self,
    ) -> Sequence[Row[str, int, int, str, list[int], int | None, str | None, int]]:
        """Tasks asked to stop and not gone yet, with their workload's grace period."""
        with self._writer() as session, session.begin():
            return session.execute(
                select(
                    TaskRow.launch_id,
                    TaskRow.workload_id,
                    TaskRow.task_index,
                    TaskRow.node,
                    TaskRow.devices,
                    TaskRow.burst_device,
                    TaskRow.reason,
                    WorkloadRow.grace_period_s,
                )
                .join(WorkloadRow, WorkloadRow.id == TaskRow.workload_id)
                .where(TaskRow.state == TaskState.STOPPING.value)
            ).all()

    def _end_unstarted(self, launch_ids: list[str]) -> set[str]:
        """Of stopping launches, those the executor never started (stopped between bind and
        dispatch, or the server was killed in between): nothing to stop and no exit will come,
        so their tasks end here. Only this thread starts launches, so none starts meanwhile."""
        if not launch_ids:
            return set()
        unstarted = set(launch_ids) - self._executor.known(launch_ids)
        if not unstarted:
            return unstarted
        now = self._clock.now_s()
        with self._writer.begin() as session:
            rows = session.execute(
                select(TaskRow.id, TaskRow.workload_id).where(
                    TaskRow.launch_id.in_(sorted(unstarted)),
                    TaskRow.state == TaskState.STOPPING.value,
                )
            ).all()
            session.execute(
                update(TaskRow)
                .where(TaskRow.id.in_([task_id for task_id, _ in rows]))
                .values(state=TaskState.DONE.value, finished_at=now)
            )
            for workload_id in sorted({workload_id for _, workload_id in rows}):
                self._after_task_end(session, workload_id, now, natural_exit=None)
        return unstarted

    def _start_ready(
        self, busy_devices: set[tuple[str, int]], busy_tasks: set[tuple[int, int]]
    ) -> None:
        with self._writer() as session, session.begin():
            rows, problems = isolation.starting_rows(session)
            # Running tasks of workloads the snapshot leaves out (none should be: a safety net):
            # the core did not see their devices, so it may have bound others there; those
            # wait, as for stopping tasks.
            unseen = session.execute(
                select(TaskRow.node, TaskRow.devices, TaskRow.burst_device)
                .join(WorkloadRow, WorkloadRow.id == TaskRow.workload_id)
                .where(
                    TaskRow.state == TaskState.RUNNING.value,
                    WorkloadRow.status.not_in(SCHEDULED),
                )
            ).all()
        held = {
            (node, index)
            for node, indices, burst in unseen
            for index in physical_devices(indices, burst)
        }
        # Starting tasks of workloads the snapshot left out go first, and the devices they
        # take are held for the others.
        rows = sorted(rows, key=lambda row: row[1].status in SCHEDULED)
        launches: list[Launch] = []
        workload_of: dict[str, int] = {}
        for task, workload, project, device_memory_mib in rows:
            if (workload.id, task.task_index) in busy_tasks:
                continue
            devices = physical_devices(task.devices, task.burst_device)
            if any((task.node, d) in busy_devices for d in devices):
                continue
            if any((task.node, d) in held for d in devices):
                continue
            if workload.status not in SCHEDULED:
                held.update((task.node, d) for d in devices)
            try:
                problem = launch_problem(workload.command, workload.env, workload.working_dir)
                launch = None if problem else _launch(task, workload, project, device_memory_mib)
            except Exception as error:
                problem, launch = describe(error), None
            if launch is None:
                problems[workload.id] = f"task {task.task_index} cannot be started: {problem}"
                continue
            workload_of[launch.launch_id] = workload.id
            launches.append(launch)
        if launches:
            try:
                self._executor.start(launches)
            except Exception as error:
                if is_outage(error):
                    raise
                launches, given_up = isolation.start_apart(
                    self._executor, launches, self._start_failures, self._clock.now_s()
                )
                problems.update({workload_of[launch]: why for launch, why in given_up.items()})
        now = self._clock.now_s()
        if problems:
            quarantine.fail_each(self._writer, problems, now, self._announce)
        if not launches:
            return
        started = [{"launch": launch.launch_id, "now": now} for launch in launches]
        with self._writer.begin() as session:
            table = TASKS
            session.connection().execute(
                update(table)
                .where(table.c.launch_id == _bind("launch"))
                .where(table.c.state == TaskState.STARTING.value)
                .values(state=TaskState.RUNNING.value, started_at=_bind("now")),
                started,
            )

    def _stop_live(self, session: Session, workload_id: int, now: float, reason: str) -> None:
        session.execute(
            update(TaskRow)
            .where(TaskRow.workload_id == workload_id, TaskRow.state.in_(_ACTIVE))
            .values(state=TaskState.STOPPING.value, stop_requested_at=now, reason=reason)
        )


def _where(placement: TaskPlacement) -> str:
    devices = ",".join(str(d) for d in placement.physical_devices)
    return f"task {placement.task_index} on {placement.node} [{devices}]"


def _update_workloads(session: Session, changes: dict[int, dict[str, object]]) -> None:
    """Apply per-workload column changes with one executemany per set of columns, each
    bumping `version` (and `preemptions` where `_PREEMPTED` is set)."""
    groups: dict[tuple[str, ...], list[dict[str, object]]] = defaultdict(list)
    for workload_id, values in changes.items():
        columns = tuple(sorted(values))
        params = {f"v_{c}": v for c, v in values.items() if c != _PREEMPTED}
        params["b_workload"] = workload_id
        groups[columns].append(params)
    for columns, rows in groups.items():
        assignments: dict[str, object] = {"version": WORKLOADS.c.version + 1}
        for column in columns:
            if column == _PREEMPTED:
                assignments["preemptions"] = WORKLOADS.c.preemptions + 1
            else:
                assignments[column] = _bind(f"v_{column}")
        session.connection().execute(
            update(WORKLOADS).where(WORKLOADS.c.id == _bind("b_workload")).values(assignments),
            rows,
        )


def _task_row(key: WorkloadKey, placement: TaskPlacement, now: float) -> dict[str, object]:
    return {
        "launch_id": uuid.uuid4().hex,
        "workload_id": key.workload_id,
        "task_index": placement.task_index,
        "node": placement.node,
        "devices": list(placement.devices),
        "burst_device": placement.burst_device,
        "state": TaskState.STARTING.value,
        "created_at": now,
    }


def _event_row(
    now: float, kind: str, key: WorkloadKey, message: str, node: str | None = None
) -> dict[str, object]:
    return eventlog.event_row(
        now,
        kind,
        message,
        project=key.project,
        project_id=key.project_id,
        workload=key.name,
        workload_id=key.workload_id,
        node=node,
    )


def _event(session: Session, now: float, kind: str, workload: WorkloadRow, message: str) -> None:
    eventlog.add(
        session,
        now,
        kind,
        message,
        project=workload.project.name,
        project_id=workload.project_id,
        workload=workload.name,
        workload_id=workload.id,
    )


def _launch(task: TaskRow, workload: WorkloadRow, project: str, device_memory_mib: int) -> Launch:
    request = gpu_request(workload.gpu_kind, workload.gpu_amount, workload.gpu_limit_milli)
    per_device_milli = min(MILLI_PER_GPU, request.milli_on(device_memory_mib))
    return Launch(
        launch_id=task.launch_id,
        project=project,
        workload=workload.name,
        task_index=task.task_index,
        node=task.node,
        devices=physical_devices(task.devices, task.burst_device),
        gpu_milli=per_device_milli,
        gpu_memory_mib=request.memory_mib_on(device_memory_mib),
        command=tuple(workload.command),
        env=tuple(sorted(workload.env.items())),
        grace_period_s=workload.grace_period_s,
        duration_s=workload.duration_s,
        burst_memory_mib=(
            request.limit_milli * device_memory_mib // MILLI_PER_GPU
            if request.is_burstable and request.limit_milli is not None
            else None
        ),
        working_dir=workload.working_dir,
        image=workload.image,
        world_size=workload.tasks,
        cpu_milli=workload.cpu_milli,
        memory_mib=workload.memory_mib,
        external_ref=(
            external.ref_pod(workload.pods[task.task_index])
            if workload.pods is not None and task.task_index < len(workload.pods)
            else None
        ),
        workload_type=workload.type,
    )
