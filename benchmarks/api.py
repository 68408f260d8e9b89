"""The control plane under a burst: submit through the HTTP API and time until the work runs.

    .venv/bin/python benchmarks/api.py                 # 500 nodes x 8, 4,000 then 2,000
    .venv/bin/python benchmarks/api.py --quick         # 50 nodes x 8, 400 then 200
    .venv/bin/python benchmarks/api.py --database-url postgresql://user@host/empty_db
    .venv/bin/python benchmarks/api.py --json --check

A fresh `gpupool server` starts in a temp directory (SQLite in WAL mode, or `--database-url`,
which must name an empty database) with `--simulated-nodes NODESxGPUS`. Not timed: project
`team-a` (quota 0: it runs over quota on idle GPUs) and `team-b` (quota half the cluster's GPUs).

1. Phase "burst": `--workloads` one-GPU `train` workloads (no duration: they run until stopped)
   are POSTed to team-a over `--concurrency` keep-alive connections (a minimal asyncio HTTP
   client: httpx would cost the client ~6 ms of CPU per request, more than the server spends,
   on a 2-core machine). Timed from the first POST:
   *acknowledged* (every POST answered 201), *bound* (the list endpoint counts them all
   `running`) and *running* (every one of them has its task running on the executor).
2. Phase "reclaim": `--reclaim` one-GPU `train` workloads are POSTed to team-b. Timed from the
   first POST until team-b *holds its quota*: all its workloads running, holding quota GPUs,
   which needs the scheduler to reclaim that many GPUs from team-a.

While a phase runs, a watcher polls every `--poll` seconds (default 0.1) a one-row page of the
list endpoint (its `total`) and `/metrics` (the cycle histogram, decision counters and pending
gauges), which gives a per-cycle timeline; once the count is reached, the full list is read to
check the tasks. Afterwards (not part of the HTTP timing) the server loop's own cost is measured
in-process on a fresh SQLite database: one cycle at `--workloads` pending split into snapshot
read, core and persist, the dispatch after it, and the cycles and time the reclaim takes
without HTTP traffic (`--no-loop` skips this).

Targets (the issue): the burst all running in at most 10 s; team-b holding its quota in at most
20 s. Exit status: 0; 1 when a phase did not complete (errors, timeout); with `--check`, also 1
when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from gpupool.server.process import ServerProcess

# The parts live next to this file (benchmarks/api_bench/), also when it is loaded by path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from api_bench.model import FULL, QUICK, Config
from api_bench.phases import run_benchmark
from api_bench.render import payload, render

__all__ = ["FULL", "QUICK", "Config", "main", "run_benchmark"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, help=f"simulated nodes (default {FULL['nodes']})")
    parser.add_argument(
        "--gpus-per-node", type=int, help=f"GPUs per node (default {FULL['gpus_per_node']})"
    )
    parser.add_argument(
        "--workloads", type=int, help=f"burst of one-GPU workloads (default {FULL['workloads']})"
    )
    parser.add_argument(
        "--reclaim", type=int, help=f"team-b's one-GPU workloads (default {FULL['reclaim']})"
    )
    parser.add_argument("--concurrency", type=int, default=64, help="concurrent POSTs")
    parser.add_argument(
        "--database-url",
        help="SQLAlchemy URL of an empty database (default: SQLite in a temp directory)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK['nodes']} nodes x {QUICK['gpus_per_node']}, {QUICK['workloads']} + "
        f"{QUICK['reclaim']} workloads (explicit sizes still win)",
    )
    parser.add_argument(
        "--cycle-interval", type=float, default=1.0, help="server's --cycle-interval (s)"
    )
    parser.add_argument(
        "--max-reclaims-per-cycle",
        type=int,
        help="server's --max-reclaims-per-cycle (default: the server's)",
    )
    parser.add_argument("--poll", type=float, default=0.1, help="watcher's poll interval (s)")
    parser.add_argument("--timeout", type=float, default=180.0, help="per phase (s)")
    parser.add_argument(
        "--no-loop", action="store_true", help="skip the in-process measurement of the loop"
    )
    parser.add_argument("--timeline", action="store_true", help="print the per-poll cycle spans")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)

    sizes = QUICK if args.quick else FULL
    config = Config(
        nodes=args.nodes or sizes["nodes"],
        gpus_per_node=args.gpus_per_node or sizes["gpus_per_node"],
        workloads=args.workloads or sizes["workloads"],
        reclaim=args.reclaim or sizes["reclaim"],
        concurrency=args.concurrency,
        database_url=args.database_url,
        cycle_interval_s=args.cycle_interval,
        max_reclaims_per_cycle=args.max_reclaims_per_cycle,
        poll_s=args.poll,
        timeout_s=args.timeout,
        loop=not args.no_loop,
    )
    if min(config.nodes, config.gpus_per_node, config.workloads, config.reclaim) < 1:
        parser.error("sizes must be positive")
    if config.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    if config.workloads > config.gpus:
        parser.error(f"--workloads ({config.workloads}) must fit the {config.gpus} GPUs")
    if config.reclaim > config.quota_b_gpus:
        parser.error(f"--reclaim must be at most team-b's quota ({config.quota_b_gpus} GPUs)")

    # Rich wraps at 80 columns when the output is not a terminal: too narrow for the tables.
    console = Console(stderr=True) if args.json else Console(width=None if _tty() else 120)

    def announce(server: ServerProcess) -> None:
        console.print(f"[dim]server pid {server.pid} at {server.url}[/dim]")

    with console.status("running the benchmark..."):
        result = run_benchmark(config, announce)
    if args.json:
        print(json.dumps(payload(result), indent=2))
    else:
        render(result, console, args.timeline)
    if not result.completed:
        return 1
    return 1 if args.check and not result.met else 0


def _tty() -> bool:
    return sys.stdout.isatty()


if __name__ == "__main__":
    sys.exit(main())
