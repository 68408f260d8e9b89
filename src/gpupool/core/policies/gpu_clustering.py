"""The FGD paper's GPU-clustering baseline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

from gpupool.core.model import MILLI_PER_GPU
from gpupool.core.policies import register
from gpupool.core.policies.base import (
    MAX_NODE_SCORE,
    Capacity,
    PackNode,
    PlacementPolicy,
    PodShape,
    PolicyContext,
    Scored,
    affinity_tag,
    tightest,
)


class GpuClusteringPolicy(PlacementPolicy):
    """Pods asking for the same per-device GPU share go together; fuller nodes first."""

    @classmethod
    def create(cls, context: PolicyContext) -> Self:
        return cls(context.nodes)

    def __init__(self, nodes: Sequence[PackNode]) -> None:
        self._max_gpu = max((n.gpu_count for n in nodes), default=1) * MILLI_PER_GPU or 1

    def score(self, state: Capacity, node: int, shape: PodShape) -> Scored | None:
        devices = tightest(state, node, shape)
        if not shape.gpu_count:
            return 0.0, devices
        tags = state.affinity[node]
        quarter = MAX_NODE_SCORE // 4
        fill = quarter * (self._max_gpu - sum(state.free_parts(node))) // self._max_gpu
        if tags.get(affinity_tag(shape), 0):
            tier = 3 * quarter if len(tags) == 1 else 2 * quarter
        else:
            tier = quarter if not tags else 0
        return -float(tier + fill), devices


# A call rather than `@register`: mypyc compiles a decorated class as a Python class.
register("gpu-clustering")(GpuClusteringPolicy)
