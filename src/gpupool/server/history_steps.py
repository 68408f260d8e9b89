"""One recording step of the history store: what the last cycle decided (`CycleFacts`) and what
each project and device held and used at that moment (`make_step`, `read_step`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.core.decisions import CycleResult
from gpupool.core.model import MILLI_PER_GPU, Snapshot
from gpupool.executors.base import UsageSample
from gpupool.server.db import ProjectRow
from gpupool.server.services.cluster import Charge, charges

DeviceKey = tuple[str, int]


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
        reasons = result.pending_reasons
        # One pass over the workloads, no index of them by name (at 10,000 nodes 130,000,
        # 77,000 of them pending).
        pending_workloads = pending_milli = 0
        for workload in snapshot.workloads:
            if workload.name in reasons:
                pending_workloads += 1
                pending_milli += workload.gpu.milli_on(memory_mib) * workload.tasks
        return CycleFacts(
            capacity_milli=sum(node.gpu_count for node in snapshot.nodes) * MILLI_PER_GPU,
            pending_workloads=pending_workloads,
            pending_milli=pending_milli,
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


class DevicePoint(NamedTuple):
    """One device in a step. A named tuple: a step makes one per device (80,000 at 10,000
    nodes every 5 s), and a frozen dataclass costs a call per field to make."""

    node: str
    device_index: int
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
    # A loop per device, not a generator or a dataclass per device: at 10,000 nodes a step
    # makes 80,000 points every 5 s.
    none: list[Charge] = []
    for key in sorted(on_device.keys() | samples.keys()):
        charged = on_device.get(key, none)
        raw_milli = 0
        for charge in charged:
            raw_milli += charge.milli
        sample = samples.get(key)
        if sample is None:
            utilized = None
            memory_mib = 0
        else:
            percent = sample.utilization_percent
            utilized = min(MILLI_PER_GPU, percent * MILLI_PER_GPU // 100) if percent > 0 else 0
            memory_mib = sample.memory_used_mib
        devices.append(
            DevicePoint(
                key[0],
                key[1],
                raw_milli if raw_milli < MILLI_PER_GPU else MILLI_PER_GPU,
                utilized,
                memory_mib,
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
    session: Session,
    at_s: float,
    facts: CycleFacts,
    samples: Mapping[DeviceKey, UsageSample],
    held: Sequence[Charge] | None = None,
) -> Step:
    """`make_step` with the projects and the charges of the tasks holding devices now (`held`
    where the caller read them already)."""
    project_ids = dict(
        session.execute(
            select(ProjectRow.name, ProjectRow.id).where(ProjectRow.is_department.is_(False))
        ).all()
    )
    return make_step(at_s, facts, project_ids, charges(session) if held is None else held, samples)
