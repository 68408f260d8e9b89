"""The history store's sums in memory: one row's (`Sums`) and one time bucket's (`Bucket`: the
cluster's, each project's and each device's), which steps are added into."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpupool.server.history_steps import DeviceKey, Step


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
        devices = self.devices
        # `Sums.add` written out, and a device's `Sums` made only when new: 80,000 devices a
        # step at 10,000 nodes.
        for node, index, allocated, utilized, memory_mib in step.devices:
            key = (node, index)
            sums = devices.get(key)
            if sums is None:
                sums = devices[key] = Sums(samples=before)
            sums.samples += 1
            sums.allocated += allocated
            if utilized is not None:
                sums.utilized += utilized
                sums.utilized_samples += 1
            if memory_mib > sums.memory_max_mib:
                sums.memory_max_mib = memory_mib
        for sums in self.projects.values():
            if sums.samples == before:
                sums.samples += 1
                sums.utilized_samples += step.measured
        if len(devices) > len(step.devices):
            for sums in devices.values():
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


def bucket_of(at_s: float, resolution_s: int) -> float:
    return float(math.floor(at_s / resolution_s) * resolution_s)
