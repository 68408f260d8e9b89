"""A cycle's working state: built once from a snapshot, changed in place, undone by statements.

Actions try decisions tentatively: they open a `Statement`, place and remove tasks through the
session, and either `commit` or `rollback`. Every change is recorded in the statement's undo log,
so a failed attempt costs what it changed, never a copy of the cluster.

Indexes kept up to date on every change, so that a placement search does not scan the cluster:
- nodes bucketed by their number of empty devices (whole-GPU tasks and new fractions);
- partly used devices bucketed by free milli-GPU, with a sorted list of the bucket keys
  (fractions go onto an already shared device first, tightest fit first).
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass

from gpupool.core.model import (
    MILLI_PER_GPU,
    Node,
    Project,
    Snapshot,
    TaskPlacement,
    Workload,
)

UNTRACKED = 1 << 62
"""Free CPU or memory of a node that does not declare it: never the bottleneck."""


class WorkState(enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    EVICTED = "evicted"


@dataclass(frozen=True, slots=True)
class TaskAlloc:
    """One placed task inside the session: node index, devices and what it takes on each."""

    task_index: int
    node: int
    devices: tuple[int, ...]
    milli_per_device: int
    memory_mib_per_device: int
    burst_device: int | None = None


_NO_ALLOCS: dict[int, TaskAlloc] = {}
"""Shared by every record with nothing placed; `Session._add_alloc` gives a record its own dict
on the first placement. Most workloads in a long queue never get one in a cycle, and not
allocating 100,000 empty dicts keeps the cycle clear of full garbage collections."""


class WorkRecord:
    """Session-side state of one workload (mutable; the snapshot's `Workload` stays frozen)."""

    __slots__ = (
        "allocs",
        "index",
        "preemptible",
        "priority",
        "project",
        "spec",
        "started_this_cycle",
        "state",
        "task_gpu_milli",
    )

    def __init__(self, index: int, spec: Workload, project: int, task_gpu_milli: int) -> None:
        self.index = index
        self.spec = spec
        self.project = project
        self.priority = spec.effective_priority
        self.preemptible = spec.is_preemptible
        self.task_gpu_milli = task_gpu_milli
        """Per-task GPU charge; a memory request is estimated on the largest device."""
        self.allocs: dict[int, TaskAlloc] = _NO_ALLOCS
        self.state = WorkState.PENDING
        self.started_this_cycle = False

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def missing_tasks(self) -> list[int]:
        return [i for i in range(self.spec.tasks) if i not in self.allocs]


class ProjectRecord:
    """Session-side accounting of one project-tree node (leaf or department)."""

    __slots__ = (
        "ancestors",
        "children",
        "fair_share",
        "holding",
        "index",
        "nonpreemptible_holding",
        "spec",
    )

    def __init__(self, index: int, spec: Project) -> None:
        self.index = index
        self.spec = spec
        self.ancestors: tuple[int, ...] = ()
        """Path from the root down to and including this node."""
        self.children: list[int] = []
        self.holding = [0, 0, 0]
        """gpu milli, cpu milli, memory MiB held by running tasks."""
        self.nonpreemptible_holding = [0, 0, 0]
        self.fair_share = [0, 0, 0]

    @property
    def name(self) -> str:
        return self.spec.name


class Session:
    """Mutable per-cycle state; see module docstring."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.settings = snapshot.settings
        self.nodes: tuple[Node, ...] = snapshot.nodes
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}
        if len(self.node_index) != len(self.nodes):
            raise ValueError("snapshot has two nodes with the same name")
        self.device_used: list[list[int]] = [[0] * n.gpu_count for n in self.nodes]
        self.device_memory_used: list[list[int]] = [[0] * n.gpu_count for n in self.nodes]
        self.cpu_free = [UNTRACKED if n.cpu_milli is None else n.cpu_milli for n in self.nodes]
        self.memory_free = [UNTRACKED if n.memory_mib is None else n.memory_mib for n in self.nodes]
        self.max_gpus_per_node = max((n.gpu_count for n in self.nodes), default=0)
        self.max_device_memory_mib = max((n.gpu_memory_mib for n in self.nodes), default=1)
        self.empty_count = [n.gpu_count for n in self.nodes]
        self.nodes_by_empty: list[dict[int, None]] = [{} for _ in range(self.max_gpus_per_node + 1)]
        for i, n in enumerate(self.nodes):
            self.nodes_by_empty[n.gpu_count][i] = None
        self.shared_by_free: dict[int, dict[tuple[int, int], None]] = {}
        self.shared_free_keys: list[int] = []
        self.capacity_gpu_milli = MILLI_PER_GPU * sum(n.gpu_count for n in self.nodes)
        self.used_gpu_milli = 0
        self.node_tags: list[dict[int, int]] = [{} for _ in self.nodes]
        """Per node, how many tasks of each size it holds (devices taken; 0 for a shared one):
        the GPU-clustering policy's affinity."""
        self.burstable_works: dict[int, None] = {}
        """Works with a dynamic fraction (limit above request): the node-level scheduler's."""

        self.projects: list[ProjectRecord] = [
            ProjectRecord(i, p) for i, p in enumerate(snapshot.projects)
        ]
        self.project_index = {p.name: i for i, p in enumerate(snapshot.projects)}
        self._link_projects()

        self.works: list[WorkRecord] = []
        self.work_index: dict[str, int] = {}
        for spec in snapshot.workloads:
            project = self.project_index.get(spec.project)
            if project is None:
                raise ValueError(f"workload {spec.name!r} names unknown project {spec.project!r}")
            if self.projects[project].children:
                raise ValueError(
                    f"workload {spec.name!r} is in {spec.project!r}, a department: "
                    "only projects (leaves) hold workloads"
                )
            record = WorkRecord(
                len(self.works), spec, project, spec.gpu.milli_on(self.max_device_memory_mib)
            )
            self.work_index[spec.name] = record.index
            self.works.append(record)
            if spec.placements:
                record.state = WorkState.RUNNING
                for placement in spec.placements:
                    self._add_alloc(record, self._alloc_from(spec, placement))

    # --- building -------------------------------------------------------------------------

    def _link_projects(self) -> None:
        for record in self.projects:
            parent = record.spec.parent
            if parent is None:
                continue
            parent_index = self.project_index.get(parent)
            if parent_index is None:
                raise ValueError(f"project {record.name!r} names unknown parent {parent!r}")
            self.projects[parent_index].children.append(record.index)
        for record in self.projects:
            path = [record.index]
            seen = {record.index}
            parent = record.spec.parent
            while parent is not None:
                parent_index = self.project_index[parent]
                if parent_index in seen:
                    raise ValueError(f"project tree has a cycle through {record.name!r}")
                seen.add(parent_index)
                path.append(parent_index)
                parent = self.projects[parent_index].spec.parent
            record.ancestors = tuple(reversed(path))

    def _alloc_from(self, spec: Workload, placement: TaskPlacement) -> TaskAlloc:
        node = self.node_index.get(placement.node)
        if node is None:
            raise ValueError(f"workload {spec.name!r} runs on unknown node {placement.node!r}")
        device_memory = self.nodes[node].gpu_memory_mib
        for device in placement.devices + (
            () if placement.burst_device is None else (placement.burst_device,)
        ):
            if not 0 <= device < self.nodes[node].gpu_count:
                raise ValueError(
                    f"workload {spec.name!r} runs on device {device} of {placement.node!r}, "
                    f"which has {self.nodes[node].gpu_count} devices"
                )
        return TaskAlloc(
            task_index=placement.task_index,
            node=node,
            devices=placement.devices,
            milli_per_device=spec.gpu.milli_on(device_memory) if spec.gpu.is_shared else 1000,
            memory_mib_per_device=spec.gpu.memory_mib_on(device_memory),
            burst_device=placement.burst_device,
        )

    # --- the only two mutations -----------------------------------------------------------

    def _add_alloc(self, work: WorkRecord, alloc: TaskAlloc) -> None:
        spec = work.spec
        for device in alloc.devices:
            self._set_device(
                alloc.node,
                device,
                self.device_used[alloc.node][device] + alloc.milli_per_device,
                self.device_memory_used[alloc.node][device] + alloc.memory_mib_per_device,
            )
        self.cpu_free[alloc.node] -= spec.cpu_milli
        self.memory_free[alloc.node] -= spec.memory_mib
        if work.allocs is _NO_ALLOCS:
            work.allocs = {}
        work.allocs[alloc.task_index] = alloc
        gpu = alloc.milli_per_device * len(alloc.devices)
        self._charge(work, gpu, 1)
        self._tag(alloc, 1)
        if spec.gpu.is_burstable:
            self.burstable_works[work.index] = None

    def _remove_alloc(self, work: WorkRecord, task_index: int) -> TaskAlloc:
        alloc = work.allocs.pop(task_index)
        for device in alloc.devices:
            self._set_device(
                alloc.node,
                device,
                self.device_used[alloc.node][device] - alloc.milli_per_device,
                self.device_memory_used[alloc.node][device] - alloc.memory_mib_per_device,
            )
        self.cpu_free[alloc.node] += work.spec.cpu_milli
        self.memory_free[alloc.node] += work.spec.memory_mib
        self._charge(work, alloc.milli_per_device * len(alloc.devices), -1)
        self._tag(alloc, -1)
        return alloc

    def _tag(self, alloc: TaskAlloc, sign: int) -> None:
        if not alloc.devices:
            return
        tag = 0 if alloc.milli_per_device < MILLI_PER_GPU else len(alloc.devices)
        tags = self.node_tags[alloc.node]
        count = tags.get(tag, 0) + sign
        if count:
            tags[tag] = count
        else:
            del tags[tag]

    def _charge(self, work: WorkRecord, gpu_milli: int, sign: int) -> None:
        spec = work.spec
        amounts = (gpu_milli * sign, spec.cpu_milli * sign, spec.memory_mib * sign)
        nonpreemptible = not work.preemptible
        for p in self.projects[work.project].ancestors:
            record = self.projects[p]
            for r in range(3):
                record.holding[r] += amounts[r]
            if nonpreemptible:
                for r in range(3):
                    record.nonpreemptible_holding[r] += amounts[r]

    def _set_device(self, node: int, device: int, used: int, memory_used: int) -> None:
        before = self.device_used[node][device]
        self.device_used[node][device] = used
        self.device_memory_used[node][device] = memory_used
        if before == used:
            return
        self.used_gpu_milli += used - before
        if 0 < before < MILLI_PER_GPU:
            self._unindex_shared(node, device, MILLI_PER_GPU - before)
        if 0 < used < MILLI_PER_GPU:
            self._index_shared(node, device, MILLI_PER_GPU - used)
        if before == 0 or used == 0:
            old = self.empty_count[node]
            new = old + (1 if used == 0 else -1)
            del self.nodes_by_empty[old][node]
            self.nodes_by_empty[new][node] = None
            self.empty_count[node] = new

    def _index_shared(self, node: int, device: int, free: int) -> None:
        bucket = self.shared_by_free.get(free)
        if bucket is None:
            bucket = self.shared_by_free[free] = {}
            bisect.insort(self.shared_free_keys, free)
        bucket[(node, device)] = None

    def _unindex_shared(self, node: int, device: int, free: int) -> None:
        bucket = self.shared_by_free[free]
        del bucket[(node, device)]
        if not bucket:
            del self.shared_by_free[free]
            del self.shared_free_keys[bisect.bisect_left(self.shared_free_keys, free)]

    def set_burst_device(self, work: WorkRecord, task_index: int, device: int | None) -> None:
        """Node-level: where a placed dynamic fraction physically runs. Accounting unchanged."""
        alloc = work.allocs[task_index]
        work.allocs[task_index] = TaskAlloc(
            alloc.task_index,
            alloc.node,
            alloc.devices,
            alloc.milli_per_device,
            alloc.memory_mib_per_device,
            device,
        )

    # --- queries --------------------------------------------------------------------------

    def project_path(self, work: WorkRecord) -> tuple[int, ...]:
        return self.projects[work.project].ancestors

    @property
    def idle_gpu_milli(self) -> int:
        return self.capacity_gpu_milli - self.used_gpu_milli

    def to_placement(self, alloc: TaskAlloc) -> TaskPlacement:
        return TaskPlacement(
            task_index=alloc.task_index,
            node=self.nodes[alloc.node].name,
            devices=alloc.devices,
            burst_device=alloc.burst_device,
        )


class Statement:
    """A tentative group of changes that is committed or rolled back as one.

    A statement opened with a `parent` hands its changes to the parent on commit, so rolling
    back the parent undoes them too.
    """

    __slots__ = ("_undo", "parent", "session")

    def __init__(self, session: Session, parent: Statement | None = None) -> None:
        self.session = session
        self.parent = parent
        self._undo: list[tuple[bool, WorkRecord, TaskAlloc]] = []

    def place(self, work: WorkRecord, alloc: TaskAlloc) -> None:
        self.session._add_alloc(work, alloc)
        self._undo.append((True, work, alloc))

    def remove(self, work: WorkRecord, task_index: int) -> TaskAlloc:
        alloc = self.session._remove_alloc(work, task_index)
        self._undo.append((False, work, alloc))
        return alloc

    def rollback(self) -> None:
        session = self.session
        for added, work, alloc in reversed(self._undo):
            if added:
                session._remove_alloc(work, alloc.task_index)
            else:
                session._add_alloc(work, alloc)
        self._undo.clear()

    def commit(self) -> None:
        if self.parent is not None:
            self.parent._undo.extend(self._undo)
        self._undo.clear()
