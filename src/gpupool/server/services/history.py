"""Reading the history store: the series a chart draws and the totals under it.

Short spans (up to two days, still within the minute rows' week) read the per-minute rows,
longer ones the hourly rows; several buckets are averaged into one step so that a chart gets at
most about `MAX_POINTS` points (24 hours: a point per 4 minutes; 30 days: per 2 hours). The
minutes the recorder has not written yet are added in, so charts reach up to now. Every query
is a range on (`resolution_s`, `bucket_s`), the leading columns of each table's unique index.

Averages follow the store's sums: allocation over all samples, utilization over the samples
where it was known (unknown stays null, never 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Integer, cast, func, literal, select
from sqlalchemy.orm import Session

from gpupool.api.schemas import (
    DeviceHistory,
    DeviceHistoryOut,
    HistoryOut,
    HistoryRange,
    HistorySeries,
    ProjectSeries,
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

MAX_POINTS = 360
"""A 1,200-pixel chart then draws a point every 3 pixels or more: finer steps look the same and
cost the server, the network and the browser twice as much (a month of 50 projects is 18,000
points per series)."""
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


ALL_SERIES = frozenset(ProjectSeries)

Totals = tuple[int, int, int, int, int]
"""A project's sums over one step: samples, allocated, utilized, utilized samples, requested.
Plain tuples: a month of 50 projects is 18,000 of them, read on every load of a chart."""


def _projects(
    session: Session,
    w: Window,
    unwritten: Sequence[Bucket],
    series: frozenset[ProjectSeries] = ALL_SERIES,
) -> dict[int, list[Totals | None]]:
    """Each project's sums per step (0 for the sums no series of `series` needs)."""
    p = PROJECTS.c
    step = _step_index(session, w).label("step")
    utilized = ProjectSeries.UTILIZED in series
    points = w.points
    steps: dict[int, list[Totals | None]] = {}
    for project_id, index, samples, allocated, used, used_samples, requested in session.execute(
        select(
            p.project_id,
            step,
            func.sum(p.samples),
            func.sum(p.allocated_milli_sum),
            func.sum(p.utilized_milli_sum) if utilized else literal(0),
            func.sum(p.utilized_samples) if utilized else literal(0),
            func.sum(p.requested_milli_sum) if ProjectSeries.REQUESTED in series else literal(0),
        )
        .where(p.resolution_s == w.resolution_s, p.bucket_s >= w.first_s, p.bucket_s < w.end)
        .group_by(p.project_id, step)
    ).all():
        if 0 <= index < points:
            line = steps.get(project_id)
            if line is None:
                line = steps[project_id] = [None] * points
            line[index] = (samples, allocated, used, used_samples, requested)
    for minute in unwritten:
        index = w.index(bucket_of(minute.bucket_s, w.resolution_s))
        if not 0 <= index < points:
            continue
        for project_id, sums in minute.projects.items():
            line = steps.setdefault(project_id, [None] * points)
            before = line[index] or (0, 0, 0, 0, 0)
            line[index] = (
                before[0] + sums.samples,
                before[1] + sums.allocated,
                before[2] + sums.utilized,
                before[3] + sums.utilized_samples,
                before[4] + sums.requested,
            )
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


def _point(totals: Totals | None) -> _Point | None:
    if totals is None or not totals[0]:
        return None
    samples, allocated, utilized, utilized_samples, requested = totals
    return (
        allocated / samples,
        requested / samples,
        utilized / utilized_samples if utilized_samples else None,
    )


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


def _series(
    key: str, steps: Sequence[Totals | None], series: frozenset[ProjectSeries]
) -> HistorySeries:
    """One project's averages per step, the asked `series` only (the others null)."""
    allocated = utilized = requested = None
    if ProjectSeries.ALLOCATED in series:
        allocated = [round(t[1] / t[0]) / 1000 if t and t[0] else None for t in steps]
    if ProjectSeries.UTILIZED in series:
        utilized = [round(t[2] / t[3]) / 1000 if t and t[0] and t[3] else None for t in steps]
    if ProjectSeries.REQUESTED in series:
        requested = [round(t[4] / t[0]) / 1000 if t and t[0] else None for t in steps]
    return HistorySeries(
        key=key, allocated_gpu=allocated, utilized_gpu=utilized, requested_gpu=requested
    )


def _combined_series(
    key: str, points: Sequence[_Point | None], series: frozenset[ProjectSeries]
) -> HistorySeries:
    def line(wanted: ProjectSeries, value: int) -> list[float | None] | None:
        if wanted not in series:
            return None
        out: list[float | None] = []
        for point in points:
            milli = None if point is None else point[value]
            out.append(None if milli is None else _gpu(milli))
        return out

    return HistorySeries(
        key=key,
        allocated_gpu=line(ProjectSeries.ALLOCATED, 0),
        utilized_gpu=line(ProjectSeries.UTILIZED, 2),
        requested_gpu=line(ProjectSeries.REQUESTED, 1),
    )


def _project_series(
    session: Session,
    w: Window,
    steps: Mapping[int, list[Totals | None]],
    viewer: Principal,
    series: frozenset[ProjectSeries],
) -> list[HistorySeries]:
    """Admins: every project by name. Researchers: theirs by name, the others as one line."""
    rows = session.execute(
        select(ProjectRow.id, ProjectRow.name).where(ProjectRow.is_department.is_(False))
    ).all()
    names = {project_id: name for project_id, name in rows}
    empty: list[Totals | None] = [None] * w.points
    out = []
    shown = sorted((name, project_id) for project_id, name in names.items() if viewer.may_use(name))
    for name, project_id in shown:
        out.append(_series(name, steps.get(project_id, empty), series))
    if viewer.is_admin:
        for project_id in sorted(set(steps) - set(names)):
            out.append(_series(f"#{project_id} (deleted)", steps[project_id], series))
        return out
    others = [steps[i] for i in steps if i not in names or not viewer.may_use(names[i])]
    if others:
        combined = [_combine([_point(s[i]) for s in others]) for i in range(w.points)]
        out.append(_combined_series(OTHER, combined, series))
    return out


def history(
    session: Session,
    w: Window,
    now_s: float,
    viewer: Principal,
    unwritten: Iterable[Bucket] = (),
    series: frozenset[ProjectSeries] = ALL_SERIES,
) -> HistoryOut:
    """The window's points; each project's `series` only (the overview draws allocation)."""
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
        projects=_project_series(
            session, w, _projects(session, w, unwritten, series), viewer, series
        ),
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
