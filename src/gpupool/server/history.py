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

The recorder (`HistoryRecorder`) is here; a step is made in `history_steps`, summed in
`history_sums` and written by `history_store`. This module re-exports their names, which the
readers (`services/history.py`, the metrics) and the tests import from here.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from gpupool.executors.base import UsageSample
from gpupool.server.history_steps import (
    CycleFacts,
    DeviceKey,
    DevicePoint,
    ProjectPoint,
    Step,
    make_step,
    read_step,
)
from gpupool.server.history_store import (
    CLUSTER,
    DEVICES,
    HOUR_RETENTION_S,
    HOUR_S,
    MINUTE_RETENTION_S,
    MINUTE_S,
    PROJECTS,
    apply_retention,
    write,
)
from gpupool.server.history_sums import Bucket, Sums, bucket_of

__all__ = [
    "CLUSTER",
    "DEVICES",
    "FRESH_S",
    "HOUR_RETENTION_S",
    "HOUR_S",
    "MAX_UNWRITTEN_DEVICE_SUMS",
    "MAX_UNWRITTEN_MINUTES",
    "MINUTE_RETENTION_S",
    "MINUTE_S",
    "PROJECTS",
    "RECENT_S",
    "STEP_S",
    "Bucket",
    "CycleFacts",
    "DeviceKey",
    "DevicePoint",
    "HistoryRecorder",
    "ProjectPoint",
    "RecentUse",
    "Step",
    "Sums",
    "apply_retention",
    "bucket_of",
    "make_step",
    "read_step",
    "read_with_unwritten",
    "write",
]

STEP_S = 5.0
"""Shortest time between two recording steps (samples of a bucket)."""
FRESH_S = 30.0
"""A device sample older than this no longer says how busy the device is."""
RECENT_S = 60.0
"""What the metrics call the last minute."""
MAX_UNWRITTEN_MINUTES = 1440
"""Minutes kept in memory while the database refuses them; older ones are dropped."""
MAX_UNWRITTEN_DEVICE_SUMS = 500_000
"""Device rows kept in memory while the database refuses them (a few hundred bytes each): past
this the oldest minutes keep only their cluster's and projects' sums. At 10,000 nodes a minute
holds 80,000 devices, and a day of them would not fit in memory."""


T = TypeVar("T")


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
            self._trim_devices()
            self._recent.append(step)
            while self._recent and self._recent[0].at_s <= step.at_s - RECENT_S:
                self._recent.popleft()

    def _trim_devices(self) -> None:
        """Drop the oldest minutes' device sums while more than `MAX_UNWRITTEN_DEVICE_SUMS`
        are kept (the lock held); never the newest minute's, which steps still add to."""
        kept = sum(len(bucket.devices) for bucket in self._minutes.values())
        for minute in sorted(self._minutes)[:-1]:
            if kept <= MAX_UNWRITTEN_DEVICE_SUMS:
                return
            bucket = self._minutes[minute]
            kept -= len(bucket.devices)
            bucket.devices = {}

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
