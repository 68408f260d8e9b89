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

`FgdPolicy` is FGD as the paper's artifact (hkust-adsl/kubernetes-scheduler-simulator) runs it,
every detail that moves the result reproduced: its target workload (`artifact_typical_shapes`),
its integer node score (`fgd_node_score`), its device choice, and its tie-break (a fixed node
priority, `Packer`'s `priority`). docs/packing.md lists each difference and its effect.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gpupool.core.model import MILLI_PER_GPU

__all__ = [
    "ARTIFACT_POPULARITY_PCT",
    "DefaultPolicy",
    "DevicePlan",
    "FgdPolicy",
    "PackNode",
    "PackPlacement",
    "Packer",
    "PackingState",
    "PlacementPolicy",
    "PodShape",
    "PolicyName",
    "TypicalShape",
    "artifact_typical_shapes",
    "fgd_fragmentation_milli",
    "fgd_node_score",
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
    random_ties = False
    """True for a policy whose ties are its choice at random (`random`): `Packer` then breaks
    them with `pick` even when it has a node priority."""

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
    random_ties = True

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
feed, next to FGD's fragment (see `DefaultPolicy`): a stranded GPU is lost for sure, a fragment
only for some shapes. Without the term (0) the default loses about half a point on the openb
default, gpushare60 and gpuspec10 traces; 8 or 16 instead of 4 move it by less than 0.05."""


# --- FGD as the paper's artifact runs it -----------------------------------------------------

ARTIFACT_POPULARITY_PCT = 95
"""The artifact's target workload keeps the most common pod shapes that cover this share (%) of
the pods (`podPopularityThreshold: 95` in its experiment scripts, one shape at a time)."""
FGD_SCORE_SCALE_MILLI = 1000.0
"""The artifact scores a node by 100·sigmoid(-growth / 1000): the growth of fragmentation in
whole GPUs."""
GPU_MODEL_SEPARATOR = "|"
"""How the artifact writes a pod's allowed GPU models (and compares them, as one string)."""
_EXP_LIMIT = 700.0
"""Past this exponent `math.exp` overflows (about 709.8)."""


def artifact_typical_shapes(
    shapes: Iterable[PodShape], popularity_pct: int = ARTIFACT_POPULARITY_PCT
) -> tuple[TypicalShape, ...]:
    """The target workload as the FGD artifact builds it from the pod list (every pod, once).

    A shape is (CPU, GPU per device, GPU count, GPU models): memory is not part of it, and pods
    without GPU count too (`isInvolvedCpuPods: true`; they see all free GPU as a fragment). The
    shapes, most common first (equal counts: larger CPU, share, count, models first), are kept
    until they cover `popularity_pct`% of the pods, and their weights renormalised. Weights are
    computed with the artifact's floating-point operations, in its order.
    """
    counts: dict[PodShape, float] = {}
    total = 0.0
    for shape in shapes:
        milli = shape.gpu_milli if shape.gpu_count else 0
        key = PodShape(shape.cpu_milli, 0, shape.gpu_count, milli, shape.gpu_models)
        counts[key] = counts.get(key, 0.0) + 1.0
        total += 1.0
    ranked = sorted(
        counts.items(),
        key=lambda kv: (
            kv[1],
            kv[0].cpu_milli,
            kv[0].gpu_milli,
            kv[0].gpu_count,
            GPU_MODEL_SEPARATOR.join(kv[0].gpu_models),
        ),
        reverse=True,
    )
    expected = float(popularity_pct) * total / 100.0
    covered = 0.0
    kept = 0
    while covered < expected and kept < len(ranked):
        covered += ranked[kept][1]
        kept += 1
    if kept == len(ranked):
        return tuple(TypicalShape(shape, count / total) for shape, count in ranked)
    share = covered / total
    return tuple(TypicalShape(shape, (count / total) / share) for shape, count in ranked[:kept])


def fgd_fragmentation_milli(
    gpu_model: str | None,
    cpu_free_milli: int,
    devices_free_milli: Sequence[int],
    typical: Sequence[TypicalShape],
    memory_free_mib: int | None = None,
) -> float:
    """A node's expected fragmented GPU (milli) as the FGD artifact computes it.

    The measure of `node_fragmentation_milli`, added up the way the artifact adds it: each
    shape's fragment goes to the sum of its case (lacks GPU, lacks CPU, lacks both, satisfied
    without GPU, lacks CPU without GPU, wrong model), and the case sums are added in that fixed
    order. Equal states give bit-equal values, so a placement that changes nothing scores exactly
    the middle score, as in the artifact. Memory counts only when `memory_free_mib` is given
    (the artifact leaves it out).
    """
    free_total = 0
    for free in devices_free_milli:
        free_total += free
    lack_both = lack_gpu = lack_cpu = no_gpu_fits = no_gpu_lacks = no_access = 0.0
    whole = float(free_total)
    for item in typical:
        shape = item.shape
        weight = item.weight
        cpu_fits = cpu_free_milli >= shape.cpu_milli and (
            memory_free_mib is None or memory_free_mib >= shape.memory_mib
        )
        if shape.gpu_milli == 0:
            if cpu_fits:
                no_gpu_fits += weight * whole
            else:
                no_gpu_lacks += weight * whole
            continue
        if shape.gpu_models and gpu_model not in shape.gpu_models:
            no_access += weight * whole
            continue
        need = shape.gpu_milli
        usable = 0
        small = 0
        for free in devices_free_milli:
            if free >= need:
                usable += 1
            else:
                small += free
        if usable >= shape.gpu_count:
            if cpu_fits:
                lack_gpu += weight * float(small)
            else:
                lack_cpu += weight * whole
        elif cpu_fits:
            lack_gpu += weight * whole
        else:
            lack_both += weight * whole
    total = 0.0
    for part in (lack_both, lack_gpu, lack_cpu, no_gpu_fits, no_gpu_lacks, no_access):
        total += part
    return total


def fgd_node_score(before_milli: float, after_milli: float) -> int:
    """FGD's node score in the artifact: 100·sigmoid((before - after) / 1000), truncated to an
    integer (0..100; 50 when the fragmentation does not change). Many nodes tie on it."""
    x = (before_milli - after_milli) / FGD_SCORE_SCALE_MILLI
    if x < -_EXP_LIMIT:  # exp overflows; in Go it is +Inf and the score 0
        return 0
    return int(1.0 / (1.0 + math.exp(-x)) * float(MAX_NODE_SCORE))


class FgdPolicy(PlacementPolicy):
    """Fragmentation gradient descent, as the paper's artifact runs it.

    A node scores `fgd_node_score` of its fragmentation (`fgd_fragmentation_milli`, over the
    target workload the driver passes: `artifact_typical_shapes` for the artifact's) before and
    after the pod. A sharing pod tries each device with room, in device order, and takes the
    first with the best score; a pod of whole GPUs takes the lowest-numbered free devices. Ties
    between nodes are the driver's (`Packer`'s `priority`, as the artifact's scheduler breaks
    them). With `count_memory` a shape whose memory does not fit is treated as one whose CPU
    does not fit (off in the artifact).
    """

    name = "fgd"

    def __init__(self, typical: Sequence[TypicalShape], count_memory: bool = False) -> None:
        self._typical = tuple(typical)
        self._count_memory = count_memory
        self._memo: dict[tuple[str | None, int, int | None, tuple[int, ...]], float] = {}

    def fragmentation(
        self, model: str | None, cpu_free: int, memory_free: int, free: Sequence[int]
    ) -> float:
        memory = memory_free if self._count_memory else None
        key = (model, cpu_free, memory, tuple(sorted(free)))
        value = self._memo.get(key)
        if value is None:
            value = fgd_fragmentation_milli(model, cpu_free, key[3], self._typical, memory)
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
            best: tuple[int, int, int] | None = None
            for d, room in enumerate(free):
                if room < shape.gpu_milli:
                    continue
                after = list(free)
                after[d] -= shape.gpu_milli
                value = fgd_node_score(
                    before, self.fragmentation(model, cpu_after, memory_after, after)
                )
                rank = self._device_rank(room, shape.gpu_milli)
                if best is None or (rank, -value) < (best[0], -best[1]):
                    best = (rank, value, d)
            if best is None:
                return None
            return float(best[0] * PLAN_RANK_STEP - best[1]), (best[2],)
        devices = tuple(d for d, room in enumerate(free) if room >= MILLI_PER_GPU)
        devices = devices[: shape.gpu_count]
        after = list(free)
        for d in devices:
            after[d] -= shape.gpu_milli
        after_value = self.fragmentation(model, cpu_after, memory_after, after)
        return -float(fgd_node_score(before, after_value)), devices

    def _device_rank(self, free_milli: int, share_milli: int) -> int:
        """Which devices a sharing pod tries first (lower first; FGD's score decides within a
        rank). FGD has one rank: the first device with the best score wins."""
        return 0


# --- ours --------------------------------------------------------------------------------------

PLAN_PODS = 100_000
"""How many shares `DevicePlan` packs to find the planned fills (in the shapes' proportions)."""
PLAN_RANK_STEP = 1000.0
"""Our default scores a sharing pod rank * this - FGD's score: any rank beats any score (0..100)."""


class DevicePlan:
    """How the target workload's sharing pods fill a device best: the fills of a best-fit-
    decreasing packing of its shares (a share list in the shapes' proportions, largest first,
    each into the fullest device it fits). On the openb default trace: an 810 alone, 470 + 470,
    650 + 320, 810 + 160, 4 x 230, ...

    The plan is kept as steps (milli-GPU already used on the device, share added): `completes`
    holds the steps that finish a planned device (the used part is the rest of that device),
    `continues` those that start one or add to one without finishing it (the used part is a
    sub-multiset of the rest). A step names the share itself, not only the new total: totals
    collide (650 + 230 = 880 = 4 x 220, a planned part), and a plan of totals alone would take
    any share that reaches a planned total as on plan.
    """

    __slots__ = ("completes", "continues")

    def __init__(
        self, completes: frozenset[tuple[int, int]], continues: frozenset[tuple[int, int]]
    ) -> None:
        self.completes = completes
        self.continues = continues

    @classmethod
    def of(cls, typical: Sequence[TypicalShape], pods: int = PLAN_PODS) -> DevicePlan:
        """The plan of `typical`'s sharing shapes: each drawn max(1, round(weight x `pods`))
        times, the shares packed largest first."""
        shares = sorted(
            (
                item.shape.gpu_milli
                for item in typical
                if item.shape.is_fractional
                for _ in range(max(1, round(item.weight * pods)))
            ),
            reverse=True,
        )
        # best fit decreasing, with the open devices grouped by how much they hold
        by_used: dict[int, list[list[int]]] = {}
        for share in shares:
            fits = [
                used for used, group in by_used.items() if group and used + share <= MILLI_PER_GPU
            ]
            if fits:
                used = max(fits)
                device = by_used[used].pop()
            else:
                used, device = 0, []
            device.append(share)
            by_used.setdefault(used + share, []).append(device)
        fills = {tuple(sorted(device)) for group in by_used.values() for device in group}
        completes: set[tuple[int, int]] = set()
        continues: set[tuple[int, int]] = set()
        for fill in fills:
            for index, share in enumerate(fill):
                if index and fill[index - 1] == share:
                    continue  # the same steps as the equal share before it
                rest = fill[:index] + fill[index + 1 :]
                completes.add((sum(rest), share))
                continues.update((used, share) for used in _part_sums(rest) - {sum(rest)})
        return cls(frozenset(completes), frozenset(continues))

    def rank(self, free: int, share: int) -> int:
        """How well putting `share` on a device with `free` milli left follows the plan:
        0 it completes a planned device, 1 it starts or continues one, 2 it leaves the plan."""
        step = (MILLI_PER_GPU - free, share)
        if step in self.completes:
            return 0
        if step in self.continues:
            return 1
        return 2


def _part_sums(shares: Sequence[int]) -> set[int]:
    """The sums of the sub-multisets of `shares`, the empty one (0) included."""
    sums = {0}
    for share in shares:
        sums |= {s + share for s in sums}
    return sums


class DefaultPolicy(FgdPolicy):
    """Ours: FGD, as the artifact scores it, over a measure that also sees memory and stranded
    GPU, with sharing pods steered to planned device fills.

    - The measure (`fragmentation`) is FGD's with memory counted like CPU, plus, at
      `stranding_weight`, the free GPU the node's free CPU and memory could not feed at the
      target workload's average CPU and memory per GPU: FGD alone sees CPU only when a shape
      stops fitting, so it spends CPU on GPU-rich nodes (CPU-only pods land anywhere) until
      their GPUs are stranded.
    - A node scores `fgd_node_score` of that measure, FGD's integer score: growth differences
      below its resolution tie, and ties go to the driver's node priority, which keeps filling
      the same nodes.
    - A sharing pod first looks for a device where it completes a planned fill, then for one
      where it starts or continues one (`DevicePlan`, whose steps name the share, not only the
      total it reaches), and only then for others: FGD looks one pod ahead, so it happily
      leaves 210 free after 470 + 320, which only rare shares fill, where the plan waits for
      the 470 or 460 that is sure to come.
    """

    name = "default"

    def __init__(
        self,
        typical: Sequence[TypicalShape],
        stranding_weight: float = DEFAULT_STRANDING_WEIGHT,
        plan: bool = True,
    ) -> None:
        super().__init__(typical, count_memory=True)
        self._stranding_weight = stranding_weight
        self._plan = DevicePlan.of(typical) if plan else None
        gpu = sum(t.weight * t.shape.total_gpu_milli for t in typical) or 1.0
        self._cpu_per_gpu = sum(t.weight * t.shape.cpu_milli for t in typical) / gpu
        self._memory_per_gpu = sum(t.weight * t.shape.memory_mib for t in typical) / gpu

    def fragmentation(
        self, model: str | None, cpu_free: int, memory_free: int, free: Sequence[int]
    ) -> float:
        key = (model, cpu_free, memory_free, tuple(sorted(free)))
        value = self._memo.get(key)
        if value is None:
            value = node_fragmentation_milli(model, cpu_free, key[3], self._typical, memory_free)
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

    def _device_rank(self, free_milli: int, share_milli: int) -> int:
        return 0 if self._plan is None else self._plan.rank(free_milli, share_milli)


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
    return DefaultPolicy(typical)


class Packer:
    """Places pods one at a time with a policy, caching node scores per pod shape.

    Ties between equally scored nodes go to the node with the lowest `priority` when one is
    given (a permutation of the nodes, so the same nodes win every tie of a run: how the FGD
    artifact's scheduler, whose nodes are named after a seeded permutation, reproduces), else to
    `pick(number of ties)`.
    """

    def __init__(
        self,
        state: PackingState,
        policy: PlacementPolicy,
        pick: Callable[[int], int],
        priority: Sequence[int] | None = None,
    ) -> None:
        if priority is not None and len(priority) != len(state.nodes):
            raise ValueError(
                f"priority has {len(priority)} entries for {len(state.nodes)} nodes; "
                "give one per node"
            )
        self.state = state
        self.policy = policy
        self._pick = pick
        self._priority = None if priority is None or policy.random_ties else tuple(priority)
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
        if len(ties) == 1:
            node = ties[0]
        elif self._priority is not None:
            node = min(ties, key=self._priority.__getitem__)
        else:
            node = ties[self._pick(len(ties))]
        placement = PackPlacement(node, self.policy.finish(self.state, node, shape, devices[node]))
        self.state.assign(node, placement.devices, shape)
        return placement
