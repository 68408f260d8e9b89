"""The scheduling loop's own cost, in-process and without HTTP, on a fresh SQLite database."""

from __future__ import annotations

import inspect
import tempfile
import time
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from api_bench.model import PROJECT_A, PROJECT_B, Config, LoopCycle, LoopResult
from gpupool.api.schemas import ProjectIn, Role, WorkloadIn, WorkloadStatus
from gpupool.cli import server_cmd
from gpupool.clock import SystemClock
from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import Bind, Evict
from gpupool.core.model import SchedulerSettings
from gpupool.executors.simulated import SimulatedExecutor, parse_simulated_nodes
from gpupool.server import migrate
from gpupool.server.auth import Principal
from gpupool.server.db import WorkloadRow, make_engine, make_sessionmakers
from gpupool.server.metrics import ServerMetrics
from gpupool.server.scheduler import SchedulingLoop
from gpupool.server.services import projects as project_service
from gpupool.server.services import workloads as workload_service
from gpupool.server.snapshot import build_snapshot


def _loop_cycle(
    loop: SchedulingLoop, writer: sessionmaker[Session], settings: SchedulerSettings, split: bool
) -> LoopCycle:
    """One loop iteration, timed. With `split`, the snapshot read and the core are first timed
    on their own (on the same database state; they change nothing)."""
    with writer() as session:
        pending = session.scalar(
            select(func.count())
            .select_from(WorkloadRow)
            .where(WorkloadRow.status == WorkloadStatus.PENDING.value)
        )
    snapshot_ms = core_ms = None
    if split:
        t0 = time.perf_counter()
        with writer() as session, session.begin():
            built = build_snapshot(session, SystemClock().now_s(), settings)
        t1 = time.perf_counter()
        run_cycle(built.snapshot)
        t2 = time.perf_counter()
        snapshot_ms, core_ms = (t1 - t0) * 1000, (t2 - t1) * 1000
    loop.collect_exits()
    loop.remove_deleted()
    t3 = time.perf_counter()
    result = loop.cycle()
    t4 = time.perf_counter()
    loop.dispatch()
    loop.collect_exits()
    t5 = time.perf_counter()
    binds = sum(1 for d in result.decisions if isinstance(d, Bind))
    return LoopCycle(
        pending=pending or 0,
        snapshot_ms=snapshot_ms,
        core_ms=core_ms,
        cycle_ms=(t4 - t3) * 1000,
        dispatch_ms=(t5 - t4) * 1000,
        binds=binds,
        evicts=sum(1 for d in result.decisions if isinstance(d, Evict)),
    )


def measure_loop(config: Config) -> LoopResult:
    """The scheduling loop's own cost, without HTTP: a fresh SQLite database with the burst's
    workloads pending, one cycle that binds them, then the reclaim workloads and cycles until
    team-b holds its quota. Settings as the server's CLI defaults them."""
    settings = SchedulerSettings(
        max_reclaim_attempts_per_cycle=config.max_reclaims_per_cycle or _server_reclaim_default()
    )
    clock = SystemClock()
    with tempfile.TemporaryDirectory(prefix="gpupool-loop-bench-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'gpupool.db'}"
        engine = make_engine(url)
        migrate.upgrade(engine)
        writer, _ = make_sessionmakers(engine)
        executor = SimulatedExecutor(
            parse_simulated_nodes(f"{config.nodes}x{config.gpus_per_node}"),
            clock,
            journal_path=Path(tmp) / "simulated.jsonl",
        )
        loop = SchedulingLoop(writer, executor, clock, settings, ServerMetrics())
        loop.register_nodes(executor.inventory())
        admin = Principal(0, "admin", Role.ADMIN, frozenset())
        t0 = time.perf_counter()
        with writer.begin() as session:
            now = clock.now_s()
            project_service.create(session, ProjectIn(name=PROJECT_A), now, {}, "admin")
            project_service.create(
                session,
                ProjectIn.model_validate(
                    {"name": PROJECT_B, "quota": {"gpu": config.quota_b_gpus}}
                ),
                now,
                {},
                "admin",
            )
            _submit_in_process(session, PROJECT_A, config.workloads, admin, now)
        setup_s = time.perf_counter() - t0
        burst = _loop_cycle(loop, writer, settings, split=True)

        with writer.begin() as session:
            _submit_in_process(session, PROJECT_B, config.reclaim, admin, clock.now_s())
        reclaim: list[LoopCycle] = []
        bound_b = 0
        began = time.perf_counter()
        while bound_b < config.reclaim and len(reclaim) < 200:
            cycle = _loop_cycle(loop, writer, settings, split=not reclaim)
            reclaim.append(cycle)
            bound_b += cycle.binds
            if cycle.binds == 0 and cycle.evicts == 0 and len(reclaim) > 3:
                break
        total_s = time.perf_counter() - began
        executor.close()
        engine.dispose()
    return LoopResult(setup_s, burst, reclaim, total_s, bound_b >= config.reclaim)


def _submit_in_process(
    session: Session, project: str, count: int, who: Principal, now: float
) -> None:
    for i in range(count):
        body = WorkloadIn(name=f"{project}-{i:05d}", project=project, gpu=1)
        workload_service.submit(session, body, who, now)


def _server_reclaim_default() -> int:
    """`gpupool server --max-reclaims-per-cycle`'s default (the core's, if that is gone)."""
    parameter = inspect.signature(server_cmd.server).parameters.get("max_reclaims_per_cycle")
    if parameter is None or not isinstance(parameter.default, int):
        return SchedulerSettings().max_reclaim_attempts_per_cycle
    return parameter.default
