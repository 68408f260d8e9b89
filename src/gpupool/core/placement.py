"""Where a task goes: node and devices, using the session's capacity indexes.

Whole-GPU tasks: bin-pack (the node with the fewest empty devices that still has enough) or
spread (the most empty devices). Fractions: onto an already shared device before an empty one;
among the shared candidates (tightest fit first, at most `fraction_candidates` of them) the one
whose use leaves the cluster least fragmented for the shapes now waiting, fragmentation being
the FGD paper's: GPU capacity that a task of a given shape could not use.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gpupool.core.model import (
    MILLI_PER_GPU,
    GpuRequestKind,
    PlacementStrategy,
    Toleration,
    Workload,
)
from gpupool.core.session import Session, TaskAlloc, WorkRecord


@dataclass(frozen=True, slots=True)
class TaskShape:
    """A per-task request as the fragmentation score sees it: whole devices or milli of one."""

    whole_devices: int
    fraction_milli: int
    weight: int


def workload_shapes(workloads: Iterable[Workload], limit: int = 8) -> tuple[TaskShape, ...]:
    """The most common task shapes among `workloads`, weighted by task count."""
    counts: dict[tuple[int, int], int] = {}
    for w in workloads:
        key = (
            (w.gpu.amount, 0)
            if w.gpu.kind is GpuRequestKind.WHOLE
            else (0, w.gpu.amount if w.gpu.kind is GpuRequestKind.FRACTION else 500)
        )
        counts[key] = counts.get(key, 0) + w.tasks
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    return tuple(TaskShape(k[0], k[1], c) for k, c in ranked)


NodeSelector = tuple[tuple[str, tuple[str, ...]], ...]


class Placer:
    """Finds task placements in a session. One per cycle; holds per-cycle caches only.

    A node is a candidate for a new placement when it matches the workload's node selector and
    the workload tolerates every NoSchedule / NoExecute taint on it (PreferNoSchedule is not
    acted on). Work already placed on a node stays valid whatever its taints. A device is also
    kept from new placements while a dynamic fraction that may not be moved off it runs there
    physically (see `_pin_burst_devices`).
    """

    def __init__(self, session: Session, shapes: tuple[TaskShape, ...]) -> None:
        self.session = session
        self.shapes = shapes
        self._selector_nodes: dict[NodeSelector, frozenset[int]] = {}
        self._repelling = tuple(
            i for i, node in enumerate(session.nodes) if any(t.repels for t in node.taints)
        )
        """Nodes with a NoSchedule / NoExecute taint: the only ones tolerations can matter on."""
        self._untolerated: dict[tuple[Toleration, ...], frozenset[int]] = {}
        self._admitted: dict[
            tuple[NodeSelector, tuple[Toleration, ...]], tuple[frozenset[int] | None]
        ] = {}
        self._repelling_taints: dict[
            tuple[NodeSelector, tuple[Toleration, ...]], tuple[int, tuple[str, ...]]
        ] = {}
        self._pins: dict[int, list[tuple[WorkRecord, int, int]]] = {}
        self._pin_burst_devices()

    # --- node filters ---------------------------------------------------------------------

    def _allowed(self, workload: Workload) -> frozenset[int] | None:
        """Nodes the selector and the taints admit; None when every node is admitted."""
        selector = workload.node_selector
        if not self._repelling:
            if not selector:
                return None
            key: tuple[NodeSelector, tuple[Toleration, ...]] = (selector, ())
        else:
            key = (selector, workload.tolerations)
        cached = self._admitted.get(key)
        if cached is None:
            nodes = self._selected(selector) if selector else None
            untolerated = self._untolerated_nodes(key[1]) if self._repelling else frozenset()
            if untolerated:
                everything = frozenset(range(len(self.session.nodes)))
                nodes = (everything if nodes is None else nodes) - untolerated
            cached = self._admitted[key] = (nodes,)
        return cached[0]

    def _selected(self, selector: NodeSelector) -> frozenset[int]:
        """Nodes whose labels match `selector` (taints aside)."""
        nodes = self._selector_nodes.get(selector)
        if nodes is None:
            nodes = frozenset(
                i
                for i, node in enumerate(self.session.nodes)
                if all(node.label(key) in values for key, values in selector)
            )
            self._selector_nodes[selector] = nodes
        return nodes

    def _untolerated_nodes(self, tolerations: tuple[Toleration, ...]) -> frozenset[int]:
        """Nodes with a NoSchedule / NoExecute taint that `tolerations` do not tolerate."""
        nodes = self._untolerated.get(tolerations)
        if nodes is None:
            all_nodes = self.session.nodes
            nodes = frozenset(i for i in self._repelling if not all_nodes[i].admits(tolerations))
            self._untolerated[tolerations] = nodes
        return nodes

    def selector_matches_any(self, workload: Workload) -> bool:
        """Whether any node matches the node selector (taints aside)."""
        selector = workload.node_selector
        return not selector or bool(self._selected(selector))

    def admits_any(self, workload: Workload) -> bool:
        """Whether any node admits the workload (selector and taints)."""
        allowed = self._allowed(workload)
        return allowed is None or bool(allowed)

    def admitted_nodes(self, workload: Workload) -> frozenset[int] | None:
        """Nodes that are candidates for new tasks of `workload` (selector and taints); None
        when every node is."""
        return self._allowed(workload)

    def tolerated_on(self, workload: Workload, node: int) -> bool:
        """Whether the workload tolerates the NoSchedule / NoExecute taints of `node`."""
        return not self._repelling or node not in self._untolerated_nodes(workload.tolerations)

    def repelling_taints(self, workload: Workload) -> tuple[int, tuple[str, ...]]:
        """(how many nodes matching the selector have taints the workload does not tolerate,
        the keys of those taints), for the pending reason."""
        if not self._repelling:
            return 0, ()
        key = (workload.node_selector, workload.tolerations)
        cached = self._repelling_taints.get(key)
        if cached is None:
            untolerated = self._untolerated_nodes(workload.tolerations)
            if workload.node_selector:
                untolerated = untolerated & self._selected(workload.node_selector)
            keys = {
                taint.key
                for i in untolerated
                for taint in self.session.nodes[i].untolerated_taints(workload.tolerations)
            }
            cached = self._repelling_taints[key] = (len(untolerated), tuple(sorted(keys)))
        return cached

    # --- devices kept from new placements -------------------------------------------------

    def _pin_burst_devices(self) -> None:
        """Keep new placements off the idle device a dynamic fraction bursts on when it could
        not be packed back if that device were claimed: it is not movable, or its node now has
        taints it does not tolerate (packing back is a restart there). The pin holds while the
        task stays placed (an eviction frees the device)."""
        session = self.session
        for index in session.burstable_works:
            work = session.works[index]
            for task, alloc in work.allocs.items():
                if alloc.burst_device is None:
                    continue
                if work.spec.movable and self.tolerated_on(work.spec, alloc.node):
                    continue
                self._pins.setdefault(alloc.node, []).append((work, task, alloc.burst_device))

    def _pinned(self, node: int) -> set[int]:
        """Devices of `node` that pinned burst tasks still run on."""
        return {device for work, task, device in self._pins[node] if task in work.allocs}

    def _node_fits(
        self,
        node: int,
        workload: Workload,
        allowed: frozenset[int] | None,
        excluded: int | None,
        count_cpu_memory: bool = True,
    ) -> bool:
        s = self.session
        return (
            node != excluded
            and (allowed is None or node in allowed)
            and (
                not count_cpu_memory
                or (
                    s.cpu_free[node] >= workload.cpu_milli
                    and s.memory_free[node] >= workload.memory_mib
                )
            )
        )

    # --- search ---------------------------------------------------------------------------

    def find(
        self,
        workload: Workload,
        task_index: int,
        excluded: int | None = None,
        max_milli: int | None = None,
    ) -> TaskAlloc | None:
        """A placement for one task of `workload`, or None. `excluded` is a node to avoid;
        `max_milli` the most GPU the task may be charged (a memory request costs more on a
        smaller device)."""
        if workload.gpu.kind is GpuRequestKind.WHOLE:
            return self._find_whole(workload, task_index, excluded)
        return self._find_shared(workload, task_index, excluded, max_milli)

    def _nodes_with_empty(self, at_least: int) -> Iterator[int]:
        s = self.session
        buckets = range(at_least, s.max_gpus_per_node + 1)
        if s.settings.placement is PlacementStrategy.SPREAD:
            buckets = range(s.max_gpus_per_node, at_least - 1, -1)
        for count in buckets:
            yield from s.nodes_by_empty[count]

    def _find_whole(
        self, workload: Workload, task_index: int, excluded: int | None
    ) -> TaskAlloc | None:
        s = self.session
        needed = workload.gpu.amount
        if needed > s.max_gpus_per_node:
            return None
        allowed = self._allowed(workload)
        pins = self._pins
        for node in self._nodes_with_empty(needed):
            if not self._node_fits(node, workload, allowed, excluded):
                continue
            used = s.device_used[node]
            if pins and node in pins:
                pinned = self._pinned(node)
                devices = tuple(d for d in range(len(used)) if used[d] == 0 and d not in pinned)
                if len(devices) < needed:
                    continue
                devices = devices[:needed]
            else:
                devices = tuple(d for d in range(len(used)) if used[d] == 0)[:needed]
            memory = s.nodes[node].gpu_memory_mib
            return TaskAlloc(task_index, node, devices, MILLI_PER_GPU, memory)
        return None

    def _find_shared(
        self, workload: Workload, task_index: int, excluded: int | None, max_milli: int | None
    ) -> TaskAlloc | None:
        s = self.session
        request = workload.gpu
        allowed = self._allowed(workload)
        pins = self._pins
        smallest = request.milli_on(s.max_device_memory_mib)
        best: TaskAlloc | None = None
        best_score = 0
        examined = 0
        keys = s.shared_free_keys
        start = bisect.bisect_left(keys, smallest)
        for free in keys[start:]:
            for node, device in s.shared_by_free[free]:
                if not self._node_fits(node, workload, allowed, excluded):
                    continue
                device_memory = s.nodes[node].gpu_memory_mib
                milli = request.milli_on(device_memory)
                memory = request.memory_mib_on(device_memory)
                if milli > free or s.device_memory_used[node][device] + memory > device_memory:
                    continue
                if max_milli is not None and milli > max_milli:
                    continue
                if pins and node in pins and device in self._pinned(node):
                    continue
                score = self._fragmentation_delta(node, device, milli)
                if best is None or score < best_score:
                    best = TaskAlloc(task_index, node, (device,), milli, memory)
                    best_score = score
                examined += 1
                if examined >= s.settings.fraction_candidates:
                    return best
        if best is not None:
            return best
        for node in self._nodes_with_empty(1):
            if not self._node_fits(node, workload, allowed, excluded):
                continue
            device_memory = s.nodes[node].gpu_memory_mib
            if max_milli is not None and request.milli_on(device_memory) > max_milli:
                continue
            used = s.device_used[node]
            if pins and node in pins:
                pinned = self._pinned(node)
                idle = [d for d in range(len(used)) if used[d] == 0 and d not in pinned]
                if not idle:
                    continue
                device = idle[0]
            else:
                device = used.index(0)
            return TaskAlloc(
                task_index,
                node,
                (device,),
                request.milli_on(device_memory),
                request.memory_mib_on(device_memory),
            )
        return None

    def _fragmentation_delta(self, node: int, device: int, milli: int) -> int:
        """Change in expected fragmentation if `milli` more lands on an already shared device.

        Using a shared device leaves the node's count of empty devices unchanged, so for every
        whole-GPU shape the fragment shrinks by exactly `milli` whichever candidate is chosen:
        only fractional shapes tell candidates apart. For those, a device's free part is a
        fragment when it is smaller than the shape.
        """
        free_before = MILLI_PER_GPU - self.session.device_used[node][device]
        free_after = free_before - milli
        delta = 0
        for shape in self.shapes:
            if shape.whole_devices:
                continue
            before = free_before if free_before < shape.fraction_milli else 0
            after = free_after if free_after < shape.fraction_milli else 0
            delta += shape.weight * (after - before)
        return delta

    # --- what the pending reason can say --------------------------------------------------

    def largest_empty_block(self, workload: Workload, count_cpu_memory: bool = True) -> int:
        """Most empty devices on one node the workload may use (with room for its CPU/memory).
        For the pending reason only: a pinned burst device counts as empty here."""
        s = self.session
        allowed = self._allowed(workload)
        for count in range(s.max_gpus_per_node, 0, -1):
            for node in s.nodes_by_empty[count]:
                if self._node_fits(node, workload, allowed, None, count_cpu_memory):
                    return count
        return 0

    def largest_free_fraction(self, workload: Workload, count_cpu_memory: bool = True) -> int:
        """Largest free part of one device the workload may use, in milli-GPU."""
        s = self.session
        allowed = self._allowed(workload)
        if self.largest_empty_block(workload, count_cpu_memory) > 0:
            return MILLI_PER_GPU
        for free in reversed(s.shared_free_keys):
            for node, _device in s.shared_by_free[free]:
                if self._node_fits(node, workload, allowed, None, count_cpu_memory):
                    return free
        return 0
