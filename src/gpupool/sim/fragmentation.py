"""GPU fragmentation of a snapshot, after the FGD paper ("Beware of Fragmentation", ATC '23).

For one node and one task shape, the node's idle GPU is *fragmented* where that task cannot use
it: all of it when the task does not fit on the node at all (too few whole idle devices, no
device with enough free share, or too little free CPU); otherwise the devices the task cannot use
(partly used ones for a whole-GPU task, ones with less free than the share for a fraction). A
node's fragmentation is the average over the typical shapes, weighted by how often each shape
was submitted; the cluster's is the sum over nodes. Integer milli-GPU throughout.

The per-node measure is the core's (`gpupool.core.packing`), the same the packing benchmark and
the placement policies use; this module adds the snapshot bookkeeping (free per device, CPU
not tracked on some nodes) and the weighting by submitted shapes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpupool.core.model import MILLI_PER_GPU, GpuRequestKind, Snapshot
from gpupool.core.packing import PodShape, TypicalShape, node_fragmentation_milli
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
    """Idle milli-GPU of one node that a task of `shape` could not use: the core's measure
    (`gpupool.core.packing.node_fragmentation_milli`) for that one shape."""
    whole = shape.gpu_milli >= MILLI_PER_GPU
    pod = PodShape(
        cpu_milli=shape.cpu_milli if cpu_free_milli is not None else 0,
        memory_mib=0,
        gpu_count=shape.gpu_milli // MILLI_PER_GPU if whole else (1 if shape.gpu_milli else 0),
        gpu_milli=MILLI_PER_GPU if whole else shape.gpu_milli,
    )
    cpu = cpu_free_milli if cpu_free_milli is not None else 0
    fragment = node_fragmentation_milli(None, cpu, devices_free_milli, (TypicalShape(pod, 1.0),))
    return round(fragment)


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
