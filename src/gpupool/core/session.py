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

import functools
from bisect import bisect_left, insort
from typing import Final

from gpupool.core.model import (
    MILLI_PER_GPU,
    GpuRequestKind,
    Node,
    Snapshot,
    TaskPlacement,
    Workload,
)
from gpupool.core.records import NEW_TUPLE as NEW_TUPLE
from gpupool.core.records import NO_ALLOCS as _NO_ALLOCS
from gpupool.core.records import UNTRACKED as UNTRACKED
from gpupool.core.records import ProjectRecord as ProjectRecord
from gpupool.core.records import ShapeKey as ShapeKey
from gpupool.core.records import Sums
from gpupool.core.records import TaskAlloc as TaskAlloc
from gpupool.core.records import WorkRecord as WorkRecord
from gpupool.core.records import WorkState as WorkState
from gpupool.core.records import task_alloc as task_alloc
from gpupool.core.statement import Statement as Statement

# The records live in `records` and `Statement` in `statement`; the actions import them from
# here, next to `Session`.

_RUNNING: Final = WorkState.RUNNING
_WHOLE: Final = GpuRequestKind.WHOLE
_FRACTION: Final = GpuRequestKind.FRACTION
"""Enum members by module name: in Python 3.11 reading one from its class costs ten times a
global, and hashing a member runs Python code."""


def _shape_key(spec: Workload, gang: int, project: int) -> ShapeKey:
    """`Session.shape_id`'s key: a GPU-memory request's charge, hence whether its project's
    headroom admits it, depends on the device, so its shape is its project's alone."""
    gpu = spec.gpu
    kind = gpu.kind
    # The kind as a number: hashing an enum member runs Python code.
    code = 0 if kind is _WHOLE else 1 if kind is _FRACTION else 2
    key = (
        code,
        gpu.amount,
        gang,
        spec.cpu_milli,
        spec.memory_mib,
        spec.node_selector,
        spec.tolerations,
    )
    return key if code != 2 else (*key, project)


class Session:
    """Mutable per-cycle state; see module docstring."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.settings = snapshot.settings
        self.nodes: tuple[Node, ...] = snapshot.nodes
        nodes = self.nodes
        self.node_index = {n.name: i for i, n in enumerate(nodes)}
        if len(self.node_index) != len(nodes):
            raise ValueError("snapshot has two nodes with the same name")
        self.device_used: list[list[int]] = [[0] * n.gpu_count for n in nodes]
        self.device_memory_used: list[list[int]] = [[0] * n.gpu_count for n in nodes]
        self.cpu_free = [UNTRACKED if n.cpu_milli is None else n.cpu_milli for n in nodes]
        self.memory_free = [UNTRACKED if n.memory_mib is None else n.memory_mib for n in nodes]
        self.max_gpus_per_node = max((n.gpu_count for n in nodes), default=0)
        self.max_device_memory_mib = max((n.gpu_memory_mib for n in nodes), default=1)
        self.empty_count = [n.gpu_count for n in nodes]
        self.node_version = [0] * len(nodes)
        """Per node, a count of the changes to what runs there (devices, CPU, memory, tags):
        a placement policy's score for the node stays valid while it is unchanged."""
        self.nodes_by_empty: list[dict[int, None]] = [{} for _ in range(self.max_gpus_per_node + 1)]
        self.shared_by_free: dict[int, dict[tuple[int, int], None]] = {}
        self.shared_free_keys: list[int] = []
        self.capacity_gpu_milli = MILLI_PER_GPU * sum(n.gpu_count for n in nodes)
        self.used_gpu_milli = 0
        self.burstable_works: dict[int, None] = {}
        """Works with a dynamic fraction (limit above request): the node-level scheduler's."""
        self.node_tags: list[dict[int, int]] = [{} for _ in nodes]
        """Per node, how many tasks of each size it holds (devices taken; 0 for a shared one):
        the GPU-clustering policy's affinity."""

        self.projects: list[ProjectRecord] = [
            ProjectRecord(i, p) for i, p in enumerate(snapshot.projects)
        ]
        self.project_index = {p.name: i for i, p in enumerate(snapshot.projects)}
        self._link_projects()
        self._holders = [
            tuple(
                (self.projects[p].holding, self.projects[p].nonpreemptible_holding)
                for p in record.ancestors
            )
            for record in self.projects
        ]
        """Per project: the holding lists (all, non-preemptible) of its path, charged by
        `_add_alloc` and `_remove_alloc`."""

        self.works: list[WorkRecord] = []
        self.running_at_start: list[WorkRecord] = []
        """The works that run when the cycle starts, in order: the only ones that can be
        victims or movers (work started this cycle cannot)."""
        self.queues_at_start: dict[int, list[WorkRecord]] = {}
        """Per project, in workload order: the work with tasks to start when the cycle starts
        (allocate's queues, sorted there)."""
        self.missing_at_start: dict[int, Sums] = {}
        """Per project: the tasks not placed when the cycle starts (the fair shares' demand,
        with the holdings)."""
        self.pending_shapes: dict[tuple[int, int], Sums] = {}
        """Per (GPUs per task, milli per GPU): the tasks of the work pending when the cycle
        starts (`candidates.typical_of`; GPU left at 0)."""
        self.shape_keys: list[ShapeKey] = []
        """Shape id -> its key (`shape_id`)."""
        self._shape_ids: dict[ShapeKey, int] = {}
        self._reduced: list[int] = []
        """Shape id -> the id of its key less CPU and memory (`reduced_shape`; -1 until asked)."""
        self._reduced_ids: dict[ShapeKey, int] = {}
        self._build_works(snapshot.workloads)

    @functools.cached_property
    def work_index(self) -> dict[str, int]:
        """Workload name -> index in `works`; built when first asked for (the cycle does not)."""
        return {work.spec.name: work.index for work in self.works}

    # --- shapes ---------------------------------------------------------------------------

    def shape_id(self, work: WorkRecord) -> int:
        """The id of the shape of `work` with nothing placed (its gang fixed by its spec), the
        same for every workload of the cycle with an equal key: allocate, reclaim and preempt
        remember failures by it. Made while the session is built for the work pending then."""
        shape = work.shape
        if shape < 0:
            shape = work.shape = self._intern(_shape_key(work.spec, work.gang, work.project))
        return shape

    def _intern(self, key: ShapeKey) -> int:
        shape = self._shape_ids.get(key)
        if shape is None:
            shape = self._shape_ids[key] = len(self.shape_keys)
            self.shape_keys.append(key)
            self._reduced.append(-1)
        return shape

    def reduced_shape(self, shape: int) -> int:
        """The id of shape `shape` less its CPU and memory per task (reclaim compares shapes by
        the rest first), in a space of its own."""
        reduced = self._reduced[shape]
        if reduced < 0:
            key = self.shape_keys[shape]
            less = key[:3] + key[5:]
            found = self._reduced_ids.get(less)
            if found is None:
                found = self._reduced_ids[less] = len(self._reduced_ids)
            reduced = self._reduced[shape] = found
        return reduced

    # --- building -------------------------------------------------------------------------

    def _build_works(self, workloads: tuple[Workload, ...]) -> None:
        """Records for every workload, and the running ones' placements charged in one pass.

        Equivalent to placing every running task through `_add_alloc` in snapshot order, but
        the capacity indexes are built once at the end: each node (device) is put into its
        bucket in the order of its last change, as the incremental updates would have left it.
        The same pass sums what the cycle's first steps need of the work waiting (queues,
        missing demand, pending shapes): each further pass over every workload would read them
        all from memory again.
        """
        works = self.works
        project_index = self.project_index
        projects = self.projects
        largest = self.max_device_memory_mib
        device_used = self.device_used
        device_memory_used = self.device_memory_used
        cpu_free = self.cpu_free
        memory_free = self.memory_free
        burstable = self.burstable_works
        node_tags = self.node_tags
        whole = _WHOLE
        fraction = _FRACTION
        leaf_project: dict[str, int] = {}
        held: dict[int, tuple[Sums, Sums]] = {}
        """Per project: what its running tasks hold, and what the non-preemptible ones do."""
        node_changed = [0] * len(self.nodes)
        """Per node: the last step at which its number of empty devices changed (0: never)."""
        first_device: list[int] = []
        devices = 0
        for used in device_used:
            first_device.append(devices)
            devices += len(used)
        device_changed = [0] * devices
        """Per device, at `first_device[node] + device`: the last step at which its use
        changed. Flat lists by position, not dicts by (node, device): the build changes tens of
        thousands of devices, and a key tuple per change was an object made and hashed."""
        step = 0
        queues = self.queues_at_start
        missing_at_start = self.missing_at_start
        pending_shapes = self.pending_shapes
        by_shape: list[Sums] = []
        """Per shape id: its pending tasks, summed into `pending_shapes` at the end (a dict
        lookup by a key tuple per pending work was an object made and hashed per work)."""
        by_shape_key: list[tuple[int, int]] = []
        """Per shape id: its key in `pending_shapes` (GPUs per task, milli per GPU)."""
        for index, spec in enumerate(workloads):
            project = leaf_project.get(spec.project)
            if project is None:
                project = project_index.get(spec.project)
                if project is None:
                    raise ValueError(
                        f"workload {spec.name!r} names unknown project {spec.project!r}"
                    )
                if projects[project].children:
                    raise ValueError(
                        f"workload {spec.name!r} is in {spec.project!r}, a department: "
                        "only projects (leaves) hold workloads"
                    )
                leaf_project[spec.project] = project
            gpu = spec.gpu
            kind = gpu.kind
            if kind is whole:
                task_milli = gpu.amount * MILLI_PER_GPU
            elif kind is fraction:
                task_milli = gpu.amount
            else:
                task_milli = gpu.milli_on(largest)
            record = WorkRecord(index, spec, project, task_milli)
            works.append(record)
            tasks = spec.tasks
            if spec.placements:
                record.state = _RUNNING
                self.running_at_start.append(record)
                allocs: dict[int, TaskAlloc] = {}
                record.allocs = allocs
                gpu_held = 0
                for placement in spec.placements:
                    alloc = self._alloc_from(spec, placement)
                    node = alloc.node
                    milli = alloc.milli_per_device
                    memory = alloc.memory_mib_per_device
                    used = device_used[node]
                    memory_used = device_memory_used[node]
                    for device in alloc.devices:
                        before = used[device]
                        after = before + milli
                        used[device] = after
                        memory_used[device] += memory
                        if before != after:
                            step += 1
                            device_changed[first_device[node] + device] = step
                            if before == 0 or after == 0:
                                node_changed[node] = step
                    cpu_free[node] -= spec.cpu_milli
                    memory_free[node] -= spec.memory_mib
                    allocs[alloc.task_index] = alloc
                    gpu_held += milli * len(alloc.devices)
                    if alloc.devices:  # the node's tags (`node_tags`)
                        tags = node_tags[node]
                        tag = 0 if milli < MILLI_PER_GPU else len(alloc.devices)
                        tags[tag] = tags.get(tag, 0) + 1
                placed = len(spec.placements)
                left = tasks - len(allocs)
                sums = held.get(project)
                if sums is None:
                    sums = held[project] = (Sums(), Sums())
                cpu_held = spec.cpu_milli * placed
                memory_held = spec.memory_mib * placed
                total = sums[0]
                total.gpu_milli += gpu_held
                total.cpu_milli += cpu_held
                total.memory_mib += memory_held
                if not record.preemptible:
                    total = sums[1]
                    total.gpu_milli += gpu_held
                    total.cpu_milli += cpu_held
                    total.memory_mib += memory_held
                if gpu.is_burstable:
                    burstable[index] = None
            else:
                left = tasks
                shape_id = self.shape_id(record)
                if shape_id < len(by_shape):
                    shape = by_shape[shape_id]
                else:  # a new shape (ids are made in order)
                    shape = Sums()
                    by_shape.append(shape)
                    by_shape_key.append(
                        (gpu.amount, MILLI_PER_GPU) if kind is whole else (1, task_milli)
                    )
                shape.tasks += tasks
                shape.cpu_milli += spec.cpu_milli * tasks
                shape.memory_mib += spec.memory_mib * tasks
            if left > 0 or not spec.placements:
                queue = queues.get(project)
                if queue is None:
                    queue = queues[project] = []
                queue.append(record)
            if left > 0:
                missing = missing_at_start.get(project)
                if missing is None:
                    missing = missing_at_start[project] = Sums()
                missing.tasks += left
                missing.gpu_milli += task_milli * left
                missing.cpu_milli += spec.cpu_milli * left
                missing.memory_mib += spec.memory_mib * left
        for shape_id, of_shape in enumerate(by_shape):
            merged = pending_shapes.get(by_shape_key[shape_id])
            if merged is None:
                pending_shapes[by_shape_key[shape_id]] = of_shape
            else:
                merged.tasks += of_shape.tasks
                merged.cpu_milli += of_shape.cpu_milli
                merged.memory_mib += of_shape.memory_mib
        for project, (everything, nonpreemptible) in held.items():
            for p in projects[project].ancestors:
                holder = projects[p]
                holding = holder.holding
                holding[0] += everything.gpu_milli
                holding[1] += everything.cpu_milli
                holding[2] += everything.memory_mib
                holding = holder.nonpreemptible_holding
                holding[0] += nonpreemptible.gpu_milli
                holding[1] += nonpreemptible.cpu_milli
                holding[2] += nonpreemptible.memory_mib
        self._build_indexes(node_changed, device_changed)

    def _build_indexes(self, node_changed: list[int], device_changed: list[int]) -> None:
        """Empty-device buckets and shared-device buckets from the devices' use: a node or
        device enters its bucket in the order of its last change (untouched nodes first, in
        node order), as `_set_device` would have moved it there."""
        used_total = 0
        empty_count = self.empty_count
        order: list[tuple[int, int]] = []
        for node, used in enumerate(self.device_used):
            used_total += sum(used)
            empty_count[node] = used.count(0)
            order.append((node_changed[node], node))
        self.used_gpu_milli = used_total
        order.sort()
        buckets = self.nodes_by_empty
        for _step, node in order:
            buckets[empty_count[node]][node] = None
        shared: list[tuple[int, int, int]] = []
        at = 0
        for node, used in enumerate(self.device_used):
            for device in range(len(used)):
                if 0 < used[device] < MILLI_PER_GPU:  # changed, so its step is set
                    shared.append((device_changed[at + device], node, device))
            at += len(used)
        shared.sort()
        by_free = self.shared_by_free
        for _step, node, device in shared:
            free = MILLI_PER_GPU - self.device_used[node][device]
            bucket = by_free.get(free)
            if bucket is None:
                bucket = by_free[free] = {}
            bucket[(node, device)] = None
        self.shared_free_keys = sorted(by_free)

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
        spec_node = self.nodes[node]
        count = spec_node.gpu_count
        devices = placement.devices
        burst = placement.burst_device
        for device in devices if burst is None else (*devices, burst):
            if not 0 <= device < count:
                raise ValueError(
                    f"workload {spec.name!r} runs on device {device} of {placement.node!r}, "
                    f"which has {count} devices"
                )
        device_memory = spec_node.gpu_memory_mib
        gpu = spec.gpu
        if gpu.kind is _WHOLE:
            milli, memory = MILLI_PER_GPU, device_memory
        elif gpu.kind is _FRACTION:
            milli, memory = gpu.amount, gpu.amount * device_memory // MILLI_PER_GPU
        else:
            milli, memory = gpu.milli_on(device_memory), gpu.memory_mib_on(device_memory)
        return task_alloc(placement.task_index, node, devices, milli, memory, burst)

    # --- the only two mutations -----------------------------------------------------------

    def _add_alloc(self, work: WorkRecord, alloc: TaskAlloc) -> None:
        """Place `alloc` of `work`: devices and indexes, CPU and memory, holdings, tags.

        The devices' part is written out here and in `_remove_alloc` rather than shared (every
        tentative placement runs both, and a call per change costs more than the copy): a
        device whose use changed goes to the end of its shared bucket, a node whose number of
        empty devices changed to the end of its bucket (once per call: every device changes
        the same way, so the intermediate buckets a device-by-device update would pass
        through end up as they were)."""
        # One unpacking instead of an attribute read per field.
        task_index, node, devices, milli, memory_per_device, _burst = alloc
        self.node_version[node] += 1
        memory_used = self.device_memory_used[node]
        if not milli:
            for device in devices:
                memory_used[device] += memory_per_device
        else:
            used = self.device_used[node]
            by_free = self.shared_by_free
            empty_delta = 0
            for device in devices:
                memory_used[device] += memory_per_device
                before = used[device]
                after = before + milli
                used[device] = after
                if 0 < before < MILLI_PER_GPU:  # out of its shared bucket
                    free = MILLI_PER_GPU - before
                    bucket = by_free[free]
                    del bucket[(node, device)]
                    if not bucket:
                        del by_free[free]
                        keys = self.shared_free_keys
                        del keys[bisect_left(keys, free)]
                if 0 < after < MILLI_PER_GPU:  # to the end of its new shared bucket
                    free = MILLI_PER_GPU - after
                    into = by_free.get(free)
                    if into is None:
                        into = by_free[free] = {}
                        insort(self.shared_free_keys, free)
                    into[(node, device)] = None
                if before == 0:
                    empty_delta -= 1
                elif after == 0:
                    empty_delta += 1
            self.used_gpu_milli += milli * len(devices)
            if empty_delta:
                empty_count = self.empty_count
                old = empty_count[node]
                new = old + empty_delta
                buckets = self.nodes_by_empty
                del buckets[old][node]
                buckets[new][node] = None
                empty_count[node] = new
        spec = work.spec
        cpu = spec.cpu_milli
        memory = spec.memory_mib
        self.cpu_free[node] -= cpu
        self.memory_free[node] -= memory
        allocs = work.allocs
        if allocs is _NO_ALLOCS:
            allocs = work.allocs = {}
        allocs[task_index] = alloc
        gpu = milli * len(devices)
        if work.preemptible:
            for holding, _nonpreemptible in self._holders[work.project]:
                holding[0] += gpu
                holding[1] += cpu
                holding[2] += memory
        else:
            for holding, nonpreemptible_holding in self._holders[work.project]:
                holding[0] += gpu
                holding[1] += cpu
                holding[2] += memory
                nonpreemptible_holding[0] += gpu
                nonpreemptible_holding[1] += cpu
                nonpreemptible_holding[2] += memory
        request = spec.gpu
        if request.kind is _FRACTION and request.is_burstable:
            self.burstable_works[work.index] = None
        if devices:  # the node's tags (`node_tags`)
            tag = 0 if milli < MILLI_PER_GPU else len(devices)
            tags = self.node_tags[node]
            count = tags.get(tag, 0) + 1
            if count:
                tags[tag] = count
            else:
                del tags[tag]

    def _remove_alloc(self, work: WorkRecord, task_index: int) -> TaskAlloc:
        """Take task `task_index` of `work` off again: `_add_alloc` backwards."""
        alloc = work.allocs.pop(task_index)
        _task, node, devices, milli, memory_per_device, _burst = alloc
        self.node_version[node] += 1
        memory_used = self.device_memory_used[node]
        if not milli:
            for device in devices:
                memory_used[device] -= memory_per_device
        else:
            used = self.device_used[node]
            by_free = self.shared_by_free
            empty_delta = 0
            for device in devices:
                memory_used[device] -= memory_per_device
                before = used[device]
                after = before - milli
                used[device] = after
                if 0 < before < MILLI_PER_GPU:  # out of its shared bucket
                    free = MILLI_PER_GPU - before
                    bucket = by_free[free]
                    del bucket[(node, device)]
                    if not bucket:
                        del by_free[free]
                        keys = self.shared_free_keys
                        del keys[bisect_left(keys, free)]
                if 0 < after < MILLI_PER_GPU:  # to the end of its new shared bucket
                    free = MILLI_PER_GPU - after
                    into = by_free.get(free)
                    if into is None:
                        into = by_free[free] = {}
                        insort(self.shared_free_keys, free)
                    into[(node, device)] = None
                if before == 0:
                    empty_delta -= 1
                elif after == 0:
                    empty_delta += 1
            self.used_gpu_milli -= milli * len(devices)
            if empty_delta:
                empty_count = self.empty_count
                old = empty_count[node]
                new = old + empty_delta
                buckets = self.nodes_by_empty
                del buckets[old][node]
                buckets[new][node] = None
                empty_count[node] = new
        spec = work.spec
        cpu = spec.cpu_milli
        memory = spec.memory_mib
        self.cpu_free[node] += cpu
        self.memory_free[node] += memory
        gpu = milli * len(devices)
        if work.preemptible:
            for holding, _nonpreemptible in self._holders[work.project]:
                holding[0] -= gpu
                holding[1] -= cpu
                holding[2] -= memory
        else:
            for holding, nonpreemptible_holding in self._holders[work.project]:
                holding[0] -= gpu
                holding[1] -= cpu
                holding[2] -= memory
                nonpreemptible_holding[0] -= gpu
                nonpreemptible_holding[1] -= cpu
                nonpreemptible_holding[2] -= memory
        if devices:  # the node's tags (`node_tags`)
            tag = 0 if milli < MILLI_PER_GPU else len(devices)
            tags = self.node_tags[node]
            count = tags.get(tag, 0) - 1
            if count:
                tags[tag] = count
            else:
                del tags[tag]
        return alloc

    def set_burst_device(self, work: WorkRecord, task_index: int, device: int | None) -> None:
        """Node-level: where a placed dynamic fraction physically runs. Accounting unchanged."""
        alloc = work.allocs[task_index]
        work.allocs[task_index] = task_alloc(
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
