"""The scheduling core's input model: an immutable snapshot of cluster, projects and workloads.

Everything here is a frozen, slotted dataclass with integer units (milli-GPU, MiB, millicores,
seconds). Drivers (what-if runner, simulator, service) build a `Snapshot`; the core reads it and
never mutates it. Parsing of user input ("0.5", "8G") happens at the edges, not here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final

MILLI_PER_GPU: Final = 1000
"""One whole device, in milli-GPU."""


class WorkloadType(enum.Enum):
    TRAIN = "train"
    INTERACTIVE = "interactive"
    INFERENCE = "inference"

    @property
    def default_priority(self) -> int:
        return _DEFAULT_PRIORITY[self]

    @property
    def default_preemptible(self) -> bool:
        return self is WorkloadType.TRAIN


_DEFAULT_PRIORITY = {
    WorkloadType.TRAIN: 50,
    WorkloadType.INTERACTIVE: 100,
    WorkloadType.INFERENCE: 125,
}


class PlacementStrategy(enum.StrEnum):
    """The two classic policies' names; `SchedulerSettings.placement` takes any registered
    placement policy's name (`gpupool.core.policies.policy_names()`)."""

    BINPACK = "binpack"
    SPREAD = "spread"


@dataclass(frozen=True, slots=True)
class Resources:
    """An amount of each schedulable resource. Used for quotas, demands and holdings."""

    gpu_milli: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class Limits:
    """A hard cap per resource; `None` means no cap."""

    gpu_milli: int | None = None
    cpu_milli: int | None = None
    memory_mib: int | None = None


NO_LIMITS: Final = Limits()


class TaintEffect(enum.Enum):
    """Kubernetes taint effects. NoSchedule and NoExecute keep new work that does not tolerate
    them off the node; PreferNoSchedule is a preference the core does not act on."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint (Kubernetes): only work that tolerates it is newly placed on the node."""

    key: str
    value: str | None
    effect: TaintEffect

    @property
    def repels(self) -> bool:
        """PreferNoSchedule is a preference, not a rule: it keeps no work away."""
        return self.effect is not TaintEffect.PREFER_NO_SCHEDULE


class TolerationOperator(enum.Enum):
    EXISTS = "Exists"
    EQUAL = "Equal"


@dataclass(frozen=True, slots=True)
class Toleration:
    """Kubernetes semantics: an empty key with Exists tolerates every taint; an effect of None
    matches every effect; Exists ignores the value; Equal compares it (None equals "")."""

    key: str | None = None
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str | None = None
    effect: TaintEffect | None = None

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' `Toleration.ToleratesTaint`, step for step: a set effect must match, a
        non-empty key must match, then Exists matches any value and Equal compares values. So
        an empty key matches every key with either operator (Kubernetes' API validation
        rejects an empty key with Equal; matching does not)."""
        if self.effect is not None and self.effect is not taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator is TolerationOperator.EXISTS:
            return True
        return (self.value or "") == (taint.value or "")


@dataclass(frozen=True, slots=True)
class Node:
    """A machine with `gpu_count` identical devices.

    `cpu_milli` / `memory_mib` of `None` mean "not tracked" (never the bottleneck). New work
    lands only where it tolerates every NoSchedule/NoExecute taint; work already placed stays.
    """

    name: str
    gpu_count: int
    gpu_memory_mib: int = 81920
    gpu_model: str | None = None
    cpu_milli: int | None = None
    memory_mib: int | None = None
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()

    def untolerated_taints(self, tolerations: tuple[Toleration, ...]) -> tuple[Taint, ...]:
        """The NoSchedule / NoExecute taints here that none of `tolerations` tolerates."""
        return tuple(
            taint
            for taint in self.taints
            if taint.repels and not any(t.tolerates(taint) for t in tolerations)
        )

    def admits(self, tolerations: tuple[Toleration, ...]) -> bool:
        """Whether new work with `tolerations` may be placed here."""
        return not self.untolerated_taints(tolerations)

    def label(self, key: str) -> str | None:
        if key == "gpu_model":
            return self.gpu_model
        for k, v in self.labels:
            if k == key:
                return v
        return None


@dataclass(frozen=True, slots=True)
class Project:
    """A node of the project tree. Departments are projects that other projects name as parent.

    Only leaves hold workloads. `over_quota_weight` 0 means no share of idle capacity in the fair
    share (the project may still use idle GPUs, G11).
    """

    name: str
    parent: str | None = None
    quota: Resources = Resources()
    over_quota_weight: int = 1
    limit: Limits = NO_LIMITS
    priority: int = 0
    min_runtime_s: int = 0


class GpuRequestKind(enum.Enum):
    WHOLE = "whole"
    """`amount` whole devices per task (amount >= 1)."""
    FRACTION = "fraction"
    """`amount` milli-GPU of one device per task (0 < amount < 1000)."""
    MEMORY = "memory"
    """`amount` MiB of one device's memory per task; charged as that fraction of the device."""


_WHOLE: Final = GpuRequestKind.WHOLE
_FRACTION: Final = GpuRequestKind.FRACTION
"""For the methods below, which placement calls per candidate device: reading a member from its
enum class costs ten times a global in Python 3.11."""


@dataclass(frozen=True, slots=True)
class GpuRequest:
    kind: GpuRequestKind
    amount: int
    limit_milli: int | None = None
    """Dynamic fraction: usable up to this while idle on its device (FRACTION only)."""

    @staticmethod
    def whole(count: int) -> GpuRequest:
        return GpuRequest(GpuRequestKind.WHOLE, count)

    @staticmethod
    def fraction(milli: int, limit_milli: int | None = None) -> GpuRequest:
        return GpuRequest(GpuRequestKind.FRACTION, milli, limit_milli)

    @staticmethod
    def memory(mib: int) -> GpuRequest:
        return GpuRequest(GpuRequestKind.MEMORY, mib)

    @property
    def is_shared(self) -> bool:
        """True when a task takes part of one device rather than whole devices."""
        return self.kind is not _WHOLE

    @property
    def is_burstable(self) -> bool:
        return (
            self.kind is _FRACTION
            and self.limit_milli is not None
            and self.limit_milli > self.amount
        )

    def milli_on(self, device_memory_mib: int) -> int:
        """GPU charged for one task on a device of this memory size, in milli-GPU."""
        if self.kind is _WHOLE:
            return self.amount * MILLI_PER_GPU
        if self.kind is _FRACTION:
            return self.amount
        return min(MILLI_PER_GPU, -(-self.amount * MILLI_PER_GPU // device_memory_mib))

    def memory_mib_on(self, device_memory_mib: int) -> int:
        """Device memory reserved for one task on one of its devices, in MiB."""
        if self.kind is _WHOLE:
            return device_memory_mib
        if self.kind is _FRACTION:
            return self.amount * device_memory_mib // MILLI_PER_GPU
        return self.amount


@dataclass(frozen=True, slots=True)
class TaskPlacement:
    """Where one task runs: a node and the devices it is charged to.

    `burst_device` is set by the node-level scheduler when a dynamic-fraction task was spread
    onto an otherwise idle device of the same node to burst; the cluster-level view still counts
    it on `devices` (packed).
    """

    task_index: int
    node: str
    devices: tuple[int, ...]
    burst_device: int | None = None

    def __init__(
        self, task_index: int, node: str, devices: tuple[int, ...], burst_device: int | None = None
    ) -> None:
        # Written out (`dataclass` keeps an `__init__` of the class's own): the compiled core
        # builds one per task it places, and compiles this one (5x faster than the generated
        # one, which stays interpreted there); as fast in pure Python.
        object.__setattr__(self, "task_index", task_index)
        object.__setattr__(self, "node", node)
        object.__setattr__(self, "devices", devices)
        object.__setattr__(self, "burst_device", burst_device)

    @property
    def physical_devices(self) -> tuple[int, ...]:
        if self.burst_device is not None:
            return (self.burst_device,)
        return self.devices


@dataclass(frozen=True, slots=True)
class Workload:
    """One workload: `tasks` equal replicas. Running when `placements` is non-empty.

    `submit_seq` orders submissions (earlier is earlier in line); `started_at_s` is when it last
    started running, for min runtime and victim order.
    """

    name: str
    project: str
    type: WorkloadType
    gpu: GpuRequest
    tasks: int = 1
    min_available: int | None = None
    priority: int | None = None
    preemptible: bool | None = None
    cpu_milli: int = 0
    memory_mib: int = 0
    node_selector: tuple[tuple[str, tuple[str, ...]], ...] = ()
    min_runtime_s: int | None = None
    submit_seq: int = 0
    started_at_s: int | None = None
    placements: tuple[TaskPlacement, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    movable: bool = True
    """False for work that cannot be restarted elsewhere by the scheduler (a Kubernetes pod
    that someone else created): consolidation and the node-level spread/pack never move it."""

    @property
    def effective_priority(self) -> int:
        return self.type.default_priority if self.priority is None else self.priority

    @property
    def is_preemptible(self) -> bool:
        return self.type.default_preemptible if self.preemptible is None else self.preemptible

    @property
    def gang_size(self) -> int:
        """Tasks that must run together (`min_available`, default all)."""
        return self.tasks if self.min_available is None else self.min_available

    @property
    def is_running(self) -> bool:
        return bool(self.placements)


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    """Policy knobs. The bounds keep the work of one cycle bounded whatever the queue length."""

    placement: str = PlacementStrategy.BINPACK
    """The placement policy's registered name (`gpupool.core.policies`): how candidate nodes and
    their devices are scored. Scenario files default to bin-pack (format v1); the server to
    `default`."""
    max_reclaim_attempts_per_cycle: int = 64
    max_victims_per_attempt: int = 64
    max_consolidation_attempts_per_cycle: int = 8
    max_moves_per_consolidation: int = 4
    placement_candidates: int = 16
    """How many candidate nodes the policy scores per task, of each kind (nodes with enough
    empty devices; for a fraction also nodes with an already shared device that fits)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one cycle needs. `now_s` is data, not a clock read: the core has no clock.

    `workloads` holds pending and running ones; workloads that are stopping (evicted, within
    their grace period) are left out by drivers: their devices may be bound again, and the
    executor starts the new task only once the old one is gone.
    """

    nodes: tuple[Node, ...]
    projects: tuple[Project, ...]
    workloads: tuple[Workload, ...]
    now_s: int = 0
    settings: SchedulerSettings = field(default_factory=SchedulerSettings)
