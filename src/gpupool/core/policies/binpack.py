"""The scheduler's classic policies: bin-pack (the default of scenario files) and spread."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Self

from gpupool.core.model import MILLI_PER_GPU
from gpupool.core.policies import register
from gpupool.core.policies.base import (
    Capacity,
    PlacementPolicy,
    PodShape,
    PolicyContext,
    Scored,
    TypicalShape,
)

_EMPTY_DEVICE_RANK: Final = 1e9
"""A fraction goes onto an empty device only when no shared device on any candidate takes it."""
_DELTA_STEP: Final = 2000.0
"""Shared devices compare by fragmentation change first (|change| <= 1000), then by free part."""


class BinPackPolicy(PlacementPolicy):
    """Whole GPUs on the node with the fewest empty devices that still has enough (its
    lowest-numbered ones). A fraction onto an already shared device before an empty one: the
    device whose use leaves the cluster least fragmented for the shapes now waiting (the FGD
    paper's fragment: free GPU a shape could not use), the tightest fit on a tie; else an empty
    device of the fullest node."""

    whole_in_offered_order = True
    empty_device_in_offered_order = True

    @classmethod
    def create(cls, context: PolicyContext) -> Self:
        return cls(context.typical)

    def __init__(self, typical: Sequence[TypicalShape]) -> None:
        self._fractions = tuple(
            (t.shape.gpu_milli, t.weight) for t in typical if t.shape.is_fractional
        )
        self._values: dict[tuple[int, int], float] = {}
        """A shared device's value for a fraction, by (free, share): `_delta` is a pure
        function of the two, and the same few pairs come up on node after node."""

    def _empty_rank(self, empty: int) -> float:
        return float(empty)

    def _delta(self, free_before: int, milli: int) -> float:
        """Change in expected fragmentation when `milli` more lands on a device with
        `free_before`: for whole-GPU shapes it is the same on every shared device, so only the
        fractional shapes tell devices apart."""
        free_after = free_before - milli
        delta = 0.0
        for need, weight in self._fractions:
            before = free_before if free_before < need else 0
            after = free_after if free_after < need else 0
            delta += weight * (after - before)
        return delta

    def score(self, state: Capacity, node: int, shape: PodShape) -> Scored | None:
        free = state.free_parts(node)
        milli = shape.gpu_milli
        if shape.gpu_count != 1 or milli >= MILLI_PER_GPU:  # not `shape.is_fractional`
            empty = [d for d, room in enumerate(free) if room == MILLI_PER_GPU]
            return self._empty_rank(len(empty)), tuple(empty[: shape.gpu_count])
        best: tuple[float, int] | None = None
        values = self._values
        for d, room in enumerate(free):
            if milli <= room < MILLI_PER_GPU:
                value = values.get((room, milli))
                if value is None:
                    value = values[(room, milli)] = (
                        self._delta(room, milli) + MILLI_PER_GPU
                    ) * _DELTA_STEP + room
                if best is None or value < best[0]:
                    best = (value, d)
        if best is not None:
            return best[0], (best[1],)
        empty_count = free.count(MILLI_PER_GPU)
        if empty_count:
            return _EMPTY_DEVICE_RANK + self._empty_rank(empty_count), (free.index(MILLI_PER_GPU),)
        return None


class SpreadPolicy(BinPackPolicy):
    """Whole GPUs and fractions that need an empty device on the node with the most empty
    devices; fractions still share a device before taking an empty one, as bin-pack does."""

    loose = True

    def _empty_rank(self, empty: int) -> float:
        return float(-empty)


# A call rather than `@register`: mypyc compiles a decorated class as a Python class.
register("binpack", "pack")(BinPackPolicy)
register("spread")(SpreadPolicy)
