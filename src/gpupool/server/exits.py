"""What follows when tasks end: the scheduling loop's bookkeeping of exits and lost tasks.

- `collect`: the executor's exits are written down (task done, with its exit code and reason)
  and each workload moves on (`after_task_end`: completed, failed, requeued), then the exits are
  acknowledged to the executor, so after a crash in between they are reported again.
- `recover`: after a restart, running or stopping tasks the executor never heard of are lost.
- `end_unstarted`: stopping launches the executor never started end here (no exit will come).
- `remove_deleted`: workloads being deleted are removed once none of their tasks is live.

Each function opens its own write transaction; `after_task_end` works inside the caller's.
Every status and task state written here is the lifecycle table's (`gpupool.core.lifecycle`):
this module decides which event happened, the table what it leads to.
"""

from __future__ import annotations

from collections import defaultdict
from typing import cast

from sqlalchemy import Table, delete, select, update
from sqlalchemy import bindparam as _bind
from sqlalchemy.orm import Session, load_only, sessionmaker

from gpupool.api.schemas import TaskState, WorkloadStatus
from gpupool.clock import Clock
from gpupool.core.lifecycle import TASK, WORKLOAD, TaskEvent, WorkloadEvent
from gpupool.executors.base import Executor, Exit
from gpupool.server import eventlog
from gpupool.server.db import ProjectRow, TaskRow, WorkloadRow
from gpupool.server.snapshot import ACTIVE_TASKS, LIVE_TASKS

TASKS = cast(Table, TaskRow.__table__)

COMPLETED = "completed"
"""A task's reason once it has ended by itself with exit code 0."""
_DONE = TASK.target(TaskEvent.END).value
_STOPPING = TASK.target(TaskEvent.STOP).value

_AFTER_END_COLUMNS = load_only(
    WorkloadRow.name,
    WorkloadRow.status,
    WorkloadRow.version,
    WorkloadRow.tasks,
    WorkloadRow.submitted_at,
    WorkloadRow.project_id,
)


def collect(writer: sessionmaker[Session], executor: Executor, clock: Clock) -> list[str]:
    """Write down the executor's exits and move their workloads on, then acknowledge them.
    Returns the launch ids acknowledged."""
    exits = executor.exits()
    if not exits:
        return []
    now = clock.now_s()
    by_launch = {e.launch_id: e for e in exits}
    with writer.begin() as session:
        rows = session.execute(
            select(TaskRow.id, TaskRow.launch_id, TaskRow.workload_id, TaskRow.state).where(
                TaskRow.launch_id.in_(list(by_launch))
            )
        ).all()
        ended: dict[int, list[Exit]] = defaultdict(list)
        updates = []
        for task_id, launch_id, workload_id, state in rows:
            if not TASK.allows(state, TaskEvent.END):
                continue  # done already: an exit reported again after a crash
            end = by_launch[launch_id]
            updates.append(
                {
                    "task_id": task_id,
                    "state": TASK.after(state, TaskEvent.END).value,
                    "finished_at": end.finished_at_s,
                    "exit_code": end.exit_code,
                    "reason": (COMPLETED if not end.stopped and end.exit_code == 0 else end.reason),
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
                after_task_end(session, workload_id, now, natural_exit=failed[0])
            elif natural:
                after_task_end(session, workload_id, now, natural_exit=natural[0])
            else:
                after_task_end(session, workload_id, now, natural_exit=None)
    executor.acknowledge(list(by_launch))
    return list(by_launch)


def after_task_end(
    session: Session, workload_id: int, now: float, natural_exit: Exit | None
) -> None:
    """Move a workload on after some of its tasks ended."""
    # Only the columns used here: a JSON column that does not parse must not stop this.
    workload = session.get(WorkloadRow, workload_id, options=[_AFTER_END_COLUMNS])
    if workload is None:
        return
    live = session.scalars(
        select(TaskRow.task_index).where(
            TaskRow.workload_id == workload_id, TaskRow.state.in_(LIVE_TASKS)
        )
    ).all()
    if natural_exit is not None and workload.status in (
        WorkloadStatus.RUNNING.value,
        WorkloadStatus.COMPLETING.value,
    ):
        if natural_exit.exit_code != 0:
            stop_live(session, workload_id, now, "another task of the workload failed")
            workload.status = WORKLOAD.after(workload.status, WorkloadEvent.FAIL).value
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
            workload.status = WORKLOAD.after(workload.status, WorkloadEvent.TASK_SUCCEEDED).value
        else:
            workload.status = WORKLOAD.after(workload.status, WorkloadEvent.SUCCEED).value
            workload.finished_at = now
            _event(session, now, "completed", workload, "all tasks finished")
        workload.version += 1
        return
    if (
        natural_exit is not None
        and natural_exit.exit_code == 0
        and not live
        and workload.status in (WorkloadStatus.PENDING.value, WorkloadStatus.SUSPENDED.value)
        and _every_task_completed(session, workload)
    ):
        # The tasks finished by themselves just as they were asked to stop (suspended,
        # preempted, or the server died in between): the work is done, do not run it again.
        workload.status = WORKLOAD.after(workload.status, WorkloadEvent.SUCCEED).value
        workload.finished_at = now
        workload.pending_reason = None
        workload.version += 1
        _event(
            session, now, "completed", workload,
            "all tasks finished before the stop took effect",
        )  # fmt: skip
    elif workload.status == WorkloadStatus.COMPLETING.value and not live:
        workload.status = WORKLOAD.after(workload.status, WorkloadEvent.SUCCEED).value
        workload.finished_at = now
        workload.version += 1
        _event(session, now, "completed", workload, "all tasks finished")
    elif workload.status == WorkloadStatus.RUNNING.value and not live:
        workload.status = WORKLOAD.after(workload.status, WorkloadEvent.REQUEUE).value
        workload.started_at = None
        workload.pending_reason = "its tasks ended unexpectedly; waiting to run again"
        workload.version += 1
        _event(session, now, "requeued", workload, "its tasks were lost")


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


def stop_live(session: Session, workload_id: int, now: float, reason: str) -> None:
    """Mark a workload's starting and running tasks stopping (dispatch stops them)."""
    session.execute(
        update(TaskRow)
        .where(TaskRow.workload_id == workload_id, TaskRow.state.in_(ACTIVE_TASKS))
        .values(state=_STOPPING, stop_requested_at=now, reason=reason)
    )


def recover(writer: sessionmaker[Session], executor: Executor, clock: Clock) -> None:
    """After a restart: tasks the executor never heard of are lost; their workloads requeue.

    Starting tasks are left alone (dispatch starts them; a start is idempotent). A running
    or stopping task the executor does not know was lost with the executor's state.
    """
    now = clock.now_s()
    with writer.begin() as session:
        rows = session.execute(
            select(TaskRow.id, TaskRow.launch_id, TaskRow.workload_id).where(
                TaskRow.state.in_((TaskState.RUNNING.value, TaskState.STOPPING.value))
            )
        ).all()
        known = executor.known([launch_id for _, launch_id, _ in rows])
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
                    state=_DONE,
                    finished_at=now,
                    exit_code=-1,
                    reason="lost: the executor does not know this task after a restart",
                )
            )
        for workload_id in {workload_id for _, workload_id in lost}:
            after_task_end(session, workload_id, now, natural_exit=None)


def end_unstarted(
    writer: sessionmaker[Session], executor: Executor, clock: Clock, launch_ids: list[str]
) -> set[str]:
    """Of stopping launches, those the executor never started (stopped between bind and
    dispatch, or the server was killed in between): nothing to stop and no exit will come,
    so their tasks end here. Only the loop's thread starts launches, so none starts meanwhile."""
    if not launch_ids:
        return set()
    unstarted = set(launch_ids) - executor.known(launch_ids)
    if not unstarted:
        return unstarted
    now = clock.now_s()
    with writer.begin() as session:
        rows = session.execute(
            select(TaskRow.id, TaskRow.workload_id).where(
                TaskRow.launch_id.in_(sorted(unstarted)),
                TaskRow.state == TaskState.STOPPING.value,
            )
        ).all()
        session.execute(
            update(TaskRow)
            .where(TaskRow.id.in_([task_id for task_id, _ in rows]))
            .values(state=_DONE, finished_at=now)
        )
        for workload_id in sorted({workload_id for _, workload_id in rows}):
            after_task_end(session, workload_id, now, natural_exit=None)
    return unstarted


_REMOVABLE = tuple(status.value for status in WORKLOAD.sources(WorkloadEvent.REMOVE))
"""Deleting: the status whose rows go once none of their tasks is live."""


def remove_deleted(writer: sessionmaker[Session], clock: Clock) -> None:
    """Remove the workloads being deleted whose tasks have all stopped, with an event each."""
    with writer.begin() as session:
        live = select(TaskRow.workload_id).where(TaskRow.state.in_(LIVE_TASKS))
        rows = session.execute(
            select(WorkloadRow.id, WorkloadRow.name, ProjectRow.name, ProjectRow.id)
            .join(ProjectRow, ProjectRow.id == WorkloadRow.project_id)
            .where(
                WorkloadRow.status.in_(_REMOVABLE),
                WorkloadRow.id.not_in(live),
            )
        ).all()
        if not rows:
            return
        now = clock.now_s()
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
