"""What every placement policy is built on: pod shapes, the capacity a policy reads, the base
class, and the fragmentation measure of the FGD paper.

A policy scores one node for one pod shape from that node's free resources alone (lower is
better) and names the devices the pod would take there. It reads the cluster through
`Capacity`, which the packing benchmark's `PackingState` and the scheduling cycle's session
(`gpupool.core.capacity.SessionCapacity`) both provide: the same class places pods in the
benchmark and tasks in production.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, Self

from mypy_extensions import mypyc_attr

from gpupool.core.model import MILLI_PER_GPU


@dataclass(frozen=True, slots=True)
class PodShape:
    """What one pod asks for. `gpu_milli` is per device: below 1000 only with `gpu_count` 1."""

    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_milli: int
    gpu_models: tuple[str, ...] = ()
    """Models it may run on; empty for any."""

    @property
    def total_gpu_milli(self) -> int:
        return self.gpu_count * self.gpu_milli

    @property
    def is_fractional(self) -> bool:
        return self.gpu_count == 1 and self.gpu_milli < MILLI_PER_GPU


@dataclass(frozen=True, slots=True)
class PackNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_model: str | None

    def __init__(
        self, name: str, cpu_milli: int, memory_mib: int, gpu_count: int, gpu_model: str | None
    ) -> None:
        # Written out for the compiled core (one per node a cycle), as `TaskPlacement.__init__`.
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "cpu_milli", cpu_milli)
        object.__setattr__(self, "memory_mib", memory_mib)
        object.__setattr__(self, "gpu_count", gpu_count)
        object.__setattr__(self, "gpu_model", gpu_model)


@dataclass(frozen=True, slots=True)
class PackPlacement:
    node: int
    devices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TypicalShape:
    """A shape of the target workload and its weight (share of pods, summing to 1)."""

    shape: PodShape
    weight: float


def typical_shapes(shapes: Iterable[PodShape], coverage: float = 1.0) -> tuple[TypicalShape, ...]:
    """The target workload: the most common shapes covering `coverage` of pods, renormalised."""
    counts: dict[PodShape, int] = {}
    total = 0
    for shape in shapes:
        counts[shape] = counts.get(shape, 0) + 1
        total += 1
    ranked = sorted(
        counts.items(), key=lambda kv: (-kv[1], kv[0].gpu_milli, kv[0].gpu_count, kv[0].cpu_milli)
    )
    kept: list[tuple[PodShape, int]] = []
    covered = 0
    for shape, count in ranked:
        if kept and covered >= coverage * total:
            break
        kept.append((shape, count))
        covered += count
    return tuple(TypicalShape(shape, count / covered) for shape, count in kept)


def node_fragmentation_milli(
    gpu_model: str | None,
    cpu_free_milli: int,
    devices_free_milli: Sequence[int],
    typical: Sequence[TypicalShape],
    memory_free_mib: int | None = None,
) -> float:
    """Expected fragmented GPU (milli) of one node for the target workload `typical`.

    A shape asking for no GPU sees every free GPU of the node as a fragment (it cannot use any);
    so does a shape that cannot run on the node (wrong model, too little CPU, too few devices
    with room). For a shape that can run, a device's free part is a fragment when it is smaller
    than the shape's per-device need. Host memory counts only when `memory_free_mib` is given
    (the paper leaves it out; our default policy counts it, since memory strands GPUs too).
    """
    return rows_fragmentation_milli(
        gpu_model, cpu_free_milli, devices_free_milli, shape_rows(typical), memory_free_mib
    )


ShapeRow = tuple[float, int, int, int, int, tuple[str, ...]]
"""A target shape as the fragmentation measures read it: (weight, GPU milli per device, GPU
count, CPU milli, memory MiB, GPU models)."""


def shape_rows(typical: Iterable[TypicalShape]) -> tuple[ShapeRow, ...]:
    """`typical` as plain rows, in order: a policy makes them once and measures many nodes."""
    return tuple(
        (
            t.weight,
            t.shape.gpu_milli,
            t.shape.gpu_count,
            t.shape.cpu_milli,
            t.shape.memory_mib,
            t.shape.gpu_models,
        )
        for t in typical
    )


def rows_fragmentation_milli(
    gpu_model: str | None,
    cpu_free_milli: int,
    devices_free_milli: Sequence[int],
    rows: Sequence[ShapeRow],
    memory_free_mib: int | None = None,
) -> float:
    """`node_fragmentation_milli` over `shape_rows` of the target workload (the same value,
    operation for operation)."""
    free, below = sorted_free(devices_free_milli)
    free_total = below[-1]
    if free_total == 0:
        return 0.0
    count = len(free)
    memory = _UNBOUNDED if memory_free_mib is None else memory_free_mib
    fragment = 0.0
    for weight, need, gpus, cpu, mem, models in rows:
        if (
            need == 0
            or (models and gpu_model not in models)
            or cpu_free_milli < cpu
            or memory < mem
        ):
            fragment += weight * free_total
            continue
        # the devices with less free than the shape needs are the first `small`
        small = bisect.bisect_left(free, need)
        fragment += weight * (below[small] if count - small >= gpus else free_total)
    return fragment


_UNBOUNDED: Final = float("inf")
"""Free memory of a measure that leaves memory out: no shape lacks it."""


def sorted_free(devices_free_milli: Sequence[int]) -> tuple[list[int], list[int]]:
    """The devices' free parts in ascending order, and the running sums of that order
    (`below[k]`: the k smallest together; `below[-1]`: all of them): how much free a shape
    could not use is then one bisection per shape rather than a pass over the devices."""
    free = sorted(devices_free_milli)
    return free, [0, *itertools.accumulate(free)]


MeasureKey = tuple[str | None, int, int, tuple[int, ...]]
"""A node's state as a memoized measure reads it: GPU model, free CPU and memory (amounts, or
how many of the target shapes' needs they cover), free milli-GPU per device in ascending order."""

MEMO_MAX_ENTRIES = 200_000
"""A shared measure memo (`shared_memo`) is emptied when it holds this many values (some 50 MB),
so that a long-running server's cannot grow without end."""


@functools.lru_cache(maxsize=4)
def shared_memo(*key: Hashable) -> dict[MeasureKey, float]:
    """The memo of one node measure, shared by every policy built with the same `key` (the
    measure's name and what it depends on besides the node: the target workload's rows, its
    settings). A measure is a pure function of node state and key, so a policy built later
    starts with what earlier ones computed: the scheduling cycle builds its policy every cycle,
    the packing benchmark one per run, and most node states recur. Its user empties it at
    `MEMO_MAX_ENTRIES`."""
    return {}


def affinity_tag(shape: PodShape) -> int:
    """GPU clustering's class of a pod, after Gandiva's job-size affinity: the number of whole
    devices it takes, or 0 for every pod that shares a device."""
    return 0 if shape.is_fractional else shape.gpu_count


class Capacity:
    """Free resources per node, as a policy reads them: the packing benchmark's `PackingState`
    and the scheduling cycle's `gpupool.core.capacity.SessionCapacity` (both subclasses).

    A class, not a Protocol: compiled, a policy reads a Protocol's members by name and indexes
    them as generic sequences (four lookups and four generic subscripts per node scored, about
    3% of a cycle under `default`); here they are typed lists read natively, and a node's free
    parts come from one method call."""

    def __init__(
        self,
        nodes: Sequence[PackNode],
        cpu_free: list[int],
        memory_free: list[int],
        affinity: list[dict[int, int]],
    ) -> None:
        self.nodes: tuple[PackNode, ...] = tuple(nodes)
        self.cpu_free = cpu_free
        self.memory_free = memory_free
        self.affinity = affinity
        """Per node, how many pods of each `affinity_tag` it holds (GPU clustering)."""

    def free_parts(self, node: int) -> tuple[int, ...]:
        """Free milli-GPU of each device of `node`, in device order. Devices a new pod may not
        use read as -1 (they fit no request)."""
        raise NotImplementedError


def fits_host(state: Capacity, node: int, shape: PodShape) -> bool:
    """CPU, memory and GPU model allow the pod on `node` (devices not checked)."""
    spec = state.nodes[node]
    return (
        state.cpu_free[node] >= shape.cpu_milli
        and state.memory_free[node] >= shape.memory_mib
        and spec.gpu_count >= shape.gpu_count
        and (not shape.gpu_models or spec.gpu_model in shape.gpu_models)
    )


def devices_with_room(state: Capacity, node: int, need_milli: int) -> list[int]:
    return [d for d, free in enumerate(state.free_parts(node)) if free >= need_milli]


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """What a policy may be built from: the nodes, the target workload (the shapes to keep
    room for, weights summing to 1) and `pick(n)`, a uniform index below n from the driver's
    seeded generator (the core holds no randomness of its own)."""

    nodes: tuple[PackNode, ...]
    typical: tuple[TypicalShape, ...]
    pick: Callable[[int], int]


Scored = tuple[float, tuple[int, ...]]
"""A node's score for a pod (lower is better) and the devices the pod would take there."""


@mypyc_attr(allow_interpreted_subclasses=True)
class PlacementPolicy:
    """Scores one node for one pod. Subclasses implement `score` (feasibility is checked
    first) and register with `gpupool.core.policies.register`; `create` builds one for a run
    or a scheduling cycle."""

    name: ClassVar[str] = "base"
    random_ties: ClassVar[bool] = False
    """True for a policy whose ties are its choice at random (`random`): `Packer` then breaks
    them with `pick` even when it has a node priority."""
    loose: ClassVar[bool] = False
    """The scheduling cycle offers a policy the nodes with the fewest empty devices first (it
    scores a bounded number of candidates); a spreading policy wants the emptiest first."""
    empty_device_in_offered_order: ClassVar[bool] = False
    """True when the policy puts a fraction on an empty device only if no candidate's shared
    device takes it, and then scores nodes with an empty device in the order the cycle offers
    them: the cycle then scores the shared candidates first and, if none takes the fraction,
    the first node with an empty device that fits, without scanning the others."""
    whole_in_offered_order: ClassVar[bool] = False
    """True when, for whole-GPU pods, the policy's score only follows the order the cycle
    offers nodes in (fewest empty devices first, or most when `loose`): the cycle then takes
    the first node that fits without scoring the others."""

    @classmethod
    def create(cls, context: PolicyContext) -> Self:
        return cls()

    def score(self, state: Capacity, node: int, shape: PodShape) -> Scored | None:
        raise NotImplementedError

    def finish(
        self, state: Capacity, node: int, shape: PodShape, devices: tuple[int, ...]
    ) -> tuple[int, ...]:
        """The devices to use on the chosen node; by default those the score was for."""
        return devices

    def evaluate(self, state: Capacity, node: int, shape: PodShape) -> Scored | None:
        """`score` where the pod fits (`fits_host` and enough `devices_with_room`), else None.
        Both checks are written out here: this runs for every node scored."""
        spec = state.nodes[node]
        count = shape.gpu_count
        if (
            state.cpu_free[node] < shape.cpu_milli
            or state.memory_free[node] < shape.memory_mib
            or spec.gpu_count < count
            or (shape.gpu_models and spec.gpu_model not in shape.gpu_models)
        ):
            return None
        if count:
            need = shape.gpu_milli
            free = state.free_parts(node)
            if count == 1:
                if max(free) < need:
                    return None
            elif len([room for room in free if room >= need]) < count:
                return None
        return self.score(state, node, shape)


def tightest(state: Capacity, node: int, shape: PodShape) -> tuple[int, ...]:
    """The devices with the least room that still fit: best fit within the node."""
    if not shape.gpu_count:
        return ()
    free = state.free_parts(node)
    room = sorted(devices_with_room(state, node, shape.gpu_milli), key=lambda d: (free[d], d))
    return tuple(sorted(room[: shape.gpu_count]))


MAX_NODE_SCORE: Final = 100
"""The baselines score nodes as Kubernetes score plugins do: integers 0..100, ties at random.
The coarse integer is part of how they behave (it makes ties), so it is kept."""


def node_score(fraction: float) -> float:
    """A 0..1 preference as a Kubernetes node score (truncated integer), as a float."""
    return float(int(fraction * MAX_NODE_SCORE))
