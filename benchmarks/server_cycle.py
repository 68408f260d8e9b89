"""Time the server's side of a scheduling cycle: database -> snapshot, the core, the writes.

    .venv/bin/python benchmarks/server_cycle.py                  # 1,000 nodes, 4 cycles
    .venv/bin/python benchmarks/server_cycle.py --nodes 10000 --cycles 3

`benchmarks/cycle.py` times the core alone on a snapshot it is handed. The server first reads
that snapshot from its database and afterwards writes the decisions: this seeds a fresh SQLite
database in a temporary directory (or the empty database `--database-url` names, PostgreSQL
too) with the same synthetic cluster (`cycle_bench.workload`, the same seed) and runs the
scheduling loop's own `SchedulingLoop.cycle` `--cycles` times, `--step-s` fake seconds apart
(30), each on what the last one wrote. Its steps are timed where the loop looks them up:
`build_snapshot` (with the loop's `SnapshotCache`), the core (`run_cycle`, isolated),
`persist.write` (with the loop's `ReasonLedger`); "other" is the rest of the loop's cycle
(metrics, history) and the young collection that the loop's pause of the collector puts off
to after the cycle; "read" says how the cache read the workload rows (all of them, or only the
rows whose change marker moved: how many). Each cycle also builds the snapshot once without
the cache, untimed in the cycle (the peer in the same run: every row made anew), and checks
that both are equal. CPU ms of this process (PostgreSQL's own work is in its processes:
`--clock wall` times in wall ms), the collector paused for the core as the loop pauses it.
Cycle 1 is the burst (every row new to the cache); the later ones are a loaded server's usual
cycle. Nothing is started: the loop's dispatch is not run. Exit status 0, or 1 when the two
snapshots differ.

An older loop is timed the same way with `PYTHONPATH=OLD/src` (a checkout of it): one that
builds its snapshot without a cache shows the same time in both columns.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cycle_bench.workload import build_snapshot as synthetic_snapshot
from sqlalchemy import insert
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from gpupool.clock import FakeClock
from gpupool.core.decisions import CycleResult
from gpupool.core.model import SchedulerSettings, Snapshot
from gpupool.corebuild import core_build
from gpupool.executors.simulated import SimulatedExecutor
from gpupool.server import isolation, migrate, persist, scheduler
from gpupool.server import snapshot as snapshot_module
from gpupool.server.db import (
    NodeRow,
    ProjectRow,
    TaskRow,
    WorkloadRow,
    make_engine,
    make_sessionmakers,
    sqlite_url,
)
from gpupool.server.metrics import ServerMetrics

if TYPE_CHECKING:  # names only: an older loop, timed with PYTHONPATH=OLD/src, lacks them
    from gpupool.server.snapshot import BuiltSnapshot, SnapshotCache

NOW_S = 1_000_000_000.0
RunCycle = Callable[[Snapshot], CycleResult]
Isolated = tuple[CycleResult, Snapshot, dict[str, str]]


_clock: Callable[[], float] = time.process_time
"""What the steps are timed with: this process's CPU time, or wall time (`--clock wall`: on
PostgreSQL the database's work is done in its own processes)."""


def seed(engine: Engine, snapshot: Snapshot) -> None:
    """The synthetic cluster as rows: projects, nodes, workloads (running or pending), tasks."""
    ids = {project.name: at + 1 for at, project in enumerate(snapshot.projects)}
    parents = {project.parent for project in snapshot.projects if project.parent}
    workloads: list[dict[str, object]] = []
    tasks: list[dict[str, object]] = []
    for at, w in enumerate(snapshot.workloads, start=1):
        workloads.append(
            {
                "id": at, "name": w.name, "project_id": ids[w.project], "type": w.type.value,
                "status": "running" if w.placements else "pending", "version": 1,
                "gpu_kind": w.gpu.kind.value, "gpu_amount": w.gpu.amount,
                "gpu_limit_milli": w.gpu.limit_milli, "tasks": w.tasks,
                "min_available": w.min_available, "priority": w.priority,
                "preemptible": w.preemptible, "cpu_milli": w.cpu_milli,
                "memory_mib": w.memory_mib,
                "node_selector": {key: list(values) for key, values in w.node_selector},
                "command": ["true"], "env": {}, "duration_s": None, "grace_period_s": 30,
                "submitted_by": "bench", "submitted_at": float(at),
                "started_at": float(w.started_at_s) if w.started_at_s is not None else None,
                "finished_at": None, "pending_reason": None, "preemptions": 0,
                "working_dir": None, "image": None, "origin": "api", "tolerations": [],
                "min_runtime_s": None,
            }
        )  # fmt: skip
        tasks.extend(
            {
                "launch_id": f"seed-{at}-{p.task_index}", "workload_id": at,
                "task_index": p.task_index, "node": p.node, "devices": list(p.devices),
                "burst_device": p.burst_device, "state": "running", "created_at": 0.0,
            }
            for p in w.placements
        )  # fmt: skip
    with engine.begin() as connection:
        connection.execute(
            insert(ProjectRow),
            [
                {
                    "id": ids[p.name], "name": p.name, "is_department": p.name in parents,
                    "parent_id": ids[p.parent] if p.parent else None,
                    "quota_gpu_milli": p.quota.gpu_milli, "quota_cpu_milli": p.quota.cpu_milli,
                    "quota_memory_mib": p.quota.memory_mib,
                    "over_quota_weight": p.over_quota_weight, "has_limit": False,
                    "limit_gpu_milli": None, "limit_cpu_milli": None, "limit_memory_mib": None,
                    "priority": p.priority, "min_runtime_s": p.min_runtime_s, "created_at": 0.0,
                }
                for p in snapshot.projects
            ],
        )  # fmt: skip
        connection.execute(
            insert(NodeRow),
            [
                {
                    "name": n.name, "executor": "simulated", "state": "ready",
                    "gpu_count": n.gpu_count, "gpu_memory_mib": n.gpu_memory_mib,
                    "gpu_model": n.gpu_model, "cpu_milli": n.cpu_milli,
                    "memory_mib": n.memory_mib, "labels": dict(n.labels), "taints": [],
                    "registered_at": 0.0, "heartbeat_at": 0.0,
                }
                for n in snapshot.nodes
            ],
        )  # fmt: skip
        for start in range(0, len(workloads), 20_000):
            connection.execute(insert(WorkloadRow), workloads[start : start + 20_000])
        if tasks:
            connection.execute(insert(TaskRow), tasks)


class _Steps:
    """Wraps the loop's three steps where `SchedulingLoop.cycle` looks them up, timing each on
    the process's CPU clock, and builds a fresh snapshot (untimed) beside each cached one."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self.same = True
        self.binds = 0
        self.peer_ms = 0.0
        self.read = "all"
        """How the cached build read the workload rows: "all", or how many changed rows."""
        """What the peer (the fresh build) cost inside the loop's cycle, taken off its time."""
        build, run, write = snapshot_module.build_snapshot, isolation.run_isolated, persist.write

        def timed_build(session: Session, now_s: float, settings: SchedulerSettings,
                        cache: SnapshotCache | None = None) -> BuiltSnapshot:  # fmt: skip
            began = _clock()
            fresh = build(session, now_s, settings)
            self.ms["snapshot"] = 1000 * (_clock() - began)
            if cache is None:  # an older loop (PYTHONPATH=OLD/src): this is its own build
                self.ms["cached"], self.peer_ms, self.same = self.ms["snapshot"], 0.0, True
                return fresh
            began = _clock()
            built = build(session, now_s, settings, cache)
            self.ms["cached"] = 1000 * (_clock() - began)
            # an older loop's cache reads every row (no `last_read`)
            changed = getattr(cache, "last_read", "all") == "changed"
            self.read = f"{getattr(cache, 'rows_read', 0):,}" if changed else "all"
            # the peer's cost to the cycle, taken off its time: its build, the comparison, and
            # freeing it here (kept, the young collection after the cycle would walk it)
            began = _clock()
            self.same = (
                built.snapshot == fresh.snapshot
                and built.keys == fresh.keys
                and built.bad == fresh.bad
                and built.reasons == fresh.reasons
            )
            del fresh
            self.peer_ms = self.ms["snapshot"] + 1000 * (_clock() - began)
            return built

        def timed_run(snapshot: Snapshot, run_cycle: RunCycle) -> Isolated:
            began = _clock()
            done = run(snapshot, run_cycle)
            self.ms["core"] = 1000 * (_clock() - began)
            return done

        def timed_write(*args: Any) -> dict[str, int]:
            began = _clock()
            counts = write(*args)
            self.ms["write"] = 1000 * (_clock() - began)
            self.binds = counts["bind"]
            return counts

        # where `SchedulingLoop.cycle` looks them up: its module's name, the others' modules
        self._originals = ((scheduler, "build_snapshot", scheduler.__dict__["build_snapshot"]),
                           (isolation, "run_isolated", run), (persist, "write", write))  # fmt: skip
        setattr(scheduler, "build_snapshot", timed_build)  # noqa: B010
        setattr(isolation, "run_isolated", timed_run)  # noqa: B010
        setattr(persist, "write", timed_write)  # noqa: B010

    def restore(self) -> None:
        """Put the loop's steps back (the benchmark may run inside a test process)."""
        for module, name, original in self._originals:
            setattr(module, name, original)


def cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """`--nodes`, `--seed` and `--database-url`: the seeded cluster and where it lives (also
    `server_recording.py`'s)."""
    parser.add_argument("--nodes", type=int, default=1000, help="nodes of 8 GPUs (1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--database-url",
        help="an empty database to seed and run on (PostgreSQL: postgresql://...); default: "
        "SQLite in a temporary directory",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    cluster_arguments(parser)
    parser.add_argument("--cycles", type=int, default=4, help="cycles to run (4)")
    parser.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="time the steps in this process's CPU time (cpu, the default) or wall time",
    )
    parser.add_argument(
        "--step-s",
        type=float,
        default=30.0,
        help="clock seconds between cycles (30; the server's loop runs every 1 s when busy: "
        "the pending reasons' numbers are rewritten once a minute, every other cycle at 30)",
    )
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.cycles < 1 or args.step_s <= 0:
        parser.error("--nodes and --cycles must be at least 1, --step-s above 0")
    global _clock
    _clock = time.perf_counter if args.clock == "wall" else time.process_time
    synthetic = synthetic_snapshot(args.nodes, args.seed)
    with tempfile.TemporaryDirectory() as data:
        engine = make_engine(args.database_url or sqlite_url(Path(data)))
        migrate.upgrade(engine)
        began = time.process_time()
        seed(engine, synthetic)
        settings, workloads = synthetic.settings, len(synthetic.workloads)
        del synthetic  # the loop's long-lived objects are its own: the collector walks them
        database = "PostgreSQL" if engine.dialect.name == "postgresql" else "SQLite"
        print(
            f"gpupool: the server's cycle, {args.clock.upper() if args.clock == 'cpu' else 'wall'}"
            f" ms, {args.nodes:,} nodes, "
            f"{workloads:,} workloads (seeded in {time.process_time() - began:.1f}"
            f" s), core {core_build()}, {database}",
            flush=True,
        )
        writer, reader = make_sessionmakers(engine)
        clock = FakeClock(NOW_S)
        executor = SimulatedExecutor((), clock)  # the loop's cycle never calls it
        loop = scheduler.SchedulingLoop(
            writer, executor, clock, settings, ServerMetrics(), reader=reader
        )
        steps = _Steps()
        header = f"{'cycle':>5} {'snapshot':>9} {'cached':>8} {'read':>6} {'ratio':>6} {'core':>7} "
        print(header + f"{'write':>7} {'other':>6} {'cycle':>7} {'binds':>6}")
        status = 0
        try:
            for cycle in range(1, args.cycles + 1):
                clock.advance(args.step_s)
                began = _clock()
                loop.cycle()  # the collector paused for the cycle, as the loop runs it
                # and counted: the young collection the pause put off, which the loop's next
                # allocation starts (whatever the cycle made and kept, and its garbage cycles)
                gc.collect(0)
                ms = steps.ms
                total = 1000 * (_clock() - began) - steps.peer_ms
                other = total - ms["cached"] - ms["core"] - ms["write"]
                if not steps.same:
                    print(f"cycle {cycle}: the cached snapshot differs from a fresh one")
                    status = 1
                print(
                    f"{cycle:>5} {ms['snapshot']:>9,.0f} {ms['cached']:>8,.0f} {steps.read:>6} "
                    f"{ms['snapshot'] / max(ms['cached'], 1e-9):>5.1f}x {ms['core']:>7,.0f} "
                    f"{ms['write']:>7,.0f} {other:>6,.0f} {total:>7,.0f} {steps.binds:>6,}",
                    flush=True,
                )
        finally:
            steps.restore()
            engine.dispose()
        print(
            "snapshot: built without the cache (every row made anew; not counted in the cycle);"
            "\ncached: with the loop's SnapshotCache; read: the rows it read in full (all, or "
            "those\nwhose change marker moved); core: run_cycle (isolated); write: the "
            "decisions\nand pending reasons; other: the rest of SchedulingLoop.cycle (metrics, "
            "history) and\nthe young collection put off while the collector was paused."
        )
    return status


if __name__ == "__main__":
    raise SystemExit(main())
