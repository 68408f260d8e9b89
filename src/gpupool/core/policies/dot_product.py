"""The FGD paper's dot-product (Tetris) baseline."""

from __future__ import annotations

from gpupool.core.model import MILLI_PER_GPU
from gpupool.core.policies import register
from gpupool.core.policies.base import (
    Capacity,
    PlacementPolicy,
    PodShape,
    Scored,
    devices_with_room,
    node_score,
    tightest,
)


class DotProductPolicy(PlacementPolicy):
    """Tetris-style: the smallest dot product of the pod's demand and the node's free resources,
    both normalised by the node's capacity (CPU, and GPU on the devices the pod would use)."""

    def score(self, state: Capacity, node: int, shape: PodShape) -> Scored | None:
        spec = state.nodes[node]
        cpu = (state.cpu_free[node] / spec.cpu_milli) * (shape.cpu_milli / spec.cpu_milli)
        if not shape.gpu_count:
            return -node_score(1.0 - cpu), ()
        free = state.free_parts(node)
        if shape.is_fractional:
            best: Scored | None = None
            for d in devices_with_room(state, node, shape.gpu_milli):
                value = cpu + (free[d] / MILLI_PER_GPU) * (shape.gpu_milli / MILLI_PER_GPU)
                if best is None or value < best[0]:
                    best = (value, (d,))
            return None if best is None else (-node_score(1.0 - best[0] / 2), best[1])
        capacity = spec.gpu_count * MILLI_PER_GPU
        gpu = (sum(free) / capacity) * (shape.total_gpu_milli / capacity)
        return -node_score(1.0 - (cpu + gpu) / 2), tightest(state, node, shape)


# A call rather than `@register`: mypyc compiles a decorated class as a Python class.
register("dot-product")(DotProductPolicy)
