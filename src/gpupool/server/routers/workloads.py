"""Workloads: submit, list, describe, suspend, resume, delete, logs; the event log."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from sqlalchemy import select

from gpupool.api.schemas import (
    EventOut,
    LogChunk,
    TaskState,
    WorkloadDetail,
    WorkloadIn,
    WorkloadOut,
    WorkloadPage,
    WorkloadStatus,
    WorkloadType,
)
from gpupool.server.db import TaskRow
from gpupool.server.errors import ERROR_RESPONSES, not_found
from gpupool.server.services import workload_list, workloads
from gpupool.server.services.workload_list import Filters, Order, SortKey
from gpupool.server.state import Caller, State

router = APIRouter(prefix="/api/v1", tags=["workloads"], responses=ERROR_RESPONSES)

MAX_LOG_CHUNK = 1 << 20


@router.post("/workloads", status_code=201, response_model=WorkloadOut)
async def submit(body: WorkloadIn, state: State, caller: Caller) -> Response:
    """Answered once the submission is committed (group commit with concurrent ones)."""
    out = await state.submitter.submit(body, caller)
    return Response(out.model_dump_json(), status_code=201, media_type="application/json")


@router.get("/workloads")
def list_workloads(
    state: State,
    caller: Caller,
    project: str | None = None,
    status: WorkloadStatus | None = None,
    type: WorkloadType | None = None,
    user: Annotated[str | None, Query(max_length=63, description="who submitted it")] = None,
    node: Annotated[
        str | None, Query(max_length=63, description="has a live task on this node")
    ] = None,
    q: Annotated[
        str | None, Query(max_length=63, description="a substring of the name (any case)")
    ] = None,
    sort: Annotated[SortKey | None, Query(description="default: submission order")] = None,
    order: Order = Order.ASC,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> WorkloadPage:
    filters = Filters(project, status, type, user, node, q)
    with state.read() as session:
        return workload_list.list_page(session, caller, filters, limit, offset, sort, order)


@router.get("/workloads/{project}/{name}")
def describe(project: str, name: str, state: State, caller: Caller) -> WorkloadDetail:
    with state.read() as session:
        return workloads.detail(session, workloads.get_row(session, project, name, caller))


@router.post("/workloads/{project}/{name}/suspend")
def suspend(project: str, name: str, state: State, caller: Caller) -> WorkloadOut:
    with state.write() as session:
        row = workloads.get_row(session, project, name, caller)
        return workloads.suspend(session, row, caller, state.clock.now_s())


@router.post("/workloads/{project}/{name}/resume")
def resume(project: str, name: str, state: State, caller: Caller) -> WorkloadOut:
    with state.write() as session:
        row = workloads.get_row(session, project, name, caller)
        return workloads.resume(session, row, caller, state.clock.now_s())


@router.delete("/workloads/{project}/{name}")
def delete(project: str, name: str, state: State, caller: Caller) -> WorkloadOut:
    with state.write() as session:
        row = workloads.get_row(session, project, name, caller)
        return workloads.delete(session, row, caller, state.clock.now_s())


@router.get("/workloads/{project}/{name}/logs")
def logs(
    project: str,
    name: str,
    state: State,
    caller: Caller,
    task: Annotated[int, Query(ge=0, le=10_000)] = 0,
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
) -> LogChunk:
    """The task's log from byte `offset`: every run of it in order (a preempted task that ran
    again shows both, separated by a line), so that a follower's offsets stay valid."""
    with state.read() as session:
        row = workloads.get_row(session, project, name, caller)
        if task >= row.tasks:
            raise not_found("task", str(task), f"the workload has tasks 0..{row.tasks - 1}")
        launches = session.execute(
            select(TaskRow.launch_id, TaskRow.state)
            .where(TaskRow.workload_id == row.id, TaskRow.task_index == task)
            .order_by(TaskRow.id)
        ).all()
        finished = row.status in (WorkloadStatus.COMPLETED.value, WorkloadStatus.FAILED.value)
    parts: list[bytes] = []
    all_ended = True
    for run, (launch_id, task_state) in enumerate(launches, start=1):
        if run > 1:
            parts.append(f"--- gpupool: task {task} started again (run {run}) ---\n".encode())
        data, ended = state.executor.read_log(launch_id, 0, MAX_LOG_CHUNK)
        parts.append(data)
        all_ended = all_ended and (ended or task_state == TaskState.DONE.value)
    whole = b"".join(parts)
    chunk = whole[offset : offset + MAX_LOG_CHUNK]
    complete = finished and all_ended and offset + len(chunk) >= len(whole)
    text = chunk.decode("utf-8", errors="replace")
    return LogChunk(text=text, next_offset=offset + len(chunk), complete=complete)


@router.get("/events")
def events(
    state: State,
    caller: Caller,
    project: str | None = None,
    workload: str | None = None,
    after_id: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 500,
) -> list[EventOut]:
    with state.read() as session:
        return workloads.events(session, caller, project, workload, after_id, limit)
