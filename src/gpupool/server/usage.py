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
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    FromClause,
    Table,
    and_,
    case,
    delete,
    distinct,
    func,
    literal,
    null,
    select,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.orm import Session

from gpupool.api.schemas import TaskState, UsageOut, UsagePoint
from gpupool.core.model import MILLI_PER_GPU
from gpupool.executors.base import UsageSample
from gpupool.server import upsert
from gpupool.server.db import UsageHourRow, UsageRow
from gpupool.server.errors import invalid
from gpupool.server.history_sums import bucket_of
from gpupool.server.services.cluster import Charge, RecentDevice, charges

USAGE = cast(Table, UsageRow.__table__)
HOURS = cast(Table, UsageHourRow.__table__)
BUCKET_S = 60
RETENTION_S = 14 * 24 * 3600
"""How long the per-hour rows are kept: what a report may reach back to."""
MINUTE_RETENTION_S = 2 * 24 * 3600
"""How long the per-minute rows are kept (a report within it reads minutes, one further back
hours): at 1,000 nodes a minute is about 14,000 rows."""
HOUR_S = 3600
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
    """Add `rows` (`UsageFold.rows`) into the per-minute rows and into their hours' rows; drop
    rows past their retention. (Each write adds to the hours, rather than a roll-up once an
    hour is over: a sample that comes late, as Prometheus's do, still reaches its hour.)"""
    hours: dict[tuple[object, ...], list[Any]] = {}
    hour_of: dict[float, float] = {}
    """Minute -> its hour (`bucket_of`), worked out once per minute, not per row."""
    for row in cast(Sequence[tuple[Any, ...]], rows):
        hour = hour_of.get(row[0])
        if hour is None:
            hour = hour_of[row[0]] = bucket_of(row[0], HOUR_S)
        key = (hour, *row[1:5])
        entry = hours.get(key)
        if entry is None:
            hours[key] = list(row[5:])
        else:  # project_id, samples, allocated, utilized (summed), memory (the peak)
            entry[1] += row[6]
            entry[2] += row[7]
            entry[3] += row[8]
            entry[4] = max(entry[4], row[9])
    connection = session.connection()
    for table, table_rows in (
        (USAGE, rows),
        (HOURS, [(*key, *entry) for key, entry in hours.items()]),
    ):
        upsert.add_rows(
            connection,
            table,
            table_rows,
            keys=("bucket_s", "node", "device_index", "project", "workload"),
            kept=("project_id",),
            sums=("samples", "allocated_milli_sum", "utilized_milli_sum"),
            peaks=("memory_used_max_mib",),
        )
    session.execute(delete(UsageRow).where(UsageRow.bucket_s < now_s - MINUTE_RETENTION_S))
    session.execute(delete(UsageHourRow).where(UsageHourRow.bucket_s < now_s - RETENTION_S))


MAX_POINTS = 100_000
"""The most (key, bucket) points one report answers: a window of per-minute rows is summed by
the database, never read into the server (at 1,000 nodes a day is 20 million rows), and what
comes back is bounded too; a report past it is refused with the fix (wider buckets)."""


def report(
    session: Session,
    by: str,
    since_s: float,
    bucket_s: int,
    project_ids: Collection[int] | None,
    now_s: float | None = None,
) -> UsageOut:
    """Average allocation and utilization per `by` (device, project, workload) and bucket,
    summed by the database. `ApiError` 422 past `MAX_POINTS`.

    Since more than `MINUTE_RETENTION_S` before `now_s` the hours' rows are read (from the
    start of the hour `since_s` falls in), and `bucket_s` must be a multiple of an hour.
    `project_ids` limits project and workload rows to those projects (researchers: by id, so
    not an earlier project of the same name); devices are shown to everyone."""
    table = USAGE
    if now_s is not None and since_s < now_s - MINUTE_RETENTION_S:
        if bucket_s % HOUR_S:
            raise invalid(
                f"usage older than {MINUTE_RETENTION_S // 86_400} days is kept per hour: ask "
                f"for buckets of whole hours (bucket_s a multiple of {HOUR_S}), or fewer minutes",
                "bucket_s",
            )
        table = HOURS
        since_s = bucket_of(since_s, HOUR_S)
    c = table.c
    own = c.project == _DEVICE
    # A bucket is a number of whole seconds: the minutes' starts are whole, and integer
    # division is the same on SQLite and PostgreSQL (a float's CAST rounds on PostgreSQL).
    width = literal(bucket_s, BigInteger)
    bucket = (sql_cast(c.bucket_s, BigInteger) // width) * width
    # A workload's row counts only the samples taken while it ran; averaging over all of the
    # device's samples in that minute makes it a time average, comparable with the device's.
    if by == "device":
        keys: tuple[ColumnElement[Any], ...] = (c.node, c.device_index)
        count = _at_least_1(c.samples)
        source: FromClause = table
        where = [c.bucket_s >= since_s, own]
        memory: ColumnElement[Any] = func.max(c.memory_used_max_mib)
    else:
        keys = (c.project,) if by == "project" else (c.project, c.workload)
        source, count = _with_device_rows(table)
        where = [c.bucket_s >= since_s, c.project != _DEVICE]
        if project_ids is not None:
            where.append(c.project_id.in_(sorted(project_ids)))
        memory = null()
    query = (
        select(
            *keys,
            bucket.label("bucket"),
            func.sum(c.allocated_milli_sum // count),
            func.sum(c.utilized_milli_sum // count),
            memory,
        )
        .select_from(source)
        .where(*where)
        .group_by(*keys, bucket)
        .limit(MAX_POINTS + 1)
    )
    rows = session.execute(query).all()
    if len(rows) > MAX_POINTS:
        raise invalid(
            f"usage by {by} in buckets of {bucket_s} s comes to more than {MAX_POINTS:,} "
            "points: ask for wider buckets (bucket_s, up to 86400) or fewer minutes",
            "bucket_s",
        )
    per_bucket = {
        float(start): int(minutes)
        for start, minutes in session.execute(
            select(bucket, func.count(distinct(c.bucket_s)))
            .where(c.bucket_s >= since_s, own)
            .group_by(bucket)
        )
    }
    sums: dict[tuple[str, float], tuple[int, int, int | None]] = {}
    span: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for row in rows:
        key = "/".join(str(part) for part in row[: len(keys)])
        start, allocated, used, peak = row[len(keys) :]
        allocated, used = int(allocated or 0), int(used or 0)
        sums[(key, float(start))] = (allocated, used, None if peak is None else int(peak))
        entry = span[key]
        entry[0] += allocated
        entry[1] += used
        entry[2] = max(entry[2], int(peak or 0))
    points = [
        UsagePoint(
            key=key,
            bucket_start=start,
            allocated_gpu_milli=allocated // max(1, per_bucket.get(start, 0)),
            utilized_gpu_milli=used // max(1, per_bucket.get(start, 0)),
            memory_used_max_mib=peak if by == "device" else None,
        )
        for (key, start), (allocated, used, peak) in sorted(sums.items())
    ]
    span_minutes = max(1, sum(per_bucket.values()))
    summary = [
        UsagePoint(
            key=key,
            bucket_start=since_s,
            allocated_gpu_milli=allocated // span_minutes,
            utilized_gpu_milli=used // span_minutes,
            memory_used_max_mib=peak if by == "device" else None,
        )
        for key, (allocated, used, peak) in sorted(span.items())
    ]
    return UsageOut(by=by, bucket_s=bucket_s, points=points, summary=summary)


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
    source, count = _with_device_rows(USAGE)
    projects = {
        project: int(used) // minutes
        for project, used in session.execute(
            select(c.project, func.sum(c.utilized_milli_sum // count))
            .select_from(source)
            .where(c.bucket_s >= since, c.project != _DEVICE)
            .group_by(c.project)
        )
    }
    return projects, devices


def _with_device_rows(table: Table) -> tuple[FromClause, ColumnElement[int]]:
    """`table` with each row's device row of the same bucket joined (none for a device's own
    row), and the samples to average a row over: its device's, or its own where none."""
    device = table.alias("device")
    c, d = table.c, device.c
    on_device = and_(
        d.bucket_s == c.bucket_s,
        d.node == c.node,
        d.device_index == c.device_index,
        d.project == _DEVICE,
        d.workload == _DEVICE,
    )
    return table.outerjoin(device, on_device), _at_least_1(func.coalesce(d.samples, c.samples))


def _at_least_1(value: ColumnElement[int]) -> ColumnElement[int]:
    return case((value < 1, 1), else_=value)
