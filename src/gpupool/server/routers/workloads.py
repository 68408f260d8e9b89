"""Workloads: submit, list, describe, suspend, resume, delete, logs; the event log."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from sqlalchemy import select

from gpupool.api.schemas import (
    DryRunOut,
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
from gpupool.executors.base import Executor
from gpupool.server.db import TaskRow
from gpupool.server.errors import ERROR_RESPONSES, not_found
from gpupool.server.services import dry_run as dry_runs
from gpupool.server.services import workload_list, workloads
from gpupool.server.services.workload_list import Filters, Order, SortKey
from gpupool.server.state import Caller, State, check_working_dir

router = APIRouter(prefix="/api/v1", tags=["workloads"], responses=ERROR_RESPONSES)

MAX_LOG_CHUNK = 1 << 20


@router.post("/workloads", status_code=201, response_model=WorkloadOut)
async def submit(body: WorkloadIn, state: State, caller: Caller) -> Response:
    """Answered once the submission is committed (group commit with concurrent ones)."""
    check_working_dir(state.executor, body.working_dir)
    out = await state.submitter.submit(body, caller)
    return Response(out.model_dump_json(), status_code=201, media_type="application/json")


@router.post("/workloads/dry-run")
def dry_run(body: WorkloadIn, state: State, caller: Caller) -> DryRunOut:
    """Where it would run now, or why it would wait; stores and starts nothing."""
    check_working_dir(state.executor, body.working_dir)
    with state.read() as session:
        return dry_runs.dry_run(
            session, body, caller, state.clock.now_s(), state.settings.scheduler
        )


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
        return workloads.detail(session, workloads.get_row(session, project, name, caller), caller)


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
    run: Annotated[
        int | None, Query(ge=1, le=10_000, description="only this run (1 = the first start)")
    ] = None,
    since: Annotated[
        float | None,
        Query(ge=0, description="only runs still running at this time (seconds since epoch)"),
    ] = None,
    tail: Annotated[
        int | None,
        Query(ge=0, le=10_000_000, description="start at the last `tail` lines (not `offset`)"),
    ] = None,
) -> LogChunk:
    """Up to 1 MiB of the task's log from byte `offset`; page on from `next_offset` (a log of
    any size reads whole). Without `run`, every run of the task in order (a preempted task that
    ran again shows both, separated by a line), so that a follower's offsets stay valid.
    `complete` is true once the task (or the chosen run) has ended, the executor has the whole
    log, and the chunk reaches its end: no more text will come."""
    with state.read() as session:
        row = workloads.get_row(session, project, name, caller)
        if task >= row.tasks:
            raise not_found("task", str(task), f"the workload has tasks 0..{row.tasks - 1}")
        launches = session.execute(
            select(TaskRow.launch_id, TaskRow.state, TaskRow.finished_at)
            .where(TaskRow.workload_id == row.id, TaskRow.task_index == task)
            .order_by(TaskRow.id)
        ).all()
        finished = row.status in (WorkloadStatus.COMPLETED.value, WorkloadStatus.FAILED.value)
    runs = list(enumerate(launches, start=1))
    if run is not None:
        if run > len(runs):
            started = f"runs 1..{len(runs)}" if runs else "no run yet"
            raise not_found("run", str(run), f"task {task} has {started}")
        runs = [runs[run - 1]]
    if since is not None:
        runs = [r for r in runs if r[1].finished_at is None or r[1].finished_at >= since]
    log = _TaskLog(state.executor)
    all_ended = True
    for number, (launch_id, task_state, _) in runs:
        if number > 1 and run is None:
            log.add_text(f"--- gpupool: task {task} started again (run {number}) ---\n")
        ended = log.add_run(launch_id)
        all_ended = all_ended and (ended or task_state == TaskState.DONE.value)
    if tail is not None:
        offset = log.tail_start(tail)
    chunk = _whole_characters(log.read(offset, MAX_LOG_CHUNK), offset, log.size)
    complete = (finished or run is not None) and all_ended and offset + len(chunk) >= log.size
    text = chunk.decode("utf-8", errors="replace")
    return LogChunk(text=text, next_offset=offset + len(chunk), complete=complete)


class _TaskLog:
    """The runs of a task's log (and the lines between them) as one byte sequence, read from
    the executor a page at a time: only the sizes of the runs before `offset` are asked for."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._parts: list[tuple[bytes | str, int]] = []
        """(literal bytes, or a launch id; its length)."""
        self.size = 0

    def add_text(self, text: str) -> None:
        data = text.encode()
        self._parts.append((data, len(data)))
        self.size += len(data)

    def add_run(self, launch_id: str) -> bool:
        size, ended = self._executor.log_size(launch_id)
        self._parts.append((launch_id, size))
        self.size += size
        return ended

    def read(self, offset: int, limit: int) -> bytes:
        out: list[bytes] = []
        start = 0
        for part, size in self._parts:
            if limit <= 0:
                break
            if offset < start + size:
                within = offset - start if offset > start else 0
                count = min(limit, size - within)
                if isinstance(part, bytes):
                    data = part[within : within + count]
                else:
                    data, _ = self._executor.read_log(part, within, count)
                    data = data[:count]
                out.append(data)
                limit -= len(data)
                offset = start + within + len(data)
                if len(data) < count:
                    break  # the log is shorter than measured (cannot be, but never skip bytes)
            start += size
        return b"".join(out)

    def tail_start(self, lines: int) -> int:
        """The offset of the last `lines` lines (a final newline does not start one)."""
        if lines == 0:
            return self.size
        end = self.size
        while end > 0:
            begin = max(0, end - MAX_LOG_CHUNK)
            page = self.read(begin, end - begin)
            if end == self.size and page.endswith(b"\n"):
                page = page[:-1]
            at = len(page)
            while lines:
                at = page.rfind(b"\n", 0, at)
                if at < 0:
                    break
                lines -= 1
            if lines == 0:
                return begin + at + 1
            end = begin
        return 0


def _whole_characters(chunk: bytes, offset: int, size: int) -> bytes:
    """`chunk` less a UTF-8 character cut at its end (the next chunk starts with it)."""
    if offset + len(chunk) >= size:
        return chunk
    for back in range(1, min(4, len(chunk)) + 1):
        byte = chunk[-back]
        if byte & 0xC0 != 0x80:  # the last character's first byte
            length = 1 if byte < 0x80 else 2 if byte >> 5 == 6 else 3 if byte >> 4 == 14 else 4
            return chunk if length <= back else chunk[:-back]
    return chunk


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
