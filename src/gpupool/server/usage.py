"""Allocation vs utilization over time: device samples folded into per-minute rows, and the
reports over them (per device, project and workload).

A sample says how busy a device was (utilization %) and how much memory it held. Each running
task on the device is charged a part of it (its milli-GPU there); the device's utilization is
attributed to the tasks in proportion to that charge. "Utilized GPU" is utilization x 1 device:
a device at 40% is 400 milli-GPU utilized, whatever is allocated on it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from typing import cast

from sqlalchemy import (
    ColumnElement,
    Table,
    and_,
    bindparam,
    case,
    delete,
    distinct,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.orm import Session

from gpupool.api.schemas import TaskState, UsageOut, UsagePoint
from gpupool.core.model import MILLI_PER_GPU
from gpupool.executors.base import UsageSample
from gpupool.server.db import UsageRow
from gpupool.server.services.cluster import Charge, RecentDevice, charges

USAGE = cast(Table, UsageRow.__table__)
BUCKET_S = 60
RETENTION_S = 14 * 24 * 3600
RECENT_S = 300
"""What `top` calls "now": the last five minutes."""

_DEVICE = ""
"""`project` and `workload` of a device's own row."""


def _charges(session: Session) -> dict[tuple[str, int], list[Charge]]:
    """Who is charged what on each (node, device), from the running tasks."""
    by_device: dict[tuple[str, int], list[Charge]] = defaultdict(list)
    for charge in charges(session, (TaskState.RUNNING.value,)):
        by_device[(charge.node, charge.device)].append(charge)
    return by_device


def record(session: Session, samples: Sequence[UsageSample], now_s: float) -> None:
    """Fold `samples` into the per-minute rows; drop rows older than the retention."""
    if not samples:
        return
    charges = _charges(session)
    increments: dict[tuple[float, str, int, str, str], list[int]] = {}
    project_ids = {c.project: c.project_id for on in charges.values() for c in on}

    def add(key: tuple[float, str, int, str, str], allocated: int, used: int, mem: int) -> None:
        entry = increments.setdefault(key, [0, 0, 0, 0])
        entry[0] += 1
        entry[1] += allocated
        entry[2] += used
        entry[3] = max(entry[3], mem)

    for sample in samples:
        bucket = float(int(sample.at_s // BUCKET_S) * BUCKET_S)
        on_device = charges.get((sample.node, sample.device_index), [])
        allocated = min(MILLI_PER_GPU, sum(charge.milli for charge in on_device))
        used = min(MILLI_PER_GPU, sample.utilization_percent * MILLI_PER_GPU // 100)
        add(
            (bucket, sample.node, sample.device_index, _DEVICE, _DEVICE),
            allocated,
            used,
            sample.memory_used_mib,
        )
        for charge in on_device:
            share = used * charge.milli // allocated if allocated else 0
            key = (bucket, sample.node, sample.device_index, charge.project, charge.workload)
            add(key, charge.milli, share, 0)
    buckets = sorted({key[0] for key in increments})
    c = USAGE.c
    existing = {
        (bucket, node, device, project, workload): row_id
        for row_id, bucket, node, device, project, workload in session.execute(
            select(c.id, c.bucket_s, c.node, c.device_index, c.project, c.workload).where(
                c.bucket_s.in_(buckets)
            )
        ).all()
    }
    inserts: list[dict[str, object]] = []
    updates: list[dict[str, object]] = []
    for key, (count, allocated, used, memory) in increments.items():
        row_id = existing.get(key)
        if row_id is None:
            inserts.append(
                {
                    "bucket_s": key[0],
                    "node": key[1],
                    "device_index": key[2],
                    "project": key[3],
                    "workload": key[4],
                    "project_id": project_ids.get(key[3]),
                    "samples": count,
                    "allocated_milli_sum": allocated,
                    "utilized_milli_sum": used,
                    "memory_used_max_mib": memory,
                }
            )
        else:
            updates.append(
                {"b_id": row_id, "b_count": count, "b_alloc": allocated, "b_used": used}
                | {"b_memory": memory}
            )
    # Core statements, many rows each: a large cluster's minute is thousands of rows.
    if inserts:
        session.execute(insert(USAGE), inserts)
    if updates:
        session.connection().execute(
            update(USAGE)
            .where(c.id == bindparam("b_id"))
            .values(
                samples=c.samples + bindparam("b_count"),
                allocated_milli_sum=c.allocated_milli_sum + bindparam("b_alloc"),
                utilized_milli_sum=c.utilized_milli_sum + bindparam("b_used"),
                memory_used_max_mib=case(
                    (c.memory_used_max_mib < bindparam("b_memory"), bindparam("b_memory")),
                    else_=c.memory_used_max_mib,
                ),
            ),
            updates,
        )
    session.execute(delete(UsageRow).where(UsageRow.bucket_s < now_s - RETENTION_S))


def report(
    session: Session,
    by: str,
    since_s: float,
    bucket_s: int,
    project_ids: Collection[int] | None,
) -> UsageOut:
    """Average allocation and utilization per `by` (device, project, workload) and bucket.

    `project_ids` limits project and workload rows to those projects (researchers: by id, so
    not an earlier project of the same name); devices are shown to everyone."""
    # A workload's row counts only the samples taken while it ran; averaging over all of the
    # device's samples in that minute makes it a time average, comparable with the device's.
    device_samples = {
        (row.bucket_s, row.node, row.device_index): row.samples
        for row in session.scalars(
            select(UsageRow).where(UsageRow.bucket_s >= since_s, UsageRow.project == _DEVICE)
        )
    }
    query = select(UsageRow).where(UsageRow.bucket_s >= since_s)
    if by == "device":
        query = query.where(UsageRow.project == _DEVICE)
    else:
        query = query.where(UsageRow.project != _DEVICE)
        if project_ids is not None:
            query = query.where(UsageRow.project_id.in_(sorted(project_ids)))
    # Per (key, bucket): a device row is one device; a project sums its workloads' devices.
    sums: dict[tuple[str, float], list[int]] = defaultdict(lambda: [0, 0, 0])
    span: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for row in session.scalars(query):
        key = _key(row, by)
        bucket = float(int(row.bucket_s // bucket_s) * bucket_s)
        count = max(1, device_samples.get((row.bucket_s, row.node, row.device_index), row.samples))
        average_allocated = row.allocated_milli_sum // count
        average_used = row.utilized_milli_sum // count
        for entry in (sums[(key, bucket)], span[key]):
            entry[0] += average_allocated
            entry[1] += average_used
            entry[2] = max(entry[2], row.memory_used_max_mib)
    minutes_per_bucket: dict[float, set[float]] = defaultdict(set)
    for minute, _, _ in device_samples:
        minutes_per_bucket[float(int(minute // bucket_s) * bucket_s)].add(minute)
    points = []
    for (key, bucket), (allocated, used, memory) in sorted(sums.items()):
        count = max(1, len(minutes_per_bucket[bucket]))
        points.append(
            UsagePoint(
                key=key,
                bucket_start=bucket,
                allocated_gpu_milli=allocated // count,
                utilized_gpu_milli=used // count,
                memory_used_max_mib=memory if by == "device" else None,
            )
        )
    span_minutes = max(1, len({minute for minute, _, _ in device_samples}))
    summary = [
        UsagePoint(
            key=key,
            bucket_start=since_s,
            allocated_gpu_milli=allocated // span_minutes,
            utilized_gpu_milli=used // span_minutes,
            memory_used_max_mib=memory if by == "device" else None,
        )
        for key, (allocated, used, memory) in sorted(span.items())
    ]
    return UsageOut(by=by, bucket_s=bucket_s, points=points, summary=summary)


def _key(row: UsageRow, by: str) -> str:
    if by == "device":
        return f"{row.node}/{row.device_index}"
    if by == "project":
        return row.project
    return f"{row.project}/{row.workload}"


def recent(
    session: Session, now_s: float
) -> tuple[dict[str, int], dict[tuple[str, int], RecentDevice]]:
    """Utilized milli-GPU per project, and utilization and memory used per device, over the
    last `RECENT_S`: the summaries of `report` by project and by device, summed by the database
    (a large cluster's five minutes are thousands of rows, read on every `/top` and `/nodes`).
    A project or device without rows is absent (unknown), never 0."""
    since = now_s - RECENT_S
    c = USAGE.c
    minutes = session.scalar(
        select(func.count(distinct(c.bucket_s))).where(c.bucket_s >= since, c.project == _DEVICE)
    )
    if not minutes:
        return {}, {}
    devices = {
        (node, index): RecentDevice(int(used) // minutes // 10, int(memory))
        for node, index, used, memory in session.execute(
            select(
                c.node,
                c.device_index,
                func.sum(c.utilized_milli_sum // _at_least_1(c.samples)),
                func.max(c.memory_used_max_mib),
            )
            .where(c.bucket_s >= since, c.project == _DEVICE)
            .group_by(c.node, c.device_index)
        )
    }
    # A workload's row is averaged over its device's samples of the minute (as in `report`).
    device = USAGE.alias("device")
    d = device.c
    on_device = and_(
        d.bucket_s == c.bucket_s,
        d.node == c.node,
        d.device_index == c.device_index,
        d.project == _DEVICE,
        d.workload == _DEVICE,
    )
    count = _at_least_1(func.coalesce(d.samples, c.samples))
    projects = {
        project: int(used) // minutes
        for project, used in session.execute(
            select(c.project, func.sum(c.utilized_milli_sum // count))
            .select_from(USAGE.outerjoin(device, on_device))
            .where(c.bucket_s >= since, c.project != _DEVICE)
            .group_by(c.project)
        )
    }
    return projects, devices


def _at_least_1(value: ColumnElement[int]) -> ColumnElement[int]:
    return case((value < 1, 1), else_=value)
