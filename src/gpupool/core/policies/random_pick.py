"""The FGD paper's random baseline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Self

from gpupool.core.policies import register
from gpupool.core.policies.base import (
    Capacity,
    PlacementPolicy,
    PodShape,
    PolicyContext,
    Scored,
    devices_with_room,
)


class RandomPolicy(PlacementPolicy):
    """Every feasible node scores the same: the tie-break picks one at random."""

    random_ties = True

    @classmethod
    def create(cls, context: PolicyContext) -> Self:
        return cls(context.pick)

    def __init__(self, pick: Callable[[int], int]) -> None:
        self._pick = pick

    def score(self, state: Capacity, node: int, shape: PodShape) -> Scored | None:
        return 0.0, ()

    def finish(
        self, state: Capacity, node: int, shape: PodShape, devices: tuple[int, ...]
    ) -> tuple[int, ...]:
        room = devices_with_room(state, node, shape.gpu_milli) if shape.gpu_count else []
        chosen: list[int] = []
        while len(chosen) < shape.gpu_count:
            chosen.append(room.pop(self._pick(len(room))))
        return tuple(sorted(chosen))


# A call rather than `@register`: mypyc compiles a decorated class as a Python class.
register("random")(RandomPolicy)
