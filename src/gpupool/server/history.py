"""The history store's writer: what the cluster, each project and each device held and used,
summed per minute (kept 7 days) and per hour (kept a year).

The scheduling loop (the leader's only) feeds a `HistoryRecorder` once per iteration: the
executor's device samples, and at most every `step_s` a recording step made of the last cycle's
facts (capacity, each project's holding and demand, pending work) and the devices' charges.
Steps are summed in memory per minute; when a minute is over its rows are written and the same
sums are added into the hour's rows, so an hour's average is exactly the average of its minutes.
Rows are only ever added to (an existing row's sums grow), so writing a minute again after a
restart or a failed transaction keeps every average right.

Utilization is known in a step only from fresh samples (`fresh_s`): a device without one is
unknown, a project is unknown when one of the devices it holds is, and the cluster is unknown
when an allocated device is or when no device was measured at all. Unknown steps add nothing to
`utilized_milli_sum` and `utilized_samples`, so an average over them is unknown, never 0. A
device's utilization is attributed to the projects on it in proportion to their charges there.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from sqlalchemy import Table, bindparam, case, delete, insert, select, update
from sqlalchemy.orm import Session

from gpupool.core.decisions import CycleResult
from gpupool.core.model import MILLI_PER_GPU, Snapshot
from gpupool.executors.base import UsageSample
from gpupool.server.db import ClusterHistoryRow, DeviceHistoryRow, ProjectHistoryRow, ProjectRow
from gpupool.server.services.cluster import Charge, charges

MINUTE_S = 60
HOUR_S = 3600
MINUTE_RETENTION_S = 7 * 86_400
HOUR_RETENTION_S = 365 * 86_400
STEP_S = 5.0
"""Shortest time between two recording steps (samples of a bucket)."""
FRESH_S = 30.0
"""A device sample older than this no longer says how busy the device is."""
RECENT_S = 60.0
"""What the metrics call the last minute."""
MAX_UNWRITTEN_MINUTES = 1440
"""Minutes kept in memory while the database refuses them; older ones are dropped."""

CLUSTER = cast(Table, ClusterHistoryRow.__table__)
PROJECTS = cast(Table, ProjectHistoryRow.__table__)
DEVICES = cast(Table, DeviceHistoryRow.__table__)

DeviceKey = tuple[str, int]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CycleFacts:
    """What the recorder takes from one scheduling cycle."""

    capacity_milli: int
    pending_workloads: int
    pending_milli: int
    projects: tuple[tuple[str, int, int], ...]
    """(name, holding milli-GPU, demand milli-GPU) of every project and department."""

    @staticmethod
    def of(result: CycleResult, snapshot: Snapshot) -> CycleFacts:
        memory_mib = max((node.gpu_memory_mib for node in snapshot.nodes), default=81920)
        by_name = {w.name: w for w in snapshot.workloads}
        pending = [by_name[name] for name in result.pending_reasons if name in by_name]
        return CycleFacts(
            capacity_milli=sum(node.gpu_count for node in snapshot.nodes) * MILLI_PER_GPU,
            pending_workloads=len(pending),
            pending_milli=sum(w.gpu.milli_on(memory_mib) * w.tasks for w in pending),
            projects=tuple(
                (share.name, share.holding.gpu_milli, share.demand.gpu_milli)
                for share in result.projects
            ),
        )


@dataclass(frozen=True, slots=True)
class ProjectPoint:
    project_id: int
    name: str
    allocated_milli: int
    requested_milli: int
    utilized_milli: int | None


@dataclass(frozen=True, slots=True)
class DevicePoint:
    node: str
    index: int
    allocated_milli: int
    utilized_milli: int | None
    """Utilization % x 10; None without a fresh sample."""
    memory_used_mib: int


@dataclass(frozen=True, slots=True)
class Step:
    """One recording step: one sample of every bucket it falls into."""

    at_s: float
    capacity_milli: int
    allocated_milli: int
    utilized_milli: int | None
    pending_workloads: int
    pending_milli: int
    projects: tuple[ProjectPoint, ...]
    devices: tuple[DevicePoint, ...]
    measured: bool = False
    """Whether any device was measured: a project that held nothing is then known at 0."""


def make_step(
    at_s: float,
    facts: CycleFacts,
    project_ids: Mapping[str, int],
    held: Sequence[Charge],
    samples: Mapping[DeviceKey, UsageSample],
) -> Step:
    """The step at `at_s` from the cycle's facts, the charges on the devices and the devices'
    fresh samples. Only projects in `project_ids` (not departments) are recorded."""
    on_device: dict[DeviceKey, list[Charge]] = defaultdict(list)
    for charge in held:
        on_device[(charge.node, charge.device)].append(charge)
    measured = bool(samples)
    devices = []
    used: dict[str, int | None] = {name: (0 if measured else None) for name in project_ids}
    cluster_used: int | None = 0 if measured else None
    for key in sorted(set(on_device) | set(samples)):
        charged = on_device.get(key, [])
        raw_milli = sum(charge.milli for charge in charged)
        sample = samples.get(key)
        utilized = (
            None
            if sample is None
            else min(MILLI_PER_GPU, max(0, sample.utilization_percent) * MILLI_PER_GPU // 100)
        )
        devices.append(
            DevicePoint(
                key[0],
                key[1],
                min(MILLI_PER_GPU, raw_milli),
                utilized,
                sample.memory_used_mib if sample is not None else 0,
            )
        )
        if raw_milli and cluster_used is not None:
            cluster_used = None if utilized is None else cluster_used + utilized
        for charge in charged:
            before = used.get(charge.project)
            if before is not None:
                used[charge.project] = (
                    None if utilized is None else before + utilized * charge.milli // raw_milli
                )
    holding = {name: (held_milli, demand) for name, held_milli, demand in facts.projects}
    projects = tuple(
        ProjectPoint(project_id, name, *holding.get(name, (0, 0)), used[name])
        for name, project_id in sorted(project_ids.items())
    )
    return Step(
        at_s=at_s,
        capacity_milli=facts.capacity_milli,
        allocated_milli=sum(p.allocated_milli for p in projects),
        utilized_milli=cluster_used,
        pending_workloads=facts.pending_workloads,
        pending_milli=facts.pending_milli,
        projects=projects,
        devices=tuple(devices),
        measured=measured,
    )


def read_step(
    session: Session, at_s: float, facts: CycleFacts, samples: Mapping[DeviceKey, UsageSample]
) -> Step:
    """`make_step` with the projects and the charges of the tasks holding devices now."""
    project_ids = dict(
        session.execute(
            select(ProjectRow.name, ProjectRow.id).where(ProjectRow.is_department.is_(False))
        ).all()
    )
    return make_step(at_s, facts, project_ids, charges(session), samples)


@dataclass(slots=True)
class Sums:
    """The sums of one row (see `gpupool.server.db._HistorySums`); unused fields stay 0."""

    samples: int = 0
    allocated: int = 0
    utilized: int = 0
    utilized_samples: int = 0
    requested: int = 0
    capacity: int = 0
    pending_workloads: int = 0
    pending_milli: int = 0
    memory_max_mib: int = 0

    def add(self, allocated: int, utilized: int | None) -> None:
        self.samples += 1
        self.allocated += allocated
        if utilized is not None:
            self.utilized += utilized
            self.utilized_samples += 1

    def merge(self, other: Sums) -> None:
        self.samples += other.samples
        self.allocated += other.allocated
        self.utilized += other.utilized
        self.utilized_samples += other.utilized_samples
        self.requested += other.requested
        self.capacity += other.capacity
        self.pending_workloads += other.pending_workloads
        self.pending_milli += other.pending_milli
        self.memory_max_mib = max(self.memory_max_mib, other.memory_max_mib)

    def copy(self) -> Sums:
        copied = Sums()
        copied.merge(self)
        return copied


@dataclass(slots=True)
class Bucket:
    """The sums of one bucket: the cluster's, each project's (by id) and each device's."""

    bucket_s: float
    cluster: Sums = field(default_factory=Sums)
    projects: dict[int, Sums] = field(default_factory=dict)
    devices: dict[DeviceKey, Sums] = field(default_factory=dict)
    measured: int = 0
    """Steps in which some device was measured (in memory only)."""

    def add(self, step: Step) -> None:
        """One more sample of every row. A project or device missing from a step (created
        or gone meanwhile, a device neither charged nor measured) held nothing then: its
        `samples` stay the cluster's, so its average is one over the whole bucket, and a
        project's utilization counts as a known 0 in the steps where devices were measured."""
        before, measured_before = self.cluster.samples, self.measured
        self.measured += step.measured
        self.cluster.add(step.allocated_milli, step.utilized_milli)
        self.cluster.capacity += step.capacity_milli
        self.cluster.pending_workloads += step.pending_workloads
        self.cluster.pending_milli += step.pending_milli
        for project in step.projects:
            sums = self.projects.get(project.project_id)
            if sums is None:
                sums = Sums(samples=before, utilized_samples=measured_before)
                self.projects[project.project_id] = sums
            sums.add(project.allocated_milli, project.utilized_milli)
            sums.requested += project.requested_milli
        for device in step.devices:
            sums = self.devices.setdefault((device.node, device.index), Sums(samples=before))
            sums.add(device.allocated_milli, device.utilized_milli)
            sums.memory_max_mib = max(sums.memory_max_mib, device.memory_used_mib)
        for sums in self.projects.values():
            if sums.samples == before:
                sums.samples += 1
                sums.utilized_samples += step.measured
        for sums in self.devices.values():
            if sums.samples == before:
                sums.samples += 1

    def merge(self, other: Bucket) -> None:
        self.cluster.merge(other.cluster)
        self.measured += other.measured
        for project_id, sums in other.projects.items():
            self.projects.setdefault(project_id, Sums()).merge(sums)
        for key, sums in other.devices.items():
            self.devices.setdefault(key, Sums()).merge(sums)

    def copy(self) -> Bucket:
        copied = Bucket(self.bucket_s)
        copied.merge(self)
        return copied


@dataclass(frozen=True, slots=True)
class RecentUse:
    """For the metrics: each project's utilized milli-GPU averaged over the last minute's
    steps where it was known (absent when never), and each device as last recorded."""

    projects: Mapping[str, int]
    devices: tuple[DevicePoint, ...]
    allocated_milli: int = 0
    """The cluster's, at the last step (projects only, not departments)."""
    utilized_milli: int | None = None
    """The cluster's, averaged like the projects'."""


def read_with_unwritten(
    recorder: HistoryRecorder, read: Callable[[list[Bucket]], T], devices: bool = True
) -> T:
    """`read(unwritten minutes)` (which reads the database), again if a minute was written
    meanwhile: each minute is counted once, from memory or from the database."""
    for _ in range(3):
        unwritten, version = recorder.unwritten_at(devices)
        result = read(unwritten)
        if recorder.version == version:
            break
    return result


def bucket_of(at_s: float, resolution_s: int) -> float:
    return float(math.floor(at_s / resolution_s) * resolution_s)


class HistoryRecorder:
    """Steps summed per minute in memory until written. Thread-safe: the loop adds, the API
    reads the minutes not written yet (`unwritten`) so that charts reach up to now.

    A minute is in memory until the transaction that wrote it has committed, then only in the
    database. Readers never see the commit without the minute leaving memory (`writing` holds
    the lock over both) and each write bumps `version`: a reader whose `version` changed while
    it read the database reads again (`read_with_unwritten`), so no minute counts twice."""

    def __init__(self, step_s: float = STEP_S, fresh_s: float = FRESH_S) -> None:
        self.step_s = step_s
        self.fresh_s = fresh_s
        self._lock = threading.RLock()
        self.version = 0
        self._samples: dict[DeviceKey, UsageSample] = {}
        self._minutes: dict[float, Bucket] = {}
        self._recent: deque[Step] = deque()
        self._last_step_s = -math.inf

    def observe(self, samples: Iterable[UsageSample]) -> None:
        """Keep each device's latest sample."""
        with self._lock:
            for sample in samples:
                key = (sample.node, sample.device_index)
                known = self._samples.get(key)
                if known is None or known.at_s <= sample.at_s:
                    self._samples[key] = sample

    def fresh_samples(self, now_s: float) -> dict[DeviceKey, UsageSample]:
        with self._lock:
            for key in [k for k, s in self._samples.items() if s.at_s < now_s - self.fresh_s]:
                del self._samples[key]
            return dict(self._samples)

    def due(self, now_s: float) -> bool:
        """Whether a step is due: `step_s` since the last one (or the clock went back)."""
        with self._lock:
            return now_s - self._last_step_s >= self.step_s or now_s < self._last_step_s

    def add(self, step: Step) -> None:
        with self._lock:
            self._last_step_s = step.at_s
            minute = bucket_of(step.at_s, MINUTE_S)
            self._minutes.setdefault(minute, Bucket(minute)).add(step)
            while len(self._minutes) > MAX_UNWRITTEN_MINUTES:
                del self._minutes[min(self._minutes)]
            self._recent.append(step)
            while self._recent and self._recent[0].at_s <= step.at_s - RECENT_S:
                self._recent.popleft()

    def complete(self, now_s: float) -> list[Bucket]:
        """Copies of the minutes that are over at `now_s`, to write inside `writing`."""
        current = bucket_of(now_s, MINUTE_S)
        with self._lock:
            return [b.copy() for m, b in sorted(self._minutes.items()) if m < current]

    @contextmanager
    def writing(self, minutes: Sequence[Bucket]) -> Iterator[None]:
        """Around the transaction that writes `minutes`: once it has committed they are
        dropped from memory. Only the loop's thread adds steps and writes, so a minute being
        written is not added to meanwhile."""
        with self._lock:
            yield
            for bucket in minutes:
                self._minutes.pop(bucket.bucket_s, None)
            self.version += 1

    def unwritten(self, devices: bool = True) -> list[Bucket]:
        """Every minute not written yet, the current one included (for readers, and for the
        last write at shutdown); without the devices' sums unless `devices`."""
        return self.unwritten_at(devices)[0]

    def unwritten_at(self, devices: bool = True) -> tuple[list[Bucket], int]:
        """`unwritten` and the `version` it was taken at."""
        with self._lock:
            buckets = [b for _, b in sorted(self._minutes.items())]
            if devices:
                return [b.copy() for b in buckets], self.version
            return [
                Bucket(
                    b.bucket_s,
                    b.cluster.copy(),
                    {project_id: sums.copy() for project_id, sums in b.projects.items()},
                )
                for b in buckets
            ], self.version

    def recent(self) -> RecentUse:
        with self._lock:
            steps = list(self._recent)
        known: dict[str, list[int]] = defaultdict(list)
        cluster = [step.utilized_milli for step in steps if step.utilized_milli is not None]
        for step in steps:
            for project in step.projects:
                if project.utilized_milli is not None:
                    known[project.name].append(project.utilized_milli)
        return RecentUse(
            projects={name: sum(values) // len(values) for name, values in known.items()},
            devices=steps[-1].devices if steps else (),
            allocated_milli=steps[-1].allocated_milli if steps else 0,
            utilized_milli=sum(cluster) // len(cluster) if cluster else None,
        )


# -- writing ----------------------------------------------------------------------------------


def _common(sums: Sums) -> dict[str, int]:
    return {
        "samples": sums.samples,
        "allocated_milli_sum": sums.allocated,
        "utilized_milli_sum": sums.utilized,
        "utilized_samples": sums.utilized_samples,
    }


def write(session: Session, minutes: Sequence[Bucket], now_s: float) -> None:
    """Add `minutes` into the per-minute rows and into their hours' rows, then drop rows past
    their retention (once per call)."""
    if not minutes:
        return
    hours: dict[float, Bucket] = {}
    for minute in minutes:
        hour = bucket_of(minute.bucket_s, HOUR_S)
        hours.setdefault(hour, Bucket(hour)).merge(minute)
    for resolution_s, buckets in ((MINUTE_S, list(minutes)), (HOUR_S, list(hours.values()))):
        _add_rows(
            session,
            CLUSTER,
            (),
            resolution_s,
            [
                (
                    b.bucket_s,
                    (),
                    _common(b.cluster)
                    | {
                        "capacity_milli_sum": b.cluster.capacity,
                        "pending_workloads_sum": b.cluster.pending_workloads,
                        "pending_milli_sum": b.cluster.pending_milli,
                    },
                )
                for b in buckets
                if b.cluster.samples
            ],
        )
        _add_rows(
            session,
            PROJECTS,
            ("project_id",),
            resolution_s,
            [
                (b.bucket_s, (project_id,), _common(s) | {"requested_milli_sum": s.requested})
                for b in buckets
                for project_id, s in b.projects.items()
            ],
        )
        _add_rows(
            session,
            DEVICES,
            ("node", "device_index"),
            resolution_s,
            [
                (b.bucket_s, key, _common(s) | {"memory_used_max_mib": s.memory_max_mib})
                for b in buckets
                for key, s in b.devices.items()
            ],
        )
    apply_retention(session, now_s)


def apply_retention(session: Session, now_s: float) -> None:
    for table in (CLUSTER, PROJECTS, DEVICES):
        for resolution_s, keep_s in ((MINUTE_S, MINUTE_RETENTION_S), (HOUR_S, HOUR_RETENTION_S)):
            session.execute(
                delete(table).where(
                    table.c.resolution_s == resolution_s, table.c.bucket_s < now_s - keep_s
                )
            )


def _add_rows(
    session: Session,
    table: Table,
    key_columns: tuple[str, ...],
    resolution_s: int,
    rows: list[tuple[float, tuple[Any, ...], dict[str, int]]],
) -> None:
    """Insert each row, or add its sums to the row already there (maxima for `_max_` columns).
    Only the leader writes history, so a read-then-write needs no lock beyond the transaction."""
    if not rows:
        return
    buckets = sorted({bucket for bucket, _, _ in rows})
    existing = {
        (row[1], *row[2:]): row[0]
        for row in session.execute(
            select(table.c.id, table.c.bucket_s, *(table.c[c] for c in key_columns)).where(
                table.c.resolution_s == resolution_s, table.c.bucket_s.in_(buckets)
            )
        )
    }
    inserts: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    for bucket, key, values in rows:
        row_id = existing.get((bucket, *key))
        if row_id is None:
            inserts.append(
                {"resolution_s": resolution_s, "bucket_s": bucket}
                | dict(zip(key_columns, key, strict=True))
                | values
            )
        else:
            updates.append({"b_id": row_id} | {f"b_{name}": v for name, v in values.items()})
    if inserts:
        session.execute(insert(table), inserts)
    if updates:
        columns = list(updates[0])[1:]
        assignments: dict[str, Any] = {}
        for bound in columns:
            name = bound[2:]
            if "_max_" in name:
                assignments[name] = case(
                    (table.c[name] < bindparam(bound), bindparam(bound)), else_=table.c[name]
                )
            else:
                assignments[name] = table.c[name] + bindparam(bound)
        session.connection().execute(
            update(table).where(table.c.id == bindparam("b_id")).values(assignments), updates
        )
