"""Workload and task states, the events that move them, and the allowed transitions: one table
each, the only place that says which state changes are allowed.

Every driver changes a state through `WORKLOAD` or `TASK`: `after(state, event)` answers the new
state or raises `TransitionError` (what was attempted, from which state, which events are
allowed there) and changes nothing; `sources(event)` and `target(event)` give a bulk SQL update
its `WHERE state IN (...)` and its new state, so a set-based update obeys the same table.
`None` in a table stands for no row: before `submit` (`NEW`) and after `remove` (`GONE`).

The wire values of `WorkloadStatus` and `TaskState` are what the API answers and the database
stores: never change one (`gpupool.api` re-exports these very enums).

How the simulated cluster's states map (what-if's `State`, the simulator's states): the
simulated cluster changes a workload's status only through `WORKLOAD` (and its tasks' end of a
grace period through `TASK`), and derives the printed state from it
(`gpupool.simcluster.records.printed_state`):

- pending, running, suspended, failed: the same names here.
- succeeded: `COMPLETED` (a timeline `complete` event and a workload whose run time is up are
  `SUCCEED`); the simulator never has `COMPLETING`: its tasks of one workload end together.
- stopping (evicted, within its grace period): the workload is already at the eviction's end
  (`PREEMPT` -> `PENDING`, or `FAIL` for a workload that is not preemptible) while its tasks
  are `STOPPING`; the tasks' `END` after the grace period frees the devices.
- deleted: `DELETE` then `REMOVE` once its tasks are done (`GONE`): a deleted workload has no
  state left.
- A simulator's restarts and generations are not states: a restart is `PREEMPT` then `BIND`.

Plain enums and dicts, nothing else imported: `gpupool --help` loads this module (via
`gpupool.api.enums`) without pydantic.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Final, Generic, TypeVar

__all__ = [
    "FINISHED",
    "GONE",
    "NEW",
    "TASK",
    "TASK_TABLE",
    "WORKLOAD",
    "WORKLOAD_TABLE",
    "Lifecycle",
    "TaskEvent",
    "TaskState",
    "TransitionError",
    "WorkloadEvent",
    "WorkloadStatus",
]


class WorkloadStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETING = "completing"
    """A task ended successfully; the others are finishing. Never restarted."""
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    DELETING = "deleting"


class TaskState(enum.StrEnum):
    STARTING = "starting"
    """Bound by the scheduler; the executor has not confirmed it runs yet."""
    RUNNING = "running"
    STOPPING = "stopping"
    """Asked to stop (preempted, moved, suspended, deleted); its devices stay busy until gone."""
    DONE = "done"


class WorkloadEvent(enum.StrEnum):
    SUBMIT = "submit"
    """A user submits it, or pods of a Kubernetes user appear."""
    REJECT = "reject"
    """Pods appear that can never run as one workload: the row is born failed."""
    BIND = "bind"
    """The scheduler places tasks (all of them, or more of a running one)."""
    PREEMPT = "preempt"
    """Evicted whole, preemptible: back to the queue (its tasks stop)."""
    REQUEUE = "requeue"
    """Its tasks all ended without an exit of their own (lost, stopped): to the queue again."""
    TASK_SUCCEEDED = "task-succeeded"
    """A task exited with code 0 while others still run."""
    SUCCEED = "succeed"
    """Every task is done after exiting with code 0 (the work is done)."""
    FAIL = "fail"
    """A task failed, it was evicted but is not preemptible, or it cannot be scheduled at all."""
    SUSPEND = "suspend"
    RESUME = "resume"
    DELETE = "delete"
    """A user deletes it, or its pod was evicted (the pod's owner makes a new one)."""
    REMOVE = "remove"
    """Being deleted and no task is live: the row goes."""
    VANISH = "vanish"
    """Its Kubernetes pods are gone before it finished: the row goes."""
    PURGE = "purge"
    """Its project is deleted: only a finished workload may go with it."""


class TaskEvent(enum.StrEnum):
    BIND = "bind"
    """The scheduler places it: a new task row with a new launch id."""
    STARTED = "started"
    """The executor started it."""
    STOP = "stop"
    """Evicted, moved, suspended, deleted, or another task of its workload failed."""
    END = "end"
    """It exited, was lost with the executor, or was stopped before it ever started."""


NEW: Final = None
"""The from-state of the event that creates a row."""
GONE: Final = None
"""The state after the event that removes a row."""

_P, _R, _C = WorkloadStatus.PENDING, WorkloadStatus.RUNNING, WorkloadStatus.COMPLETING
_S, _OK, _X = WorkloadStatus.SUSPENDED, WorkloadStatus.COMPLETED, WorkloadStatus.FAILED
_DEL = WorkloadStatus.DELETING
_W = WorkloadEvent

WORKLOAD_TABLE: Final = (
    # from states                     event               to
    ((NEW,),                          _W.SUBMIT,          _P),
    ((NEW,),                          _W.REJECT,          _X),
    ((_P, _R),                        _W.BIND,            _R),
    ((_R,),                           _W.PREEMPT,         _P),
    ((_R,),                           _W.REQUEUE,         _P),
    ((_R, _C),                        _W.TASK_SUCCEEDED,  _C),
    ((_P, _R, _C, _S),                _W.SUCCEED,         _OK),
    ((_P, _R, _C, _S),                _W.FAIL,            _X),
    ((_P, _R),                        _W.SUSPEND,         _S),
    ((_S,),                           _W.RESUME,          _P),
    ((_P, _R, _C, _S, _OK, _X),       _W.DELETE,          _DEL),
    ((_DEL,),                         _W.REMOVE,          GONE),
    ((_P, _R, _C, _S),                _W.VANISH,          GONE),
    ((_OK, _X),                       _W.PURGE,           GONE),
)  # fmt: skip
"""(from states, event, to): every allowed workload transition; anything else is refused."""

_T = TaskEvent
_START, _RUN = TaskState.STARTING, TaskState.RUNNING
_STOP, _DONE = TaskState.STOPPING, TaskState.DONE

TASK_TABLE: Final = (
    # from states                     event               to
    ((NEW,),                          _T.BIND,            _START),
    ((_START,),                       _T.STARTED,         _RUN),
    ((_START, _RUN),                  _T.STOP,            _STOP),
    ((_START, _RUN, _STOP),           _T.END,             _DONE),
)  # fmt: skip
"""(from states, event, to): every allowed task transition; anything else is refused. A task
row goes with its workload's row."""

S = TypeVar("S", WorkloadStatus, TaskState)
E = TypeVar("E", WorkloadEvent, TaskEvent)


class TransitionError(ValueError):
    """An event the table does not allow from a state; nothing was changed."""

    def __init__(self, kind: str, state: str | None, event: str, allowed: tuple[str, ...]) -> None:
        self.kind = kind
        self.state = state
        self.event = event
        self.allowed = allowed
        where = "no" if state is None else f"a {state}"
        options = ", ".join(allowed) if allowed else "none"
        super().__init__(
            f"cannot {event} {where} {kind}: the events allowed from "
            f"{'no row' if state is None else state} are {options}"
        )


class Lifecycle(Generic[S, E]):
    """One table's lookups: the new state after an event, and which states allow an event."""

    __slots__ = ("_by_event", "_events_from", "_next", "_targets", "kind", "states", "table")

    def __init__(
        self,
        kind: str,
        states: type[S],
        table: Iterable[tuple[tuple[S | None, ...], E, S | None]],
    ) -> None:
        self.kind = kind
        self.states: type[S] = states
        self.table: tuple[tuple[tuple[S | None, ...], E, S | None], ...] = tuple(table)
        # Keyed by plain strings: a StrEnum member hashes and compares as its value, so a
        # database row's string finds the same entry.
        self._next: dict[tuple[str | None, str], S | None] = {}
        self._by_event: dict[str, list[S | None]] = {}
        self._events_from: dict[str | None, list[E]] = {}
        self._targets: dict[str, set[S | None]] = {}
        for sources, event, target in self.table:
            for source in sources:
                if (source, event) in self._next:
                    raise ValueError(f"{kind} table: {event} from {source} twice")
                self._next[(source, event)] = target
                self._by_event.setdefault(event, []).append(source)
                self._events_from.setdefault(source, []).append(event)
            self._targets.setdefault(event, set()).add(target)

    def step(self, state: S | str | None, event: E) -> S | None:
        """The state after `event` from `state` (`None`: no row); `TransitionError` if the
        table does not allow it. A plain string from a database row works as its member."""
        try:
            return self._next[(state, event)]
        except KeyError:
            raise self._refused(state, event) from None

    def after(self, state: S | str | None, event: E) -> S:
        """As `step`, for an event that leaves a row (every event but those to `GONE`)."""
        target = self._next.get((state, event))  # one lookup: the scheduling loop's hot path
        if target is None:
            if (state, event) in self._next:
                raise ValueError(f"{event} removes the {self.kind}'s row: use `step`")
            raise self._refused(state, event)
        return target

    def allows(self, state: S | str | None, event: E) -> bool:
        return (state, event) in self._next

    def sources(self, event: E) -> tuple[S, ...]:
        """The existing states `event` is allowed from, in the enum's order."""
        allowed = self._by_event.get(event, ())
        return tuple(s for s in self.states if s in allowed)

    def target(self, event: E) -> S:
        """The one state `event` leads to from any state (for a bulk update)."""
        targets = self._targets.get(event, set())
        if len(targets) != 1 or None in targets:
            raise ValueError(f"{self.kind} event {event} does not lead to one state: {targets}")
        return next(t for t in targets if t is not None)

    def events_from(self, state: S | str | None) -> tuple[str, ...]:
        return tuple(str(e) for e in self._events_from.get(state, ()))

    def _refused(self, state: S | str | None, event: E) -> TransitionError:
        shown = None if state is None else str(state)
        return TransitionError(self.kind, shown, str(event), self.events_from(state))


WORKLOAD: Final = Lifecycle("workload", WorkloadStatus, WORKLOAD_TABLE)
TASK: Final = Lifecycle("task", TaskState, TASK_TABLE)

FINISHED: Final = (WorkloadStatus.COMPLETED, WorkloadStatus.FAILED)
"""Over for good: no event but `DELETE` and `PURGE` leaves them (the property test checks it)."""
