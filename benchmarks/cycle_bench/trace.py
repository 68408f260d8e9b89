"""The workload shapes of the cycle benchmark's snapshot, drawn as in the openb trace.

The cluster's constants (8 A100-80GB per node, 10 pending workloads per node, ~70% held), the
GPU-request distribution of the openb trace (Alibaba cluster-trace-gpu-v2023, default pod list;
Weng et al., "Beware of Fragmentation", USENIX ATC '23), and what one workload draws from a
`random.Random`: its GPU shape, CPU and memory, type and priority, and burst limit.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from gpupool.core.model import (
    MILLI_PER_GPU,
    GpuRequest,
    GpuRequestKind,
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

FRACTION_VALUES = tuple(v for v, _ in TRACE_FRACTION_MILLI)
_FRACTION_WEIGHTS = tuple(float(c) for _, c in TRACE_FRACTION_MILLI)
_MULTI_VALUES = tuple(v for v, _ in TRACE_MULTI_GPU)
_MULTI_WEIGHTS = tuple(float(c) for _, c in TRACE_MULTI_GPU)


@dataclass(frozen=True, slots=True)
class Shape:
    gpu: GpuRequest
    tasks: int = 1
    min_available: int | None = None

    @property
    def milli_per_task(self) -> int:
        return self.gpu.milli_on(GPU_MEMORY_MIB)

    @property
    def total_milli(self) -> int:
        return self.tasks * self.milli_per_task


def draw_shape(rng: random.Random) -> Shape:
    r = rng.random()
    if r < FRACTION_SHARE:
        milli = rng.choices(FRACTION_VALUES, _FRACTION_WEIGHTS)[0]
        return Shape(GpuRequest.fraction(milli))
    if r < FRACTION_SHARE + ONE_GPU_SHARE:
        return Shape(GpuRequest.whole(1))
    if rng.random() < 0.6:
        # One task with several devices of one node (the trace's 2/4/8-GPU pods).
        return Shape(GpuRequest.whole(rng.choices(_MULTI_VALUES, _MULTI_WEIGHTS)[0]))
    # A distributed gang: 2..4 tasks of 1..8 devices each; a quarter of them elastic.
    tasks = rng.randint(2, 4)
    per_task = rng.choice((1, 2, 4, 8))
    min_available = tasks - 1 if rng.random() < 0.25 else None
    return Shape(GpuRequest.whole(per_task), tasks, min_available)


def task_cpu_memory(rng: random.Random, shape: Shape) -> tuple[int, int]:
    """Modest per-task CPU and memory so that GPUs, not CPU or memory, are the bottleneck."""
    if shape.gpu.kind is GpuRequestKind.WHOLE:
        k = shape.gpu.amount
        return k * rng.randrange(4000, 12001, 1000), k * rng.choice((32, 48, 64, 96)) * 1024
    milli = shape.milli_per_task
    return 500 + milli * 8, 4096 + milli * 48


def type_for(rng: random.Random, shape: Shape) -> tuple[WorkloadType, int | None]:
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


def burst_limit(rng: random.Random, shape: Shape, wtype: WorkloadType) -> GpuRequest:
    """Some interactive fractions are dynamic (limit above request), for the node-level phase."""
    gpu = shape.gpu
    if (
        wtype is WorkloadType.INTERACTIVE
        and gpu.kind is GpuRequestKind.FRACTION
        and rng.random() < 0.4
    ):
        return GpuRequest.fraction(gpu.amount, MILLI_PER_GPU)
    return gpu
