"""Database rows -> the core's `Snapshot`, read in one transaction with plain column queries.

What goes in (the contract's view of a driver): ready nodes; every project and department;
pending and running workloads with the tasks that are starting or running as their placements;
completing workloads as their still-running tasks only, never to be evicted, moved or added to
(so that the core counts the devices they hold, in placement and in fair share). Left out:
workloads whose tasks are stopping after an eviction (they come back once stopped), suspended,
finished and deleting ones.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

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


class WorkloadKey(NamedTuple):
    """Which row and which version of it a snapshot's workload came from. A named tuple of
    plain values: the collector stops tracking it, and the loop keeps one per row between
    cycles (`SnapshotCache`; 130,000 at 10,000 nodes that each full collection walked)."""

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
    reasons: dict[str, str | None] = field(default_factory=dict)
    """Core workload name -> its stored pending reason, for the workloads pending when read:
    the cycle writes only the reasons that changed (`persist`)."""


NODE_STATES = ("ready", "cordoned", "notready")
"""Node states the snapshot includes: cordoned and not-ready nodes keep their work (their taints
keep new work away)."""


_COMPLETING = WorkloadStatus.COMPLETING.value
_READ = (
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
    WorkloadRow.pending_reason,  # last: not part of what the cache compares
)
"""The workload columns the snapshot reads, in the order of its rows."""
_NODE_READ = (
    NodeRow.name,
    NodeRow.gpu_count,
    NodeRow.gpu_memory_mib,
    NodeRow.gpu_model,
    NodeRow.cpu_milli,
    NodeRow.memory_mib,
    cast(NodeRow.labels, Text).label("labels"),
    cast(NodeRow.taints, Text).label("taints"),
)
"""The node columns the snapshot reads (JSON as text, parsed when the row changed)."""
_AT = {name: at for at, name in enumerate(select(*_READ).selected_columns.keys())}
_PROJECT_ID, _STATUS, _TASKS = _AT["project_id"], _AT["status"], _AT["tasks"]
_MIN_AVAILABLE, _ORIGIN = _AT["min_available"], _AT["origin"]
_REASON = len(_READ) - 1
assert _AT["pending_reason"] == _REASON, "the pending reason is read last"
_PENDING = WorkloadStatus.PENDING.value
_Made = tuple[tuple[object, ...], str, tuple[TaskPlacement, ...], Workload, WorkloadKey]
"""A row's values as read, its project's name, its placements, and what was made of them."""
_TaskKey = tuple[int, str, str, int | None]
"""A task row as read: task index, node, devices (JSON text), burst device."""


class SnapshotCache:
    """What the last snapshot made of each row, kept by the scheduling loop between cycles.

    A loaded server reads the same 100,000 rows every cycle and all but a few are unchanged;
    checking each row, parsing its JSON and making its `Workload` cost about 30 µs a row
    (3.4 to 4.9 s a cycle at 130,807 workloads, `benchmarks/server_cycle.py`). With the cache,
    a workload whose columns, project and placements read exactly as last time is the object
    made then (the core's model is immutable), and a task or node row that reads as last time
    is its `TaskPlacement` or `Node` of then. Keyed by the values read, not by the row's
    `version`, so no write path has to remember to bump
    anything for the snapshot to see it. Only what the last snapshot read is kept.
    """

    __slots__ = ("_nodes", "_placements", "_workloads")

    def __init__(self) -> None:
        self._workloads: dict[int, _Made] = {}
        self._placements: dict[_TaskKey, TaskPlacement] = {}
        self._nodes: dict[tuple[object, ...], Node] = {}

    def __len__(self) -> int:
        return len(self._workloads)


def build_snapshot(
    session: Session,
    now_s: float,
    settings: SchedulerSettings,
    cache: SnapshotCache | None = None,
) -> BuiltSnapshot:
    """The snapshot of what the database holds now. With `cache` (the loop's, kept between
    cycles), rows that read as in the last snapshot give the objects made then."""
    session.flush()  # the Core queries below run on the connection: no autoflush there
    # Core queries on the session's connection: the ORM's row handling, which these column
    # queries do not need, cost as much as the rest of a cached row.
    connection = session.connection()
    made_nodes = {} if cache is None else cache._nodes
    kept_nodes: dict[tuple[object, ...], Node] = {}
    for node_row in connection.execute(
        select(*_NODE_READ).where(NodeRow.state.in_(NODE_STATES)).order_by(NodeRow.name)
    ).all():
        node_values = tuple(node_row)
        made_node = made_nodes.get(node_values)
        if made_node is None:
            made_node = _node(*node_row)  # the columns of `_NODE_READ`, in order
        kept_nodes[node_values] = made_node
    nodes = tuple(kept_nodes.values())
    node_names = {node.name: node.name for node in nodes}
    """Each node's name as the one string object its `Node` holds (placements share it)."""
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
    made_placements = {} if cache is None else cache._placements
    kept_placements: dict[_TaskKey, TaskPlacement] = {}
    for workload_id, task_index, node, devices_text, burst, state in connection.execute(
        select(
            TaskRow.workload_id,
            TaskRow.task_index,
            TaskRow.node,
            # As text, parsed here and only when this task reads otherwise than last cycle.
            cast(TaskRow.devices, Text).label("devices"),
            TaskRow.burst_device,
            TaskRow.state,
        ).where(TaskRow.state.in_(LIVE_TASKS))
    ).all():
        if state == TaskState.STOPPING.value:
            stopping.add(workload_id)
        elif node not in node_names:
            lost.add(workload_id)
        else:
            task_key = (task_index, node, devices_text, burst)
            placement = made_placements.get(task_key)
            if placement is None:
                placement = _placement(task_index, node_names[node], devices_text, burst)
            kept_placements[task_key] = placement
            live[workload_id].append(placement)
    workloads: list[Workload] = []
    keys: dict[str, WorkloadKey] = {}
    bad: dict[int, str] = {}
    reasons: dict[str, str | None] = {}
    made = {} if cache is None else cache._workloads
    kept: dict[int, _Made] = {}
    for row in connection.execute(
        select(*_READ).where(WorkloadRow.status.in_(SCHEDULED)).order_by(WorkloadRow.id)
    ).all():
        # By position: a row's attribute by name costs more than the rest of a cached row.
        # The pending reason changes with every cycle's numbers: not part of what is compared.
        read = tuple(row)
        values = read[:_REASON]
        row_id = values[0]
        found = live.get(row_id)
        placements: tuple[TaskPlacement, ...] = ()
        if found is not None:
            if len(found) > 1:
                found.sort(key=_task_index)
            placements = tuple(found)
        if (not placements and row_id in stopping) or row_id in lost:
            continue
        external = values[_ORIGIN] == "kubernetes"
        at_least = values[_MIN_AVAILABLE]
        if external and at_least is not None and values[_TASKS] < at_least:
            continue  # a pod group that still waits for its pods
        completing = values[_STATUS] == _COMPLETING
        if completing and not placements:
            continue
        project = project_names[values[_PROJECT_ID]]
        last = made.get(row_id)
        if last is not None and last[0] == values and last[1] == project and last[2] == placements:
            workload, key = last[3], last[4]
            kept[row_id] = last  # not a new entry: what a cycle keeps is what changed
        else:
            try:
                columns = _checked(row._mapping)
                workload = core_workload(columns, project, placements, completing=completing)
            except Exception as error:  # a bad row: left out, and failed by the loop
                bad[row_id] = str(error) if isinstance(error, _BadRowError) else describe(error)
                continue
            key = WorkloadKey(
                row_id, row.version, project, row.name, external, row.project_id, row.status
            )
            kept[row_id] = (values, project, placements, workload, key)
        keys[workload.name] = key
        if values[_STATUS] == _PENDING:
            stored_reason = read[_REASON]
            reasons[workload.name] = stored_reason if isinstance(stored_reason, str) else None
        workloads.append(workload)
    if cache is not None:
        cache._workloads = kept
        cache._placements = kept_placements
        cache._nodes = kept_nodes
    return BuiltSnapshot(
        Snapshot(nodes, projects, tuple(workloads), now_s=int(now_s), settings=settings),
        keys,
        bad,
        reasons,
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


_COLUMNS = tuple(column.name for column in fields(WorkloadColumns))


def _checked(row: Any) -> WorkloadColumns:
    values = {name: row[name] for name in _COLUMNS}
    try:
        values["node_selector"] = parse_json(values["node_selector"], "node_selector")
        values["tolerations"] = parse_json(values["tolerations"], "tolerations")
    except ValueError as error:
        raise _BadRowError(str(error)) from None
    problem = snapshot_problem(**{name: values[name] for name in _CHECKED})
    if problem is not None:
        raise _BadRowError(problem)
    return WorkloadColumns(**values)


@functools.lru_cache(maxsize=4096)
def gpu_request(kind: str, amount: int, limit_milli: int | None) -> GpuRequest:
    """One shared `GpuRequest` per request (they are immutable): a 100,000-row snapshot asks
    for a few dozen distinct ones."""
    request_kind = GpuRequestKind(kind)
    if request_kind is GpuRequestKind.WHOLE:
        return GpuRequest.whole(amount)
    if request_kind is GpuRequestKind.FRACTION:
        return GpuRequest.fraction(amount, limit_milli)
    return GpuRequest.memory(amount)


def _node(
    name: str,
    gpu_count: int,
    gpu_memory_mib: int,
    gpu_model: str | None,
    cpu_milli: int | None,
    memory_mib: int | None,
    labels_text: str | None,
    taints_text: str | None,
) -> Node:
    labels: dict[str, str] = json.loads(labels_text) if labels_text else {}
    taints: list[list[str]] = json.loads(taints_text) if taints_text else []
    return Node(
        name=name,
        gpu_count=gpu_count,
        gpu_memory_mib=gpu_memory_mib,
        gpu_model=gpu_model,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        labels=tuple(sorted(labels.items())),
        taints=tuple(_taint(*t) for t in taints),
    )


def _task_index(placement: TaskPlacement) -> int:
    return placement.task_index


def _placement(task_index: int, node: str, devices_text: str, burst: int | None) -> TaskPlacement:
    devices = tuple(json.loads(devices_text))
    if burst is not None and devices == (burst,):
        burst = None  # written before rows kept the charged device: it runs there
    return TaskPlacement(task_index, node, devices, burst)


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
