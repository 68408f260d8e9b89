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
`validate_snapshot` checks that a snapshot is physically consistent; the smoke test and the
benchmark use it on the generated snapshot and on the snapshot after a cycle's decisions.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, replace

from gpupool.core.decisions import Bind, Decision, Evict, Move
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

GPUS_PER_NODE = 8
GPU_MEMORY_MIB = 80 * 1024
GPU_MODEL = "A100"
NODE_CPU_MILLI = 128_000
NODE_MEMORY_MIB = 1024 * 1024
PENDING_PER_NODE = 10
RUNNING_FILL = 0.70
"""Share of the cluster's GPU capacity held by running work (charged milli-GPU)."""
NOW_S = 10_000_000

FRACTION_SHARE = 0.38
"""Share of GPU workloads asking for a fraction of one device (openb default: 37.8% of pods)."""
ONE_GPU_SHARE = 0.48
"""Share asking for exactly one whole device (openb default: 48.0% of pods)."""
# The rest (14%) are multi-GPU gangs. In the trace the remaining 14% are mostly CPU-only pods and
# multi-GPU pods are under 1%; this benchmark deliberately makes them gangs to stress placement.

TRACE_FRACTION_MILLI: tuple[tuple[int, int], ...] = (
    (50, 7),
    (110, 24),
    (140, 1),
    (160, 74),
    (220, 62),
    (230, 140),
    (270, 4),
    (290, 1),
    (320, 328),
    (330, 7),
    (350, 6),
    (370, 47),
    (440, 2),
    (460, 128),
    (470, 750),
    (480, 19),
    (550, 72),
    (590, 75),
    (650, 253),
    (810, 1078),
)
"""(gpu_milli, pods) of the fractional pods in openb_pod_list_default.csv (3,078 pods)."""

TRACE_MULTI_GPU: tuple[tuple[int, int], ...] = ((2, 16), (4, 15), (8, 44))
"""(num_gpu, pods) of the multi-GPU pods in openb_pod_list_default.csv."""

_FRACTION_VALUES = tuple(v for v, _ in TRACE_FRACTION_MILLI)
_FRACTION_WEIGHTS = tuple(float(c) for _, c in TRACE_FRACTION_MILLI)
_MULTI_VALUES = tuple(v for v, _ in TRACE_MULTI_GPU)
_MULTI_WEIGHTS = tuple(float(c) for _, c in TRACE_MULTI_GPU)


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


@dataclass(frozen=True, slots=True)
class _Shape:
    gpu: GpuRequest
    tasks: int = 1
    min_available: int | None = None

    @property
    def milli_per_task(self) -> int:
        return self.gpu.milli_on(GPU_MEMORY_MIB)

    @property
    def total_milli(self) -> int:
        return self.tasks * self.milli_per_task


def _draw_shape(rng: random.Random) -> _Shape:
    r = rng.random()
    if r < FRACTION_SHARE:
        milli = rng.choices(_FRACTION_VALUES, _FRACTION_WEIGHTS)[0]
        return _Shape(GpuRequest.fraction(milli))
    if r < FRACTION_SHARE + ONE_GPU_SHARE:
        return _Shape(GpuRequest.whole(1))
    if rng.random() < 0.6:
        # One task with several devices of one node (the trace's 2/4/8-GPU pods).
        return _Shape(GpuRequest.whole(rng.choices(_MULTI_VALUES, _MULTI_WEIGHTS)[0]))
    # A distributed gang: 2..4 tasks of 1..8 devices each; a quarter of them elastic.
    tasks = rng.randint(2, 4)
    per_task = rng.choice((1, 2, 4, 8))
    min_available = tasks - 1 if rng.random() < 0.25 else None
    return _Shape(GpuRequest.whole(per_task), tasks, min_available)


def _task_cpu_memory(rng: random.Random, shape: _Shape) -> tuple[int, int]:
    """Modest per-task CPU and memory so that GPUs, not CPU or memory, are the bottleneck."""
    if shape.gpu.kind is GpuRequestKind.WHOLE:
        k = shape.gpu.amount
        return k * rng.randrange(4000, 12001, 1000), k * rng.choice((32, 48, 64, 96)) * 1024
    milli = shape.milli_per_task
    return 500 + milli * 8, 4096 + milli * 48


def _type_for(rng: random.Random, shape: _Shape) -> tuple[WorkloadType, int | None]:
    """Workload type and explicit priority for a pending workload of this shape."""
    if shape.tasks == 1 and shape.gpu.kind is GpuRequestKind.FRACTION:
        r = rng.random()
        if r < 0.15:
            return WorkloadType.INTERACTIVE, None
        if r < 0.20:
            return WorkloadType.INFERENCE, None
    elif shape.tasks == 1 and shape.gpu.amount == 1:
        r = rng.random()
        if r < 0.05:
            return WorkloadType.INTERACTIVE, None
        if r < 0.08:
            return WorkloadType.INFERENCE, None
    # A few urgent training runs, so that priority preemption inside a project (G6) has work.
    if rng.random() < 0.05:
        return WorkloadType.TRAIN, 80
    return WorkloadType.TRAIN, None


def _burst_limit(rng: random.Random, shape: _Shape, wtype: WorkloadType) -> GpuRequest:
    """Some interactive fractions are dynamic (limit above request), for the node-level phase."""
    gpu = shape.gpu
    if (
        wtype is WorkloadType.INTERACTIVE
        and gpu.kind is GpuRequestKind.FRACTION
        and rng.random() < 0.4
    ):
        return GpuRequest.fraction(gpu.amount, MILLI_PER_GPU)
    return gpu


class _Cluster:
    """Free capacity per node and device while running work is laid out (generator only)."""

    def __init__(self, nodes: int, rng: random.Random) -> None:
        self.rng = rng
        self.free: list[list[int]] = [[MILLI_PER_GPU] * GPUS_PER_NODE for _ in range(nodes)]
        self.cpu_free = [NODE_CPU_MILLI] * nodes
        self.mem_free = [NODE_MEMORY_MIB] * nodes
        # Nodes bucketed by how many empty devices they have, with O(1) moves between buckets.
        self.by_empty: list[list[int]] = [[] for _ in range(GPUS_PER_NODE + 1)]
        self.by_empty[GPUS_PER_NODE] = list(range(nodes))
        self.pos = list(range(nodes))
        self.empty = [GPUS_PER_NODE] * nodes
        # Devices shared by fractions with room left; stale entries are dropped lazily.
        self.shared: list[tuple[int, int]] = []

    def _set_empty(self, node: int, count: int) -> None:
        old = self.empty[node]
        if old == count:
            return
        bucket = self.by_empty[old]
        i = self.pos[node]
        last = bucket[-1]
        bucket[i] = last
        self.pos[last] = i
        bucket.pop()
        self.pos[node] = len(self.by_empty[count])
        self.by_empty[count].append(node)
        self.empty[node] = count

    def _fits_host(self, node: int, cpu: int, mem: int) -> bool:
        return self.cpu_free[node] >= cpu and self.mem_free[node] >= mem

    def _pick_node(self, need_empty: int, cpu: int, mem: int) -> int | None:
        """A node with at least `need_empty` empty devices and room for the task's CPU/memory.

        30% of the time best fit (fewest empty devices that suffice), otherwise uniform among
        the eligible nodes: the mix leaves the idle capacity realistically fragmented.
        """
        buckets = [b for b in self.by_empty[need_empty:] if b]
        if not buckets:
            return None
        for _ in range(8):
            if self.rng.random() < 0.3:
                bucket = buckets[0]
            else:
                total = sum(len(b) for b in buckets)
                i = self.rng.randrange(total)
                for bucket in buckets:
                    if i < len(bucket):
                        break
                    i -= len(bucket)
            node = bucket[self.rng.randrange(len(bucket))]
            if self._fits_host(node, cpu, mem):
                return node
        return None

    def take_whole(self, node: int, count: int, cpu: int, mem: int) -> tuple[int, ...]:
        devices = tuple(d for d, f in enumerate(self.free[node]) if f == MILLI_PER_GPU)[:count]
        for d in devices:
            self.free[node][d] = 0
        self.cpu_free[node] -= cpu
        self.mem_free[node] -= mem
        self._set_empty(node, self.empty[node] - count)
        return devices

    def take_fraction(self, node: int, device: int, milli: int, cpu: int, mem: int) -> None:
        was_empty = self.free[node][device] == MILLI_PER_GPU
        self.free[node][device] -= milli
        self.cpu_free[node] -= cpu
        self.mem_free[node] -= mem
        if was_empty:
            self._set_empty(node, self.empty[node] - 1)
            self.shared.append((node, device))

    def release(self, node: int, devices: tuple[int, ...], milli: int, cpu: int, mem: int) -> None:
        """Undo a take (per-device `milli`), used to roll back a gang that did not fit whole."""
        for d in devices:
            self.free[node][d] += milli
        self.cpu_free[node] += cpu
        self.mem_free[node] += mem
        empty = sum(1 for f in self.free[node] if f == MILLI_PER_GPU)
        self._set_empty(node, empty)

    def place_fraction(self, milli: int, cpu: int, mem: int) -> tuple[int, int] | None:
        """Onto a device already shared (usually), else onto an empty device."""
        if self.shared and self.rng.random() < 0.8:
            for _ in range(8):
                if not self.shared:
                    break
                i = self.rng.randrange(len(self.shared))
                node, device = self.shared[i]
                room = self.free[node][device]
                if room < min(_FRACTION_VALUES):
                    self.shared[i] = self.shared[-1]
                    self.shared.pop()
                    continue
                if room >= milli and self._fits_host(node, cpu, mem):
                    self.take_fraction(node, device, milli, cpu, mem)
                    return node, device
        picked = self._pick_node(1, cpu, mem)
        if picked is None:
            return None
        device = self.free[picked].index(MILLI_PER_GPU)
        self.take_fraction(picked, device, milli, cpu, mem)
        return picked, device

    def place_gang(
        self, tasks: int, per_task: int, cpu: int, mem: int
    ) -> list[tuple[int, tuple[int, ...]]] | None:
        """Whole-device tasks: all on one node when they fit there, else one node per task."""
        if tasks * per_task <= GPUS_PER_NODE:
            node = self._pick_node(tasks * per_task, cpu * tasks, mem * tasks)
            if node is not None:
                return [(node, self.take_whole(node, per_task, cpu, mem)) for _ in range(tasks)]
        placed: list[tuple[int, tuple[int, ...]]] = []
        for _ in range(tasks):
            node = self._pick_node(per_task, cpu, mem)
            if node is None:
                for n, devices in placed:
                    self.release(n, devices, MILLI_PER_GPU, cpu, mem)
                return None
            placed.append((node, self.take_whole(node, per_task, cpu, mem)))
        return placed


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
    shape: _Shape
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
        while target - held >= min(_FRACTION_VALUES):
            shape = _draw_shape(rng)
            if shape.total_milli > target - held:
                shape = (
                    _Shape(GpuRequest.whole(1))
                    if target - held >= MILLI_PER_GPU
                    else _Shape(GpuRequest.fraction(target - held))
                )
            wtype = WorkloadType.TRAIN
            small = shape.tasks == 1 and shape.milli_per_task <= MILLI_PER_GPU
            # Non-preemptible work stays well inside quota (G3), at every level of the tree.
            if small and rng.random() < 0.12 and non_preemptible + shape.total_milli <= quota // 2:
                wtype = WorkloadType.INTERACTIVE if rng.random() < 0.7 else WorkloadType.INFERENCE
                non_preemptible += shape.total_milli
            cpu, mem = _task_cpu_memory(rng, shape)
            gpu = _burst_limit(rng, shape, wtype)
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
    cluster = _Cluster(nodes, rng)
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
        shape = _draw_shape(rng)
        wtype, priority = _type_for(rng, shape)
        cpu, mem = _task_cpu_memory(rng, shape)
        selector: tuple[tuple[str, tuple[str, ...]], ...] = ()
        if rng.random() < 0.05:
            selector = (("gpu_model", (GPU_MODEL,)),)
        workloads.append(
            Workload(
                name=f"pend-{i:06d}",
                project=rng.choices(names, weights)[0],
                type=wtype,
                gpu=_burst_limit(rng, shape, wtype),
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


@dataclass(frozen=True, slots=True)
class SnapshotStats:
    nodes: int
    gpus: int
    running: int
    pending: int
    held_gpu_milli: int
    pending_fraction_share: float
    """Share of pending workloads that ask for a fraction of one device."""
    pending_one_gpu_share: float
    pending_gang_share: float


def snapshot_stats(snapshot: Snapshot) -> SnapshotStats:
    gpus = sum(n.gpu_count for n in snapshot.nodes)
    memory = {n.name: n.gpu_memory_mib for n in snapshot.nodes}
    running = [w for w in snapshot.workloads if w.is_running]
    pending = [w for w in snapshot.workloads if not w.is_running]
    held = sum(w.gpu.milli_on(memory[p.node]) for w in running for p in w.placements)
    n = max(1, len(pending))
    fraction = sum(1 for w in pending if w.gpu.is_shared)
    one = sum(1 for w in pending if not w.gpu.is_shared and w.gpu.amount == 1 and w.tasks == 1)
    return SnapshotStats(
        nodes=len(snapshot.nodes),
        gpus=gpus,
        running=len(running),
        pending=len(pending),
        held_gpu_milli=held,
        pending_fraction_share=fraction / n,
        pending_one_gpu_share=one / n,
        pending_gang_share=(len(pending) - fraction - one) / n,
    )


def validate_snapshot(snapshot: Snapshot, max_problems: int = 20) -> list[str]:
    """Physical and policy consistency of a snapshot's running work; empty when all is well.

    Checks G1 (device milli, device memory, whole-GPU exclusivity, node CPU/memory), placement
    shape (node and devices exist, one device per shared task, `amount` devices per whole task,
    task indices distinct and in range), G9 (running tasks >= min_available), project GPU limits
    at every level of the tree, and that only leaves hold workloads.
    """
    problems: list[str] = []

    def problem(text: str) -> None:
        if len(problems) < max_problems:
            problems.append(text)

    nodes = {n.name: n for n in snapshot.nodes}
    if len(nodes) != len(snapshot.nodes):
        problem("duplicate node names")
    names = [w.name for w in snapshot.workloads]
    if len(set(names)) != len(names):
        problem("duplicate workload names")
    projects = {p.name: p for p in snapshot.projects}
    parents = {p.parent for p in snapshot.projects if p.parent is not None}
    for project in snapshot.projects:
        if project.parent is not None and project.parent not in projects:
            problem(f"project {project.name}: unknown parent {project.parent}")

    device_milli: dict[tuple[str, int], int] = defaultdict(int)
    device_memory: dict[tuple[str, int], int] = defaultdict(int)
    device_users: dict[tuple[str, int], int] = defaultdict(int)
    whole_devices: set[tuple[str, int]] = set()
    node_cpu: dict[str, int] = defaultdict(int)
    node_mem: dict[str, int] = defaultdict(int)
    holding: dict[str, int] = defaultdict(int)

    for w in snapshot.workloads:
        if w.project not in projects:
            problem(f"{w.name}: unknown project {w.project}")
        elif w.project in parents:
            problem(f"{w.name}: project {w.project} is a department")
        if not w.placements:
            continue
        indices = [p.task_index for p in w.placements]
        if len(set(indices)) != len(indices) or any(i < 0 or i >= w.tasks for i in indices):
            problem(f"{w.name}: bad task indices {indices} for {w.tasks} tasks")
        if len(w.placements) < w.gang_size:
            problem(f"{w.name}: {len(w.placements)} tasks running, gang needs {w.gang_size}")
        for p in w.placements:
            node = nodes.get(p.node)
            if node is None:
                problem(f"{w.name}: unknown node {p.node}")
                continue
            if any(d < 0 or d >= node.gpu_count for d in p.devices):
                problem(f"{w.name}: devices {p.devices} out of range on {p.node}")
                continue
            if len(set(p.devices)) != len(p.devices):
                problem(f"{w.name}: repeated device in {p.devices}")
            if w.gpu.is_shared:
                if len(p.devices) != 1:
                    problem(f"{w.name}: shared task on {len(p.devices)} devices")
            elif len(p.devices) != w.gpu.amount:
                problem(f"{w.name}: whole task of {w.gpu.amount} GPUs on {p.devices}")
            milli = w.gpu.milli_on(node.gpu_memory_mib)
            mem = w.gpu.memory_mib_on(node.gpu_memory_mib)
            per_device = MILLI_PER_GPU if not w.gpu.is_shared else milli
            for d in p.devices:
                key = (p.node, d)
                device_milli[key] += per_device
                device_memory[key] += mem if w.gpu.is_shared else node.gpu_memory_mib
                device_users[key] += 1
                if not w.gpu.is_shared:
                    whole_devices.add(key)
            node_cpu[p.node] += w.cpu_milli
            node_mem[p.node] += w.memory_mib
            holding[w.project] += milli

    for key, milli in device_milli.items():
        if milli > MILLI_PER_GPU:
            problem(f"device {key[0]}/{key[1]}: {milli} milli-GPU charged")
        if device_memory[key] > nodes[key[0]].gpu_memory_mib:
            problem(f"device {key[0]}/{key[1]}: {device_memory[key]} MiB of device memory")
    for key in whole_devices:
        if device_users[key] > 1:
            problem(f"device {key[0]}/{key[1]}: whole-GPU task shares it with others")
    for name, cpu in node_cpu.items():
        cap = nodes[name].cpu_milli
        if cap is not None and cpu > cap:
            problem(f"node {name}: {cpu} CPU milli requested of {cap}")
    for name, mem in node_mem.items():
        cap = nodes[name].memory_mib
        if cap is not None and mem > cap:
            problem(f"node {name}: {mem} MiB memory requested of {cap}")

    # Project GPU limits at every level of the tree.
    tree_holding: dict[str, int] = defaultdict(int)
    for leaf, milli in holding.items():
        current: str | None = leaf
        while current is not None and current in projects:
            tree_holding[current] += milli
            current = projects[current].parent
    for name, milli in tree_holding.items():
        limit = projects[name].limit.gpu_milli
        if limit is not None and milli > limit:
            problem(f"project {name}: holds {milli} milli-GPU over its limit {limit}")
    return problems


def validate_decisions(snapshot: Snapshot, decisions: tuple[Decision, ...]) -> list[str]:
    """Whether each decision applies to the state its workload is in; empty when all is well.

    Every decision names a known workload; a bind starts tasks that are not running yet, on
    known nodes; an eviction or a move concerns tasks that are running. Resource consistency of
    the result is `validate_snapshot(apply_decisions(snapshot, decisions))`.
    """
    problems: list[str] = []
    workloads = {w.name: w for w in snapshot.workloads}
    nodes = {n.name for n in snapshot.nodes}
    running: dict[str, set[int]] = {
        w.name: {p.task_index for p in w.placements} for w in snapshot.workloads
    }
    for decision in decisions:
        w = workloads.get(decision.workload)
        if w is None:
            problems.append(f"{type(decision).__name__} of unknown workload {decision.workload}")
            continue
        tasks = running[w.name]
        if isinstance(decision, Bind):
            if not decision.placements:
                problems.append(f"bind of {w.name} with no placements")
            for p in decision.placements:
                if p.task_index in tasks:
                    problems.append(f"bind of {w.name} task {p.task_index}: already running")
                if p.node not in nodes:
                    problems.append(f"bind of {w.name} onto unknown node {p.node}")
                tasks.add(p.task_index)
        elif isinstance(decision, Evict):
            gone = set(decision.task_indices) if decision.task_indices else set(tasks)
            if not tasks or not gone <= tasks:
                problems.append(f"evict of {w.name} tasks {sorted(gone)}: not running")
            tasks -= gone
        elif isinstance(decision, Move):
            if decision.source.task_index not in tasks:
                problems.append(f"move of {w.name} task {decision.source.task_index}: not running")
            if decision.target.task_index != decision.source.task_index:
                problems.append(f"move of {w.name}: source and target tasks differ")
            if decision.target.node not in nodes:
                problems.append(f"move of {w.name} onto unknown node {decision.target.node}")
    return problems
