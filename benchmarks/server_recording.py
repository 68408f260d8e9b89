"""Time what the server's loop records besides scheduling: usage per workload and the history.

    .venv/bin/python benchmarks/server_recording.py                  # 1,000 nodes, 14 steps
    .venv/bin/python benchmarks/server_recording.py --nodes 10000

Every iteration the loop ends with `SchedulingLoop.record_usage`: the executor's device samples
are attributed to the tasks on each device (the `usage` rows, per minute, device and workload)
and, every 5 s, a step of the history store (the cluster, each project and each device) is
made; the usage rows are written every 15 s and the minutes that are over (usage and history)
when they are (an older loop wrote the usage rows at every step). At 10,000 nodes a step is
80,000 devices and 45,000 tasks. This seeds a fresh SQLite database (or the empty database
`--database-url` names) with the synthetic cluster of `benchmarks/cycle.py`
(`server_cycle.seed`), runs one loop cycle (the history needs its facts), then calls
`record_usage` `--steps` times, 5 fake seconds apart, with every device sampled each time (what
the simulated and local executors send every 5 s; Kubernetes with DCGM every 10 s). The first
step falls on a minute's start, so step 13 is the one that writes the first minute. Times are
this process's CPU ms and wall ms (PostgreSQL's own work is in its processes).

An older loop is timed the same way with `PYTHONPATH=OLD/src` (a checkout of it): the peer in
the same session, which the table's ratio needs (this 2-core VM moves by 1.3-1.8x by the hour)."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from server_cycle import NOW_S, cluster_arguments, seed, synthetic_snapshot

from gpupool.clock import FakeClock
from gpupool.executors.base import UsageSample
from gpupool.executors.simulated import SimulatedExecutor
from gpupool.server import migrate, scheduler
from gpupool.server.db import make_engine, make_sessionmakers, sqlite_url
from gpupool.server.metrics import ServerMetrics

STEP_S = 5.0


class _Sampled(SimulatedExecutor):
    """No nodes of its own (the seeded tasks are not its launches); every device of the
    synthetic cluster sampled at 50% each time it is asked."""

    def __init__(self, clock: FakeClock, devices: list[tuple[str, int]]) -> None:
        super().__init__((), clock)
        self._sampled_clock = clock
        self._devices = devices

    def usage_samples(self) -> list[UsageSample]:
        now = self._sampled_clock.now_s()
        return [UsageSample(now, node, index, 50, 1000) for node, index in self._devices]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    cluster_arguments(parser)
    parser.add_argument("--steps", type=int, default=14, help="5-s steps to record (14)")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.steps < 1:
        parser.error("--nodes and --steps must be at least 1")
    synthetic = synthetic_snapshot(args.nodes, args.seed)
    devices = [(node.name, index) for node in synthetic.nodes for index in range(node.gpu_count)]
    with tempfile.TemporaryDirectory() as data:
        engine = make_engine(args.database_url or sqlite_url(Path(data)))
        migrate.upgrade(engine)
        seed(engine, synthetic)
        settings = synthetic.settings
        del synthetic
        database = "PostgreSQL" if engine.dialect.name == "postgresql" else "SQLite"
        print(
            f"gpupool: the loop's recording, {args.nodes:,} nodes, {len(devices):,} devices "
            f"sampled every {STEP_S:g} s, {database}",
            flush=True,
        )
        writer, reader = make_sessionmakers(engine)
        clock = FakeClock(NOW_S - NOW_S % 60 - STEP_S)
        loop = scheduler.SchedulingLoop(
            writer, _Sampled(clock, devices), clock, settings, ServerMetrics(), reader=reader
        )
        loop.cycle()  # the history's facts
        write_s = getattr(scheduler, "USAGE_WRITE_S", None)
        """How often the loop writes its usage rows (an older loop: every step)."""
        cpu: list[float] = []
        wall: list[float] = []
        print(f"{'step':>4} {'clock s':>7} {'CPU ms':>8} {'wall ms':>8}")
        try:
            for step in range(1, args.steps + 1):
                clock.advance(STEP_S)
                began_cpu, began_wall = time.process_time(), time.perf_counter()
                loop.record_usage()
                cpu.append(1000 * (time.process_time() - began_cpu))
                wall.append(1000 * (time.perf_counter() - began_wall))
                at = clock.now_s() - (NOW_S - NOW_S % 60)
                note = (
                    "  (a minute is over: usage and history written)"
                    if at % 60 == 0 and at
                    else "  (usage written)"
                    if write_s and at % write_s == 0
                    else ""
                )
                print(f"{step:>4} {at:>7.0f} {cpu[-1]:>8,.0f} {wall[-1]:>8,.0f}{note}", flush=True)
        finally:
            engine.dispose()
        span_s = args.steps * STEP_S
        print(
            f"median {statistics.median(cpu):,.0f} CPU ms, {statistics.median(wall):,.0f} wall ms"
            f" a step; {sum(wall) / 1000:.1f} s of wall time over {span_s:g} s of clock "
            f"({sum(wall) / 10 / span_s:.0f}% of the loop's thread)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
