"""The loop survives any bad row: whatever got into the database (or whatever the executor or
the core does with one workload) fails that workload with the reason, and the others keep being
scheduled in the same iteration. Bad rows are written with plain SQL, past the API's checks."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select, text
from test_scheduler_loop import Harness

from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import CycleResult
from gpupool.core.model import Snapshot
from gpupool.executors.base import Launch
from gpupool.server import isolation, persist, scheduler
from gpupool.server.db import EventRow, WorkloadRow

BAD_ROWS = {
    "nul-in-command": ("command", json.dumps(["echo", "a\0b"]), "NUL byte"),
    "command-not-json": ("command", '["echo", ', "cannot be read"),
    "unknown-gpu-kind": ("gpu_kind", "quantum", "unknown gpu_kind 'quantum'"),
    "node-selector-not-json": ("node_selector", "{zone: a", "node_selector is not valid JSON"),
    "env-not-a-dict": ("env", json.dumps(["A=1"]), "env is not an object"),
    "negative-gpu-amount": ("gpu_amount", -2, "gpu_amount -2"),
    "tolerations-not-a-list": ("tolerations", json.dumps("x"), "tolerations is not a list"),
    "type-unknown": ("type", "batch", "unknown workload type 'batch'"),
}


def _corrupt(harness: Harness, name: str, column: str, value: object) -> None:
    with harness.writer.begin() as session:
        session.execute(
            text(f"UPDATE workloads SET {column} = :value WHERE name = :name"),
            {"value": value, "name": name},
        )


def _reason(harness: Harness, name: str) -> str:
    with harness.reader() as session:
        reason = session.execute(
            select(WorkloadRow.pending_reason).where(WorkloadRow.name == name)
        ).scalar_one()
        messages = session.scalars(
            select(EventRow.message).where(EventRow.workload == name, EventRow.kind == "failed")
        ).all()
    assert reason is not None
    assert len(messages) == 1, messages
    assert messages[0].endswith(reason.removeprefix("failed: "))
    return reason


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    h = Harness(tmp_path, nodes="1x8")
    h.project("a", 8)
    return h


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_a_bad_row_fails_its_workload_and_the_others_run(harness: Harness, case: str) -> None:
    column, value, expected = BAD_ROWS[case]
    harness.submit("a", "before", gpu=1, command=["true"])
    harness.submit("a", "bad", gpu=1, command=["true"])
    harness.submit("a", "after", gpu=1, command=["true"])
    _corrupt(harness, "bad", column, value)
    harness.loop.run_once()
    harness.loop.run_once()  # a bad launch is found at dispatch, after the bind
    assert harness.status("before") == "running"
    assert harness.status("after") == "running"
    assert harness.status("bad") == "failed"
    assert expected in _reason(harness, "bad")
    assert all(state == "done" for state, _ in harness.tasks("bad"))

    harness.submit("a", "later", gpu=1)  # and the loop goes on scheduling
    harness.loop.run_once()
    harness.loop.run_once()
    assert harness.status("later") == "running"
    assert harness.status("bad") == "failed"
    _reason(harness, "bad")  # failed once, not once per iteration


def test_many_bad_rows_at_once(harness: Harness) -> None:
    for case in BAD_ROWS:
        harness.submit("a", case, gpu=1)
        column, value, _ = BAD_ROWS[case]
        _corrupt(harness, case, column, value)
    harness.submit("a", "good", gpu=1)
    for _ in range(3):
        harness.loop.run_once()
    assert harness.status("good") == "running"
    for case, (_, _, expected) in BAD_ROWS.items():
        assert harness.status(case) == "failed", case
        assert expected in _reason(harness, case), case


def test_a_launch_the_executor_keeps_refusing_fails_with_its_error(harness: Harness) -> None:
    executor = harness.loop._executor
    original = executor.start

    def start(launches: list[Launch]) -> None:
        if any(launch.workload == "refused" for launch in launches):
            raise RuntimeError("image pull failed: no such image")
        original(launches)

    executor.start = start  # type: ignore[method-assign]
    harness.submit("a", "good", gpu=1)
    harness.submit("a", "refused", gpu=1)
    step_s = isolation.START_GIVE_UP_S / (isolation.START_ATTEMPTS - 1)
    for _ in range(isolation.START_ATTEMPTS - 1):
        harness.loop.run_once()
        assert harness.status("refused") == "running"  # tried again: it may be passing
        assert [state for state, _ in harness.tasks("refused")] == ["starting"]
        harness.clock.advance(step_s)
    assert harness.status("good") == "running"
    assert [state for state, _ in harness.tasks("good")] == ["running"]
    harness.loop.run_once()
    assert harness.status("refused") == "failed"
    reason = _reason(harness, "refused")
    assert "cannot start task 0 (3 tries over 30 s): RuntimeError: image pull failed" in reason
    harness.loop.run_once()
    assert [state for state, _ in harness.tasks("refused")] == ["done"]


def test_a_workload_the_core_fails_on_is_taken_out(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fragile(snapshot: Snapshot) -> CycleResult:
        if any(w.name == "a/poison" for w in snapshot.workloads):
            raise ZeroDivisionError("division by zero")
        return run_cycle(snapshot)

    monkeypatch.setattr(scheduler, "run_cycle", fragile)
    for name in ("one", "two", "poison", "three"):
        harness.submit("a", name, gpu=1)
    harness.loop.run_once()
    assert [harness.status(n) for n in ("one", "two", "three")] == ["running"] * 3
    assert harness.status("poison") == "failed"
    assert "the scheduler's core fails on it: ZeroDivisionError" in _reason(harness, "poison")


def test_a_decision_that_cannot_be_written_fails_its_workload_only(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = persist._event_row

    def event_row(now: float, kind: str, key: object, message: str, node: object = None) -> object:
        if getattr(key, "name", None) == "unwritable":
            raise ValueError("cannot encode this event")
        return original(now, kind, key, message, node)  # type: ignore[arg-type]

    monkeypatch.setattr(persist, "_event_row", event_row)
    for name in ("one", "unwritable", "two"):
        harness.submit("a", name, gpu=1)
    harness.loop.run_once()
    assert harness.status("one") == "running"
    assert harness.status("two") == "running"
    assert harness.status("unwritable") == "failed"
    assert "cannot be written: ValueError: cannot encode" in _reason(harness, "unwritable")
    assert harness.tasks("unwritable") == []


def test_a_launch_waits_while_the_executor_cannot_be_reached(harness: Harness) -> None:
    """A connection error says the executor's backend is away, not that the launch is bad:
    however long it lasts, the workload waits and starts once the backend is back."""
    executor = harness.loop._executor
    original = executor.start
    down = True

    def start(launches: list[Launch]) -> None:
        if down:
            raise httpx.ConnectError("connection refused")
        original(launches)

    executor.start = start  # type: ignore[method-assign]
    harness.submit("a", "job", gpu=1)
    for _ in range(2 * isolation.START_ATTEMPTS):
        harness.loop.run_once()
        harness.clock.advance(isolation.START_GIVE_UP_S)
    assert [state for state, _ in harness.tasks("job")] == ["starting"]
    down = False
    harness.loop.run_once()
    assert harness.status("job") == "running"
    assert [state for state, _ in harness.tasks("job")] == ["running"]


def test_bad_rows_on_postgresql(tmp_path: Path, postgres_url: str) -> None:
    """The same on PostgreSQL, which refuses JSON that does not parse at the door."""
    harness = Harness(tmp_path, nodes="1x8", url=postgres_url)
    try:
        harness.project("a", 8)
        cases = {
            name: BAD_ROWS[name]
            for name in BAD_ROWS
            if name not in ("command-not-json", "node-selector-not-json")
        }
        for case, (column, value, _) in cases.items():
            harness.submit("a", case, gpu=1)
            if column in ("command", "env", "tolerations"):
                with harness.writer.begin() as session:
                    session.execute(
                        text(f"UPDATE workloads SET {column} = CAST(:value AS json) "
                             "WHERE name = :name"),
                        {"value": value, "name": case},
                    )  # fmt: skip
            else:
                _corrupt(harness, case, column, value)
        harness.submit("a", "good", gpu=1)  # then its selector, as if the nodes had changed
        with harness.writer.begin() as session:  # (submit refuses a selector no node matches)
            session.execute(
                text(
                    "UPDATE workloads SET node_selector = CAST(:value AS json) WHERE name = 'good'"
                ),
                {"value": '{"zone": ["a", "b"]}'},
            )
        for _ in range(3):
            harness.loop.run_once()
        assert harness.status("good") == "pending"  # no node has the label: read, not broken
        harness.submit("a", "plain", gpu=1)
        harness.loop.run_once()
        harness.loop.run_once()
        assert harness.status("plain") == "running"
        for case, (_, _, expected) in cases.items():
            assert harness.status(case) == "failed", case
            assert expected in _reason(harness, case), case
    finally:
        harness.engine.dispose()
