"""Online placement of one pod at a time: the packing benchmark's driver over the registered
placement policies (`gpupool.core.policies`).

This is the placement problem alone (no quotas, no queue, no preemption): a stream of pods, each
placed at once on a node and devices or dropped. The packing benchmark and the simulator's
placement comparisons drive it. The policies are the very classes the scheduling cycle's placer
uses (`gpupool.core.placement`); only the candidates differ: here every node is scored for every
pod, as the FGD paper's artifact does.

Every policy scores a (node, pod) pair from that node's free resources alone, lower is better.
So a node's score for a pod shape changes only when a pod lands on that node, and `Packer`
caches scores per shape, recomputing only the nodes changed since the shape was last placed:
a pod costs one pass over a list of floats, not a scoring of every node. Ties between nodes are
broken by fixed node ranks (FGD: the node the artifact's scheduler reports first; lower rank
first, `pick` among equal ranks) or by the driver's `pick`; the core itself holds no
randomness.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Sequence

from gpupool.core.model import MILLI_PER_GPU
from gpupool.core.policies import create_policy
from gpupool.core.policies.base import (
    Capacity,
    PackNode,
    PackPlacement,
    PlacementPolicy,
    PodShape,
    PolicyContext,
    TypicalShape,
    affinity_tag,
    devices_with_room,
    fits_host,
    node_fragmentation_milli,
    typical_shapes,
)
from gpupool.core.policies.default import DefaultPolicy, DevicePlan
from gpupool.core.policies.fgd import (
    ARTIFACT_POPULARITY_PCT,
    FgdPolicy,
    artifact_typical_shapes,
    fgd_fragmentation_milli,
    fgd_node_score,
)

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


class PackingState(Capacity):
    """Free resources of every node; changed only through `assign`, which logs the node."""

    def __init__(self, nodes: Sequence[PackNode]) -> None:
        super().__init__(
            nodes,
            [n.cpu_milli for n in nodes],
            [n.memory_mib for n in nodes],
            [{} for _ in nodes],
        )
        self.device_free: list[tuple[int, ...]] = [
            (MILLI_PER_GPU,) * n.gpu_count for n in self.nodes
        ]
        """Per node, the free milli-GPU of each device; a node's tuple is replaced when a pod
        lands there (`free_parts` hands it out as it is)."""
        self.changes: list[int] = []
        self.capacity_gpu_milli = sum(n.gpu_count for n in self.nodes) * MILLI_PER_GPU
        self.allocated_gpu_milli = 0

    def free_parts(self, node: int) -> tuple[int, ...]:
        return self.device_free[node]

    def fits_host(self, node: int, shape: PodShape) -> bool:
        """CPU, memory and GPU model allow the pod on `node` (devices not checked)."""
        return fits_host(self, node, shape)

    def devices_with_room(self, node: int, need_milli: int) -> list[int]:
        return devices_with_room(self, node, need_milli)

    def assign(self, node: int, devices: tuple[int, ...], shape: PodShape) -> None:
        self.cpu_free[node] -= shape.cpu_milli
        self.memory_free[node] -= shape.memory_mib
        if devices:
            free = list(self.device_free[node])
            for d in devices:
                free[d] -= shape.gpu_milli
            self.device_free[node] = tuple(free)
        if shape.gpu_count:
            tag = self.affinity[node]
            tag[affinity_tag(shape)] = tag.get(affinity_tag(shape), 0) + 1
        self.allocated_gpu_milli += shape.total_gpu_milli
        self.changes.append(node)

    def idle_gpu_milli(self) -> int:
        return self.capacity_gpu_milli - self.allocated_gpu_milli


class PolicyName(enum.StrEnum):
    """The packing benchmark's usual policies: the FGD paper's baselines, FGD, and ours. Any
    registered name (`gpupool.core.policies.policy_names()`) may be given where a name is."""

    RANDOM = "random"
    DOT_PRODUCT = "dot-product"
    GPU_CLUSTERING = "gpu-clustering"
    GPU_PACKING = "gpu-packing"
    BEST_FIT = "best-fit"
    FGD = "fgd"
    DEFAULT = "default"


def make_policy(
    name: str,
    nodes: Sequence[PackNode],
    typical: Sequence[TypicalShape],
    pick: Callable[[int], int],
) -> PlacementPolicy:
    """The policy called `name`. `pick(n)` returns a uniform index below n (the driver's RNG)."""
    return create_policy(name, PolicyContext(tuple(nodes), tuple(typical), pick))


class Packer:
    """Places pods one at a time with a policy, caching node scores per pod shape.

    Ties between equally scored nodes go to the nodes with the lowest `priority` rank when one is
    given (one rank per node), else to all of them; where several remain, `pick(how many)` chooses
    (in node order). A permutation as `priority` makes the same nodes win every tie of a run; ranks
    shared by a few nodes model the FGD artifact's scheduler, whose ties go to the node its
    parallel filter found first (`gpupool.sim.packing.artifact_node_rank`).
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
        self._order = (
            None
            if self._priority is None
            else sorted(range(len(state.nodes)), key=self._priority.__getitem__)
        )
        """The nodes by priority rank, then number (`sorted` is stable): the first best-scored
        node in this order has the lowest rank among the ties, and its rank's other ties follow
        it. Every pod's tie-break reads a few of them instead of every node's score."""
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

    @staticmethod
    def _first_rank_ties(
        scores: list[float], best: float, rank: Sequence[int], order: Sequence[int]
    ) -> list[int]:
        """The nodes scored `best` of the lowest rank any of them has, by number."""
        walk = iter(order)
        for node in walk:
            if scores[node] == best:
                break
        first = rank[node]
        ties = [node]
        for node in walk:
            if rank[node] != first:
                break
            if scores[node] == best:
                ties.append(node)
        return ties

    def place(self, shape: PodShape) -> PackPlacement | None:
        """Place `shape` (and record it in the state), or None when no node can take it."""
        scores, devices = self._refresh(shape)
        best = min(scores, default=math.inf)
        if best == math.inf:
            return None
        # The ties (in node order) of the lowest priority rank among them, without a Python loop
        # over every node's score: a third of an FGD run went to that.
        if scores.count(best) == 1:
            node = scores.index(best)
        else:
            if self._priority is None or self._order is None:
                ties = [i for i, s in enumerate(scores) if s == best]
            else:
                ties = self._first_rank_ties(scores, best, self._priority, self._order)
            node = ties[0] if len(ties) == 1 else ties[self._pick(len(ties))]
        placement = PackPlacement(node, self.policy.finish(self.state, node, shape, devices[node]))
        self.state.assign(node, placement.devices, shape)
        return placement
