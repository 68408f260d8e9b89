"""The FGD paper's packing experiment, on the core's placement policies.

Protocol (Weng et al., USENIX ATC '23, section 6): the GPU nodes of the openb trace; the pod list
shuffled by the seed, then resampled with replacement until the pods ask for `inflation` times
the cluster's GPU capacity; pods arrive one by one and are placed at once or dropped (no
departures, no queue, no preemption; CPU, memory and GPU model must fit). After every pod the
arrived and allocated GPU, as a percentage of capacity, form the curve; at the checkpoints
(90, 95, 100, 130% arrived) we also take the cluster's fragmentation.

The offline reference packs the same prefix of pods knowing them all in advance: largest GPU
request first, best fit. It is a feasible packing, so it shows what an online policy leaves on
the table (the true optimum is at least as high; the trivial bound is min(arrived, 100%)).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpupool.core.model import MILLI_PER_GPU
from gpupool.core.packing import (
    Packer,
    PackingState,
    PackNode,
    PodShape,
    PolicyName,
    TypicalShape,
    make_policy,
    node_fragmentation_milli,
    typical_shapes,
)
from gpupool.sim.openb import TraceNode, TracePod

__all__ = [
    "CHECKPOINTS_PCT",
    "PackingRun",
    "cluster_fragmentation",
    "pack_nodes",
    "pod_shape",
    "pod_stream",
    "run_offline",
    "run_packing",
]

CHECKPOINTS_PCT = (90, 95, 100, 130)
"""Arrived GPU (% of capacity) at which allocation and fragmentation are reported."""


def pack_nodes(nodes: Sequence[TraceNode]) -> tuple[PackNode, ...]:
    """The GPU nodes of a node list (CPU-only nodes take no part in GPU packing)."""
    return tuple(
        PackNode(n.name, n.cpu_milli, n.memory_mib, n.gpu_count, n.gpu_model)
        for n in nodes
        if n.gpu_count > 0
    )


def pod_shape(pod: TracePod) -> PodShape:
    return PodShape(pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_spec)


def pod_stream(
    pods: Sequence[TracePod], capacity_gpu_milli: int, seed: int, inflation: float
) -> list[PodShape]:
    """The shuffled pod list, then pods drawn with replacement until the stream asks for
    `inflation` x capacity in GPU. Deterministic in `seed`."""
    if not pods:
        raise ValueError("the pod list is empty: there is nothing to pack")
    if not any(p.total_gpu_milli for p in pods):
        raise ValueError("no pod in the list asks for a GPU: the packing curve would be empty")
    rng = random.Random(seed)
    order = [pod_shape(p) for p in pods]
    rng.shuffle(order)
    target = inflation * capacity_gpu_milli
    stream: list[PodShape] = []
    asked = 0
    for shape in order:
        if asked >= target:
            return stream
        stream.append(shape)
        asked += shape.total_gpu_milli
    while asked < target:
        shape = order[rng.randrange(len(order))]
        stream.append(shape)
        asked += shape.total_gpu_milli
    return stream


def cluster_fragmentation(state: PackingState, typical: Sequence[TypicalShape]) -> float:
    """Fragmented GPU of the whole cluster, milli (the sum of the nodes' expected fragments)."""
    return sum(
        node_fragmentation_milli(node.gpu_model, state.cpu_free[i], state.device_free[i], typical)
        for i, node in enumerate(state.nodes)
    )


@dataclass(frozen=True, slots=True)
class PackingRun:
    """One policy, one seed. Percentages are of the cluster's GPU capacity, except
    `frag_at`, which is the fragmented share of the then idle GPU (the paper's ratio)."""

    policy: str
    seed: int
    pods: int
    placed: int
    arrived_pct: tuple[float, ...]
    allocated_pct: tuple[float, ...]
    alloc_at: dict[int, float]
    frag_at: dict[int, float]
    frag_of_capacity_at: dict[int, float]
    seconds: float


def _checkpoint_index(arrived_pct: Sequence[float], point: float) -> int:
    """The first pod after which `point`% had arrived (the last pod if never reached)."""
    for i, value in enumerate(arrived_pct):
        if value >= point - 1e-9:
            return i
    return len(arrived_pct) - 1


def run_packing(
    nodes: Sequence[PackNode],
    pods: Sequence[TracePod],
    policy: PolicyName,
    seed: int,
    inflation: float = 1.3,
    progress: Callable[[int, int], None] | None = None,
) -> PackingRun:
    """Pack the seed's pod stream onto `nodes` with `policy`; `progress(done, total)` is called
    every few hundred pods."""
    target = [pod_shape(p) for p in pods if p.total_gpu_milli > 0]
    typical = typical_shapes(target)
    state = PackingState(nodes)
    stream = pod_stream(pods, state.capacity_gpu_milli, seed, inflation)
    rng = random.Random(seed + 1_000_003)
    pick = rng.randrange
    packer = Packer(state, make_policy(policy, nodes, typical, pick), pick)
    capacity = state.capacity_gpu_milli
    points = [p for p in CHECKPOINTS_PCT if p <= inflation * 100 + 1e-9]
    arrived_pct: list[float] = []
    allocated_pct: list[float] = []
    frag_at: dict[int, float] = {}
    frag_of_capacity_at: dict[int, float] = {}
    asked = 0
    placed = 0
    started = time.perf_counter()
    for i, shape in enumerate(stream):
        asked += shape.total_gpu_milli
        if packer.place(shape) is not None:
            placed += 1
        arrived = 100.0 * asked / capacity
        arrived_pct.append(arrived)
        allocated_pct.append(100.0 * state.allocated_gpu_milli / capacity)
        last = i == len(stream) - 1
        while points and (arrived >= points[0] - 1e-9 or last):
            point = points.pop(0)
            fragmented = cluster_fragmentation(state, typical)
            idle = state.idle_gpu_milli()
            frag_at[point] = 100.0 * fragmented / idle if idle else 0.0
            frag_of_capacity_at[point] = 100.0 * fragmented / capacity
        if progress is not None and (i % 500 == 0 or last):
            progress(i + 1, len(stream))
    seconds = time.perf_counter() - started
    alloc_at = {
        p: allocated_pct[_checkpoint_index(arrived_pct, p)] for p in CHECKPOINTS_PCT if p in frag_at
    }
    return PackingRun(
        policy=str(policy),
        seed=seed,
        pods=len(stream),
        placed=placed,
        arrived_pct=tuple(arrived_pct),
        allocated_pct=tuple(allocated_pct),
        alloc_at=alloc_at,
        frag_at=frag_at,
        frag_of_capacity_at=frag_of_capacity_at,
        seconds=seconds,
    )


OFFLINE_ORDERS: dict[str, Callable[[PodShape], tuple[int, ...]] | None] = {
    "arrival": None,
    "gpu-descending": lambda s: (-s.total_gpu_milli, -s.cpu_milli, -s.memory_mib),
    "cpu-descending": lambda s: (-s.cpu_milli, -s.total_gpu_milli, -s.memory_mib),
}
"""The hindsight orders the offline reference tries (each packed with our default policy)."""


def run_offline(
    nodes: Sequence[PackNode], pods: Sequence[TracePod], seed: int, inflation: float = 1.3
) -> dict[int, float]:
    """Allocated GPU % at each checkpoint when the pods that had arrived by then are packed
    knowing them all: the best of `OFFLINE_ORDERS`, each placed with our default policy.

    A feasible packing, so a lower bound on the optimum; min(arrived, 100) bounds it above.
    """
    target = [pod_shape(p) for p in pods if p.total_gpu_milli > 0]
    typical = typical_shapes(target)
    capacity = sum(n.gpu_count for n in nodes) * MILLI_PER_GPU
    stream = pod_stream(pods, capacity, seed, inflation)
    arrived_pct: list[float] = []
    asked = 0
    for shape in stream:
        asked += shape.total_gpu_milli
        arrived_pct.append(100.0 * asked / capacity)
    result: dict[int, float] = {}
    for point in CHECKPOINTS_PCT:
        if point > inflation * 100 + 1e-9:
            continue
        prefix = stream[: _checkpoint_index(arrived_pct, point) + 1]
        best = 0.0
        for order in OFFLINE_ORDERS.values():
            state = PackingState(nodes)
            policy = make_policy(PolicyName.DEFAULT, nodes, typical, _first)
            packer = Packer(state, policy, _first)
            for shape in prefix if order is None else sorted(prefix, key=order):
                packer.place(shape)
            best = max(best, 100.0 * state.allocated_gpu_milli / capacity)
        result[point] = best
    return result


def _first(count: int) -> int:
    """A deterministic tie-break for the offline packings: the lowest-numbered node."""
    return 0
