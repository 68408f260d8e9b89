"""Seeding the history store (per-minute and hourly rows) and the raw per-minute `usage`
table from a model of the cluster's past."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import Connection, Engine

from gpupool.api.schemas import WorkloadStatus
from gpupool.server.db import (
    ClusterHistoryRow,
    DeviceHistoryRow,
    ProjectHistoryRow,
    UsageRow,
)

from .common import RAW_SAMPLES_PER_MINUTE, SAMPLES_PER_MINUTE, say
from .plan import Plan


def _bulk(connection: Connection, table: str, columns: Sequence[str], rows: list[Any]) -> None:
    """Insert tuples through the DB-API's executemany (SQLite's `?` style): for the millions
    of history rows, about 2.5 times as fast as Core's insert() with a dict per row."""
    if not rows:
        return
    marks = ", ".join("?" for _ in columns)
    connection.exec_driver_sql(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)


_DEVICE_COLUMNS = (
    "resolution_s", "bucket_s", "node", "device_index", "samples", "allocated_milli_sum",
    "utilized_milli_sum", "utilized_samples", "memory_used_max_mib",
)  # fmt: skip
_PROJECT_COLUMNS = (
    "resolution_s", "bucket_s", "project_id", "samples", "allocated_milli_sum",
    "utilized_milli_sum", "utilized_samples", "requested_milli_sum",
)  # fmt: skip
_CLUSTER_COLUMNS = (
    "resolution_s", "bucket_s", "samples", "allocated_milli_sum", "utilized_milli_sum",
    "utilized_samples", "capacity_milli_sum", "pending_workloads_sum", "pending_milli_sum",
)  # fmt: skip
_USAGE_COLUMNS = (
    "bucket_s", "node", "device_index", "project", "workload", "samples",
    "allocated_milli_sum", "utilized_milli_sum", "memory_used_max_mib",
)  # fmt: skip

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def _day_curve(hours: FloatArray) -> FloatArray:
    """0 at 03:00 UTC, 1 at 15:00 UTC."""
    return 0.5 - 0.5 * np.cos(2 * np.pi * (hours - 3.0) / 24.0)


@dataclass(slots=True)
class _Series:
    """One chunk of minutes, per device, project and the cluster (values per sample)."""

    times: FloatArray
    alloc: IntArray
    """(minutes, devices) milli-GPU."""
    util: IntArray
    memory: IntArray
    project_alloc: IntArray
    """(minutes, projects)."""
    project_util: IntArray
    project_requested: IntArray
    pending: IntArray
    """(minutes,) pending workloads."""
    pending_milli: IntArray


class HistoryModel:
    """The cluster's past, minute by minute: each project's activity follows a day (busy at
    15:00 UTC, quiet at 03:00), quieter weekends and its own hourly wiggle; a device held by a
    project now is allocated while that activity is above the device's threshold; utilization
    is the project's efficiency, the time of day and noise."""

    def __init__(self, plan_: Plan) -> None:
        config = plan_.config
        self.rng = np.random.default_rng(config.seed)
        self.projects = plan_.projects
        count = len(self.projects)
        self.devices = config.gpus
        self.start_s = float(math.floor(plan_.now_s / 3600) * 3600 - config.days * 86400)
        self.end_s = float(math.floor(plan_.now_s / 60) * 60)
        """Exclusive: the minute under way has no row yet."""
        self.minutes = int((self.end_s - self.start_s) // 60)
        hours = self.minutes // 60 + 2
        self.knots = self.start_s + 3600.0 * np.arange(hours)
        self.wiggle = self.rng.normal(0.0, 0.07, size=(count, hours))
        owner = np.array(plan_.owner, dtype=np.int64)
        self.owner = np.where(owner >= 0, owner, 0)
        self.threshold = np.full(self.devices, 2.0)  # not held by anyone: never allocated
        for p in range(count):
            held = np.flatnonzero(owner == p)
            if len(held):
                order = self.rng.permutation(len(held))
                self.threshold[held[order]] = (np.arange(len(held)) + 0.5) / len(held)
        efficiency = np.array([p.efficiency for p in self.projects])
        self.device_efficiency = efficiency[self.owner] + self.rng.normal(0, 0.08, self.devices)
        self.onehot = np.zeros((self.devices, count), dtype=np.int64)
        self.onehot[np.flatnonzero(owner >= 0), owner[owner >= 0]] = 1
        self.base = np.array([p.base for p in self.projects])
        self.amplitude = np.array([p.amplitude for p in self.projects])
        self.phase = np.array([p.phase_h for p in self.projects])
        pending = [w for w in plan_.workloads if w.status == WorkloadStatus.PENDING.value]
        self.pending_now = len(pending)
        self.pending_mean_milli = (
            sum(w.gpus for w in pending) * 1000 / len(pending) if pending else 0.0
        )
        share = np.array([sum(1 for w in pending if w.project == p) for p in range(count)])
        self.pending_share = share / max(1, share.sum())

    def chunk(self, first: int, last: int) -> _Series:
        """Minutes [first, last) since `start_s`."""
        times = (self.start_s + 60.0 * np.arange(first, last)).astype(np.float64)
        hours = (times % 86400) / 3600
        weekday = ((times // 86400).astype(np.int64) + 3) % 7  # 1970-01-01 was a Thursday
        weekend = np.where(weekday >= 5, 0.55, 1.0)
        day = 0.5 - 0.5 * np.cos(2 * np.pi * (hours[:, None] - 3.0 - self.phase[None, :]) / 24)
        wiggle = np.stack([np.interp(times, self.knots, w) for w in self.wiggle], axis=1)
        activity = np.clip(self.base + self.amplitude * day * weekend[:, None] + wiggle, 0.0, 1.0)
        allocated = activity[:, self.owner] > self.threshold[None, :]
        noise = self.rng.standard_normal((last - first, self.devices))
        fraction = np.clip(
            self.device_efficiency[None, :]
            + 0.12 * (_day_curve(hours)[:, None] - 0.5)
            + 0.1 * noise,
            0.02,
            1.0,
        )
        alloc = allocated.astype(np.int64) * 1000
        util = (fraction * 1000).astype(np.int64) * allocated
        memory = np.minimum(81920, (12000 + 64000 * fraction).astype(np.int64)) * allocated
        project_alloc = alloc @ self.onehot
        project_util = util @ self.onehot
        busy = alloc.sum(axis=1) / (self.devices * 1000)
        pending = np.round(self.pending_now * (0.3 + 0.7 * busy)).astype(np.int64)
        pending_milli = np.round(pending * self.pending_mean_milli).astype(np.int64)
        requested = project_alloc + np.round(
            pending_milli[:, None] * self.pending_share[None, :]
        ).astype(np.int64)
        return _Series(
            times,
            alloc,
            util,
            memory,
            project_alloc,
            project_util,
            requested,
            pending,
            pending_milli,
        )


@dataclass(slots=True)
class SeedCounts:
    minute_rows: int = 0
    hour_rows: int = 0
    raw_usage_rows: int = 0


def _hour_sums(values: IntArray, starts: IntArray) -> IntArray:
    return np.add.reduceat(values, starts, axis=0)


def seed_history(engine: Engine, plan_: Plan) -> SeedCounts:
    """Per-minute rows for the last 7 days, hourly rows for all `days`, for every project, the
    cluster and every device; raw `usage` rows for the last `raw_hours`."""
    config = plan_.config
    model = HistoryModel(plan_)
    counts = SeedCounts()
    s = SAMPLES_PER_MINUTE
    nodes = plan_.node_names
    gpn = config.gpus_per_node
    device_node = [nodes[d // gpn] for d in range(config.gpus)]
    device_index = [d % gpn for d in range(config.gpus)]
    project_ids = np.array([p.id for p in plan_.projects], dtype=np.int64)
    capacity = config.gpus * 1000
    minute_from = model.end_s - config.minute_days * 86400
    raw_from = model.end_s - config.raw_hours * 3600
    said = time.perf_counter()
    for first in range(0, model.minutes, 1440):
        last = min(model.minutes, first + 1440)
        series = model.chunk(first, last)
        starts = np.arange(0, last - first, 60)
        per_hour = np.diff(np.append(starts, last - first)) * s
        hours = series.times[starts]
        hour_rows = _hour_rows(series, starts, per_hour, hours, project_ids, capacity)
        device_hours = _device_rows(
            3600,
            hours,
            per_hour,
            _hour_sums(series.alloc, starts) * s,
            _hour_sums(series.util, starts) * s,
            np.maximum.reduceat(series.memory, starts, axis=0),
            device_node,
            device_index,
        )
        minute = series.times >= minute_from
        with engine.begin() as connection:
            _bulk(connection, ProjectHistoryRow.__tablename__, _PROJECT_COLUMNS, hour_rows[0])
            _bulk(connection, ClusterHistoryRow.__tablename__, _CLUSTER_COLUMNS, hour_rows[1])
            _bulk(connection, DeviceHistoryRow.__tablename__, _DEVICE_COLUMNS, device_hours)
            counts.hour_rows += len(hour_rows[0]) + len(hour_rows[1]) + len(device_hours)
            if minute.any():
                rows = _minute_rows(series, minute, project_ids, capacity)
                devices = _device_rows(
                    60,
                    series.times[minute],
                    np.full(int(minute.sum()), s),
                    series.alloc[minute] * s,
                    series.util[minute] * s,
                    series.memory[minute],
                    device_node,
                    device_index,
                )
                _bulk(connection, ProjectHistoryRow.__tablename__, _PROJECT_COLUMNS, rows[0])
                _bulk(connection, ClusterHistoryRow.__tablename__, _CLUSTER_COLUMNS, rows[1])
                _bulk(connection, DeviceHistoryRow.__tablename__, _DEVICE_COLUMNS, devices)
                counts.minute_rows += len(rows[0]) + len(rows[1]) + len(devices)
            raw = series.times >= raw_from
            if raw.any():
                usage_rows = _raw_usage_rows(plan_, series, raw, device_node, device_index)
                _bulk(connection, UsageRow.__tablename__, _USAGE_COLUMNS, usage_rows)
                counts.raw_usage_rows += len(usage_rows)
        if time.perf_counter() - said > 3 or last == model.minutes:
            said = time.perf_counter()
            say(
                f"  history: day {math.ceil(last / 1440)}/{math.ceil(model.minutes / 1440)}, "
                f"{counts.minute_rows:,} per-minute + {counts.hour_rows:,} hourly rows, "
                f"{counts.raw_usage_rows:,} raw usage rows"
            )
    return counts


def _hour_rows(
    series: _Series,
    starts: IntArray,
    per_hour: IntArray,
    hours: FloatArray,
    project_ids: IntArray,
    capacity: int,
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    s = SAMPLES_PER_MINUTE
    alloc = _hour_sums(series.project_alloc, starts) * s
    util = _hour_sums(series.project_util, starts) * s
    requested = _hour_sums(series.project_requested, starts) * s
    projects = [
        (3600, hour, int(pid), n, a, u, n, r)
        for hour, n, a_row, u_row, r_row in zip(
            hours.tolist(),
            per_hour.tolist(),
            alloc.tolist(),
            util.tolist(),
            requested.tolist(),
            strict=True,
        )
        for pid, a, u, r in zip(project_ids.tolist(), a_row, u_row, r_row, strict=True)
    ]
    cluster = list(
        zip(
            itertools.repeat(3600),
            hours.tolist(),
            per_hour.tolist(),
            (_hour_sums(series.alloc.sum(axis=1), starts) * s).tolist(),
            (_hour_sums(series.util.sum(axis=1), starts) * s).tolist(),
            per_hour.tolist(),
            (per_hour * capacity).tolist(),
            (_hour_sums(series.pending, starts) * s).tolist(),
            (_hour_sums(series.pending_milli, starts) * s).tolist(),
        )
    )
    return projects, cluster


def _minute_rows(
    series: _Series, minute: npt.NDArray[np.bool_], project_ids: IntArray, capacity: int
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    s = SAMPLES_PER_MINUTE
    times = series.times[minute].tolist()
    projects = [
        (60, t, pid, s, a * s, u * s, s, r * s)
        for t, a_row, u_row, r_row in zip(
            times,
            series.project_alloc[minute].tolist(),
            series.project_util[minute].tolist(),
            series.project_requested[minute].tolist(),
            strict=True,
        )
        for pid, a, u, r in zip(project_ids.tolist(), a_row, u_row, r_row, strict=True)
    ]
    n = len(times)
    cluster = list(
        zip(
            itertools.repeat(60),
            times,
            itertools.repeat(s),
            (series.alloc[minute].sum(axis=1) * s).tolist(),
            (series.util[minute].sum(axis=1) * s).tolist(),
            itertools.repeat(s),
            itertools.repeat(capacity * s),
            (series.pending[minute] * s).tolist(),
            (series.pending_milli[minute] * s).tolist(),
        )
    )
    assert len(cluster) == n
    return projects, cluster


def _device_rows(
    resolution: int,
    times: FloatArray,
    samples: IntArray,
    alloc: IntArray,
    util: IntArray,
    memory: IntArray,
    device_node: list[str],
    device_index: list[int],
) -> list[tuple[Any, ...]]:
    devices = len(device_node)
    n = len(times)
    return list(
        zip(
            itertools.repeat(resolution),
            np.repeat(times, devices).tolist(),
            device_node * n,
            device_index * n,
            np.repeat(samples, devices).tolist(),
            alloc.ravel().tolist(),
            util.ravel().tolist(),
            np.repeat(samples, devices).tolist(),
            memory.ravel().tolist(),
        )
    )


def _raw_usage_rows(
    plan_: Plan,
    series: _Series,
    raw: npt.NDArray[np.bool_],
    device_node: list[str],
    device_index: list[int],
) -> list[tuple[Any, ...]]:
    """The raw table as `gpupool.server.usage.record` writes it: per minute, a row per device
    (project and workload empty) and a row per workload on an allocated device."""
    s = RAW_SAMPLES_PER_MINUTE
    times = series.times[raw]
    alloc, util, memory = series.alloc[raw], series.util[raw], series.memory[raw]
    empty = itertools.repeat("")
    rows: list[tuple[Any, ...]] = list(
        zip(
            np.repeat(times, len(device_node)).tolist(),
            device_node * len(times),
            device_index * len(times),
            empty,
            empty,
            itertools.repeat(s),
            (alloc * s).ravel().tolist(),
            (util * s).ravel().tolist(),
            memory.ravel().tolist(),
        )
    )
    names = [(plan_.projects[w.project].name, w.name) for w in plan_.workloads]
    minute_list = times.tolist()
    util_list = util.tolist()
    for m, d in zip(*np.nonzero(alloc), strict=True):
        used = util_list[m][d]
        for index, milli in plan_.charges[d]:
            project, workload = names[index]
            share = used * milli // 1000
            rows.append(
                (
                    minute_list[m],
                    device_node[d],
                    device_index[d],
                    project,
                    workload,
                    s,
                    milli * s,
                    share * s,
                    0,
                )
            )
    return rows
