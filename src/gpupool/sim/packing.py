"""The FGD paper's packing experiment, on the core's placement policies.

Protocol (Weng et al., USENIX ATC '23, section 6, as its artifact runs it): the GPU nodes of the
openb trace; the pod list shuffled by the seed, then resampled with replacement until the pods
ask for `inflation` times the cluster's GPU capacity; pods arrive one by one and are placed at
once or dropped (no departures, no queue, no preemption; CPU, memory and GPU model must fit).
Ties between equally scored nodes go, for FGD, to the node the artifact's scheduler finds first
(`artifact_node_rank`: the order in which kube-scheduler's parallel filter reports the nodes), and
for the other policies to a node priority drawn from the seed, the same for the whole run. After
every pod the arrived and allocated GPU and the fragmentation form the curves; the value at x%
arrived is, as the artifact's analysis takes it, the mean over the pods after which
round(arrived) = x (`level_means`).

The offline reference packs the same prefix of pods knowing them all in advance: the best of a
few orders, each with our default policy. It is a feasible packing, so it shows what an online
policy leaves on the table (the true optimum is at least as high; the trivial bound is
min(arrived, 100%)).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpupool.core.model import MILLI_PER_GPU
from gpupool.core.packing import (
    FgdPolicy,
    Packer,
    PackingState,
    PackNode,
    PodShape,
    PolicyName,
    TypicalShape,
    artifact_typical_shapes,
    make_policy,
    node_fragmentation_milli,
    typical_shapes,
)
from gpupool.core.policies import canonical_name
from gpupool.sim.cycle_packer import CyclePacker
from gpupool.sim.openb import TraceNode, TracePod

__all__ = [
    "CHECKPOINTS_PCT",
    "PackingRun",
    "artifact_node_rank",
    "cluster_fragmentation",
    "level_means",
    "node_priority",
    "pack_nodes",
    "parse_policy",
    "pod_shape",
    "pod_stream",
    "run_offline",
    "run_packing",
    "target_workload",
    "tie_break",
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
    `frag_at`, which is the fragmented share of the then idle GPU (the paper's ratio).

    `arrived_pct` and `allocated_pct` hold one value per pod. `alloc_at` and the other `_at`
    values are at the checkpoints, `alloc_levels` and `frag_levels` at every whole arrival
    percent (0, 1, ...): the artifact's values (`level_means`), comparable with its published
    curves.
    """

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
    alloc_levels: dict[int, float] = field(default_factory=dict)
    frag_levels: dict[int, float] = field(default_factory=dict)


def _checkpoint_index(arrived_pct: Sequence[float], point: float) -> int:
    """The first pod after which `point`% had arrived (the last pod if never reached)."""
    for i, value in enumerate(arrived_pct):
        if value >= point - 1e-9:
            return i
    return len(arrived_pct) - 1


def level_means(
    arrived_milli: Sequence[int], values: Sequence[float], gpus: int, top: int
) -> dict[int, float]:
    """Per whole arrival percent x in 0..`top`, a per-pod series as the FGD artifact's analysis
    reads it: the mean of the values after the pods at which round(arrived %) = x, or, when no
    pod rounds to x, of those that round to x-1..x+1 (`arrived_milli[i]` is the GPU asked for by
    the first i+1 pods; `gpus` the cluster's). Where no pod comes within a point of x (a coarse
    trace) the value after the first pod at which x% had arrived stands in. Arrival percents are
    computed and rounded as the artifact does (milli / GPUs / 10, half to even).
    """
    if not arrived_milli:
        return {}
    levels = _Levels(arrived_milli, gpus)
    return {x: statistics.fmean(values[i] for i in levels.rows(x)) for x in range(top + 1)}


class _Levels:
    """Which pods `level_means` averages for each arrival percent."""

    def __init__(self, arrived_milli: Sequence[int], gpus: int) -> None:
        self._pct = [asked / gpus / 10 for asked in arrived_milli]
        self._rounded = [round(pct) for pct in self._pct]
        self._at: dict[int, list[int]] = {}
        for i, level in enumerate(self._rounded):
            self._at.setdefault(level, []).append(i)

    def rows(self, x: int) -> list[int]:
        rows = self._at.get(x)
        if rows:
            return rows
        near = [i for i, level in enumerate(self._rounded) if x - 1 <= level <= x + 1]
        return near or [_checkpoint_index(self._pct, x)]


def node_priority(count: int, seed: int) -> tuple[int, ...]:
    """Each node's rank in the run's tie-break, drawn from `seed`: a permutation of 0..count-1
    (the FGD artifact names its nodes after such a permutation; ties to the first reproduce it)."""
    ranks = list(range(count))
    random.Random(seed + NODE_PRIORITY_SALT).shuffle(ranks)
    return tuple(ranks)


NODE_PRIORITY_SALT = 2_000_003
"""Added to the seed for the node priority's generator (the tie-break `pick`'s is 1_000_003), so
the priority is not the pod shuffle's permutation."""

SCHEDULER_PARALLELISM = 16
"""kube-scheduler's filter workers (`parallelize.parallelism` in Kubernetes 1.20)."""


def artifact_node_rank(count: int) -> tuple[int, ...]:
    """Each node's rank in FGD's tie-break as the artifact's scheduler produces it: ties go to the
    node its filter phase reported first.

    kube-scheduler 1.20 filters the nodes (in the order they were created: the node list's)
    with `SCHEDULER_PARALLELISM` workers, each taking the next chunk of min(isqrt(n), n // 16 + 1)
    consecutive nodes (35 chunks of 34 for the 1,213 openb GPU nodes), and appends each node that
    passes as it is checked. So the feasible list, whose first best-scored node wins, runs through
    the chunks side by side: the first node of each of the first 16 chunks, then their second
    nodes, ..., then the next 16 chunks. Nodes checked at the same moment (the same position in
    chunks that run side by side) share a rank; which of them a worker reports first is a race,
    left to `Packer`'s `pick`. Ranks: round of 16 chunks x chunk size + position in the chunk.
    """
    chunk = max(1, min(math.isqrt(count), count // SCHEDULER_PARALLELISM + 1))
    return tuple((i // chunk // SCHEDULER_PARALLELISM) * chunk + i % chunk for i in range(count))


def tie_break(policy: str, count: int, seed: int) -> tuple[int, ...]:
    """The node ranks `Packer` breaks ties by: the artifact scheduler's for FGD
    (`artifact_node_rank`), the seed's node priority for the other policies (`node_priority`)."""
    if policy == PolicyName.FGD:
        return artifact_node_rank(count)
    return node_priority(count, seed)


def target_workload(pods: Sequence[TracePod], policy: str) -> tuple[TypicalShape, ...]:
    """The typical pod shapes `policy` measures fragmentation against: the FGD artifact's for
    `fgd` (`artifact_typical_shapes`), for the others every shape of the pods that ask for a
    GPU, weighted by how often it occurs (`typical_shapes`)."""
    if policy == PolicyName.FGD:
        return artifact_typical_shapes(pod_shape(p) for p in pods)
    return typical_shapes(pod_shape(p) for p in pods if p.total_gpu_milli > 0)


CYCLE_MARK = "@"
"""`default@16`: the policy `default` placed by the scheduling cycle's placer, which scores at
most 16 candidate nodes of each kind per pod (`CyclePacker`)."""


def parse_policy(spec: str) -> tuple[str, int | None]:
    """(registered policy name, candidates or None) of `name` or `name@K`; `ValueError` with
    what is wrong."""
    name, mark, count = spec.partition(CYCLE_MARK)
    name = canonical_name(name.strip())
    if not mark:
        return name, None
    try:
        candidates = int(count)
    except ValueError:
        candidates = 0
    if candidates < 1:
        raise ValueError(
            f"{spec!r}: after {CYCLE_MARK!r} give how many candidate nodes the cycle's placer "
            "scores per pod, a positive integer (the server's default is 16)"
        )
    return name, candidates


def run_packing(
    nodes: Sequence[PackNode],
    pods: Sequence[TracePod],
    policy: str,
    seed: int,
    inflation: float = 1.3,
    progress: Callable[[int, int], None] | None = None,
    candidates: int | None = None,
) -> PackingRun:
    """Pack the seed's pod stream onto `nodes` with `policy`; `progress(done, total)` is called
    every few hundred pods. With `candidates` the pods go through the scheduling cycle's placer
    (`CyclePacker`), which scores at most that many candidate nodes of each kind per pod, as the
    server does; without, every node is scored, as the FGD artifact does.

    The fragmentation reported (`frag_at`, `frag_levels`) is the artifact's for every policy: its
    measure (`fgd_fragmentation_milli`) over its target workload, whatever `policy` scores by.
    """
    if candidates is None:
        policy, candidates = parse_policy(policy)
    measured = artifact_typical_shapes(pod_shape(p) for p in pods)
    state = PackingState(nodes)
    stream = pod_stream(pods, state.capacity_gpu_milli, seed, inflation)
    rng = random.Random(seed + 1_000_003)
    pick = rng.randrange
    typical = target_workload(pods, policy)
    packer: Packer | CyclePacker
    if candidates is None:
        policy_impl = make_policy(policy, nodes, typical, pick)
        packer = Packer(state, policy_impl, pick, tie_break(policy, len(nodes), seed))
    else:
        packer = CyclePacker(nodes, policy, typical, candidates)
    capacity = state.capacity_gpu_milli
    gpus = capacity // MILLI_PER_GPU
    # FGD's own measure and memo (shared with an `fgd` run's policy and the next runs')
    measure = FgdPolicy(measured).fragmentation

    def node_fragment(i: int) -> float:
        return measure(state.nodes[i].gpu_model, state.cpu_free[i], 0, state.device_free[i])

    fragments = [node_fragment(i) for i in range(len(state.nodes))]
    fragmented = sum(fragments)
    arrived_milli: list[int] = []
    allocated_pct: list[float] = []
    alloc_rows: list[float] = []
    frag_rows: list[float] = []
    frag_capacity_rows: list[float] = []
    asked = 0
    placed = 0
    started = time.perf_counter()
    for i, shape in enumerate(stream):
        asked += shape.total_gpu_milli
        placement = packer.place(shape)
        if placement is not None:
            if candidates is not None:
                state.assign(placement.node, placement.devices, shape)
            placed += 1
            before = fragments[placement.node]
            fragments[placement.node] = node_fragment(placement.node)
            fragmented += fragments[placement.node] - before
        used = state.allocated_gpu_milli
        arrived_milli.append(asked)
        allocated_pct.append(100.0 * used / capacity)
        # as the artifact logs and parses them: allocation to 2 decimals, the ratio with %.2f
        alloc_rows.append(round(used / gpus / 10, 2))
        idle = state.idle_gpu_milli()
        frag_rows.append(round(100.0 * fragmented / idle, 2) if idle else 0.0)
        frag_capacity_rows.append(100.0 * fragmented / capacity)
        if progress is not None and (i % 500 == 0 or i == len(stream) - 1):
            progress(i + 1, len(stream))
    seconds = time.perf_counter() - started
    top = max(math.floor(100 * asked / capacity + 1e-9), round(inflation * 100))
    alloc_levels = level_means(arrived_milli, alloc_rows, gpus, top)
    frag_levels = level_means(arrived_milli, frag_rows, gpus, top)
    frag_capacity_levels = level_means(arrived_milli, frag_capacity_rows, gpus, top)
    points = [p for p in CHECKPOINTS_PCT if p <= inflation * 100 + 1e-9]
    return PackingRun(
        policy=str(policy) if candidates is None else f"{policy}@{candidates}",
        seed=seed,
        pods=len(stream),
        placed=placed,
        arrived_pct=tuple(100.0 * a / capacity for a in arrived_milli),
        allocated_pct=tuple(allocated_pct),
        alloc_at={p: alloc_levels[p] for p in points if p in alloc_levels},
        frag_at={p: frag_levels[p] for p in points if p in frag_levels},
        frag_of_capacity_at={p: frag_capacity_levels[p] for p in points if p in frag_levels},
        seconds=seconds,
        alloc_levels=alloc_levels,
        frag_levels=frag_levels,
    )


OFFLINE_ORDERS: dict[str, Callable[[PodShape], tuple[int, ...]] | None] = {
    "arrival": None,
    "gpu-descending": lambda s: (-s.total_gpu_milli, -s.cpu_milli, -s.memory_mib),
    "cpu-descending": lambda s: (-s.cpu_milli, -s.total_gpu_milli, -s.memory_mib),
}
"""The hindsight orders the offline reference tries (each packed with our default policy)."""


def run_offline(
    nodes: Sequence[PackNode],
    pods: Sequence[TracePod],
    seed: int,
    inflation: float = 1.3,
    points: Sequence[int] = CHECKPOINTS_PCT,
    online: PackingRun | None = None,
) -> dict[int, float]:
    """Allocated GPU % at each checkpoint when the pods that had arrived by then are packed
    knowing them all: the best of `OFFLINE_ORDERS`, each placed with our default policy and the
    run's node priority.

    "Arrived by then" is every pod `level_means` averages over at that checkpoint (up to the
    last of them), so the arrival order, one of the orders tried, reproduces the online default
    run and the reference is never below its `alloc_at`. A feasible packing, so a lower bound on
    the optimum; min(arrived, 100) bounds it above. Only the checkpoints in `points` are
    packed for. `online`, the default policy's `run_packing` of the same pods, seed and
    inflation, gives the arrival order's packing (it is that packing) instead of a repeat.
    """
    typical = target_workload(pods, PolicyName.DEFAULT)
    capacity = sum(n.gpu_count for n in nodes) * MILLI_PER_GPU
    stream = pod_stream(pods, capacity, seed, inflation)
    arrived_milli: list[int] = []
    asked = 0
    for shape in stream:
        asked += shape.total_gpu_milli
        arrived_milli.append(asked)
    if online is not None and (
        online.policy != PolicyName.DEFAULT or online.seed != seed or online.pods != len(stream)
    ):
        raise ValueError(
            f"the online run given ({online.policy}, seed {online.seed}, {online.pods} pods) "
            f"is not the default policy's run of these pods with seed {seed} "
            f"({len(stream)} pods at inflation {inflation:g}); give that one or none"
        )
    levels = _Levels(arrived_milli, capacity // MILLI_PER_GPU)
    priority = node_priority(len(nodes), seed)
    result: dict[int, float] = {}
    # one policy for every packing: its measure's memo carries over
    policy = make_policy(PolicyName.DEFAULT, nodes, typical, _first)
    for point in points:
        if point > inflation * 100 + 1e-9:
            continue
        last = max(levels.rows(point))
        prefix = stream[: last + 1]
        best = 0.0
        for order in OFFLINE_ORDERS.values():
            if order is None and online is not None:
                best = max(best, online.allocated_pct[last])
                continue
            state = PackingState(nodes)
            packer = Packer(state, policy, _first, priority)
            for shape in prefix if order is None else sorted(prefix, key=order):
                packer.place(shape)
            best = max(best, 100.0 * state.allocated_gpu_milli / capacity)
        result[point] = best
    return result


def _first(count: int) -> int:
    """The offline packings' `pick` (their ties go to the node priority): the first."""
    return 0
