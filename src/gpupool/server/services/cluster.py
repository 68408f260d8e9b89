"""Nodes, devices and the live allocation view (`top`)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from sqlalchemy import Row, Text, cast, delete, func, insert, select
from sqlalchemy.orm import Session

from gpupool.api.schemas import (
    DeviceOut,
    DeviceShare,
    NamesOut,
    NodeIn,
    NodeOut,
    NodeTop,
    ProjectTop,
    TaskState,
    TopOut,
    WorkloadStatus,
)
from gpupool.core.decisions import ProjectShare
from gpupool.core.model import MILLI_PER_GPU
from gpupool.executors.base import DeviceInfo, NodeInventory
from gpupool.server import eventlog
from gpupool.server.auth import Principal
from gpupool.server.db import (
    DeviceRow,
    NodeRow,
    ProjectRow,
    TaskRow,
    WorkloadRow,
    physical_devices,
)
from gpupool.server.errors import not_found
from gpupool.server.snapshot import core_name, gpu_request

_HOLDING = (TaskState.STARTING.value, TaskState.RUNNING.value, TaskState.STOPPING.value)


def inventory_of(body: NodeIn) -> NodeInventory:
    """A node registered through the API, as an executor would report it."""
    devices = tuple(
        DeviceInfo(index=d.index, memory_mib=d.memory_mib, model=d.model, uuid=d.uuid)
        for d in body.devices
    ) or tuple(
        DeviceInfo(index=i, memory_mib=body.gpu_memory_mib, model=body.gpu_model)
        for i in range(body.gpu_count)
    )
    return NodeInventory(
        name=body.name,
        devices=devices,
        cpu_milli=body.cpu_milli,
        memory_mib=body.memory_mib,
        labels=tuple(sorted(body.labels.items())),
    )


def register(session: Session, node: NodeInventory, executor: str, now_s: float) -> NodeRow:
    """Create or update a node and replace its devices; it is ready from now on."""
    row = session.execute(select(NodeRow).where(NodeRow.name == node.name)).scalar_one_or_none()
    if row is None:
        row = NodeRow(name=node.name, executor=executor, registered_at=now_s)
        session.add(row)
    row.state = node.state
    row.taints = [list(taint) for taint in node.taints]
    row.gpu_count = node.gpu_count
    row.gpu_memory_mib = node.gpu_memory_mib
    row.gpu_model = node.gpu_model
    row.cpu_milli = node.cpu_milli
    row.memory_mib = node.memory_mib
    row.labels = dict(node.labels)
    row.heartbeat_at = now_s
    session.flush()
    session.execute(delete(DeviceRow).where(DeviceRow.node_id == row.id))
    if node.devices:
        session.execute(
            insert(DeviceRow),
            [
                {
                    "node_id": row.id,
                    "device_index": d.index,
                    "uuid": d.uuid,
                    "model": d.model,
                    "memory_mib": d.memory_mib,
                }
                for d in node.devices
            ],
        )
    return row


def register_by(session: Session, body: NodeIn, now_s: float, actor: str) -> None:
    """A node registered through the API by `actor` (an admin), in the audit log."""
    inventory = inventory_of(body)
    register(session, inventory, "api", now_s)
    eventlog.add(
        session,
        now_s,
        "node-registered",
        f"{body.name} ({len(inventory.devices)} GPUs) by {actor}",
        node=body.name,
        actor=actor,
    )


@dataclass(frozen=True, slots=True)
class Charge:
    """What one task holds on one device."""

    node: str
    device: int
    project: str
    workload: str
    milli: int
    """Milli-GPU on this device (1000 for a whole device)."""
    project_id: int | None = None
    running: bool = True
    """The task is running (not starting or stopping): only running tasks are charged a
    device's utilization (`usage`)."""


_DEVICE_LISTS: dict[str, tuple[int, ...]] = {}
"""A task row's `devices` as stored (JSON text) -> the devices: a cluster's tasks hold a few
hundred distinct lists (`[0]`, `[2, 3]`, ...), and parsing each row's was a third of reading
the charges of 45,000 tasks."""


def _device_list(text: str | None) -> tuple[int, ...]:
    """Nothing for a value that is not a list of device numbers (a row written by hand): its
    charges are not worth a failed read of everyone's."""
    if text is None:
        return ()
    devices = _DEVICE_LISTS.get(text)
    if devices is None:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        ok = isinstance(parsed, list) and all(type(d) is int for d in parsed)
        devices = tuple(parsed) if ok and isinstance(parsed, list) else ()
        if len(_DEVICE_LISTS) >= 4096:
            _DEVICE_LISTS.clear()
        _DEVICE_LISTS[text] = devices
    return devices


def charges(session: Session, states: tuple[str, ...] = _HOLDING) -> list[Charge]:
    """One per (task in `states`, device it holds). Read through the connection, not the ORM:
    at 10,000 nodes 45,000 tasks, and the ORM's row handling was a third of the read."""
    rows = (
        session.connection()
        .execute(
            select(
                TaskRow.node,
                cast(TaskRow.devices, Text),
                TaskRow.burst_device,
                WorkloadRow.name,
                WorkloadRow.gpu_kind,
                WorkloadRow.gpu_amount,
                ProjectRow.name,
                NodeRow.gpu_memory_mib,
                ProjectRow.id,
                TaskRow.state,
            )
            .join(WorkloadRow, WorkloadRow.id == TaskRow.workload_id)
            .join(ProjectRow, ProjectRow.id == WorkloadRow.project_id)
            .join(NodeRow, NodeRow.name == TaskRow.node)
            .where(TaskRow.state.in_(states))
        )
        .all()
    )
    running = TaskState.RUNNING.value
    milli_of: dict[tuple[str, int, int], int] = {}
    """(kind, amount, device memory) -> milli-GPU charged per device: a few shapes."""
    result: list[Charge] = []
    for (
        node,
        devices,
        burst,
        workload,
        kind,
        amount,
        project,
        memory_mib,
        project_id,
        state,
    ) in rows:
        milli = milli_of.get((kind, amount, memory_mib))
        if milli is None:
            milli = min(MILLI_PER_GPU, gpu_request(kind, amount, None).milli_on(memory_mib))
            milli_of[(kind, amount, memory_mib)] = milli
        on = physical_devices(_device_list(devices), burst)
        is_running = state == running
        for device in on:
            result.append(Charge(node, device, project, workload, milli, project_id, is_running))
    return result


Shares = dict[tuple[str, int], dict[tuple[str, str], int]]
"""(node, device) -> (project, workload) -> milli-GPU held there."""


def _allocations(session: Session) -> tuple[Shares, dict[str, int]]:
    """Milli-GPU held per (node, device) by each workload, and per project."""
    per_device: Shares = defaultdict(lambda: defaultdict(int))
    per_project: dict[str, int] = defaultdict(int)
    for charge in charges(session):
        per_device[(charge.node, charge.device)][(charge.project, charge.workload)] += charge.milli
        per_project[charge.project] += charge.milli
    return per_device, per_project


def _device_shares(
    held: Mapping[tuple[str, str], int], viewer: Principal | None
) -> tuple[list[str], list[DeviceShare]]:
    """The names of what holds a device and its shares, as `viewer` may see them: a researcher
    sees another project's share, never its workloads' names."""
    names = []
    shares = []
    for (project, workload), milli in sorted(held.items(), key=lambda item: (-item[1], item[0])):
        visible = viewer is None or viewer.may_use(project)
        if visible:
            names.append(core_name(project, workload))
        shares.append(
            DeviceShare(project=project, workload=workload if visible else None, milli=milli)
        )
    return names, shares


class RecentDevice(NamedTuple):
    """One device over the last five minutes of usage rows (`usage.recent`), as `/nodes` and
    `/top` show it."""

    utilization_percent: int
    """Average."""
    memory_used_mib: int
    """The peak."""


def nodes(
    session: Session,
    name: str | None = None,
    recent_devices: Mapping[tuple[str, int], RecentDevice] | None = None,
    viewer: Principal | None = None,
    allocations: Shares | None = None,
) -> list[NodeOut]:
    """Nodes with their devices and who holds them; `viewer` (None: all) limits the names.
    `allocations`: what `_allocations` read already (else it is read here)."""
    query = select(NodeRow).order_by(NodeRow.name)
    if name is not None:
        query = query.where(NodeRow.name == name)
    rows = session.scalars(query).all()
    if name is not None and not rows:
        raise not_found("node", name, "list nodes with gpupool nodes")
    per_device = allocations if allocations is not None else _allocations(session)[0]
    # Columns, not objects: a large cluster has thousands of devices, read on every /nodes.
    devices: dict[int, list[Row[int, int, str | None, str | None, int]]] = defaultdict(list)
    for device in session.execute(
        select(
            DeviceRow.node_id,
            DeviceRow.device_index,
            DeviceRow.uuid,
            DeviceRow.model,
            DeviceRow.memory_mib,
        ).order_by(DeviceRow.device_index)
    ):
        devices[device.node_id].append(device)
    recent = recent_devices or {}
    out = []
    for row in rows:
        device_views = []
        for d in devices[row.id]:
            held = per_device.get((row.name, d.device_index), {})
            names, shares = _device_shares(held, viewer)
            seen = recent.get((row.name, d.device_index))
            device_views.append(
                DeviceOut(
                    index=d.device_index,
                    uuid=d.uuid,
                    model=d.model,
                    memory_mib=d.memory_mib,
                    allocated_milli=sum(held.values()),
                    workloads=names,
                    shares=shares,
                    utilization_percent=None if seen is None else seen.utilization_percent,
                    memory_used_mib=None if seen is None else seen.memory_used_mib,
                )
            )
        out.append(
            NodeOut(
                name=row.name,
                executor=row.executor,
                state=row.state,
                gpu_count=row.gpu_count,
                gpu_memory_mib=row.gpu_memory_mib,
                gpu_model=row.gpu_model,
                cpu_milli=row.cpu_milli,
                memory_mib=row.memory_mib,
                labels=row.labels,
                allocated_gpu_milli=sum(d.allocated_milli for d in device_views),
                devices=device_views,
            )
        )
    return out


def top(
    session: Session,
    now_s: float,
    shares: Mapping[str, ProjectShare],
    last_cycle_at: float | None,
    last_cycle_ms: float | None,
    utilized: Mapping[str, int] | None = None,
    recent_devices: Mapping[tuple[str, int], RecentDevice] | None = None,
    viewer: Principal | None = None,
) -> TopOut:
    per_device, per_project = _allocations(session)
    node_views = nodes(
        session, recent_devices=recent_devices, viewer=viewer, allocations=per_device
    )
    counts: dict[tuple[str, str], int] = defaultdict(int)
    requested: dict[str, int] = defaultdict(int)
    # Counted per request shape by the database: thousands of pending workloads, few shapes.
    shape = (
        ProjectRow.name,
        WorkloadRow.status,
        WorkloadRow.gpu_kind,
        WorkloadRow.gpu_amount,
        WorkloadRow.tasks,
    )
    for project, status, kind, amount, tasks, count in session.execute(
        select(*shape, func.count())
        .join(ProjectRow, ProjectRow.id == WorkloadRow.project_id)
        .where(WorkloadRow.status.in_((WorkloadStatus.PENDING.value, WorkloadStatus.RUNNING.value)))
        .group_by(*shape)
    ):
        counts[(project, status)] += count
        requested[project] += gpu_request(kind, amount, None).milli_on(81920) * tasks * count
    projects = [
        ProjectTop(
            name=row.name,
            quota_gpu_milli=row.quota_gpu_milli,
            fair_share_gpu_milli=(
                shares[row.name].fair_share.gpu_milli if row.name in shares else None
            ),
            allocated_gpu_milli=per_project.get(row.name, 0),
            requested_gpu_milli=(
                shares[row.name].demand.gpu_milli
                if row.name in shares
                else requested.get(row.name, 0)
            ),
            utilized_gpu_milli=(utilized or {}).get(row.name),
            running=counts.get((row.name, WorkloadStatus.RUNNING.value), 0),
            pending=counts.get((row.name, WorkloadStatus.PENDING.value), 0),
        )
        for row in session.scalars(
            select(ProjectRow).where(ProjectRow.is_department.is_(False)).order_by(ProjectRow.name)
        )
    ]
    return TopOut(
        at=now_s,
        capacity_gpu_milli=sum(n.gpu_count for n in node_views if n.state == "ready")
        * MILLI_PER_GPU,
        allocated_gpu_milli=sum(n.allocated_gpu_milli for n in node_views),
        projects=projects,
        nodes=[
            NodeTop(
                name=n.name,
                gpu_count=n.gpu_count,
                allocated_gpu_milli=n.allocated_gpu_milli,
                devices=n.devices,
            )
            for n in node_views
        ],
        last_cycle_at=last_cycle_at,
        last_cycle_ms=last_cycle_ms,
    )


def names(session: Session) -> NamesOut:
    """Every project's and node's name."""
    projects = session.scalars(
        select(ProjectRow.name).where(ProjectRow.is_department.is_(False)).order_by(ProjectRow.name)
    )
    return NamesOut(
        projects=list(projects),
        nodes=list(session.scalars(select(NodeRow.name).order_by(NodeRow.name))),
    )
