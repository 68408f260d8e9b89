"""The scheduling loop in-process, on fake time: no thread, no sleeps, each `run_once` a step.

Covers what the HTTP tests cannot pin down precisely: starts wait for stopping tasks to free
their devices, exits are acknowledged only once written, and a loop restarted on the same
database and executor journal adopts what runs and starts nothing twice.
"""

from __future__ import annotations

import bisect
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
from gpupool.server.db import EventRow, TaskRow, WorkloadRow, make_engine, make_sessionmakers
from gpupool.server.metrics import ServerMetrics
from gpupool.server.scheduler import SchedulingLoop
from gpupool.server.services import projects, workloads
from gpupool.server.snapshot import build_snapshot

ADMIN = Principal(1, "admin", Role.ADMIN, frozenset())


class Harness:
    def __init__(self, tmp: Path, nodes: str = "1x4", url: str | None = None) -> None:
        self.tmp = tmp
        self.clock = FakeClock()
        self.engine = make_engine(url or f"sqlite:///{tmp / 'db.sqlite'}")
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
            projects.create(session, body, self.clock.now_s(), {}, "admin")

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

    def events(self) -> list[tuple[float, str, str | None]]:
        """The event log: (at, kind, workload)."""
        with self.reader() as session:
            rows = session.execute(
                select(EventRow.at, EventRow.kind, EventRow.workload).order_by(EventRow.id)
            ).all()
            return [(at, kind, workload) for at, kind, workload in rows]

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


# -- dynamic fractions on the live loop -------------------------------------------------------

DEMAND_CHANGES = ("submitted", "completed", "deleted", "failed", "requeued")
"""Event kinds that change what the cluster is asked for."""

MIX: list[tuple[float, str, dict[str, object] | None]] = [
    # (at, name, submitted fields; None = delete it then)
    (0, "nb-1", {"type": "interactive", "gpu": 0.5, "gpu_limit": 1.0}),
    (0, "nb-2", {"type": "interactive", "gpu": 0.5, "gpu_limit": 1.0}),
    (0, "nb-3", {"type": "interactive", "gpu": 0.25, "gpu_limit": 1.0}),
    (300, "tune-1", {"type": "train", "gpu": 0.25, "gpu_limit": 0.75}),
    (600, "train-a", {"type": "train", "gpu": 2, "duration_s": 1800}),
    (1200, "train-b", {"type": "train", "gpu": 4, "duration_s": 1200}),
    (2400, "nb-4", {"type": "interactive", "gpu": 0.5, "gpu_limit": 1.0}),
    (3000, "nb-2", None),
    (3600, "train-c", {"type": "train", "gpu": 3, "duration_s": 1500}),
    (4500, "train-d", {"type": "train", "gpu": 1, "duration_s": 900}),
    (5400, "nb-5", {"type": "interactive", "gpu": 0.25, "gpu_limit": 0.5}),
]


@pytest.mark.slow
def test_dynamic_fractions_move_at_most_once_per_change_of_demand(tmp_path: Path) -> None:
    """Two simulated hours of notebooks and fine-tuning jobs with dynamic fractions beside
    whole-GPU training that comes and goes, on the loop the server runs (database, simulated
    executor), one iteration every 10 simulated seconds. Between two changes of demand each
    workload is moved at most once (a spread task used to be read back from its row as charged
    to its burst device, and was moved between idle devices on every cycle, forever)."""
    harness = Harness(tmp_path, nodes="2x4")
    harness.project("lab", 8)
    timeline = sorted(MIX, key=lambda item: item[0])
    start = harness.clock.now_s()
    for step in range(2 * 3600 // 10 + 1):
        elapsed = step * 10
        while timeline and timeline[0][0] <= elapsed:
            _at, name, fields = timeline.pop(0)
            if fields is None:
                with harness.writer.begin() as session:
                    row = workloads.get_row(session, "lab", name, ADMIN)
                    workloads.delete(session, row, ADMIN, harness.clock.now_s())
            else:
                harness.submit("lab", name, **fields)
        harness.loop.run_once()
        if elapsed < 2 * 3600:
            harness.clock.advance(10)
    events = harness.events()
    for _ in range(5):  # nothing changes any more: nothing moves any more
        harness.loop.run_once()
    assert harness.events() == events

    moves = [(at - start, workload) for at, kind, workload in events if kind == "moved"]
    changes = sorted({at - start for at, kind, _ in events if kind in DEMAND_CHANGES})
    assert moves, "the mix should make the node level spread and pack"
    per_interval: dict[tuple[int, str | None], int] = {}
    for at, workload in moves:
        interval = bisect.bisect_right(changes, at) - 1
        per_interval[(interval, workload)] = per_interval.get((interval, workload), 0) + 1
    twice = {
        f"{workload} after the change at t={changes[interval]:.0f}": count
        for (interval, workload), count in per_interval.items()
        if count > 1
    }
    assert not twice, f"moved more than once per change of demand: {twice}; moves {moves}"
    assert harness.status("nb-1") == "running"
    assert harness.status("train-c") == "completed"
    # A task row keeps the device its task is charged to beside the one it bursts on.
    with harness.reader() as session:
        rows = session.execute(
            select(TaskRow.devices, TaskRow.burst_device).where(
                TaskRow.state == "running", TaskRow.burst_device.is_not(None)
            )
        ).all()
    assert rows, "some dynamic fraction should burst at the end"
    assert all(burst not in devices for devices, burst in rows), rows


def test_a_task_row_from_before_charged_devices_were_kept_is_read_as_running_there(
    harness: Harness,
) -> None:
    """Rows written before a spread task kept its charged device hold the burst device twice:
    the snapshot reads the task as charged where it runs, and the next cycle moves nothing."""
    harness.project("a", 4)
    harness.submit("a", "nb-1", type="interactive", gpu=0.5, gpu_limit=1.0)
    harness.submit("a", "nb-2", type="interactive", gpu=0.5, gpu_limit=1.0)
    harness.loop.run_once()
    with harness.writer.begin() as session:
        row = session.scalars(select(TaskRow).where(TaskRow.burst_device.is_not(None))).one()
        row.devices = [row.burst_device]
        burst = row.burst_device
    with harness.reader() as session:
        built = build_snapshot(session, harness.clock.now_s(), SchedulerSettings())
    [spread] = [p for w in built.snapshot.workloads for p in w.placements if p.devices == (burst,)]
    assert spread.burst_device is None
    events = harness.events()
    harness.loop.run_once()
    assert harness.events() == events


def test_a_workload_min_runtime_protects_it_from_reclaim_until_it_has_run_that_long(
    harness: Harness,
) -> None:
    """`submit --min-runtime 10m`: b reclaims a's unprotected borrower at once, the protected
    one only after it has run 600 s (its project's min runtime is 0). Reclaim never evicts the
    plain one alone for a job that needs both: that would free too little."""
    harness.project("a", 0)
    harness.project("b", 4)
    harness.submit("a", "protected", gpu=2, min_runtime_s=600)
    harness.submit("a", "plain", gpu=2)
    harness.loop.run_once()
    assert (harness.status("protected"), harness.status("plain")) == ("running", "running")
    harness.clock.advance(60)
    harness.submit("b", "first", gpu=2)
    harness.submit("b", "second", gpu=2)
    for _ in range(3):
        harness.loop.run_once()
    assert (harness.status("protected"), harness.status("plain")) == ("running", "pending")
    assert (harness.status("first"), harness.status("second")) == ("running", "pending")
    harness.clock.advance(539)
    harness.loop.run_once()
    assert harness.status("protected") == "running"
    harness.clock.advance(1)
    for _ in range(3):
        harness.loop.run_once()
    assert harness.status("protected") == "pending"
    assert harness.status("second") == "running"
