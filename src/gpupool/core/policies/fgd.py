"""FGD, fragmentation gradient descent (Weng et al., "Beware of Fragmentation", USENIX ATC '23),
as the paper's artifact (hkust-adsl/kubernetes-scheduler-simulator) runs it: every detail that
moves the result reproduced (its target workload, its integer node score, its device choice);
docs/packing.md lists each and its effect."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from typing import ClassVar, Final, Self

from gpupool.core.model import MILLI_PER_GPU
from gpupool.core.policies import register
from gpupool.core.policies.base import (
    MAX_NODE_SCORE,
    MEMO_MAX_ENTRIES,
    Capacity,
    PlacementPolicy,
    PodShape,
    PolicyContext,
    Scored,
    ShapeRow,
    TypicalShape,
    shape_rows,
    shared_memo,
    sorted_free,
)

PLAN_RANK_STEP: Final = 1000.0
"""A subclass may rank a sharing pod's devices (`_device_rank`); the score is then
rank * this - FGD's score, so any rank beats any score (0..100)."""

ARTIFACT_POPULARITY_PCT: Final = 95
"""The artifact's target workload keeps the most common pod shapes that cover this share (%) of
the pods (`podPopularityThreshold: 95` in its experiment scripts, one shape at a time)."""
FGD_SCORE_SCALE_MILLI: Final = 1000.0
"""The artifact scores a node by 100·sigmoid(-growth / 1000): the growth of fragmentation in
whole GPUs."""
GPU_MODEL_SEPARATOR: Final = "|"
"""How the artifact writes a pod's allowed GPU models (and compares them, as one string)."""
_EXP_LIMIT: Final = 700.0
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
    return rows_fgd_fragmentation_milli(
        gpu_model, cpu_free_milli, devices_free_milli, shape_rows(typical), memory_free_mib
    )


def rows_fgd_fragmentation_milli(
    gpu_model: str | None,
    cpu_free_milli: int,
    devices_free_milli: Sequence[int],
    rows: Sequence[ShapeRow],
    memory_free_mib: int | None = None,
) -> float:
    """`fgd_fragmentation_milli` over `shape_rows` of the target workload (the same value,
    operation for operation)."""
    free, below = sorted_free(devices_free_milli)
    free_total = below[-1]
    count = len(free)
    memory = _UNBOUNDED if memory_free_mib is None else memory_free_mib
    lack_both = lack_gpu = lack_cpu = no_gpu_fits = no_gpu_lacks = no_access = 0.0
    whole = float(free_total)
    for weight, need, gpus, cpu, mem, models in rows:
        cpu_fits = cpu_free_milli >= cpu and memory >= mem
        if need == 0:
            if cpu_fits:
                no_gpu_fits += weight * whole
            else:
                no_gpu_lacks += weight * whole
            continue
        if models and gpu_model not in models:
            no_access += weight * whole
            continue
        small = bisect.bisect_left(free, need)
        if count - small >= gpus:
            if cpu_fits:
                lack_gpu += weight * float(below[small])
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


_UNBOUNDED: Final = float("inf")
"""Free memory of a measure that leaves memory out: no shape lacks it."""


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

    measure_name: ClassVar[str] = "fgd"
    """Names the measure `_measure` memoizes (`shared_memo`): a subclass measuring otherwise
    names its own."""

    @classmethod
    def create(cls, context: PolicyContext) -> Self:
        return cls(context.typical)

    def __init__(self, typical: Sequence[TypicalShape], count_memory: bool = False) -> None:
        self._typical = tuple(typical)
        self._rows = shape_rows(self._typical)
        self._count_memory = count_memory
        self._memo = shared_memo(self.measure_name, self._rows, count_memory)
        self._cpu_cuts = sorted({row[3] for row in self._rows})
        self._memory_cuts = sorted({row[4] for row in self._rows})
        """The shapes' CPU and memory per pod, ascending: the measure reads a node's free CPU
        and memory only as whether each shape's fits (free >= need), which the number of cuts
        at or below the free amount tells; nodes that differ in free CPU or memory alone then
        share a memo entry."""
        self._before: list[tuple[tuple[int, ...], int, int, tuple[int, ...], float] | None] = []
        """Per node (a list grown to the highest node asked about), the state it was last
        scored in (free parts as read, free CPU, free memory), its free parts sorted and its
        measure: a node is scored for several shapes in one state (7 of 10 scores in a
        1,000-node cycle), each of which needs the measure before the pod. Checked by value,
        so it holds for any `Capacity` (a node's free parts read afresh compare equal to the
        tuple kept while they are the same)."""

    def fragmentation(
        self, model: str | None, cpu_free: int, memory_free: int, free: Sequence[int]
    ) -> float:
        return self._measure(model, cpu_free, memory_free, tuple(sorted(free)))

    def _measure(
        self, model: str | None, cpu_free: int, memory_free: int, free_sorted: tuple[int, ...]
    ) -> float:
        """`fragmentation` of a node whose free parts are already sorted (`score` derives the
        state after a pod from the state before without sorting again)."""
        memory = memory_free if self._count_memory else None
        key = (
            model,
            bisect.bisect_right(self._cpu_cuts, cpu_free),
            -1 if memory is None else bisect.bisect_right(self._memory_cuts, memory),
            free_sorted,
        )
        memo = self._memo
        value = memo.get(key)
        if value is None:
            value = rows_fgd_fragmentation_milli(model, cpu_free, free_sorted, self._rows, memory)
            if len(memo) >= MEMO_MAX_ENTRIES:
                memo.clear()
            memo[key] = value
        return value

    def score(self, state: Capacity, node: int, shape: PodShape) -> Scored | None:
        model = state.nodes[node].gpu_model
        cpu = state.cpu_free[node]
        memory = state.memory_free[node]
        free = state.free_parts(node)
        kept = self._before
        if node >= len(kept):
            kept.extend([None] * (node + 1 - len(kept)))
        last = kept[node]
        if (
            last is not None
            and last[1] == cpu
            and last[2] == memory
            and (last[0] is free or last[0] == free)
        ):
            free_sorted = last[3]
            before = last[4]
        else:
            free_sorted = tuple(sorted(free))
            # `self._measure(...)` at each call, not a local: compiled, that is a direct call
            # with machine integers; a bound method would box every argument
            before = self._measure(model, cpu, memory, free_sorted)
            kept[node] = (free, cpu, memory, free_sorted, before)
        cpu_after = cpu - shape.cpu_milli
        memory_after = memory - shape.memory_mib
        milli = shape.gpu_milli
        if shape.is_fractional:
            # Each distinct room once, in ascending order: devices with the same room leave the
            # node in the same state (the measure sees the free parts as a multiset) and rank
            # the same, so the first device with it stands for all. The best is the least
            # (rank, -score, device): the first device in device order among the best, as FGD
            # tries them.
            best_rank = best_value = best_device = -1
            previous = -2
            for at in range(len(free_sorted)):
                room = free_sorted[at]
                if room < milli or room == previous:
                    continue
                previous = room
                # the sorted state after: `room` taken out, `room - milli` put in its place
                left = room - milli
                to = at
                while to and free_sorted[to - 1] >= left:
                    to -= 1
                after = list(free_sorted)  # the parts from `to` up by one, over `at`
                k = at
                while k > to:
                    after[k] = after[k - 1]
                    k -= 1
                after[to] = left
                after_sorted = tuple(after)
                value = fgd_node_score(
                    before, self._measure(model, cpu_after, memory_after, after_sorted)
                )
                rank = self._device_rank(room, milli)
                device = 0  # `free.index(room)`, which compiled is a method call by name
                while free[device] != room:
                    device += 1
                if (
                    best_device < 0
                    or rank < best_rank
                    or (
                        rank == best_rank
                        and (value > best_value or (value == best_value and device < best_device))
                    )
                ):
                    best_rank, best_value, best_device = rank, value, device
            if best_device < 0:
                return None
            return float(best_rank * PLAN_RANK_STEP - best_value), (best_device,)
        count = shape.gpu_count
        taken: list[int] = []
        if count:
            for d, room in enumerate(free):
                if room >= MILLI_PER_GPU:
                    taken.append(d)
                    if len(taken) == count:
                        break
        devices = tuple(taken)
        if taken and free_sorted[-1] == MILLI_PER_GPU:
            # the devices taken are whole ones, the last in sorted order: each leaves
            # `MILLI_PER_GPU - milli` free, which goes in where that amount sorts
            rest = free_sorted[: len(free_sorted) - len(taken)]
            left = MILLI_PER_GPU - milli
            to = 0  # where `left` sorts in: first, after any pinned device's -1 (no bisect)
            while to < len(rest) and rest[to] < left:
                to += 1
            after_sorted = rest[:to] + (left,) * len(taken) + rest[to:]
        else:
            changed = list(free)
            for d in taken:
                changed[d] -= milli
            after_sorted = tuple(sorted(changed))
        after_value = self._measure(model, cpu_after, memory_after, after_sorted)
        return -float(fgd_node_score(before, after_value)), devices

    def _device_rank(self, free_milli: int, share_milli: int) -> int:
        """Which devices a sharing pod tries first (lower first; FGD's score decides within a
        rank). FGD has one rank: the first device with the best score wins."""
        return 0


# A call rather than `@register`: mypyc compiles a decorated class as a Python class.
register("fgd")(FgdPolicy)
