"""Allocation vs utilization over time: device samples folded into per-minute rows, and the
reports over them (per device, project and workload).

A sample says how busy a device was (utilization %) and how much memory it held. Each running
task on the device is charged a part of it (its milli-GPU there); the device's utilization is
attributed to the tasks in proportion to that charge. "Utilized GPU" is utilization x 1 device:
a device at 40% is 400 milli-GPU utilized, whatever is allocated on it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Sequence
from typing import cast

from sqlalchemy import (
    ColumnElement,
    Table,
    and_,
    case,
    delete,
    distinct,
    func,
    select,
)
from sqlalchemy.orm import Session

from gpupool.api.schemas import TaskState, UsageOut, UsagePoint
from gpupool.core.model import MILLI_PER_GPU
from gpupool.executors.base import UsageSample
from gpupool.server import upsert
from gpupool.server.db import UsageRow
from gpupool.server.services.cluster import Charge, RecentDevice, charges

USAGE = cast(Table, UsageRow.__table__)
BUCKET_S = 60
RETENTION_S = 14 * 24 * 3600
RECENT_S = 300
"""What `top` calls "now": the last five minutes."""

_DEVICE = ""
"""`project` and `workload` of a device's own row."""


Key = tuple[float, str, int, str, str]
"""A usage row: (minute, node, device index, project, workload); a device's own row has an
empty project and workload."""


class UsageFold:
    """Samples folded into per-minute rows in memory, until they are written (`rows`,
    `written`). The loop writes them every 15 s and when their minute is over
    (`SchedulingLoop._write_usage`) rather than at every sample (at 10,000 nodes 141,000 rows
    every 5 s, and on PostgreSQL as many dead row versions). Not thread-safe: the loop's
    thread only."""

    def __init__(self) -> None:
        self._rows: dict[Key, list[int]] = {}
        """Per row: samples, allocated milli sum, utilized milli sum, memory peak MiB."""
        self._project_ids: dict[str, int | None] = {}
        self._minutes: set[float] = set()
        """The minutes `_rows` holds: the loop asks every iteration whether one is over, which
        must not cost a pass over 141,000 rows."""

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, samples: Sequence[UsageSample], held: Sequence[Charge]) -> None:
        """Fold `samples`, attributing each device's utilization to the running tasks of
        `held` on it in proportion to their charges."""
        on: dict[tuple[str, int], list[Charge]] = defaultdict(list)
        project_ids = self._project_ids
        for charge in held:
            if charge.running:
                on[(charge.node, charge.device)].append(charge)
                project_ids[charge.project] = charge.project_id
        rows = self._rows
        minutes = self._minutes
        none: list[Charge] = []
        last_minute = math.nan
        for sample in samples:
            minute = float(int(sample.at_s // BUCKET_S) * BUCKET_S)
            if minute != last_minute:
                minutes.add(minute)
                last_minute = minute
            node, index = sample.node, sample.device_index
            on_device = on.get((node, index), none)
            allocated = 0
            for charge in on_device:
                allocated += charge.milli
            if allocated > MILLI_PER_GPU:
                allocated = MILLI_PER_GPU
            used = min(MILLI_PER_GPU, sample.utilization_percent * MILLI_PER_GPU // 100)
            key: Key = (minute, node, index, _DEVICE, _DEVICE)
            entry = rows.get(key)
            if entry is None:
                entry = rows[key] = [0, 0, 0, 0]
            entry[0] += 1
            entry[1] += allocated
            entry[2] += used
            if sample.memory_used_mib > entry[3]:
                entry[3] = sample.memory_used_mib
            for charge in on_device:
                key = (minute, node, index, charge.project, charge.workload)
                entry = rows.get(key)
                if entry is None:
                    entry = rows[key] = [0, 0, 0, 0]
                entry[0] += 1
                entry[1] += charge.milli
                entry[2] += used * charge.milli // allocated if allocated else 0

    def minutes(self) -> list[float]:
        return sorted(self._minutes)

    def rows(self, before_s: float = math.inf) -> list[tuple[object, ...]]:
        """The rows of the minutes that start before `before_s`, as `write` takes them."""
        if not any(minute < before_s for minute in self._minutes):
            return []
        project_ids = self._project_ids
        return [
            (*key, project_ids.get(key[3]), *entry)
            for key, entry in self._rows.items()
            if key[0] < before_s
        ]

    def trim(self, max_rows: int) -> None:
        """Drop the oldest minutes while more than `max_rows` rows are kept (the newest minute
        always stays)."""
        minutes = self.minutes()
        while len(self._rows) > max_rows and len(minutes) > 1:
            oldest = minutes.pop(0)
            self._rows = {key: entry for key, entry in self._rows.items() if key[0] != oldest}
            self._minutes.discard(oldest)

    def written(self, before_s: float = math.inf) -> None:
        """Forget the rows `rows(before_s)` gave, once they are committed."""
        self._rows = {key: entry for key, entry in self._rows.items() if key[0] >= before_s}
        self._minutes = {minute for minute in self._minutes if minute >= before_s}
        if not self._rows:
            self._project_ids = {}


def record(
    session: Session,
    samples: Sequence[UsageSample],
    now_s: float,
    held: Sequence[Charge] | None = None,
) -> None:
    """Fold `samples` into the per-minute rows in the database at once; drop rows older than
    the retention. `held`: the charges of the tasks holding devices now
    (`services.cluster.charges`); read here when not given. The loop folds in memory instead
    (`UsageFold`) and writes every 15 s."""
    if not samples:
        return
    fold = UsageFold()
    fold.add(samples, charges(session, (TaskState.RUNNING.value,)) if held is None else held)
    write(session, fold.rows(), now_s)


def write(session: Session, rows: Sequence[tuple[object, ...]], now_s: float) -> None:
    """Add `rows` (`UsageFold.rows`) into the per-minute rows; drop rows past the retention."""
    upsert.add_rows(
        session.connection(),
        USAGE,
        rows,
        keys=("bucket_s", "node", "device_index", "project", "workload"),
        kept=("project_id",),
        sums=("samples", "allocated_milli_sum", "utilized_milli_sum"),
        peaks=("memory_used_max_mib",),
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
