"""Database rows -> the core's `Snapshot`, read in one transaction with plain column queries.

What goes in (the contract's view of a driver): ready nodes; every project and department;
pending and running workloads with the tasks that are starting or running as their placements;
completing workloads as their still-running tasks only, never to be evicted, moved or added to
(so that the core counts the devices they hold, in placement and in fair share). Left out:
workloads whose tasks are stopping after an eviction (they come back once stopped), suspended,
finished and deleting ones.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, fields
from typing import Any

from sqlalchemy import Text, cast, select
from sqlalchemy.orm import Session

from gpupool.api.schemas import TaskState, WorkloadStatus
from gpupool.core.lifecycle import TASK, TaskEvent
from gpupool.core.model import (
    GpuRequest,
    GpuRequestKind,
    Limits,
    Node,
    Project,
    Resources,
    SchedulerSettings,
    Snapshot,
    Taint,
    TaintEffect,
    TaskPlacement,
    Toleration,
    TolerationOperator,
    Workload,
    WorkloadType,
)
from gpupool.server.db import NodeRow, ProjectRow, TaskRow, WorkloadRow
from gpupool.server.quarantine import describe
from gpupool.server.rowcheck import parse_json, snapshot_problem

SCHEDULED = (
    WorkloadStatus.PENDING.value,
    WorkloadStatus.RUNNING.value,
    WorkloadStatus.COMPLETING.value,
)
"""Workload states the snapshot gives the core (completing ones as their running tasks)."""
ACTIVE_TASKS = tuple(state.value for state in TASK.sources(TaskEvent.STOP))
"""Task states of a task that runs or is about to: what an eviction, a move or a failure stops
(starting, running: the states the lifecycle table lets `stop` leave)."""
LIVE_TASKS = tuple(state.value for state in TASK.sources(TaskEvent.END))
"""Task states of a task that still holds its devices (starting, running, stopping: all but
done, the states `end` leaves)."""


def core_workload(
    row: WorkloadColumns,
    project: str,
    placements: tuple[TaskPlacement, ...] = (),
    completing: bool = False,
) -> Workload:
    """One workload as the core sees it; `completing`: only its running tasks, held as they are."""
    return Workload(
        name=core_name(project, row.name),
        project=project,
        type=WorkloadType(row.type),
        gpu=gpu_request(row.gpu_kind, row.gpu_amount, None if completing else row.gpu_limit_milli),
        tasks=len(placements) if completing else row.tasks,
        min_available=None if completing else row.min_available,
        priority=row.priority,
        preemptible=False if completing else row.preemptible,
        cpu_milli=row.cpu_milli,
        memory_mib=row.memory_mib,
        node_selector=tuple(
            (key, tuple(values)) for key, values in sorted(row.node_selector.items())
        ),
        submit_seq=row.id,
        started_at_s=int(row.started_at) if placements and row.started_at is not None else None,
        placements=placements,
        tolerations=tuple(_toleration(t) for t in row.tolerations or ()),
        movable=row.origin != "kubernetes",
        min_runtime_s=row.min_runtime_s,
    )


def core_name(project: str, workload: str) -> str:
    """Workload names are unique per project; the core wants one namespace."""
    return f"{project}/{workload}"


@dataclass(frozen=True, slots=True)
class WorkloadKey:
    """Which row and which version of it a snapshot's workload came from."""

    workload_id: int
    version: int
    project: str
    name: str
    external: bool = False
    """Pods someone else created (Kubernetes): never moved, and gone once evicted."""
    project_id: int = 0
    status: str = WorkloadStatus.PENDING.value
    """Its status as the snapshot read it: the from-state of the decision's transition."""


@dataclass(frozen=True, slots=True)
class BuiltSnapshot:
    snapshot: Snapshot
    keys: dict[str, WorkloadKey]
    """Core workload name -> its row."""
    bad: dict[int, str] = field(default_factory=dict)
    """Workload id -> why its row cannot be scheduled (left out; the loop fails it)."""


NODE_STATES = ("ready", "cordoned", "notready")
"""Node states the snapshot includes: cordoned and not-ready nodes keep their work (their taints
keep new work away)."""


def build_snapshot(session: Session, now_s: float, settings: SchedulerSettings) -> BuiltSnapshot:
    nodes = tuple(
        Node(
            name=row.name,
            gpu_count=row.gpu_count,
            gpu_memory_mib=row.gpu_memory_mib,
            gpu_model=row.gpu_model,
            cpu_milli=row.cpu_milli,
            memory_mib=row.memory_mib,
            labels=tuple(sorted(row.labels.items())),
            taints=tuple(_taint(*t) for t in row.taints or ()),
        )
        for row in session.scalars(
            select(NodeRow).where(NodeRow.state.in_(NODE_STATES)).order_by(NodeRow.name)
        )
    )
    node_names = {node.name for node in nodes}
    project_rows = session.scalars(select(ProjectRow).order_by(ProjectRow.id)).unique().all()
    project_names = {row.id: row.name for row in project_rows}
    projects = tuple(
        Project(
            name=row.name,
            parent=project_names.get(row.parent_id) if row.parent_id is not None else None,
            quota=Resources(row.quota_gpu_milli, row.quota_cpu_milli, row.quota_memory_mib),
            over_quota_weight=row.over_quota_weight,
            limit=Limits(row.limit_gpu_milli, row.limit_cpu_milli, row.limit_memory_mib),
            priority=row.priority,
            min_runtime_s=row.min_runtime_s,
        )
        for row in project_rows
    )
    live: dict[int, list[TaskPlacement]] = defaultdict(list)
    stopping: set[int] = set()
    lost: set[int] = set()
    """Workloads with tasks on nodes the snapshot lacks: left out until those tasks end."""
    for workload_id, task_index, node, devices, burst, state in session.execute(
        select(
            TaskRow.workload_id,
            TaskRow.task_index,
            TaskRow.node,
            TaskRow.devices,
            TaskRow.burst_device,
            TaskRow.state,
        ).where(TaskRow.state.in_(LIVE_TASKS))
    ):
        if state == TaskState.STOPPING.value:
            stopping.add(workload_id)
        elif node not in node_names:
            lost.add(workload_id)
        else:
            if burst is not None and tuple(devices) == (burst,):
                burst = None  # written before rows kept the charged device: it runs there
            live[workload_id].append(TaskPlacement(task_index, node, tuple(devices), burst))
    workloads: list[Workload] = []
    keys: dict[str, WorkloadKey] = {}
    bad: dict[int, str] = {}
    for row in session.execute(
        select(
            WorkloadRow.id,
            WorkloadRow.version,
            WorkloadRow.project_id,
            WorkloadRow.name,
            WorkloadRow.type,
            WorkloadRow.status,
            WorkloadRow.gpu_kind,
            WorkloadRow.gpu_amount,
            WorkloadRow.gpu_limit_milli,
            WorkloadRow.tasks,
            WorkloadRow.min_available,
            WorkloadRow.priority,
            WorkloadRow.preemptible,
            WorkloadRow.cpu_milli,
            WorkloadRow.memory_mib,
            # As text, parsed here: a value that does not parse costs its row only.
            cast(WorkloadRow.node_selector, Text).label("node_selector"),
            WorkloadRow.started_at,
            WorkloadRow.origin,
            cast(WorkloadRow.tolerations, Text).label("tolerations"),
            WorkloadRow.min_runtime_s,
        )
        .where(WorkloadRow.status.in_(SCHEDULED))
        .order_by(WorkloadRow.id)
    ):
        placements = tuple(sorted(live.get(row.id, ()), key=lambda p: p.task_index))
        if (not placements and row.id in stopping) or row.id in lost:
            continue
        external = row.origin == "kubernetes"
        if external and row.min_available is not None and row.tasks < row.min_available:
            continue  # a pod group that still waits for its pods
        completing = row.status == WorkloadStatus.COMPLETING.value
        if completing and not placements:
            continue
        try:
            columns = _checked(row._mapping)
            project = project_names[row.project_id]
            workload = core_workload(columns, project, placements, completing=completing)
        except Exception as error:  # a bad row: left out, and failed by the loop
            bad[row.id] = str(error) if isinstance(error, _BadRowError) else describe(error)
            continue
        keys[workload.name] = WorkloadKey(
            row.id, row.version, project, row.name, external, row.project_id, row.status
        )
        workloads.append(workload)
    return BuiltSnapshot(
        Snapshot(nodes, projects, tuple(workloads), now_s=int(now_s), settings=settings),
        keys,
        bad,
    )


class _BadRowError(ValueError):
    """A row that fails `gpupool.server.rowcheck`: the message is the problem."""


@dataclass(slots=True)
class WorkloadColumns:
    """The columns of a workload row that the core needs, JSON columns parsed and checked (a row
    read by `build_snapshot`, or a submission not stored yet: `--dry-run`)."""

    id: int
    name: str
    type: str
    gpu_kind: str
    gpu_amount: int
    gpu_limit_milli: int | None
    tasks: int
    min_available: int | None
    priority: int | None
    preemptible: bool | None
    cpu_milli: int
    memory_mib: int
    node_selector: dict[str, list[str]]
    started_at: float | None
    origin: str
    tolerations: list[dict[str, str | None]]
    min_runtime_s: int | None


_CHECKED = (
    "type", "gpu_kind", "gpu_amount", "gpu_limit_milli", "tasks", "min_available", "cpu_milli",
    "memory_mib", "node_selector", "tolerations",
)  # fmt: skip


def _checked(row: Any) -> WorkloadColumns:
    values = {column.name: row[column.name] for column in fields(WorkloadColumns)}
    try:
        values["node_selector"] = parse_json(values["node_selector"], "node_selector")
        values["tolerations"] = parse_json(values["tolerations"], "tolerations")
    except ValueError as error:
        raise _BadRowError(str(error)) from None
    problem = snapshot_problem(**{name: values[name] for name in _CHECKED})
    if problem is not None:
        raise _BadRowError(problem)
    return WorkloadColumns(**values)


def gpu_request(kind: str, amount: int, limit_milli: int | None) -> GpuRequest:
    request_kind = GpuRequestKind(kind)
    if request_kind is GpuRequestKind.WHOLE:
        return GpuRequest.whole(amount)
    if request_kind is GpuRequestKind.FRACTION:
        return GpuRequest.fraction(amount, limit_milli)
    return GpuRequest.memory(amount)


def _taint(key: str, value: str, effect: str) -> Taint:
    return Taint(key, value or None, TaintEffect(effect))


def _toleration(spec: dict[str, str | None]) -> Toleration:
    effect = spec.get("effect")
    return Toleration(
        key=spec.get("key") or None,
        operator=TolerationOperator(spec.get("operator") or "Equal"),
        value=spec.get("value"),
        effect=TaintEffect(effect) if effect else None,
    )
