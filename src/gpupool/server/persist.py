"""Writing one cycle's decisions, in one transaction, each only if its workload is unchanged.

A decision counts only if its workload's `version` is still the one the snapshot read (a user
may have suspended or deleted it meanwhile) and the lifecycle table (`gpupool.core.lifecycle`)
allows its change from the status the snapshot read; otherwise it is left out, as a stale one
is. Every status and task state written here comes from that table. A bind adds task rows in
state `starting` with a new launch id; an eviction or a move marks tasks `stopping` (a move
also adds the new task); each decision adds an event, and pending workloads get their reason
where it changed (`ReasonLedger`: where only its numbers changed, within a minute). Rows
are written in batches: one executemany per kind of change.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import Iterable
from typing import Final, cast

from sqlalchemy import Table, insert, or_, select, update
from sqlalchemy import bindparam as _bind
from sqlalchemy.orm import Session, sessionmaker

from gpupool.api.schemas import WorkloadStatus
from gpupool.core.decisions import Bind, CycleResult, Decision, Evict, EvictionCause, Move
from gpupool.core.lifecycle import NEW, TASK, WORKLOAD, TaskEvent, TransitionError, WorkloadEvent
from gpupool.core.model import TaskPlacement, Workload
from gpupool.server import eventlog
from gpupool.server.db import TaskRow, WorkloadRow
from gpupool.server.snapshot import ACTIVE_TASKS, BuiltSnapshot, WorkloadKey

TASKS = cast(Table, TaskRow.__table__)
WORKLOADS = cast(Table, WorkloadRow.__table__)

_PREEMPTED = "_preempted"
"""Marks a workload change that counts one more preemption."""
_STOPPING = TASK.target(TaskEvent.STOP).value
_STARTING = TASK.after(NEW, TaskEvent.BIND).value
_BIND, _PREEMPT = WorkloadEvent.BIND, WorkloadEvent.PREEMPT
_DELETE, _FAIL = WorkloadEvent.DELETE, WorkloadEvent.FAIL
"""By module name: in Python 3.11 reading an enum member from its class costs ten times a
global, and `_statuses` reads one per decision."""


class ReasonLedger:
    """When each waiting workload's reason was last written, kept by the loop between cycles.

    Most pending reasons quote the cluster as the cycle saw it ("178.65 GPU idle", "largest
    free part of a device is 0.45 GPU"), so nine in ten of them read differently every cycle:
    written each time, that was 70,000 row updates a cycle at 10,000 nodes. A reason is written
    at once when what it says changes; when only its numbers do, once its workload's share of
    `refresh_s` has passed since it was last written (`refresh_after_s`: the numbers a user
    reads are at most `refresh_s` old)."""

    __slots__ = ("due_at", "refresh_s", "written")

    def __init__(self, refresh_s: float = 60.0) -> None:
        self.refresh_s = refresh_s
        self.due_at: dict[int, float] = {}
        """Workload id -> when its reason's numbers may be written again (clock seconds: when
        it was last written, plus `refresh_after_s`)."""
        self.written: dict[int, str] = {}
        """Workload id -> the reason the last `write` wrote (`SnapshotCache.note_reasons`)."""

    def refresh_after_s(self, workload_id: int) -> float:
        """How long a workload's reason keeps its numbers: between half of `refresh_s` and all
        of it, spread by workload id. The reasons of work that began waiting together (a burst
        of submissions, a restart) are then refreshed over half of `refresh_s`, and drift
        further apart each time, rather than all in one cycle that rewrites, and whose next
        snapshot reads again, tens of thousands of rows."""
        return self.refresh_s * (0.5 + 0.5 * ((workload_id * _GOLDEN_RATIO) % 1.0))


_GOLDEN_RATIO: Final = 0.6180339887498949
"""Consecutive ids times this, modulo 1, fall evenly over [0, 1) (`refresh_after_s`)."""


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def write(
    writer: sessionmaker[Session],
    built: BuiltSnapshot,
    result: CycleResult,
    now: float,
    ledger: ReasonLedger | None = None,
) -> dict[str, int]:
    """Write the decisions of `result` on `built`; returns how many of each kind were written
    (`bind`, `evict`, `move`, and evictions by cause). Without `ledger` every changed reason is
    written."""
    counts = {"bind": 0, "evict": 0, "move": 0} | {cause.value: 0 for cause in EvictionCause}
    touched = {d.workload for d in result.decisions}
    with writer.begin() as session:
        # Locked until this transaction ends (PostgreSQL; SQLite's writers are serialised
        # already): a delete or suspend that commits between this read and the writes below
        # would otherwise be overwritten, its workload left with tasks no one stops.
        current = dict(
            session.execute(
                select(WorkloadRow.id, WorkloadRow.version)
                .where(WorkloadRow.id.in_([built.keys[name].workload_id for name in touched]))
                .with_for_update()
            ).all()
        )
        by_name = {w.name: w for w in built.snapshot.workloads}
        fresh = {
            name
            for name in touched
            if current.get(built.keys[name].workload_id) == built.keys[name].version
        }
        statuses, refused = _statuses(result.decisions, built, by_name)
        fresh -= refused
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
                values["status"] = statuses[decision.workload]
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
                _evict(by_name[decision.workload], key, decision, now, changed, stops, statuses)
                events.append(_event_row(now, "evicted", key, decision.reason))
            else:
                counts["move"] += 1
                _move(session, key, decision, now)
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
                    or_(*(TASKS.c.state == state for state in ACTIVE_TASKS)),
                )
                .values(state=_STOPPING, stop_requested_at=now, reason=_bind("why")),
                stops,
            )
        _update_workloads(session, {built.keys[n].workload_id: v for n, v in changed.items()})
        _store_pending_reasons(session, built, result, fresh, now, ledger)
    return counts


def _evict(
    workload: Workload,
    key: WorkloadKey,
    decision: Evict,
    now: float,
    changed: dict[str, dict[str, object]],
    stops: list[dict[str, object]],
    statuses: dict[str, str],
) -> None:
    """Note the tasks to stop and the workload's new state (written in batches); `statuses`:
    each workload's status after its decisions, from the lifecycle table."""
    indices = decision.task_indices or tuple(p.task_index for p in workload.placements)
    why = f"{decision.cause.value}: {decision.reason}"
    stops.extend({"b_workload": key.workload_id, "b_index": index, "why": why} for index in indices)
    if decision.task_indices:
        return
    values = changed.setdefault(decision.workload, {})
    event = _eviction_event(workload, key)
    values["status"] = statuses[decision.workload]
    if event is _DELETE:
        # A pod cannot come back once evicted: its owner makes a new one, a new workload.
        values["pending_reason"] = None
        values[_PREEMPTED] = True
    elif event is _PREEMPT:
        values["started_at"] = None
        values["pending_reason"] = f"preempted ({decision.cause.value}): {decision.reason}"
        values[_PREEMPTED] = True
    else:
        values["finished_at"] = now
        values["pending_reason"] = None


def _eviction_event(workload: Workload, key: WorkloadKey) -> WorkloadEvent:
    """What evicting the whole workload does to it: an external pod is gone (its owner makes
    a new one), a preemptible workload waits again, any other fails."""
    if key.external:
        return _DELETE
    if workload.is_preemptible:
        return _PREEMPT
    return _FAIL


def _statuses(
    decisions: Iterable[Decision], built: BuiltSnapshot, by_name: dict[str, Workload]
) -> tuple[dict[str, str], set[str]]:
    """Each decided workload's status after its decisions, in order, from the status the
    snapshot read, and the workloads with a decision the lifecycle table refuses (a core that
    broke its contract): none of theirs is written, as for a stale one, so that one bad
    decision cannot stop every cycle's writes."""
    statuses: dict[str, str] = {}
    refused: set[str] = set()
    for decision in decisions:
        key = built.keys[decision.workload]
        if isinstance(decision, Bind):
            event = _BIND
        elif isinstance(decision, Evict) and not decision.task_indices:
            event = _eviction_event(by_name[decision.workload], key)
        else:
            continue  # a move or a partial eviction stops tasks only
        status = statuses.get(decision.workload, key.status)
        try:
            statuses[decision.workload] = WORKLOAD.after(status, event).value
        except TransitionError:
            refused.add(decision.workload)
    return statuses, refused


def _move(session: Session, key: WorkloadKey, decision: Move, now: float) -> None:
    session.execute(
        update(TaskRow)
        .where(
            TaskRow.workload_id == key.workload_id,
            TaskRow.task_index == decision.source.task_index,
            TaskRow.state.in_(ACTIVE_TASKS),
        )
        .values(
            state=_STOPPING,
            stop_requested_at=now,
            reason=f"moved ({decision.cause.value})",
        )
    )


def _store_pending_reasons(
    session: Session,
    built: BuiltSnapshot,
    result: CycleResult,
    fresh: set[str],
    now: float,
    ledger: ReasonLedger | None,
) -> None:
    """Write each pending workload's reason where it changed since the snapshot read it (most
    cycles: few), only while the workload is still pending."""
    stored = built.reasons
    keys = built.keys
    skeletons: dict[str, str] = {}
    due_at = ledger.due_at if ledger is not None else {}
    changes: list[dict[str, object]] = []
    for name, reason in result.pending_reasons.items():
        if name in fresh or name not in stored:
            continue  # decided this cycle, or not pending when read
        before = stored[name]
        if before == reason:
            continue
        workload_id = keys[name].workload_id
        if before is not None:
            due = due_at.get(workload_id)
            if (
                due is not None
                and now < due
                and _skeleton(before, skeletons) == _skeleton(reason, skeletons)
            ):
                continue  # only its numbers changed, and they were written recently
        changes.append({"workload_id": workload_id, "reason": reason})
    if changes:
        session.connection().execute(
            update(WORKLOADS)
            .where(
                WORKLOADS.c.id == _bind("workload_id"),
                WORKLOADS.c.status == WorkloadStatus.PENDING.value,
            )
            .values(pending_reason=_bind("reason")),
            changes,
        )
    if ledger is not None:
        ledger.written = {
            cast(int, change["workload_id"]): cast(str, change["reason"]) for change in changes
        }
        for workload_id in ledger.written:
            due_at[workload_id] = now + ledger.refresh_after_s(workload_id)
        if len(due_at) > 2 * len(stored) + 1024:  # forget the workloads no longer waiting
            waiting = {keys[name].workload_id for name in stored}
            ledger.due_at = {w: at for w, at in due_at.items() if w in waiting}


def _skeleton(reason: str, known: dict[str, str]) -> str:
    """`reason` with its numbers masked: what it says, not how much (memoized per text: a long
    queue's reasons are a few texts)."""
    found = known.get(reason)
    if found is None:
        found = known[reason] = _NUMBER.sub("#", reason)
    return found


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
        "state": _STARTING,
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
