"""The FGD paper's best-fit baseline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

from gpupool.core.model import MILLI_PER_GPU
from gpupool.core.policies import register
from gpupool.core.policies.base import (
    Capacity,
    PackNode,
    PlacementPolicy,
    PodShape,
    PolicyContext,
    Scored,
    node_score,
    tightest,
)


class BestFitPolicy(PlacementPolicy):
    """The node left with the least free CPU and GPU (each normalised by the largest node)."""

    @classmethod
    def create(cls, context: PolicyContext) -> Self:
        return cls(context.nodes)

    def __init__(self, nodes: Sequence[PackNode]) -> None:
        self._max_cpu = max((n.cpu_milli for n in nodes), default=1) or 1
        self._max_gpu = max((n.gpu_count for n in nodes), default=1) * MILLI_PER_GPU or 1

    def score(self, state: Capacity, node: int, shape: PodShape) -> Scored | None:
        cpu_left = state.cpu_free[node] - shape.cpu_milli
        gpu_left = sum(state.free_parts(node)) - shape.total_gpu_milli
        value = 0.5 * cpu_left / self._max_cpu + 0.5 * gpu_left / self._max_gpu
        return -node_score(1.0 - value), tightest(state, node, shape)


# A call rather than `@register`: mypyc compiles a decorated class as a Python class.
register("best-fit")(BestFitPolicy)
