"""Keeping one workload's failure to itself: the loop's fallbacks when a whole step fails.

Each step of an iteration works on all workloads at once (one snapshot, one core run, one
transaction of decisions, one batch of starts) because that is fast. When such a step raises
something other than a database outage, these helpers redo it one workload at a time to find
the one that breaks it; that workload is failed (`gpupool.server.quarantine`) and the others go
on in the same iteration. The slow path runs only after a failure.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence

import httpx
from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from gpupool.api.schemas import TaskState
from gpupool.core.decisions import Bind, CycleResult, Decision
from gpupool.core.model import Snapshot
from gpupool.executors.base import Executor, Launch
from gpupool.server.db import NodeRow, ProjectRow, TaskRow, WorkloadRow
from gpupool.server.dbfaults import is_outage
from gpupool.server.quarantine import describe

START_ATTEMPTS = 3
"""How many iterations in a row a launch may fail to start before its workload fails (an
executor may fail for a moment; a launch it can never start must not be tried forever)..."""
START_GIVE_UP_S = 30.0
"""... and for at least this long since its first failure."""

MAX_CULPRITS = 5
"""At most this many workloads are taken out of one cycle for breaking the core."""


def run_isolated(
    snapshot: Snapshot, run: Callable[[Snapshot], CycleResult]
) -> tuple[CycleResult, Snapshot, dict[str, str]]:
    """`run(snapshot)`; if it raises, find the workloads it raises for and run without them.

    Returns the result, the snapshot it was computed on, and core name -> reason for each
    workload left out. Raises the core's error when no single workload explains it."""
    culprits: dict[str, str] = {}
    while True:
        try:
            return run(snapshot), snapshot, culprits
        except Exception as error:
            if len(culprits) >= MAX_CULPRITS:
                raise
            culprit = _first_breaking(snapshot, run)
            if culprit is None:
                raise
            culprits[culprit] = f"the scheduler's core fails on it: {describe(error)}"
            snapshot = _without(snapshot, {culprit})


def _without(snapshot: Snapshot, names: set[str]) -> Snapshot:
    kept = tuple(w for w in snapshot.workloads if w.name not in names)
    return dataclasses.replace(snapshot, workloads=kept)


def _first_breaking(snapshot: Snapshot, run: Callable[[Snapshot], CycleResult]) -> str | None:
    """The workload whose addition makes `run` raise, by bisection over the snapshot's workloads
    in order (log2(n) runs); None if it raises with none of them."""
    workloads = snapshot.workloads

    def raises(count: int) -> bool:
        try:
            run(dataclasses.replace(snapshot, workloads=workloads[:count]))
        except Exception:
            return True
        return False

    if raises(0) or not raises(len(workloads)):
        return None
    good, bad = 0, len(workloads)
    while bad - good > 1:
        middle = (good + bad) // 2
        if raises(middle):
            bad = middle
        else:
            good = middle
    return workloads[bad - 1].name


def persist_apart(
    persist: Callable[[CycleResult], dict[str, int]], result: CycleResult
) -> tuple[dict[str, int], dict[str, str]]:
    """After writing a cycle's decisions in one transaction failed: each workload's decisions
    in their own, evictions and moves first. Returns the counts written and core name -> reason
    for the workloads whose decisions could not be written. If an eviction or move could not be
    written, no bind is: it may have counted on the devices freed (the next cycle decides again,
    without the failed workload)."""
    groups: dict[str, list[Decision]] = {}
    for decision in result.decisions:
        groups.setdefault(decision.workload, []).append(decision)
    binds_only = {name: all(isinstance(d, Bind) for d in group) for name, group in groups.items()}
    counts: Counter[str] = Counter()
    failed: dict[str, str] = {}
    for name in sorted(groups, key=lambda n: binds_only[n]):
        if binds_only[name] and any(not binds_only[other] for other in failed):
            continue
        part = dataclasses.replace(result, decisions=tuple(groups[name]), pending_reasons={})
        try:
            counts.update(persist(part))
        except Exception as error:
            if is_outage(error):
                raise
            failed[name] = f"its scheduling decision cannot be written: {describe(error)}"
    try:
        persist(dataclasses.replace(result, decisions=()))  # the pending reasons
    except Exception as error:
        if is_outage(error):
            raise
    return dict(counts), failed


def start_apart(
    executor: Executor,
    launches: Sequence[Launch],
    failures: dict[str, tuple[int, float]],
    now_s: float,
) -> tuple[list[Launch], dict[str, str]]:
    """After the executor failed to start a batch: each launch alone (a start is idempotent by
    launch id, so those of the batch that did start are not started twice). Returns the launches
    started and launch id -> reason for those given up: failed `START_ATTEMPTS` times over at
    least `START_GIVE_UP_S`. `failures` (launch id -> (failures, first at)) is updated. An
    error that says the executor itself is unreachable (connection, timeout, HTTP 5xx or 429)
    does not count: the launch waits for it to come back."""
    started: list[Launch] = []
    given_up: dict[str, str] = {}
    for launch in launches:
        try:
            executor.start([launch])
        except Exception as error:
            if is_outage(error):
                raise
            if executor_unreachable(error):
                continue
            count, first_s = failures.get(launch.launch_id, (0, now_s))
            failures[launch.launch_id] = (count + 1, first_s)
            if count + 1 >= START_ATTEMPTS and now_s - first_s >= START_GIVE_UP_S:
                del failures[launch.launch_id]
                given_up[launch.launch_id] = (
                    f"the {executor.name} executor cannot start task {launch.task_index} "
                    f"({count + 1} tries over {now_s - first_s:.0f} s): {describe(error)}"
                )
            continue
        failures.pop(launch.launch_id, None)
        started.append(launch)
    return started, given_up


def executor_unreachable(error: BaseException) -> bool:
    """Does `error` say the executor's backend (the Kubernetes API) cannot answer now?"""
    if isinstance(error, httpx.TransportError | ConnectionError | TimeoutError):
        return True
    if isinstance(error, httpx.HTTPStatusError):
        code = error.response.status_code
        return code >= 500 or code == 429
    return False


Starting = Row[TaskRow, WorkloadRow, str, int]


def starting_rows(session: Session) -> tuple[list[Starting], dict[int, str]]:
    """Starting tasks with their workload, project and device memory; workload id -> why
    for those whose rows cannot even be read (JSON that does not parse): one query, or one per
    task after that one failed."""
    query = (
        select(TaskRow, WorkloadRow, ProjectRow.name, NodeRow.gpu_memory_mib)
        .join(WorkloadRow, WorkloadRow.id == TaskRow.workload_id)
        .join(ProjectRow, ProjectRow.id == WorkloadRow.project_id)
        .join(NodeRow, NodeRow.name == TaskRow.node)
        .where(TaskRow.state == TaskState.STARTING.value)
    )
    try:
        return list(session.execute(query).all()), {}
    except Exception as error:
        if is_outage(error):
            raise
    session.expunge_all()
    rows: list[Starting] = []
    problems: dict[int, str] = {}
    for task_id, workload_id in session.execute(
        select(TaskRow.id, TaskRow.workload_id).where(TaskRow.state == TaskState.STARTING.value)
    ).all():
        try:
            rows.extend(session.execute(query.where(TaskRow.id == task_id)).all())
        except Exception as error:
            if is_outage(error):
                raise
            problems[workload_id] = f"its row cannot be read: {describe(error)}"
    return rows, problems
