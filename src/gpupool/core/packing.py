"""Online placement of one pod at a time: the policies of the FGD paper, and ours.

This is the placement problem alone (no quotas, no queue, no preemption): a stream of pods, each
placed at once on a node and devices or dropped. The packing benchmark and the simulator's
placement comparisons drive it; the scheduling cycle's placer uses the same fragmentation measure.

Every policy scores a (node, pod) pair from that node's free resources alone, lower is better.
So a node's score for a pod shape changes only when a pod lands on that node, and `Packer`
caches scores per shape, recomputing only the nodes changed since the shape was last placed:
a pod costs one pass over a list of floats, not a scoring of every node. Ties between nodes are
broken by the driver's `choose` (uniformly at random in the benchmark, as Kubernetes' scheduler
does), the core itself holds no randomness.

Fragmentation follows Weng et al., "Beware of Fragmentation" (USENIX ATC '23): for a pod shape
m, the fragment of node n is the free GPU that m could not use there (all of it when m does not
fit on the node at all; else the free part of each device smaller than m's per-device need). The
node's fragmentation is the expectation over the target workload's shapes, weighted by how
often each occurs; FGD places a pod where that expectation grows least.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gpupool.core.model import MILLI_PER_GPU

__all__ = [
    "PackNode",
    "PackPlacement",
    "Packer",
    "PackingState",
    "PlacementPolicy",
    "PodShape",
    "PolicyName",
    "TypicalShape",
    "make_policy",
    "node_fragmentation_milli",
    "typical_shapes",
]


@dataclass(frozen=True, slots=True)
class PodShape:
    """What one pod asks for. `gpu_milli` is per device: below 1000 only with `gpu_count` 1."""

    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_milli: int
    gpu_models: tuple[str, ...] = ()
    """Models it may run on; empty for any."""

    @property
    def total_gpu_milli(self) -> int:
        return self.gpu_count * self.gpu_milli

    @property
    def is_fractional(self) -> bool:
        return self.gpu_count == 1 and self.gpu_milli < MILLI_PER_GPU


@dataclass(frozen=True, slots=True)
class PackNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_model: str | None


@dataclass(frozen=True, slots=True)
class PackPlacement:
    node: int
    devices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TypicalShape:
    """A shape of the target workload and its weight (share of pods, summing to 1)."""

    shape: PodShape
    weight: float


def typical_shapes(shapes: Iterable[PodShape], coverage: float = 1.0) -> tuple[TypicalShape, ...]:
    """The target workload: the most common shapes covering `coverage` of pods, renormalised."""
    counts: dict[PodShape, int] = {}
    total = 0
    for shape in shapes:
        counts[shape] = counts.get(shape, 0) + 1
        total += 1
    ranked = sorted(
        counts.items(), key=lambda kv: (-kv[1], kv[0].gpu_milli, kv[0].gpu_count, kv[0].cpu_milli)
    )
    kept: list[tuple[PodShape, int]] = []
    covered = 0
    for shape, count in ranked:
        if kept and covered >= coverage * total:
            break
        kept.append((shape, count))
        covered += count
    return tuple(TypicalShape(shape, count / covered) for shape, count in kept)


def node_fragmentation_milli(
    gpu_model: str | None,
    cpu_free_milli: int,
    devices_free_milli: Sequence[int],
    typical: Sequence[TypicalShape],
    memory_free_mib: int | None = None,
) -> float:
    """Expected fragmented GPU (milli) of one node for the target workload `typical`.

    A shape asking for no GPU sees every free GPU of the node as a fragment (it cannot use any);
    so does a shape that cannot run on the node (wrong model, too little CPU, too few devices
    with room). For a shape that can run, a device's free part is a fragment when it is smaller
    than the shape's per-device need. Host memory counts only when `memory_free_mib` is given
    (the paper leaves it out; our default policy counts it, since memory strands GPUs too).
    """
    free_total = sum(devices_free_milli)
    if free_total == 0:
        return 0.0
    fragment = 0.0
    for item in typical:
        shape = item.shape
        if (
            shape.gpu_milli == 0
            or (shape.gpu_models and gpu_model not in shape.gpu_models)
            or cpu_free_milli < shape.cpu_milli
            or (memory_free_mib is not None and memory_free_mib < shape.memory_mib)
        ):
            fragment += item.weight * free_total
            continue
        need = shape.gpu_milli
        usable = 0
        small = 0
        for free in devices_free_milli:
            if free >= need:
                usable += 1
            else:
                small += free
        fragment += item.weight * (small if usable >= shape.gpu_count else free_total)
    return fragment


def affinity_tag(shape: PodShape) -> int:
    """GPU clustering's class of a pod, after Gandiva's job-size affinity: the number of whole
    devices it takes, or 0 for every pod that shares a device."""
    return 0 if shape.is_fractional else shape.gpu_count


class PackingState:
    """Free resources of every node; changed only through `assign`, which logs the node."""

    def __init__(self, nodes: Sequence[PackNode]) -> None:
        self.nodes = tuple(nodes)
        self.cpu_free = [n.cpu_milli for n in self.nodes]
        self.memory_free = [n.memory_mib for n in self.nodes]
        self.device_free = [[MILLI_PER_GPU] * n.gpu_count for n in self.nodes]
        self.affinity: list[dict[int, int]] = [{} for _ in self.nodes]
        """Per node, how many pods of each per-device GPU request it holds (GPU clustering)."""
        self.changes: list[int] = []
        self.capacity_gpu_milli = sum(n.gpu_count for n in self.nodes) * MILLI_PER_GPU
        self.allocated_gpu_milli = 0

    def fits_host(self, node: int, shape: PodShape) -> bool:
        """CPU, memory and GPU model allow the pod on `node` (devices not checked)."""
        spec = self.nodes[node]
        return (
            self.cpu_free[node] >= shape.cpu_milli
            and self.memory_free[node] >= shape.memory_mib
            and spec.gpu_count >= shape.gpu_count
            and (not shape.gpu_models or spec.gpu_model in shape.gpu_models)
        )

    def devices_with_room(self, node: int, need_milli: int) -> list[int]:
        return [d for d, free in enumerate(self.device_free[node]) if free >= need_milli]

    def assign(self, node: int, devices: tuple[int, ...], shape: PodShape) -> None:
        self.cpu_free[node] -= shape.cpu_milli
        self.memory_free[node] -= shape.memory_mib
        free = self.device_free[node]
        for d in devices:
            free[d] -= shape.gpu_milli
        if shape.gpu_count:
            tag = self.affinity[node]
            tag[affinity_tag(shape)] = tag.get(affinity_tag(shape), 0) + 1
        self.allocated_gpu_milli += shape.total_gpu_milli
        self.changes.append(node)

    def idle_gpu_milli(self) -> int:
        return self.capacity_gpu_milli - self.allocated_gpu_milli


Scored = tuple[float, tuple[int, ...]]
"""A node's score for a pod (lower is better) and the devices the pod would take there."""


class PlacementPolicy:
    """Scores one node for one pod. Subclasses implement `score`; feasibility is checked first."""

    name = "base"

    def score(self, state: PackingState, node: int, shape: PodShape) -> Scored | None:
        raise NotImplementedError

    def finish(
        self, state: PackingState, node: int, shape: PodShape, devices: tuple[int, ...]
    ) -> tuple[int, ...]:
        """The devices to use on the chosen node; by default those the score was for."""
        return devices

    def evaluate(self, state: PackingState, node: int, shape: PodShape) -> Scored | None:
        if not state.fits_host(node, shape):
            return None
        if shape.gpu_count and len(state.devices_with_room(node, shape.gpu_milli)) < (
            shape.gpu_count
        ):
            return None
        return self.score(state, node, shape)


def _tightest(state: PackingState, node: int, shape: PodShape) -> tuple[int, ...]:
    """The devices with the least room that still fit: best fit within the node."""
    if not shape.gpu_count:
        return ()
    free = state.device_free[node]
    room = sorted(state.devices_with_room(node, shape.gpu_milli), key=lambda d: (free[d], d))
    return tuple(sorted(room[: shape.gpu_count]))


MAX_NODE_SCORE = 100
"""The baselines score nodes as Kubernetes score plugins do: integers 0..100, ties at random.
The coarse integer is part of how they behave (it makes ties), so it is kept."""


def _node_score(fraction: float) -> float:
    """A 0..1 preference as a Kubernetes node score (truncated integer), as a float."""
    return float(int(fraction * MAX_NODE_SCORE))


class RandomPolicy(PlacementPolicy):
    """Every feasible node scores the same: the tie-break picks one at random."""

    name = "random"

    def __init__(self, pick: Callable[[int], int]) -> None:
        self._pick = pick

    def score(self, state: PackingState, node: int, shape: PodShape) -> Scored | None:
        return 0.0, ()

    def finish(
        self, state: PackingState, node: int, shape: PodShape, devices: tuple[int, ...]
    ) -> tuple[int, ...]:
        room = state.devices_with_room(node, shape.gpu_milli) if shape.gpu_count else []
        chosen: list[int] = []
        while len(chosen) < shape.gpu_count:
            chosen.append(room.pop(self._pick(len(room))))
        return tuple(sorted(chosen))


class BestFitPolicy(PlacementPolicy):
    """The node left with the least free CPU and GPU (each normalised by the largest node)."""

    name = "best-fit"

    def __init__(self, nodes: Sequence[PackNode]) -> None:
        self._max_cpu = max((n.cpu_milli for n in nodes), default=1) or 1
        self._max_gpu = max((n.gpu_count for n in nodes), default=1) * MILLI_PER_GPU or 1

    def score(self, state: PackingState, node: int, shape: PodShape) -> Scored | None:
        cpu_left = state.cpu_free[node] - shape.cpu_milli
        gpu_left = sum(state.device_free[node]) - shape.total_gpu_milli
        value = 0.5 * cpu_left / self._max_cpu + 0.5 * gpu_left / self._max_gpu
        return -_node_score(1.0 - value), _tightest(state, node, shape)


class DotProductPolicy(PlacementPolicy):
    """Tetris-style: the smallest dot product of the pod's demand and the node's free resources,
    both normalised by the node's capacity (CPU, and GPU on the devices the pod would use)."""

    name = "dot-product"

    def score(self, state: PackingState, node: int, shape: PodShape) -> Scored | None:
        spec = state.nodes[node]
        cpu = (state.cpu_free[node] / spec.cpu_milli) * (shape.cpu_milli / spec.cpu_milli)
        if not shape.gpu_count:
            return -_node_score(1.0 - cpu), ()
        free = state.device_free[node]
        if shape.is_fractional:
            best: Scored | None = None
            for d in state.devices_with_room(node, shape.gpu_milli):
                value = cpu + (free[d] / MILLI_PER_GPU) * (shape.gpu_milli / MILLI_PER_GPU)
                if best is None or value < best[0]:
                    best = (value, (d,))
            return None if best is None else (-_node_score(1.0 - best[0] / 2), best[1])
        capacity = spec.gpu_count * MILLI_PER_GPU
        gpu = (sum(free) / capacity) * (shape.total_gpu_milli / capacity)
        return -_node_score(1.0 - (cpu + gpu) / 2), _tightest(state, node, shape)


class GpuPackingPolicy(PlacementPolicy):
    """Prefer already shared devices, then free devices of a used node, then an empty node."""

    name = "gpu-packing"

    def score(self, state: PackingState, node: int, shape: PodShape) -> Scored | None:
        free = state.device_free[node]
        full = sum(1 for f in free if f == MILLI_PER_GPU)
        devices = _tightest(state, node, shape)
        if full == len(free):
            return -float(max(MAX_NODE_SCORE // 3 - full, full)), devices
        fresh = sum(1 for d in devices if free[d] == MILLI_PER_GPU)
        if fresh:
            return -float(max(MAX_NODE_SCORE // 2 - fresh, MAX_NODE_SCORE // 3)), devices
        left_pct = sum(free[d] * 100 // MILLI_PER_GPU for d in devices)
        return -float(max(MAX_NODE_SCORE - left_pct // 10, MAX_NODE_SCORE // 2)), devices


class GpuClusteringPolicy(PlacementPolicy):
    """Pods asking for the same per-device GPU share go together; fuller nodes first."""

    name = "gpu-clustering"

    def __init__(self, nodes: Sequence[PackNode]) -> None:
        self._max_gpu = max((n.gpu_count for n in nodes), default=1) * MILLI_PER_GPU or 1

    def score(self, state: PackingState, node: int, shape: PodShape) -> Scored | None:
        devices = _tightest(state, node, shape)
        if not shape.gpu_count:
            return 0.0, devices
        tags = state.affinity[node]
        quarter = MAX_NODE_SCORE // 4
        fill = quarter * (self._max_gpu - sum(state.device_free[node])) // self._max_gpu
        if tags.get(affinity_tag(shape), 0):
            tier = 3 * quarter if len(tags) == 1 else 2 * quarter
        else:
            tier = quarter if not tags else 0
        return -float(tier + fill), devices


DEFAULT_STRANDING_WEIGHT = 4.0
"""How much our default policy charges for GPU that the node's CPU or memory could no longer
feed, next to FGD's fragment (see `FgdPolicy`). Chosen on the packing benchmark: 0.25 to 32 all
land within 0.1 point of each other; 0 loses about 1.1 points."""


class FgdPolicy(PlacementPolicy):
    """Fragmentation gradient descent: where the node's expected fragmentation grows least.

    With `count_memory` a shape whose memory does not fit counts the node's free GPU as a
    fragment (as CPU does in the paper). With `stranding_weight` > 0 the measure also charges,
    at that weight, the free GPU the node's free CPU and memory could not feed at the target
    workload's average CPU and memory per GPU: FGD alone sees CPU only when a shape stops
    fitting, so it happily spends CPU on GPU-rich nodes (CPU-only pods land anywhere) until
    their GPUs are stranded. That fluid term is what lifts our default over FGD.
    """

    name = "fgd"

    def __init__(
        self,
        typical: Sequence[TypicalShape],
        count_memory: bool = False,
        stranding_weight: float = 0.0,
    ) -> None:
        self._typical = tuple(typical)
        self._count_memory = count_memory
        self._stranding_weight = stranding_weight
        gpu = sum(t.weight * t.shape.total_gpu_milli for t in typical) or 1.0
        self._cpu_per_gpu = sum(t.weight * t.shape.cpu_milli for t in typical) / gpu
        self._memory_per_gpu = sum(t.weight * t.shape.memory_mib for t in typical) / gpu
        self._memo: dict[tuple[str | None, int, int | None, tuple[int, ...]], float] = {}

    def fragmentation(
        self, model: str | None, cpu_free: int, memory_free: int, free: Sequence[int]
    ) -> float:
        memory = memory_free if self._count_memory or self._stranding_weight else None
        key = (model, cpu_free, memory, tuple(sorted(free)))
        value = self._memo.get(key)
        if value is None:
            counted = memory_free if self._count_memory else None
            value = node_fragmentation_milli(model, cpu_free, key[3], self._typical, counted)
            if self._stranding_weight:
                free_gpu = sum(free)
                usable = min(
                    free_gpu,
                    cpu_free / self._cpu_per_gpu if self._cpu_per_gpu else free_gpu,
                    memory_free / self._memory_per_gpu if self._memory_per_gpu else free_gpu,
                )
                value += self._stranding_weight * (free_gpu - usable)
            self._memo[key] = value
        return value

    def score(self, state: PackingState, node: int, shape: PodShape) -> Scored | None:
        model = state.nodes[node].gpu_model
        cpu = state.cpu_free[node]
        memory = state.memory_free[node]
        free = state.device_free[node]
        before = self.fragmentation(model, cpu, memory, free)
        cpu_after = cpu - shape.cpu_milli
        memory_after = memory - shape.memory_mib
        if shape.is_fractional:
            best: Scored | None = None
            seen: set[int] = set()
            for d in state.devices_with_room(node, shape.gpu_milli):
                if free[d] in seen:
                    continue
                seen.add(free[d])
                after = list(free)
                after[d] -= shape.gpu_milli
                value = self.fragmentation(model, cpu_after, memory_after, after) - before
                if best is None or value < best[0]:
                    best = (value, (d,))
            return best
        devices = tuple(state.devices_with_room(node, MILLI_PER_GPU)[: shape.gpu_count])
        after = list(free)
        for d in devices:
            after[d] -= shape.gpu_milli
        return self.fragmentation(model, cpu_after, memory_after, after) - before, devices


class PolicyName(enum.StrEnum):
    """The packing benchmark's policies: the FGD paper's baselines, FGD, and ours (`default`:
    FGD counting memory, plus the stranding term)."""

    RANDOM = "random"
    DOT_PRODUCT = "dot-product"
    GPU_CLUSTERING = "gpu-clustering"
    GPU_PACKING = "gpu-packing"
    BEST_FIT = "best-fit"
    FGD = "fgd"
    DEFAULT = "default"


def make_policy(
    name: PolicyName,
    nodes: Sequence[PackNode],
    typical: Sequence[TypicalShape],
    pick: Callable[[int], int],
) -> PlacementPolicy:
    """The policy called `name`. `pick(n)` returns a uniform index below n (the driver's RNG)."""
    if name is PolicyName.RANDOM:
        return RandomPolicy(pick)
    if name is PolicyName.DOT_PRODUCT:
        return DotProductPolicy()
    if name is PolicyName.GPU_CLUSTERING:
        return GpuClusteringPolicy(nodes)
    if name is PolicyName.GPU_PACKING:
        return GpuPackingPolicy()
    if name is PolicyName.BEST_FIT:
        return BestFitPolicy(nodes)
    if name is PolicyName.FGD:
        return FgdPolicy(typical)
    return FgdPolicy(typical, count_memory=True, stranding_weight=DEFAULT_STRANDING_WEIGHT)


class Packer:
    """Places pods one at a time with a policy, caching node scores per pod shape."""

    def __init__(
        self,
        state: PackingState,
        policy: PlacementPolicy,
        pick: Callable[[int], int],
    ) -> None:
        self.state = state
        self.policy = policy
        self._pick = pick
        self._scores: dict[PodShape, list[float]] = {}
        self._devices: dict[PodShape, list[tuple[int, ...]]] = {}
        self._seen: dict[PodShape, int] = {}

    def _refresh(self, shape: PodShape) -> tuple[list[float], list[tuple[int, ...]]]:
        state = self.state
        scores = self._scores.get(shape)
        devices = self._devices.get(shape)
        changes = state.changes
        if scores is None or devices is None:
            nodes: Iterable[int] = range(len(state.nodes))
            scores = [math.inf] * len(state.nodes)
            devices = [()] * len(state.nodes)
            self._scores[shape] = scores
            self._devices[shape] = devices
        else:
            start = self._seen[shape]
            nodes = (
                set(changes[start:]) if len(changes) - start < len(scores) else range(len(scores))
            )
        evaluate = self.policy.evaluate
        for node in nodes:
            scored = evaluate(state, node, shape)
            if scored is None:
                scores[node] = math.inf
            else:
                scores[node], devices[node] = scored
        self._seen[shape] = len(changes)
        return scores, devices

    def place(self, shape: PodShape) -> PackPlacement | None:
        """Place `shape` (and record it in the state), or None when no node can take it."""
        scores, devices = self._refresh(shape)
        best = min(scores, default=math.inf)
        if best == math.inf:
            return None
        ties = [i for i, s in enumerate(scores) if s == best]
        node = ties[self._pick(len(ties))] if len(ties) > 1 else ties[0]
        placement = PackPlacement(node, self.policy.finish(self.state, node, shape, devices[node]))
        self.state.assign(node, placement.devices, shape)
        return placement
