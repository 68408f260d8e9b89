"""What a cycle's placement search is built from besides the placer itself: the target workload
the policy keeps room for (`cycle_typical`) and the rotating tie-break of a policy that chooses
at random (`RotatingPick`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from gpupool.core.model import MILLI_PER_GPU, GpuRequestKind, Workload
from gpupool.core.policies.base import PodShape, TypicalShape
from gpupool.core.records import Sums

TYPICAL_WEIGHT_STEP: Final = 100
"""The cycle's target workload weights are rounded to 1/this: the same mix from one cycle to
the next gives the same target (and the policies' per-target work is kept)."""


def cycle_typical(
    workloads: Iterable[Workload], max_device_memory_mib: int
) -> tuple[TypicalShape, ...]:
    """The target workload a policy keeps room for: the tasks now waiting, by GPU request, each
    with the mean CPU and memory of its tasks, weighted by task count (rounded). The cycle has
    the session sum them as it is built (`Session.pending_shapes`, `typical_of`)."""
    totals: dict[tuple[int, int], Sums] = {}
    whole = GpuRequestKind.WHOLE
    fraction = GpuRequestKind.FRACTION
    for w in workloads:
        request = w.gpu
        kind = request.kind
        if kind is whole:
            key = (request.amount, MILLI_PER_GPU)
        elif kind is fraction:
            key = (1, request.amount)  # `milli_on`, inline: every pending workload comes here
        else:
            key = (1, request.milli_on(max_device_memory_mib))
        row = totals.get(key)
        if row is None:
            row = totals[key] = Sums()
        row.tasks += w.tasks
        row.cpu_milli += w.cpu_milli * w.tasks
        row.memory_mib += w.memory_mib * w.tasks
    return typical_of(totals)


def typical_of(totals: dict[tuple[int, int], Sums]) -> tuple[TypicalShape, ...]:
    """`cycle_typical` from its sums: per (GPUs per task, milli per GPU), the tasks."""
    tasks = sum(row.tasks for row in totals.values())
    shapes: list[TypicalShape] = []
    for (count, milli), row in sorted(totals.items()):
        n = row.tasks
        weight = round(n * TYPICAL_WEIGHT_STEP / tasks) / TYPICAL_WEIGHT_STEP
        if weight > 0:
            shape = PodShape(row.cpu_milli // n, row.memory_mib // n, count, milli)
            shapes.append(TypicalShape(shape, weight))
    return tuple(shapes)


class RotatingPick:
    """The cycle's `pick(n)` for a policy that chooses at random (the benchmark's `random`): the
    core holds no randomness, so it rotates through the choices from a start the snapshot's time
    sets, and a cycle stays a function of its snapshot."""

    __slots__ = ("_next",)

    def __init__(self, start: int) -> None:
        self._next = start

    def __call__(self, count: int) -> int:
        self._next += 1
        return self._next % count
