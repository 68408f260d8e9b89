"""Our default placement policy: FGD's score over a measure that also sees memory and stranded
GPU, with sharing pods steered to planned device fills (`DefaultPolicy`)."""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence
from typing import Final, Self

from gpupool.core.model import MILLI_PER_GPU
from gpupool.core.policies import register
from gpupool.core.policies.base import (
    MEMO_MAX_ENTRIES,
    PolicyContext,
    TypicalShape,
    rows_fragmentation_milli,
    shared_memo,
)
from gpupool.core.policies.fgd import FgdPolicy

DEFAULT_STRANDING_WEIGHT: Final = 4.0
"""How much our default policy charges for GPU that the node's CPU or memory could no longer
feed, next to FGD's fragment (see `DefaultPolicy`): a stranded GPU is lost for sure, a fragment
only for some shapes. Without the term (0) the default loses about half a point on the openb
default, gpushare60 and gpuspec10 traces; 8 or 16 instead of 4 move it by less than 0.05."""

PLAN_PODS: Final = 100_000
"""How many shares `DevicePlan` packs to find the planned fills (in the shapes' proportions)."""

_STEP_BASE: Final = 1 << 16
"""A plan step (milli-GPU used, share) is kept as one integer, used * this + share (a share is
below `MILLI_PER_GPU`): looking up an int hashes nothing, a tuple hashes both."""


class DevicePlan:
    """How the target workload's sharing pods fill a device best: the fills of a best-fit-
    decreasing packing of its shares (a share list in the shapes' proportions, largest first,
    each into the fullest device it fits). On the openb default trace: an 810 alone, 470 + 470,
    650 + 320, 810 + 160, 4 x 230, ...

    The plan is kept as steps (milli-GPU already used on the device, share added; `plan_step`
    writes one as an integer): `completes`
    holds the steps that finish a planned device (the used part is the rest of that device),
    `continues` those that start one or add to one without finishing it (the used part is a
    sub-multiset of the rest). A step names the share itself, not only the new total: totals
    collide (650 + 230 = 880 = 4 x 220, a planned part), and a plan of totals alone would take
    any share that reaches a planned total as on plan.
    """

    __slots__ = ("completes", "continues")

    def __init__(self, completes: frozenset[int], continues: frozenset[int]) -> None:
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
        completes: set[int] = set()
        continues: set[int] = set()
        for fill in fills:
            for index, share in enumerate(fill):
                if index and fill[index - 1] == share:
                    continue  # the same steps as the equal share before it
                rest = fill[:index] + fill[index + 1 :]
                completes.add(plan_step(sum(rest), share))
                continues.update(plan_step(used, share) for used in _part_sums(rest) - {sum(rest)})
        return cls(frozenset(completes), frozenset(continues))

    def rank(self, free: int, share: int) -> int:
        """How well putting `share` on a device with `free` milli left follows the plan:
        0 it completes a planned device, 1 it starts or continues one, 2 it leaves the plan."""
        step = plan_step(MILLI_PER_GPU - free, share)
        if step in self.completes:
            return 0
        if step in self.continues:
            return 1
        return 2


@functools.lru_cache(maxsize=8)
def _plan_of(typical: tuple[TypicalShape, ...]) -> DevicePlan:
    """The plan of a target workload, kept for the next policy built on the same one (the
    scheduling cycle builds a policy every cycle; the plan costs about 0.15 s)."""
    return DevicePlan.of(typical)


def plan_step(used_milli: int, share_milli: int) -> int:
    """A plan step as one integer (`_STEP_BASE`)."""
    return used_milli * _STEP_BASE + share_milli


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

    measure_name = "default"

    @classmethod
    def create(cls, context: PolicyContext) -> Self:
        return cls(context.typical)

    def __init__(
        self,
        typical: Sequence[TypicalShape],
        stranding_weight: float = DEFAULT_STRANDING_WEIGHT,
        plan: bool = True,
    ) -> None:
        super().__init__(typical, count_memory=True)
        self._stranding_weight = stranding_weight
        self._plan = _plan_of(tuple(typical)) if plan else None
        gpu = sum(t.weight * t.shape.total_gpu_milli for t in typical) or 1.0
        self._cpu_per_gpu = sum(t.weight * t.shape.cpu_milli for t in typical) / gpu
        self._memory_per_gpu = sum(t.weight * t.shape.memory_mib for t in typical) / gpu
        self._exact = shared_memo("default-exact", self._rows, stranding_weight)
        """The whole measure by the node's exact free CPU and memory (the stranding term reads
        them as amounts); `_memo` keeps the shapes' part by the cuts (`FgdPolicy`)."""

    def _measure(
        self, model: str | None, cpu_free: int, memory_free: int, free_sorted: tuple[int, ...]
    ) -> float:
        exact = (model, cpu_free, memory_free, free_sorted)
        memo = self._exact
        value = memo.get(exact)
        if value is None:
            key = (
                model,
                bisect.bisect_right(self._cpu_cuts, cpu_free),
                bisect.bisect_right(self._memory_cuts, memory_free),
                free_sorted,
            )
            shapes_part = self._memo.get(key)
            if shapes_part is None:
                shapes_part = rows_fragmentation_milli(
                    model, cpu_free, free_sorted, self._rows, memory_free
                )
                if len(self._memo) >= MEMO_MAX_ENTRIES:
                    self._memo.clear()
                self._memo[key] = shapes_part
            value = shapes_part
            if self._stranding_weight:
                free_gpu = sum(free_sorted)
                usable = min(
                    free_gpu,
                    cpu_free / self._cpu_per_gpu if self._cpu_per_gpu else free_gpu,
                    memory_free / self._memory_per_gpu if self._memory_per_gpu else free_gpu,
                )
                value += self._stranding_weight * (free_gpu - usable)
            if len(memo) >= MEMO_MAX_ENTRIES:
                memo.clear()
            memo[exact] = value
        return value

    def _device_rank(self, free_milli: int, share_milli: int) -> int:
        return 0 if self._plan is None else self._plan.rank(free_milli, share_milli)


# A call rather than `@register`: mypyc compiles a decorated class as a Python class.
register("default")(DefaultPolicy)
