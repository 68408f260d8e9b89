"""Database rows -> the core's `Snapshot`, read in one transaction with plain column queries.

What goes in (the contract's view of a driver): ready nodes; every project and department;
pending and running workloads with the tasks that are starting or running as their placements;
completing workloads as their still-running tasks only, never to be evicted, moved or added to
(so that the core counts the devices they hold, in placement and in fair share). Left out:
workloads whose tasks are stopping after an eviction (they come back once stopped), suspended,
finished and deleting ones.

The scheduling loop keeps a `SnapshotCache` between cycles: with it, only the workload rows
whose change marker moved are read in full (`gpupool.server.snapshot_cache`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sqlalchemy import Text, cast, select
from sqlalchemy.orm import Session

from gpupool.core.model import (
    Limits,
    Node,
    Project,
    Resources,
    SchedulerSettings,
    Snapshot,
    Taint,
    TaintEffect,
)
from gpupool.server.db import NodeRow, ProjectRow
from gpupool.server.snapshot_cache import SnapshotCache, read_workloads
from gpupool.server.snapshot_rows import (
    ACTIVE_TASKS,
    LIVE_TASKS,
    SCHEDULED,
    WorkloadColumns,
    WorkloadKey,
    core_name,
    core_workload,
    gpu_request,
)

__all__ = [
    "ACTIVE_TASKS",
    "LIVE_TASKS",
    "NODE_STATES",
    "SCHEDULED",
    "BuiltSnapshot",
    "SnapshotCache",
    "WorkloadColumns",
    "WorkloadKey",
    "build_snapshot",
    "core_name",
    "core_workload",
    "gpu_request",
]


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


def build_snapshot(
    session: Session,
    now_s: float,
    settings: SchedulerSettings,
    cache: SnapshotCache | None = None,
) -> BuiltSnapshot:
    """The snapshot of what the database holds now. With `cache` (the loop's, kept between
    cycles), only rows that changed since the last snapshot are read in full, and rows that read
    as then give the objects made then."""
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
    workloads, keys, bad, reasons = read_workloads(connection, cache, node_names, project_names)
    if cache is not None:
        cache._nodes = kept_nodes
        cache._node_names = tuple(node_names)
        cache._project_names = project_names
    return BuiltSnapshot(
        Snapshot(nodes, projects, workloads, now_s=int(now_s), settings=settings),
        keys,
        bad,
        reasons,
    )


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


def _taint(key: str, value: str, effect: str) -> Taint:
    return Taint(key, value or None, TaintEffect(effect))
