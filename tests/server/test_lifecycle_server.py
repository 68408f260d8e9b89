"""The server changes states only as the lifecycle table allows (`gpupool.core.lifecycle`).

In-process on a fake clock, as in test_scheduler_loop: a decision the table refuses from the
status the snapshot read is not written (as a stale one is not), and a project cannot be deleted
while one of its workloads is completing (its tasks still run; before the table, it was).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from gpupool.api.schemas import ProjectIn, Role, WorkloadIn
from gpupool.clock import FakeClock
from gpupool.core.decisions import Bind, CycleResult, Evict, EvictionCause
from gpupool.core.model import SchedulerSettings, TaskPlacement
from gpupool.executors.simulated import SimulatedExecutor, parse_simulated_nodes
from gpupool.server import migrate, persist
from gpupool.server.auth import Principal
from gpupool.server.db import ProjectRow, TaskRow, WorkloadRow, make_engine, make_sessionmakers
from gpupool.server.errors import ApiError
from gpupool.server.metrics import ServerMetrics
from gpupool.server.scheduler import SchedulingLoop
from gpupool.server.services import projects, workloads
from gpupool.server.snapshot import BuiltSnapshot, build_snapshot

ADMIN = Principal(1, "admin", Role.ADMIN, frozenset())
NODE = "sim-1"


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.clock = FakeClock()
        engine = make_engine(f"sqlite:///{tmp / 'db.sqlite'}")
        migrate.upgrade(engine)
        self.writer, self.reader = make_sessionmakers(engine)
        executor = SimulatedExecutor(parse_simulated_nodes("1x4"), self.clock, tmp / "j.jsonl")
        self.loop = SchedulingLoop(
            self.writer, executor, self.clock, SchedulerSettings(), ServerMetrics()
        )
        self.loop.register_nodes(executor.inventory())
        with self.writer.begin() as session:
            body = ProjectIn(name="team", quota={"gpu": 4})  # type: ignore[arg-type]
            projects.create(session, body, self.clock.now_s(), {}, "admin")

    def submit(self, name: str, **fields: object) -> None:
        with self.writer.begin() as session:
            body = WorkloadIn.model_validate({"name": name, "project": "team", **fields})
            workloads.submit(session, body, ADMIN, self.clock.now_s())

    def status(self, name: str) -> str:
        with self.reader() as session:
            return session.execute(
                select(WorkloadRow.status).where(WorkloadRow.name == name)
            ).scalar_one()

    def task_count(self) -> int:
        with self.reader() as session:
            return session.execute(select(func.count()).select_from(TaskRow)).scalar_one()

    def built(self) -> BuiltSnapshot:
        with self.reader() as session:
            return build_snapshot(session, self.clock.now_s(), SchedulerSettings())


def _placement(index: int, device: int) -> TaskPlacement:
    return TaskPlacement(task_index=index, node=NODE, devices=(device,))


def _core_name(built: BuiltSnapshot, name: str) -> str:
    """The core's name of the workload `name` (the snapshot's key)."""
    return next(core for core, key in built.keys.items() if key.name == name)


def _as_if(built: BuiltSnapshot, name: str, status: str) -> BuiltSnapshot:
    keys = dict(built.keys)
    core = _core_name(built, name)
    keys[core] = keys[core]._replace(status=status)
    return dataclasses.replace(built, keys=keys)


def test_a_bind_from_a_status_the_table_refuses_is_not_written(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.submit("a", gpu=1)
    built = h.built()
    bind = CycleResult((Bind(_core_name(built, "a"), (_placement(0, 0),), "fits"),), {}, ())
    # As if the snapshot had read it completing: the table refuses `bind` from there.
    counts = persist.write(h.writer, _as_if(built, "a", "completing"), bind, h.clock.now_s())
    assert counts["bind"] == 0
    assert (h.status("a"), h.task_count()) == ("pending", 0)
    # The same decision from the status the snapshot really read is written.
    counts = persist.write(h.writer, built, bind, h.clock.now_s())
    assert counts["bind"] == 1
    assert (h.status("a"), h.task_count()) == ("running", 1)


def test_an_eviction_the_table_refuses_leaves_the_workload_and_its_tasks(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.submit("a", gpu=1, preemptible=True)
    h.loop.run_once()
    assert h.status("a") == "running"
    with h.reader() as session:
        states = session.scalars(select(TaskRow.state)).all()
    assert states in (["starting"], ["running"])
    built = h.built()
    evict = CycleResult((Evict(_core_name(built, "a"), EvictionCause.RECLAIM, "test"),), {}, ())
    # `preempt` is allowed from running only: as if read pending, nothing is written.
    persist.write(h.writer, _as_if(built, "a", "pending"), evict, h.clock.now_s())
    assert h.status("a") == "running"
    with h.reader() as session:
        assert session.scalars(select(TaskRow.state)).all() == states
    persist.write(h.writer, built, evict, h.clock.now_s())
    assert h.status("a") == "pending"
    with h.reader() as session:
        assert session.scalars(select(TaskRow.state)).all() == ["stopping"]


def test_a_project_with_a_completing_workload_cannot_be_deleted(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.submit("a", gpu=1, tasks=2)
    h.loop.run_once()
    with h.writer.begin() as session:
        # One task exited with 0, the other still runs: what `after_task_end` leaves.
        session.execute(update(WorkloadRow).values(status="completing"))
    with h.writer.begin() as session:
        row = session.execute(select(ProjectRow).where(ProjectRow.name == "team")).scalar_one()
        with pytest.raises(ApiError) as refused:
            projects.remove(session, row, h.clock.now_s(), "admin")
    assert refused.value.status == 409
    assert "still has 1 workload(s) that are not finished" in refused.value.detail
    assert h.status("a") == "completing"


def test_a_project_whose_workloads_all_finished_can_be_deleted(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.submit("a", gpu=1)
    with h.writer.begin() as session:
        session.execute(update(WorkloadRow).values(status="completed"))
    with h.writer.begin() as session:
        row = session.execute(select(ProjectRow).where(ProjectRow.name == "team")).scalar_one()
        projects.remove(session, row, h.clock.now_s(), "admin")
    with h.reader() as session:
        assert session.execute(select(func.count()).select_from(WorkloadRow)).scalar_one() == 0
