"""GPU fragmentation of a snapshot, after the FGD paper ("Beware of Fragmentation", ATC '23).

For one node and one task shape, the node's idle GPU is *fragmented* where that task cannot use
it: all of it when the task does not fit on the node at all (too few whole idle devices, no
device with enough free share, or too little free CPU); otherwise the devices the task cannot use
(partly used ones for a whole-GPU task, ones with less free than the share for a fraction). A
node's fragmentation is the average over the typical shapes, weighted by how often each shape
was submitted; the cluster's is the sum over nodes. Integer milli-GPU throughout.

This is the simulator's own simple measure; `shape_fragmentation` has the signature the engine
takes (`FragmentationFunction`), so the core's measure can replace it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpupool.core.model import MILLI_PER_GPU, GpuRequestKind, Snapshot
from gpupool.sim.engine import FragmentationFunction
from gpupool.sim.workload import SimWorkload

__all__ = [
    "TaskShape",
    "node_fragmented_milli",
    "node_free",
    "shape_fragmentation",
    "typical_shapes",
]


@dataclass(frozen=True, slots=True, order=True)
class TaskShape:
    """One task's request: `gpu_milli` >= 1000 means whole devices (a multiple of 1000)."""

    gpu_milli: int
    cpu_milli: int = 0


def typical_shapes(workloads: Iterable[SimWorkload]) -> tuple[tuple[TaskShape, int], ...]:
    """Each task shape with how many tasks of the workloads have it, most frequent first."""
    counts: Counter[TaskShape] = Counter()
    for workload in workloads:
        gpu = workload.gpu
        milli = gpu.amount * MILLI_PER_GPU if gpu.kind is GpuRequestKind.WHOLE else gpu.amount
        if gpu.kind is GpuRequestKind.MEMORY:
            milli = gpu.milli_on(81920)
        counts[TaskShape(milli, workload.cpu_milli)] += workload.tasks
    return tuple(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def node_fragmented_milli(
    devices_free_milli: Sequence[int], cpu_free_milli: int | None, shape: TaskShape
) -> int:
    """Idle milli-GPU of one node that a task of `shape` could not use."""
    idle = sum(devices_free_milli)
    if cpu_free_milli is not None and cpu_free_milli < shape.cpu_milli:
        return idle
    if shape.gpu_milli >= MILLI_PER_GPU:
        whole = sum(1 for free in devices_free_milli if free >= MILLI_PER_GPU)
        if whole < shape.gpu_milli // MILLI_PER_GPU:
            return idle
        return sum(free for free in devices_free_milli if free < MILLI_PER_GPU)
    if not any(free >= shape.gpu_milli for free in devices_free_milli):
        return idle
    return sum(free for free in devices_free_milli if free < shape.gpu_milli)


def node_free(snapshot: Snapshot) -> dict[str, tuple[list[int], int | None]]:
    """Per node: idle milli-GPU of each device, and free CPU (None when not tracked)."""
    free: dict[str, tuple[list[int], int | None]] = {
        node.name: ([MILLI_PER_GPU] * node.gpu_count, node.cpu_milli) for node in snapshot.nodes
    }
    memory = {node.name: node.gpu_memory_mib for node in snapshot.nodes}
    for workload in snapshot.workloads:
        for placement in workload.placements:
            devices, cpu = free[placement.node]
            if workload.gpu.kind is GpuRequestKind.WHOLE:
                for device in placement.devices:
                    devices[device] -= MILLI_PER_GPU
            else:
                devices[placement.devices[0]] -= workload.gpu.milli_on(memory[placement.node])
            if cpu is not None:
                free[placement.node] = (devices, cpu - workload.cpu_milli)
    return free


def shape_fragmentation(shapes: Sequence[tuple[TaskShape, int]]) -> FragmentationFunction:
    """The engine's fragmentation function for these weighted shapes: (fragmented, idle)."""
    total_weight = sum(weight for _, weight in shapes)

    def measure(snapshot: Snapshot) -> tuple[int, int]:
        fragmented = 0
        idle = 0
        for devices, cpu in node_free(snapshot).values():
            node_idle = sum(devices)
            idle += node_idle
            if node_idle == 0 or total_weight == 0:
                continue
            weighted = sum(
                weight * node_fragmented_milli(devices, cpu, shape) for shape, weight in shapes
            )
            fragmented += weighted // total_weight
        return fragmented, idle

    return measure
