"""The list of workloads: filters, sort, search and paging, with each workload's placement and
exit code (what the CLI's `list` and the dashboard's table show)."""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.orm import Session

from gpupool.api.schemas import (
    TaskPlacement,
    TaskState,
    WorkloadPage,
    WorkloadStatus,
    WorkloadType,
)
from gpupool.core.model import MILLI_PER_GPU, GpuRequestKind
from gpupool.server.auth import Principal
from gpupool.server.db import ProjectRow, TaskRow, WorkloadRow, physical_devices
from gpupool.server.redact import redactor
from gpupool.server.services.workloads import FINISHED, LIVE_TASK_STATES, exit_code_of, view

MEMORY_MIB_PER_GPU = 81920
"""What a `gpu_memory` request is counted as when sorting by GPU (an 80 GiB device)."""


class SortKey(enum.StrEnum):
    NAME = "name"
    SUBMITTED_AT = "submitted_at"
    STATUS = "status"
    PROJECT = "project"
    GPU = "gpu"


class Order(enum.StrEnum):
    ASC = "asc"
    DESC = "desc"


@dataclass(frozen=True, slots=True)
class Filters:
    project: str | None = None
    status: WorkloadStatus | None = None
    type: WorkloadType | None = None
    user: str | None = None
    """Who submitted it."""
    node: str | None = None
    """Has a live task (starting, running, stopping) on this node."""
    q: str | None = None
    """A substring of the name (case-insensitive)."""


def _gpu_milli_total() -> ColumnElement[int]:
    """The whole request in milli-GPU (memory requests as a share of an 80 GiB device)."""
    per_task = case(
        (WorkloadRow.gpu_kind == GpuRequestKind.WHOLE.value, WorkloadRow.gpu_amount * 1000),
        (WorkloadRow.gpu_kind == GpuRequestKind.FRACTION.value, WorkloadRow.gpu_amount),
        else_=WorkloadRow.gpu_amount * MILLI_PER_GPU / MEMORY_MIB_PER_GPU,
    )
    return per_task * WorkloadRow.tasks


_SORT_COLUMNS: dict[SortKey, ColumnElement[Any]] = {
    SortKey.NAME: WorkloadRow.name.expression,
    SortKey.SUBMITTED_AT: WorkloadRow.submitted_at.expression,
    SortKey.STATUS: WorkloadRow.status.expression,
    SortKey.PROJECT: ProjectRow.name.expression,
    SortKey.GPU: _gpu_milli_total(),
}


def _like_pattern(text: str) -> str:
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def list_page(
    session: Session,
    who: Principal,
    filters: Filters,
    limit: int,
    offset: int,
    sort: SortKey | None = None,
    order: Order = Order.ASC,
) -> WorkloadPage:
    """One page of the workloads `who` may see that match `filters`; `total` counts them all.
    Without `sort`, in submission order (by id)."""
    query = select(WorkloadRow).join(ProjectRow, ProjectRow.id == WorkloadRow.project_id)
    if filters.project is not None:
        who.require_project(filters.project)
        query = query.where(ProjectRow.name == filters.project)
    elif not who.is_admin:
        query = query.where(ProjectRow.name.in_(sorted(who.project_names)))
    if filters.status is not None:
        query = query.where(WorkloadRow.status == filters.status.value)
    if filters.type is not None:
        query = query.where(WorkloadRow.type == filters.type.value)
    if filters.user is not None:
        query = query.where(WorkloadRow.submitted_by == filters.user)
    if filters.q:
        query = query.where(func.lower(WorkloadRow.name).like(_like_pattern(filters.q), "\\"))
    if filters.node is not None:
        on_node = select(TaskRow.workload_id).where(
            TaskRow.node == filters.node, TaskRow.state.in_(LIVE_TASK_STATES)
        )
        query = query.where(WorkloadRow.id.in_(on_node))
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    ordering: list[ColumnElement[Any]]
    if sort is None:
        ordering = [WorkloadRow.id.desc() if order is Order.DESC else WorkloadRow.id.asc()]
    else:
        column = _SORT_COLUMNS[sort]
        if order is Order.DESC:
            ordering = [column.desc(), WorkloadRow.id.desc()]
        else:
            ordering = [column.asc(), WorkloadRow.id.asc()]
    rows = session.scalars(query.order_by(*ordering).limit(limit).offset(offset)).all()
    tasks = _tasks(session, [row.id for row in rows])
    hide = redactor(session, who)
    items = []
    for row in rows:
        mine = tasks.get(row.id, [])
        running = sum(1 for task in mine if task.state == TaskState.RUNNING.value)
        out = view(row, running)
        out.pending_reason = hide(out.pending_reason)
        out.placement = [
            TaskPlacement(
                task_index=task.task_index,
                node=task.node,
                devices=list(physical_devices(task.devices, task.burst_device)),
                state=TaskState(task.state),
            )
            for task in mine
            if task.state in LIVE_TASK_STATES
        ]
        out.exit_code = _exit_code(mine) if row.status in FINISHED else None
        items.append(out)
    return WorkloadPage(items=items, total=total)


@dataclass(frozen=True, slots=True)
class _Task:
    id: int
    task_index: int
    node: str
    devices: list[int]
    burst_device: int | None
    state: str
    exit_code: int | None


def _tasks(session: Session, ids: Sequence[int]) -> dict[int, list[_Task]]:
    """Every task row of these workloads, in creation order."""
    by_workload: dict[int, list[_Task]] = defaultdict(list)
    if not ids:
        return by_workload
    for row in session.execute(
        select(
            TaskRow.workload_id,
            TaskRow.id,
            TaskRow.task_index,
            TaskRow.node,
            TaskRow.devices,
            TaskRow.burst_device,
            TaskRow.state,
            TaskRow.exit_code,
        )
        .where(TaskRow.workload_id.in_(ids))
        .order_by(TaskRow.id)
    ):
        by_workload[row[0]].append(_Task(*row[1:]))
    return by_workload


def _exit_code(tasks: Sequence[_Task]) -> int | None:
    return exit_code_of((task.task_index, task.exit_code) for task in tasks)
