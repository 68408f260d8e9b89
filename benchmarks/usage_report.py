"""Time `GET /usage`'s report over a day of a cluster's per-minute usage rows.

    .venv/bin/python benchmarks/usage_report.py                      # 100 nodes, 24 h
    .venv/bin/python benchmarks/usage_report.py --nodes 300 --hours 6
    PYTHONPATH=OLD/src .venv/bin/python benchmarks/usage_report.py --database-url sqlite:///X

The `usage` table holds a row per (minute, device) and one per (minute, device, workload), for
two days (their hours for 14): at 100 nodes (800 devices) about 1,400 rows a minute, two
million a day. This seeds a
fresh SQLite database (or the one `--database-url` names, kept when it exists and is seeded:
`--keep`) with `--hours` of such rows, then asks for the report (`usage.report`) as
`gpupool usage --by workload --since 24h` and the dashboard's device view would, each in a
child process, and prints its CPU time, wall time and the child's peak memory. An older server
is timed the same way with `PYTHONPATH=OLD/src` (a checkout of it), in the same session: this
2-core VM moves by 1.3-1.8x by the hour, so only ratios in one session count.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T0 = 1_796_688_000.0
"""The first minute of the seeded day (a minute's start)."""


def seed(url: str, nodes: int, hours: int, seed_value: int = 0) -> int:
    """`hours` of usage rows for `nodes` nodes of 8 GPUs, about 70% of devices holding one
    workload (a few hundred distinct workloads); returns the rows written."""
    from sqlalchemy import insert

    from gpupool.server import migrate
    from gpupool.server.db import UsageRow, make_engine

    engine = make_engine(url)
    migrate.upgrade(engine)
    rng = random.Random(seed_value)
    held = {
        (f"node-{n:05d}", d): (f"p{rng.randrange(20)}", f"job-{rng.randrange(nodes * 3)}")
        for n in range(nodes)
        for d in range(8)
        if rng.random() < 0.7
    }
    project_ids = {f"p{i}": i + 1 for i in range(20)}
    written = 0
    with engine.begin() as connection:
        for minute in range(hours * 60):
            at = T0 + 60 * minute
            rows = []
            for n in range(nodes):
                for d in range(8):
                    node = f"node-{n:05d}"
                    used = rng.randrange(0, 12_001)
                    holder = held.get((node, d))
                    allocated = 12_000 if holder else 0
                    rows.append(
                        {"bucket_s": at, "node": node, "device_index": d, "project": "",
                         "workload": "", "project_id": None, "samples": 12,
                         "allocated_milli_sum": allocated, "utilized_milli_sum": used,
                         "memory_used_max_mib": rng.randrange(80_000)}
                    )  # fmt: skip
                    if holder:
                        rows.append(
                            {"bucket_s": at, "node": node, "device_index": d,
                             "project": holder[0], "workload": holder[1],
                             "project_id": project_ids[holder[0]], "samples": 12,
                             "allocated_milli_sum": 12_000, "utilized_milli_sum": used,
                             "memory_used_max_mib": 0}
                        )  # fmt: skip
            connection.execute(insert(UsageRow), rows)
            written += len(rows)
            if minute % 60 == 59:
                print(f"  seeded {minute // 60 + 1} of {hours} h ({written:,} rows)", flush=True)
    engine.dispose()
    return written


def _child(url: str, by: str, minutes: int, bucket_s: int) -> None:
    """Run in a child process: one report, then its times and peak memory as JSON."""
    from gpupool.server import usage
    from gpupool.server.db import make_engine, make_sessionmakers

    engine = make_engine(url)
    _, reader = make_sessionmakers(engine)
    since = T0  # the seeded window, whole
    wall, cpu = time.perf_counter(), time.process_time()
    with reader() as session:
        try:
            out = usage.report(session, by, since, bucket_s, None)
            answer = f"{len(out.points):,} points, {len(out.summary):,} keys"
        except Exception as error:  # a refusal is an answer too
            answer = f"{type(error).__name__}: {str(error)[:60]}"
    result = {
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.perf_counter() - wall,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "answer": answer,
    }
    print(json.dumps(result))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=100, help="nodes of 8 GPUs (100)")
    parser.add_argument("--hours", type=int, default=24, help="hours of rows to seed (24)")
    parser.add_argument("--database-url", help="a database to seed (default: a temporary SQLite)")
    parser.add_argument(
        "--keep", action="store_true", help="use --database-url as it is if it holds rows"
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        url, by, minutes, bucket_s = args.child
        _child(url, by, int(minutes), int(bucket_s))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'usage.db'}"
        if not (args.keep and args.database_url):
            started = time.perf_counter()
            rows = seed(url, args.nodes, args.hours)
            print(f"seeded {rows:,} rows in {time.perf_counter() - started:.0f} s")
        minutes = args.hours * 60
        asks = (
            ("workload", min(86_400, 60 * minutes), "usage --by workload"),
            ("device", 3600, "devices by the hour"),
            ("workload", 60, "workloads by the minute"),
        )
        print(f"{'report':<26}{'CPU s':>8}{'wall s':>8}{'peak MiB':>10}  answer")
        for by, bucket_s, label in asks:
            child = subprocess.run(
                [sys.executable, __file__, "--child", url, by, str(minutes), str(bucket_s)],
                capture_output=True,
                text=True,
                env=os.environ,
                check=False,
            )
            if child.returncode != 0:
                print(f"{label:<26}failed: {child.stderr.strip().splitlines()[-1:]}")
                continue
            out = json.loads(child.stdout.strip().splitlines()[-1])
            print(
                f"{label:<26}{out['cpu_s']:>8.1f}{out['wall_s']:>8.1f}{out['peak_mib']:>10.0f}"
                f"  {out['answer']}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
