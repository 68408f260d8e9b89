"""Reading the history store: the series a chart draws and the totals under it.

Short spans (up to two days, still within the minute rows' week) read the per-minute rows,
longer ones the hourly rows; several buckets are averaged into one step so that a chart gets at
most `MAX_POINTS` points. The minutes the recorder has not written yet are added in, so charts
reach up to now. Every query is a range on (`resolution_s`, `bucket_s`), the leading columns of
each table's unique index.

Averages follow the store's sums: allocation over all samples, utilization over the samples
where it was known (unknown stays null, never 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Integer, cast, func, select
from sqlalchemy.orm import Session

from gpupool.api.schemas import (
    DeviceHistory,
    DeviceHistoryOut,
    HistoryOut,
    HistoryRange,
    HistorySeries,
)
from gpupool.server.auth import Principal
from gpupool.server.db import ProjectRow
from gpupool.server.errors import invalid
from gpupool.server.history import (
    CLUSTER,
    DEVICES,
    HOUR_S,
    MINUTE_RETENTION_S,
    MINUTE_S,
    PROJECTS,
    Bucket,
    Sums,
    bucket_of,
)

MAX_POINTS = 720
MINUTE_ROWS_UP_TO_S = 2 * 86_400
MAX_SPAN_S = 366 * 86_400
OTHER = "other projects"
"""The one series a researcher sees for every project that is not theirs."""
RANGE_S = {
    HistoryRange.HOUR: 3_600,
    HistoryRange.DAY: 86_400,
    HistoryRange.WEEK: 7 * 86_400,
    HistoryRange.MONTH: 30 * 86_400,
}


@dataclass(frozen=True, slots=True)
class Window:
    """Which rows answer a request and how they are grouped into steps."""

    start: float
    end: float
    resolution_s: int
    step_s: int
    first_s: float
    """Start of the first step (a multiple of `step_s`, at or before `start`)."""
    points: int

    def index(self, bucket_s: float) -> int:
        return int((bucket_s - self.first_s) // self.step_s)


def window(range_: HistoryRange, start: float | None, end: float | None, now_s: float) -> Window:
    """The window of `range_` back from now, or of explicit `start`/`end` (zooming); a 422
    that says what to change for a bad one."""
    if start is None and end is None:
        end, start = now_s, now_s - RANGE_S[range_]
    elif start is None:
        raise invalid("give start with end (epoch seconds), or range alone", "start")
    elif end is None:
        end = now_s
    if not (math.isfinite(start) and math.isfinite(end)):
        raise invalid("start and end must be finite epoch seconds", "start")
    if end <= start:
        raise invalid(f"end ({end:.0f}) must be after start ({start:.0f})", "end")
    if end - start > MAX_SPAN_S:
        raise invalid(
            f"the span from start to end is {(end - start) / 86_400:.1f} days; at most 366 "
            "days can be read at once: narrow start and end",
            "end",
        )
    span = end - start
    minute_rows = span <= MINUTE_ROWS_UP_TO_S and start >= now_s - MINUTE_RETENTION_S
    resolution = MINUTE_S if minute_rows else HOUR_S
    step = resolution * max(1, math.ceil(span / (MAX_POINTS * resolution)))
    first = float(math.floor(start / step) * step)
    return Window(start, end, resolution, step, first, math.ceil((end - first) / step))


def _sums(row: Sequence[int]) -> Sums:
    return Sums(samples=row[0], allocated=row[1], utilized=row[2], utilized_samples=row[3])


def _cluster(session: Session, w: Window, unwritten: Sequence[Bucket]) -> dict[float, Sums]:
    """The cluster's sums per bucket of the window (the totals need each bucket's time)."""
    c = CLUSTER.c
    cluster: dict[float, Sums] = {}
    for row in session.execute(
        select(
            c.bucket_s, c.samples, c.allocated_milli_sum, c.utilized_milli_sum,
            c.utilized_samples, c.capacity_milli_sum, c.pending_workloads_sum,
            c.pending_milli_sum,
        ).where(c.resolution_s == w.resolution_s, c.bucket_s >= w.first_s, c.bucket_s < w.end)
    ).all():  # fmt: skip
        sums = _sums(row[1:5])
        sums.capacity, sums.pending_workloads, sums.pending_milli = row[5], row[6], row[7]
        cluster[row[0]] = sums
    for minute in unwritten:
        bucket = bucket_of(minute.bucket_s, w.resolution_s)
        if w.first_s <= bucket < w.end:
            cluster.setdefault(bucket, Sums()).merge(minute.cluster)
    return cluster


def _step_index(session: Session, w: Window) -> ColumnElement[int]:
    """The step of a row, in SQL: rows are summed per step by the database, not here."""
    offset = (PROJECTS.c.bucket_s - w.first_s) / w.step_s
    if session.get_bind().dialect.name == "postgresql":
        return cast(func.floor(offset), Integer)  # a cast alone would round
    return cast(offset, Integer)  # SQLite truncates, the floor of a value >= 0


def _projects(
    session: Session, w: Window, unwritten: Sequence[Bucket]
) -> dict[int, list[Sums | None]]:
    """Each project's sums per step."""
    p = PROJECTS.c
    step = _step_index(session, w).label("step")
    steps: dict[int, list[Sums | None]] = {}
    for project_id, index, samples, allocated, utilized, utilized_samples, requested in (
        session.execute(
            select(
                p.project_id, step, func.sum(p.samples), func.sum(p.allocated_milli_sum),
                func.sum(p.utilized_milli_sum), func.sum(p.utilized_samples),
                func.sum(p.requested_milli_sum),
            )
            .where(p.resolution_s == w.resolution_s, p.bucket_s >= w.first_s, p.bucket_s < w.end)
            .group_by(p.project_id, step)
        ).all()
    ):  # fmt: skip
        if 0 <= index < w.points:
            line = steps.setdefault(project_id, [None] * w.points)
            line[index] = Sums(
                samples=int(samples),
                allocated=int(allocated),
                utilized=int(utilized),
                utilized_samples=int(utilized_samples),
                requested=int(requested),
            )
    for minute in unwritten:
        index = w.index(bucket_of(minute.bucket_s, w.resolution_s))
        if not 0 <= index < w.points:
            continue
        for project_id, sums in minute.projects.items():
            line = steps.setdefault(project_id, [None] * w.points)
            into = line[index]
            if into is None:
                line[index] = into = Sums()
            into.merge(sums)
    return steps


def _per_step(w: Window, buckets: Mapping[float, Sums]) -> list[Sums | None]:
    steps: list[Sums | None] = [None] * w.points
    for bucket, sums in buckets.items():
        index = w.index(bucket)
        if 0 <= index < w.points:
            into = steps[index]
            if into is None:
                steps[index] = into = Sums()
            into.merge(sums)
    return steps


def _gpu(milli: float) -> float:
    """Milli-GPU as GPUs with 3 decimals (the store's precision)."""
    return round(milli) / 1000


_Point = tuple[float, float, float | None]
"""Average allocated, requested and utilized milli-GPU (None: unknown) over one step."""


def _point(sums: Sums | None) -> _Point | None:
    if sums is None or not sums.samples:
        return None
    utilized = sums.utilized / sums.utilized_samples if sums.utilized_samples else None
    return (sums.allocated / sums.samples, sums.requested / sums.samples, utilized)


def _combine(points: Sequence[_Point | None]) -> _Point | None:
    """Several projects as one line: their averages added. Utilization is unknown when a
    project that held GPUs had it unknown, or when none of them had it known."""
    present = [p for p in points if p is not None]
    if not present:
        return None
    known = [utilized for _, _, utilized in present if utilized is not None]
    unknown_holding = any(utilized is None and allocated > 0 for allocated, _, utilized in present)
    return (
        sum(allocated for allocated, _, _ in present),
        sum(requested for _, requested, _ in present),
        None if unknown_holding or not known else sum(known),
    )


def _series(key: str, points: Sequence[_Point | None]) -> HistorySeries:
    allocated: list[float | None] = []
    utilized: list[float | None] = []
    requested: list[float | None] = []
    for point in points:
        if point is None:
            allocated.append(None)
            utilized.append(None)
            requested.append(None)
        else:
            allocated.append(_gpu(point[0]))
            requested.append(_gpu(point[1]))
            utilized.append(None if point[2] is None else _gpu(point[2]))
    return HistorySeries(
        key=key, allocated_gpu=allocated, utilized_gpu=utilized, requested_gpu=requested
    )


def _project_series(
    session: Session, w: Window, steps: Mapping[int, list[Sums | None]], viewer: Principal
) -> list[HistorySeries]:
    """Admins: every project by name. Researchers: theirs by name, the others as one line."""
    rows = session.execute(
        select(ProjectRow.id, ProjectRow.name).where(ProjectRow.is_department.is_(False))
    ).all()
    names = {project_id: name for project_id, name in rows}
    empty: list[Sums | None] = [None] * w.points
    out = []
    shown = sorted((name, project_id) for project_id, name in names.items() if viewer.may_use(name))
    for name, project_id in shown:
        out.append(_series(name, [_point(s) for s in steps.get(project_id, empty)]))
    if viewer.is_admin:
        for project_id in sorted(set(steps) - set(names)):
            points = [_point(s) for s in steps[project_id]]
            out.append(_series(f"#{project_id} (deleted)", points))
        return out
    others = [steps[i] for i in steps if i not in names or not viewer.may_use(names[i])]
    if others:
        combined = [_combine([_point(s[i]) for s in others]) for i in range(w.points)]
        out.append(_series(OTHER, combined))
    return out


def history(
    session: Session,
    w: Window,
    now_s: float,
    viewer: Principal,
    unwritten: Iterable[Bucket] = (),
) -> HistoryOut:
    unwritten = list(unwritten)
    cluster = _cluster(session, w, unwritten)
    steps = _per_step(w, cluster)

    def each(value: Callable[[Sums], float | None]) -> list[float | None]:
        return [None if s is None or not s.samples else value(s) for s in steps]

    def gpus(total: Callable[[Sums], int]) -> Callable[[Sums], float | None]:
        return lambda s: _gpu(total(s) / s.samples)

    allocated_h = utilized_h = idle_h = known_allocated_h = 0.0
    measured = False
    covered_until = min(w.end, now_s)
    for bucket, sums in cluster.items():
        seconds = max(0.0, min(bucket + w.resolution_s, covered_until) - max(bucket, w.start))
        if not sums.samples or not seconds:
            continue
        allocated = sums.allocated / sums.samples
        allocated_h += allocated * seconds / 3600
        if sums.utilized_samples:
            measured = True
            known_h = seconds / 3600 * sums.utilized_samples / sums.samples
            utilized = sums.utilized / sums.utilized_samples
            utilized_h += utilized * known_h
            idle_h += max(0.0, allocated - utilized) * known_h
            known_allocated_h += allocated * known_h
    return HistoryOut(
        start=w.start,
        end=w.end,
        step_s=w.step_s,
        resolution_s=w.resolution_s,
        times=[w.first_s + i * w.step_s for i in range(w.points)],
        capacity_gpu=each(gpus(lambda s: s.capacity)),
        allocated_gpu=each(gpus(lambda s: s.allocated)),
        utilized_gpu=each(
            lambda s: _gpu(s.utilized / s.utilized_samples) if s.utilized_samples else None
        ),
        pending_workloads=each(lambda s: round(s.pending_workloads / s.samples, 3)),
        pending_gpu=each(gpus(lambda s: s.pending_milli)),
        projects=_project_series(session, w, _projects(session, w, unwritten), viewer),
        allocated_gpu_hours=round(allocated_h / 1000, 3),
        utilized_gpu_hours=round(utilized_h / 1000, 3) if measured else None,
        idle_allocated_gpu_hours=round(idle_h / 1000, 3) if measured else None,
        idle_allocated_share=(
            round(idle_h / known_allocated_h, 4) if measured and known_allocated_h else None
        ),
    )


def devices(
    session: Session, w: Window, now_s: float, unwritten: Iterable[Bucket] = ()
) -> DeviceHistoryOut:
    """Each device over the window, summed in the database (a month of a large cluster is
    millions of rows). Allocation is averaged over the cluster's samples: a device without a
    row in a bucket held nothing then."""
    d, c = DEVICES.c, CLUSTER.c
    lowest = bucket_of(w.start, w.resolution_s)
    in_window = (d.resolution_s == w.resolution_s, d.bucket_s >= lowest)
    sums: dict[tuple[str, int], Sums] = {}
    for node, index, allocated, utilized, utilized_samples, memory in session.execute(
        select(
            d.node, d.device_index, func.sum(d.allocated_milli_sum),
            func.sum(d.utilized_milli_sum), func.sum(d.utilized_samples),
            func.max(d.memory_used_max_mib),
        )
        .where(*in_window, d.bucket_s < w.end)
        .group_by(d.node, d.device_index)
    ):  # fmt: skip
        sums[(node, index)] = Sums(
            allocated=int(allocated),
            utilized=int(utilized),
            utilized_samples=int(utilized_samples),
            memory_max_mib=int(memory),
        )
    samples, seconds = 0, 0.0
    covered_until = min(w.end, now_s)
    buckets = dict(
        session.execute(
            select(c.bucket_s, c.samples).where(
                c.resolution_s == w.resolution_s, c.bucket_s >= lowest, c.bucket_s < w.end
            )
        ).all()
    )
    for minute in unwritten:
        bucket = bucket_of(minute.bucket_s, w.resolution_s)
        if not lowest <= bucket < w.end:
            continue
        buckets[bucket] = buckets.get(bucket, 0) + minute.cluster.samples
        for key, device in minute.devices.items():
            sums.setdefault(key, Sums()).merge(device)
    for bucket, count in buckets.items():
        samples += count
        seconds += max(0.0, min(bucket + w.resolution_s, covered_until) - max(bucket, w.start))
    out = []
    for (node, index), s in sorted(sums.items()):
        allocated = s.allocated / samples if samples else 0.0
        out.append(
            DeviceHistory(
                node=node,
                device_index=index,
                allocated_gpu=_gpu(allocated),
                utilization_percent=(
                    round(s.utilized / s.utilized_samples / 10, 1) if s.utilized_samples else None
                ),
                memory_used_max_mib=s.memory_max_mib if s.utilized_samples else None,
                allocated_gpu_hours=round(allocated * seconds / 3600 / 1000, 3),
            )
        )
    return DeviceHistoryOut(start=w.start, end=w.end, resolution_s=w.resolution_s, devices=out)
