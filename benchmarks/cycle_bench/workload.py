"""A synthetic, trace-shaped cluster snapshot for benchmarking one scheduling cycle.

`build_snapshot(nodes, seed)` returns a `Snapshot` of `nodes` x 8 A100-80GB machines with:

- 10 projects under 2 departments; quotas sum to the cluster's GPU capacity, weights 1..3, two
  projects with a GPU limit;
- running work holding about 70% of the GPUs, already placed consistently (G1), spread unevenly
  over the projects: department a is over its quota (p0, p2, p4 over theirs), department b and
  p1/p3 are under theirs, so reclaim has real work to do;
- 10 pending workloads per node whose GPU shapes follow the openb trace (Alibaba
  cluster-trace-gpu-v2023, default pod list; Weng et al., "Beware of Fragmentation", USENIX
  ATC '23): fractional requests draw `gpu_milli` from the trace's own distribution.

Everything is drawn from `random.Random(seed)`: the same arguments give the same snapshot.
The shapes come from `cycle_bench.trace`, the layout of running work from `cycle_bench.layout`;
`cycle_bench.checks` says whether a snapshot is consistent.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from cycle_bench.layout import Cluster
from cycle_bench.trace import (
    FRACTION_VALUES,
    GPU_MEMORY_MIB,
    GPU_MODEL,
    GPUS_PER_NODE,
    NODE_CPU_MILLI,
    NODE_MEMORY_MIB,
    NOW_S,
    PENDING_PER_NODE,
    Shape,
    burst_limit,
    draw_shape,
    task_cpu_memory,
    type_for,
)
from gpupool.core.model import (
    MILLI_PER_GPU,
    GpuRequest,
    GpuRequestKind,
    Limits,
    Node,
    Project,
    Resources,
    Snapshot,
    TaskPlacement,
    Workload,
    WorkloadType,
)


@dataclass(frozen=True, slots=True)
class _ProjectSpec:
    name: str
    department: str
    quota_share: float
    """Share of the cluster's capacity (all resources) that is the project's quota."""
    hold_share: float
    """Share of the cluster's GPU capacity that its running work holds."""
    pending_weight: float
    """Relative share of the pending workloads."""
    over_quota_weight: int
    limit_share: float | None = None
    min_runtime_s: int = 0


# Quotas sum to 1.0, holdings to RUNNING_FILL (0.70): department a holds 0.55 of a 0.50 quota.
_PROJECTS: tuple[_ProjectSpec, ...] = (
    _ProjectSpec("p0", "dept-a", 0.16, 0.22, 2.0, 3),
    _ProjectSpec("p1", "dept-a", 0.12, 0.03, 3.0, 1),
    _ProjectSpec("p2", "dept-a", 0.10, 0.18, 2.0, 2, min_runtime_s=1800),
    _ProjectSpec("p3", "dept-a", 0.07, 0.04, 3.0, 1),
    _ProjectSpec("p4", "dept-a", 0.05, 0.08, 1.0, 2, limit_share=0.10),
    _ProjectSpec("p5", "dept-b", 0.15, 0.02, 3.0, 1),
    _ProjectSpec("p6", "dept-b", 0.12, 0.07, 2.0, 3, limit_share=0.15, min_runtime_s=600),
    _ProjectSpec("p7", "dept-b", 0.10, 0.03, 3.0, 2),
    _ProjectSpec("p8", "dept-b", 0.08, 0.02, 2.0, 1),
    _ProjectSpec("p9", "dept-b", 0.05, 0.01, 2.0, 2),
)
_DEPARTMENTS = ("dept-a", "dept-b")


def _node_name(i: int) -> str:
    return f"node-{i:05d}"


def _build_projects(capacity: Resources) -> tuple[Project, ...]:
    def share(fraction: float) -> Resources:
        return Resources(
            gpu_milli=round(capacity.gpu_milli * fraction),
            cpu_milli=round(capacity.cpu_milli * fraction),
            memory_mib=round(capacity.memory_mib * fraction),
        )

    quotas = [share(p.quota_share) for p in _PROJECTS]
    # Rounding remainders go to the last project so the quotas sum to the capacity exactly.
    rest = Resources(
        gpu_milli=capacity.gpu_milli - sum(q.gpu_milli for q in quotas[:-1]),
        cpu_milli=capacity.cpu_milli - sum(q.cpu_milli for q in quotas[:-1]),
        memory_mib=capacity.memory_mib - sum(q.memory_mib for q in quotas[:-1]),
    )
    quotas[-1] = rest
    leaves: list[Project] = []
    for spec, quota in zip(_PROJECTS, quotas, strict=True):
        limit = Limits()
        if spec.limit_share is not None:
            limit = Limits(gpu_milli=round(capacity.gpu_milli * spec.limit_share))
        leaves.append(
            Project(
                name=spec.name,
                parent=spec.department,
                quota=quota,
                over_quota_weight=spec.over_quota_weight,
                limit=limit,
                min_runtime_s=spec.min_runtime_s,
            )
        )
    departments: list[Project] = []
    for dept, weight in zip(_DEPARTMENTS, (2, 1), strict=True):
        children = [p for p in leaves if p.parent == dept]
        departments.append(
            Project(
                name=dept,
                quota=Resources(
                    gpu_milli=sum(p.quota.gpu_milli for p in children),
                    cpu_milli=sum(p.quota.cpu_milli for p in children),
                    memory_mib=sum(p.quota.memory_mib for p in children),
                ),
                over_quota_weight=weight,
            )
        )
    return tuple(departments) + tuple(leaves)


@dataclass(slots=True)
class _RunningDraft:
    project: str
    shape: Shape
    wtype: WorkloadType
    gpu: GpuRequest
    cpu_milli: int
    memory_mib: int


def _draw_running(rng: random.Random, projects: tuple[Project, ...]) -> list[_RunningDraft]:
    """Running work per project up to its target holding, before placement."""
    by_name = {p.name: p for p in projects}
    capacity = sum(p.quota.gpu_milli for p in projects if p.parent is None)
    drafts: list[_RunningDraft] = []
    for spec in _PROJECTS:
        quota = by_name[spec.name].quota.gpu_milli
        target = round(capacity * spec.hold_share)
        held = 0
        non_preemptible = 0
        while target - held >= min(FRACTION_VALUES):
            shape = draw_shape(rng)
            if shape.total_milli > target - held:
                shape = (
                    Shape(GpuRequest.whole(1))
                    if target - held >= MILLI_PER_GPU
                    else Shape(GpuRequest.fraction(target - held))
                )
            wtype = WorkloadType.TRAIN
            small = shape.tasks == 1 and shape.milli_per_task <= MILLI_PER_GPU
            # Non-preemptible work stays well inside quota (G3), at every level of the tree.
            if small and rng.random() < 0.12 and non_preemptible + shape.total_milli <= quota // 2:
                wtype = WorkloadType.INTERACTIVE if rng.random() < 0.7 else WorkloadType.INFERENCE
                non_preemptible += shape.total_milli
            cpu, mem = task_cpu_memory(rng, shape)
            gpu = burst_limit(rng, shape, wtype)
            drafts.append(_RunningDraft(spec.name, shape, wtype, gpu, cpu, mem))
            held += shape.total_milli
    return drafts


def build_snapshot(nodes: int, seed: int) -> Snapshot:
    """A cluster of `nodes` x 8 GPUs, ~70% held by running work, 10 pending workloads per node."""
    if nodes < 1:
        raise ValueError("nodes must be at least 1")
    rng = random.Random(seed)
    node_objs = tuple(
        Node(
            name=_node_name(i),
            gpu_count=GPUS_PER_NODE,
            gpu_memory_mib=GPU_MEMORY_MIB,
            gpu_model=GPU_MODEL,
            cpu_milli=NODE_CPU_MILLI,
            memory_mib=NODE_MEMORY_MIB,
            labels=(("pool", "default"),),
        )
        for i in range(nodes)
    )
    capacity = Resources(
        gpu_milli=nodes * GPUS_PER_NODE * MILLI_PER_GPU,
        cpu_milli=nodes * NODE_CPU_MILLI,
        memory_mib=nodes * NODE_MEMORY_MIB,
    )
    projects = _build_projects(capacity)

    drafts = _draw_running(rng, projects)
    rng.shuffle(drafts)
    # Largest tasks first so that big gangs find room, as they would have when the cluster was
    # emptier; the order within a size is random, so projects interleave on the nodes.
    drafts.sort(key=lambda d: (d.shape.milli_per_task, d.shape.tasks), reverse=True)
    cluster = Cluster(nodes, rng)
    workloads: list[Workload] = []
    seq = 0
    for draft in drafts:
        shape = draft.shape
        placements: tuple[TaskPlacement, ...]
        if shape.gpu.kind is GpuRequestKind.WHOLE:
            placed = cluster.place_gang(
                shape.tasks, shape.gpu.amount, draft.cpu_milli, draft.memory_mib
            )
            if placed is None:
                continue
            placements = tuple(
                TaskPlacement(i, _node_name(n), devices) for i, (n, devices) in enumerate(placed)
            )
        else:
            spot = cluster.place_fraction(shape.milli_per_task, draft.cpu_milli, draft.memory_mib)
            if spot is None:
                continue
            placements = (TaskPlacement(0, _node_name(spot[0]), (spot[1],)),)
        seq += 1
        workloads.append(
            Workload(
                name=f"run-{seq:06d}",
                project=draft.project,
                type=draft.wtype,
                gpu=draft.gpu,
                tasks=shape.tasks,
                min_available=shape.min_available,
                cpu_milli=draft.cpu_milli,
                memory_mib=draft.memory_mib,
                submit_seq=seq,
                started_at_s=NOW_S - rng.randint(60, 3 * 86_400),
                placements=placements,
            )
        )
    # Submission order of running work follows start time (older first), roughly.
    workloads.sort(key=lambda w: w.started_at_s or 0)
    workloads = [replace(w, submit_seq=i + 1) for i, w in enumerate(workloads)]

    names = [p.name for p in _PROJECTS]
    weights = [p.pending_weight for p in _PROJECTS]
    first_seq = len(workloads) + 1
    for i in range(PENDING_PER_NODE * nodes):
        shape = draw_shape(rng)
        wtype, priority = type_for(rng, shape)
        cpu, mem = task_cpu_memory(rng, shape)
        selector: tuple[tuple[str, tuple[str, ...]], ...] = ()
        if rng.random() < 0.05:
            selector = (("gpu_model", (GPU_MODEL,)),)
        workloads.append(
            Workload(
                name=f"pend-{i:06d}",
                project=rng.choices(names, weights)[0],
                type=wtype,
                gpu=burst_limit(rng, shape, wtype),
                tasks=shape.tasks,
                min_available=shape.min_available,
                priority=priority,
                cpu_milli=cpu,
                memory_mib=mem,
                node_selector=selector,
                submit_seq=first_seq + i,
            )
        )
    return Snapshot(nodes=node_objs, projects=projects, workloads=tuple(workloads), now_s=NOW_S)
