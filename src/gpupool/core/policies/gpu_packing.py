"""The FGD paper's GPU-packing baseline."""

from __future__ import annotations

from gpupool.core.model import MILLI_PER_GPU
from gpupool.core.policies import register
from gpupool.core.policies.base import (
    MAX_NODE_SCORE,
    Capacity,
    PlacementPolicy,
    PodShape,
    Scored,
    tightest,
)


class GpuPackingPolicy(PlacementPolicy):
    """Prefer already shared devices, then free devices of a used node, then an empty node."""

    def score(self, state: Capacity, node: int, shape: PodShape) -> Scored | None:
        free = state.free_parts(node)
        full = sum(1 for f in free if f == MILLI_PER_GPU)
        devices = tightest(state, node, shape)
        if full == len(free):
            return -float(max(MAX_NODE_SCORE // 3 - full, full)), devices
        fresh = sum(1 for d in devices if free[d] == MILLI_PER_GPU)
        if fresh:
            return -float(max(MAX_NODE_SCORE // 2 - fresh, MAX_NODE_SCORE // 3)), devices
        left_pct = sum(free[d] * 100 // MILLI_PER_GPU for d in devices)
        return -float(max(MAX_NODE_SCORE - left_pct // 10, MAX_NODE_SCORE // 2)), devices


# A call rather than `@register`: mypyc compiles a decorated class as a Python class.
register("gpu-packing")(GpuPackingPolicy)
