"""The session's records: one per workload and one per project-tree node, mutable for one cycle
(the snapshot's `Workload` and `Project` stay frozen), and the placed task (`TaskAlloc`)."""

from __future__ import annotations

import enum
from typing import Final, NamedTuple

from gpupool.core.model import Project, Workload, WorkloadType

ShapeKey = tuple[object, ...]
"""What makes two pending workloads alike for placement: GPU kind and amount, gang size, CPU
and memory per task, node selector, tolerations (and the project, for a GPU-memory request:
`Session.shape_id`). A cycle interns each to a small integer id."""

UNTRACKED: Final = 1 << 62
"""Free CPU or memory of a node that does not declare it: never the bottleneck."""


class WorkState(enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    EVICTED = "evicted"


_PENDING: Final = WorkState.PENDING
"""By module name: in Python 3.11 reading `WorkState.PENDING` from the class costs ten times a
global."""


class TaskAlloc(NamedTuple):
    """One placed task inside the session: node index, devices and what it takes on each.

    A named tuple rather than a frozen dataclass: a cycle makes thousands (every running task,
    every tentative placement), and a tuple is built several times faster."""

    task_index: int
    node: int
    devices: tuple[int, ...]
    milli_per_device: int
    memory_mib_per_device: int
    burst_device: int | None = None


NEW_TUPLE: Final = tuple.__new__
"""`NEW_TUPLE(Cls, (field, ...))` builds a named tuple without the `__new__` that `NamedTuple`
writes in Python: 0.2 instead of 0.6 µs, and the compiled core then runs no interpreted code
for it. For the named tuples a cycle makes by the thousand."""


def task_alloc(
    task_index: int,
    node: int,
    devices: tuple[int, ...],
    milli_per_device: int,
    memory_mib_per_device: int,
    burst_device: int | None = None,
) -> TaskAlloc:
    """`TaskAlloc(...)`, built as `NEW_TUPLE` does."""
    return NEW_TUPLE(
        TaskAlloc,
        (task_index, node, devices, milli_per_device, memory_mib_per_device, burst_device),
    )


_TYPE_DEFAULTS: Final = {
    t._value_: (t.default_priority, t.default_preemptible) for t in WorkloadType
}
"""Per workload type's value: (priority, preemptible) when the workload does not set them. By
value, since hashing an enum member runs Python code and a string's hash is kept."""
_TRAIN: Final = WorkloadType.TRAIN
_TRAIN_DEFAULTS: Final = _TYPE_DEFAULTS[_TRAIN._value_]
"""The most common type, told apart by identity."""

NO_ALLOCS: Final[dict[int, TaskAlloc]] = {}
"""Shared by every record with nothing placed; `Session._add_alloc` gives a record its own dict
on the first placement. Most workloads in a long queue never get one in a cycle, and not
allocating 100,000 empty dicts keeps the cycle clear of full garbage collections."""


class WorkRecord:
    """Session-side state of one workload (mutable; the snapshot's `Workload` stays frozen)."""

    __slots__ = (
        "allocs",
        "gang",
        "index",
        "preemptible",
        "priority",
        "project",
        "shape",
        "spec",
        "started_this_cycle",
        "state",
        "submit_seq",
        "task_gpu_milli",
    )

    def __init__(self, index: int, spec: Workload, project: int, task_gpu_milli: int) -> None:
        self.index = index
        self.spec = spec
        self.project = project
        kind = spec.type
        defaults = _TRAIN_DEFAULTS if kind is _TRAIN else _TYPE_DEFAULTS[kind._value_]
        priority = spec.priority
        self.priority = defaults[0] if priority is None else priority
        preemptible = spec.preemptible
        self.preemptible = defaults[1] if preemptible is None else preemptible
        self.submit_seq = spec.submit_seq
        """The spec's, on the record: allocate sorts every queue by it."""
        self.task_gpu_milli = task_gpu_milli
        """Per-task GPU charge; a memory request is estimated on the largest device."""
        self.allocs: dict[int, TaskAlloc] = NO_ALLOCS
        self.state = _PENDING
        self.started_this_cycle = False
        tasks = spec.tasks
        at_least = spec.min_available
        self.gang = (
            (tasks if tasks > 0 else 0) if at_least is None else len(range(tasks)[:at_least])
        )
        """How many tasks must start together while nothing of it is placed (`gang_to_start`):
        on the record, so that the passes over the waiting work read the record alone, not its
        spec (at 100,000 workloads every object read is a cache miss)."""
        self.shape = -1
        """With nothing placed: the id of its shape (`Session.shape_id`; -1 until asked),
        read by allocate, reclaim and preempt for their failed-shape caches. An id rather than
        the key: a small integer to look up, and no tuple per workload kept for the cycle."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def missing_tasks(self) -> list[int]:
        allocs = self.allocs
        if not allocs:
            return list(range(self.spec.tasks))
        return [i for i in range(self.spec.tasks) if i not in allocs]


class ProjectRecord:
    """Session-side accounting of one project-tree node (leaf or department)."""

    __slots__ = (
        "ancestors",
        "children",
        "fair_share",
        "holding",
        "index",
        "nonpreemptible_holding",
        "spec",
    )

    def __init__(self, index: int, spec: Project) -> None:
        self.index = index
        self.spec = spec
        self.ancestors: tuple[int, ...] = ()
        """Path from the root down to and including this node."""
        self.children: list[int] = []
        self.holding = [0, 0, 0]
        """gpu milli, cpu milli, memory MiB held by running tasks."""
        self.nonpreemptible_holding = [0, 0, 0]
        self.fair_share = [0, 0, 0]

    @property
    def name(self) -> str:
        return self.spec.name


class Sums:
    """Running totals of one kind of task: how many, and their GPU, CPU and memory. Attributes
    rather than a list's items: the compiled core adds to them as machine integers (a list holds
    every total boxed, and each addition makes a new object)."""

    __slots__ = ("cpu_milli", "gpu_milli", "memory_mib", "tasks")

    def __init__(self) -> None:
        self.tasks = 0
        self.gpu_milli = 0
        self.cpu_milli = 0
        self.memory_mib = 0
