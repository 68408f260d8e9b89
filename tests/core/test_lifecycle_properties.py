"""Random event sequences through the lifecycle tables.

For each step: an allowed event gives the table's state, and that state is one a breadth-first
walk of the table reaches from no row; a refused event raises `TransitionError` naming the
state, the event and exactly the events allowed there, and the state stays what it was (the
driver below keeps it only from answers). Terminal states stay terminal: a finished workload
(completed, failed) only ever goes on to being deleted or removed, a workload being deleted only
to removal, a removed one nowhere (the sequence ends), and a done task nowhere.

Set CI=1 to derandomize (the same examples on every run).
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.core.lifecycle import (
    FINISHED,
    TASK,
    WORKLOAD,
    Lifecycle,
    TaskEvent,
    TaskState,
    TransitionError,
    WorkloadEvent,
    WorkloadStatus,
)

settings.register_profile("lifecycle", max_examples=400, derandomize=bool(os.environ.get("CI")))


def _reachable(machine: Lifecycle[Any, Any]) -> set[str | None]:
    """Every state a walk of the table reaches from no row (None: no row, before or after)."""
    seen: set[str | None] = {None}
    queue: deque[str | None] = deque([None])
    while queue:
        state = queue.popleft()
        for sources, _, target in machine.table:
            if state in sources and target not in seen:
                seen.add(target)
                queue.append(target)
    return seen


WORKLOAD_REACHABLE = _reachable(WORKLOAD)
TASK_REACHABLE = _reachable(TASK)


def test_every_state_is_reachable_from_no_row() -> None:
    assert {None, *WorkloadStatus} == WORKLOAD_REACHABLE
    assert {None, *TaskState} == TASK_REACHABLE


@settings(settings.get_profile("lifecycle"))
@given(st.lists(st.sampled_from(list(WorkloadEvent)), max_size=40))
def test_random_workload_events(events: list[WorkloadEvent]) -> None:
    state: WorkloadStatus | None = None
    born = False
    history: list[WorkloadStatus] = []
    for event in events:
        before = state
        if WORKLOAD.allows(state, event):
            state = WORKLOAD.step(state, event)
            assert state in WORKLOAD_REACHABLE
            assert before in WORKLOAD.sources(event) or before is None
        else:
            try:
                WORKLOAD.step(state, event)
            except TransitionError as error:
                assert (error.state, error.event) == (before, event)
                assert set(error.allowed) == {
                    e for e in WorkloadEvent if WORKLOAD.allows(before, e)
                }
                assert event not in error.allowed
            else:
                raise AssertionError(f"{event} from {before} was not refused")
            assert state == before  # refused: nothing changed
            continue
        if before is not None and state is None:
            break  # the row is gone: a later submit would be another workload
        born = True
        assert state is not None
        history.append(state)
    if not born:
        return
    # Terminal states stay terminal.
    for i, status in enumerate(history):
        later = set(history[i:])
        if status in FINISHED:
            assert later <= {status, WorkloadStatus.DELETING}, history
        if status is WorkloadStatus.DELETING:
            assert later == {WorkloadStatus.DELETING}, history


@settings(settings.get_profile("lifecycle"))
@given(st.lists(st.sampled_from(list(TaskEvent)), max_size=20))
def test_random_task_events(events: list[TaskEvent]) -> None:
    state: TaskState | None = None
    for event in events:
        before = state
        try:
            state = TASK.after(state, event)
        except TransitionError as error:
            assert not TASK.allows(before, event)
            assert (error.state, error.event) == (before, event)
            assert set(error.allowed) == {e for e in TaskEvent if TASK.allows(before, e)}
            assert state == before
            continue
        assert state in TASK_REACHABLE
        if before is TaskState.DONE:
            raise AssertionError(f"{event} left done")
        if state is TaskState.DONE:
            assert all(not TASK.allows(state, e) for e in TaskEvent)


@settings(settings.get_profile("lifecycle"))
@given(st.sampled_from([None, *WorkloadStatus]), st.sampled_from(list(WorkloadEvent)))
def test_sources_and_allows_agree(state: WorkloadStatus | None, event: WorkloadEvent) -> None:
    if state is not None:
        assert (state in WORKLOAD.sources(event)) == WORKLOAD.allows(state, event)
    # A plain string (as a database row holds it) finds the same entry as the member.
    assert WORKLOAD.allows(None if state is None else str(state.value), event) == WORKLOAD.allows(
        state, event
    )
