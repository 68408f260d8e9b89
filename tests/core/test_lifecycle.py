"""The lifecycle table, pinned: every allowed transition written out here by hand (a change to
the table must be made in both places, on purpose), a sample of refused ones, the error's words,
and the wire values the API and the database keep."""

from __future__ import annotations

import pytest

from gpupool.api import enums, schemas
from gpupool.core import lifecycle
from gpupool.core.lifecycle import (
    NEW,
    TASK,
    WORKLOAD,
    TaskEvent,
    TaskState,
    TransitionError,
    WorkloadEvent,
    WorkloadStatus,
)

P, R, C, S = "pending", "running", "completing", "suspended"
OK, X, DEL = "completed", "failed", "deleting"

ALLOWED_WORKLOAD = {
    (None, "submit", P),
    (None, "reject", X),
    (P, "bind", R),
    (R, "bind", R),
    (R, "preempt", P),
    (R, "requeue", P),
    (R, "task-succeeded", C),
    (C, "task-succeeded", C),
    (P, "succeed", OK),
    (R, "succeed", OK),
    (C, "succeed", OK),
    (S, "succeed", OK),
    (P, "fail", X),
    (R, "fail", X),
    (C, "fail", X),
    (S, "fail", X),
    (P, "suspend", S),
    (R, "suspend", S),
    (S, "resume", P),
    (P, "delete", DEL),
    (R, "delete", DEL),
    (C, "delete", DEL),
    (S, "delete", DEL),
    (OK, "delete", DEL),
    (X, "delete", DEL),
    (DEL, "remove", None),
    (P, "vanish", None),
    (R, "vanish", None),
    (C, "vanish", None),
    (S, "vanish", None),
    (OK, "purge", None),
    (X, "purge", None),
}

ALLOWED_TASK = {
    (None, "bind", "starting"),
    ("starting", "started", "running"),
    ("starting", "stop", "stopping"),
    ("running", "stop", "stopping"),
    ("starting", "end", "done"),
    ("running", "end", "done"),
    ("stopping", "end", "done"),
}


def _all(machine: lifecycle.Lifecycle[lifecycle.S, lifecycle.E]) -> set[tuple[str | None, ...]]:
    return {
        (source, event, target)
        for sources, event, target in machine.table
        for source in sources
    }  # fmt: skip


def test_the_workload_table_allows_exactly_these_transitions() -> None:
    assert _all(WORKLOAD) == ALLOWED_WORKLOAD
    for source, event, target in ALLOWED_WORKLOAD:
        assert WORKLOAD.step(source, WorkloadEvent(event)) == target
        assert WORKLOAD.allows(source, WorkloadEvent(event))


def test_the_task_table_allows_exactly_these_transitions() -> None:
    assert _all(TASK) == ALLOWED_TASK
    for source, event, target in ALLOWED_TASK:
        assert TASK.after(source, TaskEvent(event)) == target


def test_every_pair_not_listed_is_refused_and_says_what_is_allowed_there() -> None:
    refused = 0
    for source in (None, *WorkloadStatus):
        for event in WorkloadEvent:
            listed = any(s == source and e == event for s, e, _ in ALLOWED_WORKLOAD)
            if listed:
                continue
            refused += 1
            assert not WORKLOAD.allows(source, event)
            with pytest.raises(TransitionError) as caught:
                WORKLOAD.step(source, event)
            error = caught.value
            assert (error.kind, error.state, error.event) == ("workload", source, event)
            assert set(error.allowed) == {e for s, e, _ in ALLOWED_WORKLOAD if s == source}
    assert refused == 8 * 14 - len(ALLOWED_WORKLOAD)


@pytest.mark.parametrize(
    ("state", "event", "message"),
    [
        (
            "completed",
            WorkloadEvent.RESUME,
            "cannot resume a completed workload: the events allowed from completed are "
            "delete, purge",
        ),
        (
            "deleting",
            WorkloadEvent.DELETE,
            "cannot delete a deleting workload: the events allowed from deleting are remove",
        ),
        (
            "completing",
            WorkloadEvent.BIND,
            "cannot bind a completing workload: the events allowed from completing are "
            "task-succeeded, succeed, fail, delete, vanish",
        ),
        (
            "pending",
            WorkloadEvent.PREEMPT,
            "cannot preempt a pending workload: the events allowed from pending are "
            "bind, succeed, fail, suspend, delete, vanish",
        ),
        (None, WorkloadEvent.RESUME, "cannot resume no workload: the events allowed from no "
         "row are submit, reject"),
    ],
)  # fmt: skip
def test_a_refused_workload_event_names_the_event_the_state_and_the_choices(
    state: str | None, event: WorkloadEvent, message: str
) -> None:
    with pytest.raises(TransitionError, match="^" + message + "$"):
        WORKLOAD.after(state, event)


@pytest.mark.parametrize(
    ("state", "event"),
    [
        ("done", TaskEvent.STOP),
        ("done", TaskEvent.END),
        ("stopping", TaskEvent.STARTED),
        ("stopping", TaskEvent.STOP),
        ("running", TaskEvent.STARTED),
        (None, TaskEvent.STARTED),
        ("running", TaskEvent.BIND),
    ],
)
def test_refused_task_events(state: str | None, event: TaskEvent) -> None:
    assert not TASK.allows(state, event)
    with pytest.raises(TransitionError, match=f"^cannot {event} "):
        TASK.after(state, event)


def test_an_event_that_removes_the_row_has_no_state_after_it() -> None:
    assert WORKLOAD.step("deleting", WorkloadEvent.REMOVE) is None
    with pytest.raises(ValueError, match="remove removes the workload's row: use `step`"):
        WORKLOAD.after("deleting", WorkloadEvent.REMOVE)


def test_bulk_updates_get_their_where_and_their_new_state_from_the_table() -> None:
    assert TASK.sources(TaskEvent.STOP) == (TaskState.STARTING, TaskState.RUNNING)
    assert TASK.target(TaskEvent.STOP) is TaskState.STOPPING
    assert TASK.sources(TaskEvent.END) == (
        TaskState.STARTING,
        TaskState.RUNNING,
        TaskState.STOPPING,
    )
    assert WORKLOAD.sources(WorkloadEvent.SUSPEND) == (
        WorkloadStatus.PENDING,
        WorkloadStatus.RUNNING,
    )
    assert WORKLOAD.sources(WorkloadEvent.REMOVE) == (WorkloadStatus.DELETING,)
    with pytest.raises(ValueError, match="does not lead to one state"):
        WORKLOAD.target(WorkloadEvent.REMOVE)  # to no row


def test_a_table_with_a_pair_twice_is_refused_when_built() -> None:
    with pytest.raises(ValueError, match="twice"):
        lifecycle.Lifecycle(
            "task",
            TaskState,
            [
                ((NEW,), TaskEvent.BIND, TaskState.STARTING),
                ((NEW,), TaskEvent.BIND, TaskState.DONE),
            ],
        )


def test_the_wire_values_stay_what_the_api_and_the_database_hold() -> None:
    assert [s.value for s in WorkloadStatus] == [
        "pending", "running", "completing", "suspended", "completed", "failed", "deleting",
    ]  # fmt: skip
    assert [s.value for s in TaskState] == ["starting", "running", "stopping", "done"]


def test_the_api_enums_are_the_core_enums() -> None:
    assert enums.WorkloadStatus is WorkloadStatus
    assert schemas.WorkloadStatus is WorkloadStatus
    assert schemas.TaskState is TaskState
