"""A workload row as the core sees it: the columns read, checked and made into a `Workload`.

Shared by the snapshot (`gpupool.server.snapshot`), `--dry-run` and the API's views; no queries
here.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

from gpupool.api.schemas import WorkloadStatus
from gpupool.core.lifecycle import TASK, TaskEvent
from gpupool.core.model import (
    GpuRequest,
    GpuRequestKind,
    TaintEffect,
    TaskPlacement,
    Toleration,
    TolerationOperator,
    Workload,
    WorkloadType,
)
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


class BadRowError(ValueError):
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


def checked_columns(row: Any) -> WorkloadColumns:
    values = {name: row[name] for name in _COLUMNS}
    try:
        values["node_selector"] = parse_json(values["node_selector"], "node_selector")
        values["tolerations"] = parse_json(values["tolerations"], "tolerations")
    except ValueError as error:
        raise BadRowError(str(error)) from None
    problem = snapshot_problem(**{name: values[name] for name in _CHECKED})
    if problem is not None:
        raise BadRowError(problem)
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


def task_index_of(placement: TaskPlacement) -> int:
    return placement.task_index


def placement_of(task_index: int, node: str, devices_text: str, burst: int | None) -> TaskPlacement:
    devices = tuple(json.loads(devices_text))
    if burst is not None and devices == (burst,):
        burst = None  # written before rows kept the charged device: it runs there
    return TaskPlacement(task_index, node, devices, burst)


def _toleration(spec: dict[str, str | None]) -> Toleration:
    effect = spec.get("effect")
    return Toleration(
        key=spec.get("key") or None,
        operator=TolerationOperator(spec.get("operator") or "Equal"),
        value=spec.get("value"),
        effect=TaintEffect(effect) if effect else None,
    )
