"""Failing one workload that the scheduling loop cannot handle, so that the loop goes on.

Whatever got into a workload's row (a command with a NUL byte, an unknown GPU kind, JSON that
does not parse, a value out of range), or whatever the executor answers when asked to start it,
must cost that workload only: it ends `failed` with the reason (in `pending_reason` and a
`failed` event) and every other workload keeps being scheduled. Its live tasks are marked
stopping, so dispatch stops them (or ends those never started) and their devices stay held
until they are gone.

Everything here reads and writes plain columns with SQL expressions, never the ORM's row
objects: loading a row whose JSON does not parse would fail again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from sqlalchemy import Table, select, update
from sqlalchemy.orm import Session, sessionmaker

from gpupool.core.lifecycle import TASK, WORKLOAD, TaskEvent, WorkloadEvent
from gpupool.server import eventlog
from gpupool.server.db import ProjectRow, TaskRow, WorkloadRow
from gpupool.server.dbfaults import is_outage

WORKLOADS = cast(Table, WorkloadRow.__table__)
TASKS = cast(Table, TaskRow.__table__)

_STOPPABLE = tuple(state.value for state in TASK.sources(TaskEvent.STOP))
_STOPPING = TASK.target(TaskEvent.STOP).value
_MAX_REASON = 1000


def describe(error: BaseException) -> str:
    """An exception as a reason: its type and message, on one line, not too long."""
    text = " ".join(str(error).split()) or "no message"
    return f"{type(error).__name__}: {text}"[:_MAX_REASON]


def fail(session: Session, workload_id: int, reason: str, now: float) -> bool:
    """Fail the workload in `session`'s transaction; False if it is gone or already over."""
    reason = reason[:_MAX_REASON]
    found = session.execute(
        select(WorkloadRow.name, ProjectRow.name, WorkloadRow.status, ProjectRow.id)
        .join(ProjectRow, ProjectRow.id == WorkloadRow.project_id)
        .where(WorkloadRow.id == workload_id)
    ).first()
    if found is None or not WORKLOAD.allows(found[2], WorkloadEvent.FAIL):
        return False  # gone, or over already (completed, failed, being deleted)
    name, project, status, project_id = found
    session.execute(
        update(WORKLOADS)
        .where(WORKLOADS.c.id == workload_id)
        .values(
            status=WORKLOAD.after(status, WorkloadEvent.FAIL).value,
            finished_at=now,
            pending_reason=f"failed: {reason}",
            version=WORKLOADS.c.version + 1,
        )
    )
    session.execute(
        update(TASKS)
        .where(
            TASKS.c.workload_id == workload_id,
            TASKS.c.state.in_(_STOPPABLE),
        )
        .values(
            state=_STOPPING,
            stop_requested_at=now,
            reason=f"its workload failed: {reason}",
        )
    )
    eventlog.add(
        session,
        now,
        "failed",
        f"the scheduler cannot handle this workload: {reason}",
        project=project,
        project_id=project_id,
        workload=name,
        workload_id=workload_id,
    )
    return True


def fail_each(
    writer: sessionmaker[Session],
    problems: dict[int, str],
    now: float,
    report: Callable[[str], None],
) -> set[int]:
    """Fail each workload of `problems` (id -> reason) in its own transaction, so that one
    that cannot even be failed does not keep the others from it. Returns the ids failed."""
    failed: set[int] = set()
    for workload_id, reason in sorted(problems.items()):
        try:
            with writer.begin() as session:
                if fail(session, workload_id, reason, now):
                    failed.add(workload_id)
        except Exception as error:  # reported; the loop goes on without it
            if is_outage(error):
                raise
            report(f"cannot mark workload {workload_id} failed ({reason}): {describe(error)}")
            continue
        report(f"workload {workload_id} failed: {reason}")
    return failed
