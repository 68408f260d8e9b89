"""Workloads: submit, list, describe, suspend, resume, delete; their events and logs.

Every status change here is the lifecycle table's (`gpupool.core.lifecycle`): a user's request
that the table refuses from the workload's status is a 409 that says which status allows it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from gpupool.api.schemas import (
    EventOut,
    TaskOut,
    TaskState,
    WorkloadDetail,
    WorkloadIn,
    WorkloadOut,
    WorkloadStatus,
    WorkloadType,
)
from gpupool.core.lifecycle import FINISHED as FINISHED_STATUSES
from gpupool.core.lifecycle import NEW, TASK, WORKLOAD, TaskEvent, WorkloadEvent
from gpupool.core.model import GpuRequestKind
from gpupool.core.model import WorkloadType as CoreType
from gpupool.server import eventlog
from gpupool.server.auth import Principal
from gpupool.server.db import EventRow, ProjectRow, TaskRow, WorkloadRow
from gpupool.server.errors import ApiError, conflict, invalid, not_found
from gpupool.server.redact import Redact, redactor
from gpupool.server.services.feasibility import ClusterNodes

LIVE_TASK_STATES = tuple(state.value for state in TASK.sources(TaskEvent.END))
"""Starting, running, stopping: every task state but done."""
FINISHED = tuple(status.value for status in FINISHED_STATUSES)
"""Completed, failed: over for good."""
_STOPPABLE = tuple(state.value for state in TASK.sources(TaskEvent.STOP))
_STOPPING = TASK.target(TaskEvent.STOP).value


def submit(session: Session, body: WorkloadIn, who: Principal, now_s: float) -> WorkloadOut:
    """Store one submission; `ApiError` with the field and the fix if it cannot be."""
    (outcome,) = submit_many(session, [(body, who)], now_s)
    if isinstance(outcome, ApiError):
        raise outcome
    return outcome


def submit_many(
    session: Session, requests: Sequence[tuple[WorkloadIn, Principal]], now_s: float
) -> list[WorkloadOut | ApiError]:
    """Store submissions together: three reads (projects, names, nodes) and two multi-row
    inserts however many there are (the API's hottest path, and a round trip per statement on
    PostgreSQL). Each gets its own outcome: the stored workload, or why it was refused; one
    refusal stores nothing wrong."""
    project_names = sorted({body.project for body, _ in requests})
    projects = {
        row.name: row
        for row in session.execute(
            select(ProjectRow.id, ProjectRow.name, ProjectRow.is_department).where(
                ProjectRow.name.in_(project_names)
            )
        )
    }
    taken: dict[tuple[int, str], str] = {
        (row.project_id, row.name): row.status
        for row in session.execute(
            select(WorkloadRow.project_id, WorkloadRow.name, WorkloadRow.status).where(
                WorkloadRow.name.in_(sorted({body.name for body, _ in requests}))
            )
        )
    }
    nodes = ClusterNodes.load(session)
    outcomes: list[WorkloadOut | ApiError | None] = []
    rows: list[dict[str, Any]] = []
    for body, who in requests:
        try:
            project = projects.get(body.project)
            values = workload_values(body, who, project, taken, now_s, nodes)
        except ApiError as error:
            outcomes.append(error)
            continue
        taken[(values["project_id"], body.name)] = values["status"]
        rows.append(values)
        outcomes.append(None)
    if rows:
        name_of = {row.id: name for name, row in projects.items()}
        ids = session.scalars(_INSERT_WORKLOAD, rows).all()
        session.execute(
            eventlog.INSERT,
            [
                eventlog.event_row(
                    now_s,
                    "submitted",
                    f"submitted by {values['submitted_by']}",
                    project=name_of[values["project_id"]],
                    project_id=values["project_id"],
                    workload=values["name"],
                    workload_id=workload_id,
                    actor=values["submitted_by"],
                )
                for workload_id, values in zip(ids, rows, strict=True)
            ],
        )
        stored = iter(zip(ids, rows, strict=True))
        for index, outcome in enumerate(outcomes):
            if outcome is None:
                workload_id, values = next(stored)
                row = WorkloadRow(id=workload_id, **values)
                outcomes[index] = view(row, 0, project=name_of[values["project_id"]])
    return [outcome for outcome in outcomes if outcome is not None]


def workload_values(
    body: WorkloadIn,
    who: Principal,
    project: Any,
    taken: dict[tuple[int, str], str],
    now_s: float,
    nodes: ClusterNodes,
) -> dict[str, Any]:
    """The row of an acceptable submission, or `ApiError` saying why it is not (refused too:
    what no node in `nodes` could ever run)."""
    who.require_project(body.project)  # first: a non-member learns nothing, not even existence
    if project is None or project.is_department:
        what = "is a department" if project else "does not exist"
        raise invalid(
            f"project {body.project!r} {what}: submit to one of your projects "
            "(gpupool projects lists them)",
            "project",
        )
    status = taken.get((project.id, body.name))
    if status is not None:
        raise conflict(
            f"project {body.project!r} already has a workload named {body.name!r} "
            f"({status}): pick another name, or delete the old one first",
            "name",
        )
    amount = body.gpu_amount
    if amount is None:
        kind, gpu_amount = GpuRequestKind.MEMORY, body.gpu_memory_mib or 0
    elif amount.is_whole:
        kind, gpu_amount = GpuRequestKind.WHOLE, amount.devices
    else:
        kind, gpu_amount = GpuRequestKind.FRACTION, amount.milli
    if body.type is WorkloadType.INTERACTIVE and body.preemptible:
        raise invalid(
            "interactive workloads are never preempted: leave preemptible out or submit --type "
            "train",
            "preemptible",
        )
    nodes.check(body, kind, gpu_amount)
    return {
        "name": body.name,
        "project_id": project.id,
        "type": body.type.value,
        "status": WORKLOAD.after(NEW, WorkloadEvent.SUBMIT).value,
        "version": 1,
        "gpu_kind": kind.value,
        "gpu_amount": gpu_amount,
        "gpu_limit_milli": body.gpu_limit_milli,
        "tasks": body.tasks,
        "min_available": body.min_available,
        "priority": body.priority,
        "preemptible": body.preemptible,
        "cpu_milli": body.cpu_milli,
        "memory_mib": body.memory_mib,
        "node_selector": body.node_selector,
        "command": body.command,
        "env": body.env,
        "duration_s": body.duration_s,
        "grace_period_s": body.grace_period_s,
        "min_runtime_s": body.min_runtime_s,
        "submitted_by": who.name,
        "submitted_at": now_s,
        "pending_reason": "waiting for the next scheduling cycle",
        "preemptions": 0,
        "working_dir": body.working_dir,
        "image": body.image,
        "origin": "api",
        "tolerations": [],
    }


_INSERT_WORKLOAD = insert(WorkloadRow).returning(WorkloadRow.id, sort_by_parameter_order=True)


def add_event(session: Session, at_s: float, kind: str, row: WorkloadRow, who: Principal) -> None:
    """A user's change to a workload (suspend, resume, delete), in the event log."""
    eventlog.add(
        session,
        at_s,
        kind,
        f"by {who.name}",
        project=row.project.name,
        project_id=row.project_id,
        workload=row.name,
        workload_id=row.id,
        actor=who.name,
    )


def get_row(session: Session, project: str, name: str, who: Principal) -> WorkloadRow:
    who.require_project(project)  # before the lookup: a non-member learns nothing of what is in it
    row = session.execute(
        select(WorkloadRow)
        .join(ProjectRow, ProjectRow.id == WorkloadRow.project_id)
        .where(ProjectRow.name == project, WorkloadRow.name == name)
    ).scalar_one_or_none()
    if row is None:
        raise not_found(
            "workload", f"{project}/{name}", "check the name and --project (gpupool list)"
        )
    return row


def exit_code_of(tasks: Iterable[tuple[int, int | None]]) -> int | None:
    """(task index, exit code) in creation order -> the first non-zero exit code among each
    task's last run, else 0; None if none is known."""
    last: dict[int, int | None] = {}
    for task_index, exit_code in tasks:
        last[task_index] = exit_code
    codes = [code for code in last.values() if code is not None]
    if not codes:
        return None
    return next((code for code in codes if code != 0), 0)


def detail(session: Session, row: WorkloadRow, who: Principal) -> WorkloadDetail:
    """A workload with its tasks and events; other projects' workloads named in its reasons
    are left unnamed for a researcher (`gpupool.server.redact`)."""
    tasks = session.scalars(
        select(TaskRow).where(TaskRow.workload_id == row.id).order_by(TaskRow.id)
    ).all()
    events = session.scalars(
        select(EventRow)
        .where(EventRow.project_id == row.project_id, EventRow.workload_id == row.id)
        .where(EventRow.at >= row.submitted_at)  # an id a deleted workload had before
        .order_by(EventRow.id.desc())
        .limit(200)
    ).all()
    running = sum(1 for task in tasks if task.state == TaskState.RUNNING.value)
    base = view(row, running)
    hide = redactor(session, who)
    base.pending_reason = hide(base.pending_reason)
    if row.status in FINISHED:
        base.exit_code = exit_code_of((task.task_index, task.exit_code) for task in tasks)
    return WorkloadDetail(
        **base.model_dump(),
        task_list=[task_view(task) for task in tasks],
        events=[event_view(event, hide) for event in reversed(events)],
    )


def _bump(session: Session, row: WorkloadRow, event: WorkloadEvent, reason: str | None) -> None:
    """Move the workload on by `event` (the lifecycle table's answer; it raises if refused)."""
    status = WORKLOAD.after(row.status, event)
    session.execute(
        update(WorkloadRow)
        .where(WorkloadRow.id == row.id)
        .values(status=status.value, version=WorkloadRow.version + 1, pending_reason=reason)
    )


def stop_tasks(session: Session, workload_id: int, now_s: float, reason: str) -> int:
    """Ask every live task of a workload to stop; returns how many."""
    result = session.execute(
        update(TaskRow)
        .where(
            TaskRow.workload_id == workload_id,
            TaskRow.state.in_(_STOPPABLE),
        )
        .values(state=_STOPPING, stop_requested_at=now_s, reason=reason)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def _allowing(event: WorkloadEvent) -> str:
    """The statuses `event` is allowed from, in words: "pending or running"."""
    return " or ".join(WORKLOAD.sources(event))


def suspend(session: Session, row: WorkloadRow, who: Principal, now_s: float) -> WorkloadOut:
    if not WORKLOAD.allows(row.status, WorkloadEvent.SUSPEND):
        raise conflict(
            f"workload {row.name!r} is {row.status}: only a {_allowing(WorkloadEvent.SUSPEND)} "
            "workload can be suspended"
        )
    # The workload first: that update waits for a scheduling cycle writing it, and the stop
    # after it then sees the tasks that cycle added.
    _bump(session, row, WorkloadEvent.SUSPEND, f"suspended by {who.name}")
    stop_tasks(session, row.id, now_s, f"suspended by {who.name}")
    add_event(session, now_s, "suspended", row, who)
    session.refresh(row)
    return view(row, 0)


def resume(session: Session, row: WorkloadRow, who: Principal, now_s: float) -> WorkloadOut:
    if not WORKLOAD.allows(row.status, WorkloadEvent.RESUME):
        raise conflict(
            f"workload {row.name!r} is {row.status}: only a {_allowing(WorkloadEvent.RESUME)} "
            "workload can be resumed"
        )
    _bump(session, row, WorkloadEvent.RESUME, "waiting for the next scheduling cycle")
    add_event(session, now_s, "resumed", row, who)
    session.refresh(row)
    return view(row, 0)


def delete(session: Session, row: WorkloadRow, who: Principal, now_s: float) -> WorkloadOut:
    """Stop the workload's tasks; the scheduling loop removes the row once they are gone."""
    if not WORKLOAD.allows(row.status, WorkloadEvent.DELETE):
        return view(row, 0)  # being deleted already: deleting again changes nothing
    _bump(session, row, WorkloadEvent.DELETE, None)  # first, as in `suspend`
    stop_tasks(session, row.id, now_s, f"deleted by {who.name}")
    add_event(session, now_s, "deleting", row, who)
    session.refresh(row)
    return view(row, 0)


def events(
    session: Session,
    who: Principal,
    project: str | None,
    workload: str | None,
    after_id: int,
    limit: int,
) -> list[EventOut]:
    """The log after `after_id`, oldest first. A researcher sees the events of their projects
    as they are now (by id: not those of an earlier project of the same name); an admin sees
    every event, and with `project` those of every project that had that name."""
    query = select(EventRow).where(EventRow.id > after_id)
    if project is not None:
        who.require_project(project)
        if who.is_admin:
            query = query.where(EventRow.project == project)
        else:
            query = query.where(EventRow.project_id == who.project_ids.get(project, -1))
    elif not who.is_admin:
        query = query.where(EventRow.project_id.in_(sorted(who.project_ids.values())))
    if workload is not None:
        query = query.where(EventRow.workload == workload)
    rows = session.scalars(query.order_by(EventRow.id).limit(limit)).all()
    hide = redactor(session, who)
    return [event_view(row, hide) for row in rows]


def gpu_milli_per_task(row: WorkloadRow) -> int | None:
    if row.gpu_kind == GpuRequestKind.WHOLE.value:
        return row.gpu_amount * 1000
    if row.gpu_kind == GpuRequestKind.FRACTION.value:
        return row.gpu_amount
    return None


def view(row: WorkloadRow, running_tasks: int, project: str | None = None) -> WorkloadOut:
    core_type = CoreType(row.type)
    return WorkloadOut(
        id=row.id,
        name=row.name,
        project=project or row.project.name,
        type=WorkloadType(row.type),
        status=WorkloadStatus(row.status),
        gpu_kind=row.gpu_kind,
        gpu_amount=row.gpu_amount,
        gpu_limit_milli=row.gpu_limit_milli,
        gpu_milli_per_task=gpu_milli_per_task(row),
        tasks=row.tasks,
        min_available=row.min_available,
        priority=core_type.default_priority if row.priority is None else row.priority,
        preemptible=core_type.default_preemptible if row.preemptible is None else row.preemptible,
        cpu_milli=row.cpu_milli,
        memory_mib=row.memory_mib,
        command=row.command,
        env=row.env,
        duration_s=row.duration_s,
        grace_period_s=row.grace_period_s,
        min_runtime_s=row.min_runtime_s,
        submitted_by=row.submitted_by,
        submitted_at=row.submitted_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        pending_reason=row.pending_reason,
        preemptions=row.preemptions,
        running_tasks=running_tasks,
        working_dir=row.working_dir,
        image=row.image,
        origin=row.origin or "api",
    )


def task_view(row: TaskRow) -> TaskOut:
    return TaskOut(
        task_index=row.task_index,
        launch_id=row.launch_id,
        state=TaskState(row.state),
        node=row.node,
        devices=row.devices,
        burst_device=row.burst_device,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        exit_code=row.exit_code,
        reason=row.reason,
    )


def event_view(row: EventRow, hide: Redact | None = None) -> EventOut:
    message = hide(row.message) if hide is not None else row.message
    return EventOut(
        id=row.id,
        at=row.at,
        kind=row.kind,
        project=row.project,
        project_id=row.project_id,
        workload=row.workload,
        workload_id=row.workload_id,
        node=row.node,
        actor=row.actor,
        message=message or "",
    )
