"""The scheduling loop in-process, on fake time: no thread, no sleeps, each `run_once` a step.

Covers what the HTTP tests cannot pin down precisely: starts wait for stopping tasks to free
their devices, exits are acknowledged only once written, and a loop restarted on the same
database and executor journal adopts what runs and starts nothing twice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from gpupool.api.schemas import ProjectIn, Role, WorkloadIn
from gpupool.clock import FakeClock
from gpupool.core.model import SchedulerSettings
from gpupool.executors.base import Stop
from gpupool.executors.simulated import SimulatedExecutor, parse_simulated_nodes
from gpupool.server import migrate
from gpupool.server.auth import Principal
from gpupool.server.db import TaskRow, WorkloadRow, make_engine, make_sessionmakers
from gpupool.server.metrics import ServerMetrics
from gpupool.server.scheduler import SchedulingLoop
from gpupool.server.services import projects, workloads

ADMIN = Principal(1, "admin", Role.ADMIN, frozenset())


class Harness:
    def __init__(self, tmp: Path, nodes: str = "1x4") -> None:
        self.tmp = tmp
        self.clock = FakeClock()
        self.engine = make_engine(f"sqlite:///{tmp / 'db.sqlite'}")
        migrate.upgrade(self.engine)
        self.writer, self.reader = make_sessionmakers(self.engine)
        self.nodes = nodes
        self.loop = self.new_loop()

    def new_loop(self) -> SchedulingLoop:
        executor = SimulatedExecutor(
            parse_simulated_nodes(self.nodes), self.clock, self.tmp / "journal.jsonl"
        )
        loop = SchedulingLoop(
            self.writer, executor, self.clock, SchedulerSettings(), ServerMetrics()
        )
        loop.register_nodes(executor.inventory())
        loop.recover()
        return loop

    def project(self, name: str, quota_gpu: int) -> None:
        with self.writer.begin() as session:
            body = ProjectIn(name=name, quota={"gpu": quota_gpu})  # type: ignore[arg-type]
            projects.create(session, body, self.clock.now_s(), {})

    def submit(self, project: str, name: str, **fields: object) -> None:
        with self.writer.begin() as session:
            body = WorkloadIn.model_validate({"name": name, "project": project, **fields})
            workloads.submit(session, body, ADMIN, self.clock.now_s())

    def status(self, name: str) -> str:
        with self.reader() as session:
            return session.execute(
                select(WorkloadRow.status).where(WorkloadRow.name == name)
            ).scalar_one()

    def tasks(self, name: str) -> list[tuple[str, list[int]]]:
        with self.reader() as session:
            rows = session.execute(
                select(TaskRow.state, TaskRow.devices)
                .join(WorkloadRow, WorkloadRow.id == TaskRow.workload_id)
                .where(WorkloadRow.name == name)
                .order_by(TaskRow.id)
            ).all()
            return [(state, devices) for state, devices in rows]

    def journal_starts(self) -> list[str]:
        lines = (self.tmp / "journal.jsonl").read_text().splitlines()
        return [json.loads(line)["launch"]["launch_id"] for line in lines if '"start"' in line]


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def test_runs_for_its_duration_then_completes(harness: Harness) -> None:
    harness.project("a", 4)
    harness.submit("a", "job", gpu=2, duration_s=60)
    harness.loop.run_once()
    assert harness.status("job") == "running"
    assert [state for state, _ in harness.tasks("job")] == ["running"]
    harness.clock.advance(59)
    harness.loop.run_once()
    assert harness.status("job") == "running"
    harness.clock.advance(1)
    harness.loop.run_once()
    assert harness.status("job") == "completed"
    assert harness.loop.last_cycle is not None


def test_a_start_waits_until_the_stopping_task_has_freed_its_devices(harness: Harness) -> None:
    """Reclaim: b's task is bound where a's preempted task still stops; it starts after."""
    harness.project("a", 0)
    harness.project("b", 4)
    harness.submit("a", "borrower", gpu=4)
    harness.loop.run_once()
    assert harness.status("borrower") == "running"

    executor = harness.loop._executor
    original_stop = executor.stop
    held: list[Stop] = []
    executor.stop = held.extend  # type: ignore[method-assign]  # a process slow to stop
    harness.submit("b", "owner", gpu=4)
    harness.loop.run_once()
    assert harness.status("borrower") == "pending"
    assert [state for state, _ in harness.tasks("borrower")] == ["stopping"]
    assert [state for state, _ in harness.tasks("owner")] == ["starting"]
    harness.loop.run_once()
    assert [state for state, _ in harness.tasks("owner")] == ["starting"]

    executor.stop = original_stop  # type: ignore[method-assign]
    original_stop(held)
    harness.loop.run_once()
    assert [state for state, _ in harness.tasks("borrower")] == ["done"]
    assert [state for state, _ in harness.tasks("owner")] == ["running"]


def test_restart_adopts_running_tasks_and_starts_nothing_twice(harness: Harness) -> None:
    harness.project("a", 4)
    harness.submit("a", "long", gpu=1, duration_s=100)
    harness.submit("a", "short", gpu=1, duration_s=10)
    harness.loop.run_once()
    assert len(harness.journal_starts()) == 2
    harness.loop._executor.close()

    harness.clock.advance(20)  # "short" ended while the server was down
    harness.loop = harness.new_loop()
    harness.loop.run_once()
    assert harness.status("short") == "completed"
    assert harness.status("long") == "running"
    starts = harness.journal_starts()
    assert len(starts) == len(set(starts)) == 2
    harness.clock.advance(80)
    harness.loop.run_once()
    assert harness.status("long") == "completed"


def test_a_bound_task_not_yet_started_is_started_once_after_a_crash(harness: Harness) -> None:
    harness.project("a", 4)
    harness.submit("a", "job", gpu=1)
    harness.loop.cycle()  # decided and written, then the server died before dispatch
    assert [state for state, _ in harness.tasks("job")] == ["starting"]
    harness.loop._executor.close()
    harness.loop = harness.new_loop()
    harness.loop.run_once()
    harness.loop.run_once()
    assert [state for state, _ in harness.tasks("job")] == ["running"]
    assert len(harness.journal_starts()) == 1


def test_tasks_lost_with_the_executor_are_requeued(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    harness.project("a", 4)
    harness.submit("a", "job", gpu=1)
    harness.loop.run_once()
    (tmp_path / "journal.jsonl").unlink()  # the machine was wiped
    harness.loop = harness.new_loop()
    assert harness.status("job") == "pending"
    harness.loop.run_once()
    assert [state for state, _ in harness.tasks("job")] == ["done", "running"]


def test_decisions_on_a_workload_changed_meanwhile_are_dropped(harness: Harness) -> None:
    """A user suspends a workload after the snapshot was read: its bind is not applied."""
    harness.project("a", 4)
    harness.submit("a", "job", gpu=1)
    original = harness.loop._persist

    def suspend_then_persist(*args: object) -> dict[str, int]:
        with harness.writer.begin() as session:
            row = workloads.get_row(session, "a", "job", ADMIN)
            workloads.suspend(session, row, ADMIN, harness.clock.now_s())
        return original(*args)  # type: ignore[arg-type]

    harness.loop._persist = suspend_then_persist  # type: ignore[method-assign]
    harness.loop.cycle()
    assert harness.status("job") == "suspended"
    assert harness.tasks("job") == []
