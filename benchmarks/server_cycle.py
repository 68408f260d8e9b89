"""Time the server's side of a scheduling cycle: database -> snapshot, the core, the writes.

    .venv/bin/python benchmarks/server_cycle.py                  # 1,000 nodes, 4 cycles
    .venv/bin/python benchmarks/server_cycle.py --nodes 10000 --cycles 3

`benchmarks/cycle.py` times the core alone on a snapshot it is handed. The server first reads
that snapshot from its database and afterwards writes the decisions: this seeds a fresh SQLite
database (in a temporary directory) with the same synthetic cluster (`cycle_bench.workload`,
the same seed), then runs `--cycles` cycles as the loop does, each on what the last one wrote:
`build_snapshot` with the loop's `SnapshotCache`, `run_cycle`, `persist.write` with its
`ReasonLedger`. Each cycle
also builds the snapshot once without the cache (the peer: every row made anew) and checks
that both are equal. CPU ms per step, the collector paused as the loop
pauses it for the core. Cycle 1 is the burst (every row new to the cache); the later ones are
a loaded server's usual cycle. Exit status 0, or 1 when the two snapshots differ.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cycle_bench.workload import build_snapshot as synthetic_snapshot
from sqlalchemy import insert
from sqlalchemy.engine import Engine

from gpupool.core.cycle import run_cycle
from gpupool.core.model import Snapshot
from gpupool.corebuild import core_build
from gpupool.server import migrate, persist
from gpupool.server.db import (
    NodeRow,
    ProjectRow,
    TaskRow,
    WorkloadRow,
    make_engine,
    make_sessionmakers,
    sqlite_url,
)
from gpupool.server.snapshot import SnapshotCache, build_snapshot

NOW_S = 1_000_000_000.0


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=1000, help="nodes of 8 GPUs (1000)")
    parser.add_argument("--cycles", type=int, default=4, help="cycles to run (4)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.cycles < 1:
        parser.error("--nodes and --cycles must be at least 1")
    synthetic = synthetic_snapshot(args.nodes, args.seed)
    clock = time.process_time
    with tempfile.TemporaryDirectory() as data:
        engine = make_engine(sqlite_url(Path(data)))
        migrate.upgrade(engine)
        began = clock()
        seed(engine, synthetic)
        print(
            f"gpupool: the server's cycle, CPU ms, {args.nodes:,} nodes, "
            f"{len(synthetic.workloads):,} workloads (seeded in {clock() - began:.1f} s), "
            f"core {core_build()}, SQLite",
            flush=True,
        )
        writer, reader = make_sessionmakers(engine)
        cache = SnapshotCache()
        ledger = persist.ReasonLedger()
        header = f"{'cycle':>5} {'snapshot':>9} {'cached':>8} {'ratio':>6} {'core':>7} "
        print(header + f"{'write':>7} {'total':>7} {'binds':>6}")
        status = 0
        for cycle in range(1, args.cycles + 1):
            now = NOW_S + 30 * cycle
            gc.collect()
            gc.disable()
            try:
                t0 = clock()
                with reader() as session, session.begin():
                    fresh = build_snapshot(session, now, synthetic.settings)
                t1 = clock()
                with reader() as session, session.begin():
                    built = build_snapshot(session, now, synthetic.settings, cache)
                t2 = clock()
                result = run_cycle(built.snapshot)
                t3 = clock()
                counts = persist.write(writer, built, result, now, ledger)
                t4 = clock()
            finally:
                gc.enable()
            if built.snapshot != fresh.snapshot or built.keys != fresh.keys:
                print(f"cycle {cycle}: the cached snapshot differs from a fresh one")
                status = 1
            ms = [1000 * (b - a) for a, b in ((t0, t1), (t1, t2), (t2, t3), (t3, t4))]
            total = ms[1] + ms[2] + ms[3]
            print(
                f"{cycle:>5} {ms[0]:>9,.0f} {ms[1]:>8,.0f} {ms[0] / max(ms[1], 1e-9):>5.1f}x "
                f"{ms[2]:>7,.0f} {ms[3]:>7,.0f} {total:>7,.0f} {counts['bind']:>6,}",
                flush=True,
            )
        print(
            "snapshot: built without the cache (every row made anew); cached: with the loop's "
            "SnapshotCache;\ntotal = cached + core + write (what the loop's cycle spends)."
        )
    return status


if __name__ == "__main__":
    raise SystemExit(main())
