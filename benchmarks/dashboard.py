"""The dashboard at a realistic size: the APIs its pages read, and the pages in a browser.

    .venv/bin/python benchmarks/dashboard.py              # 10,000 workloads, 50 projects, 30 days
    .venv/bin/python benchmarks/dashboard.py --workloads 200 --projects 3 --days 2 --nodes 4
    .venv/bin/python benchmarks/dashboard.py --json

1. **Seed** (not timed as a target, shown as progress): a fresh data directory's SQLite database,
   made by the server's own Alembic migrations, filled with SQLAlchemy Core bulk inserts:
   `--nodes` x `--gpus-per-node` simulated nodes (64 x 8), `--projects` projects (a few under
   departments; one in ten without quota) with quotas adding up to the cluster, users and their
   memberships, and `--workloads` workloads in a realistic mix: the running ones fill every GPU,
   each project exactly at its quota (so the scheduler has nothing to change: pending work can
   neither borrow nor reclaim), pending ones with pending reasons (some preempted before),
   suspended, completed and failed ones over the whole period, with their tasks and events.
   History: `--days` days in the downsampled store, per-minute rows (`resolution_s` 60) for the
   last 7 days and hourly rows (3600) for all of them, for every project, the cluster and every
   device, with a daily and weekly rhythm; hourly rows are the sums of their minutes' rows. The
   raw per-minute `usage` table (a row per device and per workload on it, per minute) is filled
   for the last `--raw-hours` (24): its endpoint's peer.
2. **Serve**: a real `gpupool server` on that data directory, with the simulated executor on the
   same nodes (the running tasks are in its journal, so it adopts them) and its scheduling loop
   running at its default interval (there is no setting to turn it off).
3. **Measure** over HTTP (keep-alive, `--requests` timed after `--warmup`), as the admin and as
   a researcher in three projects: `GET /api/v1/history?range=30d|7d|24h|1h` (every series, as
   the projects page and `gpupool usage` read it) and at 30 days and 1 hour with
   `project_series=allocated` (as the overview reads it), `/top`, `/projects`, `/nodes`,
   `/names`, and the first page of `/api/v1/workloads` (50 rows, newest first; the overview's 5
   oldest pending; filtered by project, by status and by a name search), each as far as the
   server's OpenAPI offers it. Then the reads each page waits for before it is drawn, issued
   together as the page issues them (the overview at 1 h and at 30 days: `/top`, `/history`
   and the oldest pending; the workloads page: its first page and `/projects`).
4. **Peer**, in the same run: the raw per-minute `usage` table through `GET /api/v1/usage`
   (`by=project`, `--raw-requests` each) over the last hour and the last `--raw-hours`, against
   the history store over the same window; `ratio` = raw / history. The raw table keeps and its
   endpoint reads at most 14 days, and a day of it at this size is 1.3 M rows, read in tens of
   seconds: 30 days cannot be read raw at all, and the default seeds one day of it.
5. **Browser** (when Playwright and `/usr/bin/chromium` (or `$GPUPOOL_CHROMIUM`) are there and
   the server serves the pages): log in once through `#login=TOKEN`, then time each view from
   navigation start until `main[data-ready]` names it: the overview (its default hour, and 30
   days) and the workloads page, median of `--browser-loads` fresh loads after one.

Targets (issue 12): the overview renders in <= 1 s (the browser's render; without a browser its
API reads stand in), the first page of workloads in <= 300 ms (the API's answer, and the
browser's render of the page against the same bound). Exit status 0 (an error stops the run);
with `--check`, 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

# The parts live next to this file (benchmarks/dashboard_bench/), also when it is loaded by path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dashboard_bench.browser import browser_unavailable
from dashboard_bench.common import RAW_RETENTION_H, SAMPLES_PER_MINUTE, Config
from dashboard_bench.history_seed import seed_history
from dashboard_bench.plan import plan
from dashboard_bench.report import payload, render, verdicts
from dashboard_bench.run import run
from dashboard_bench.seed import seed_state

__all__ = [
    "SAMPLES_PER_MINUTE",
    "Config",
    "browser_unavailable",
    "main",
    "plan",
    "seed_history",
    "seed_state",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    defaults = Config()
    parser.add_argument(
        "--workloads", type=int, default=defaults.workloads, help="workloads (10,000)"
    )
    parser.add_argument("--projects", type=int, default=defaults.projects, help="projects (50)")
    parser.add_argument("--days", type=int, default=defaults.days, help="days of history (30)")
    parser.add_argument("--nodes", type=int, default=defaults.nodes, help="simulated nodes (64)")
    parser.add_argument("--gpus-per-node", type=int, default=defaults.gpus_per_node)
    parser.add_argument(
        "--raw-hours",
        type=int,
        default=defaults.raw_hours,
        help="hours of the raw per-minute usage table to seed and read (0: no peer; at most "
        f"{RAW_RETENTION_H}, its retention)",
    )
    parser.add_argument("--requests", type=int, default=defaults.requests, help="per endpoint")
    parser.add_argument("--warmup", type=int, default=defaults.warmup)
    parser.add_argument(
        "--raw-requests", type=int, default=defaults.raw_requests, help="per peer window"
    )
    parser.add_argument("--browser-loads", type=int, default=defaults.browser_loads)
    parser.add_argument("--no-browser", action="store_true", help="skip the page renders")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    config = Config(
        workloads=args.workloads,
        projects=args.projects,
        days=args.days,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        raw_hours=min(args.raw_hours, args.days * 24),
        requests=args.requests,
        warmup=args.warmup,
        raw_requests=args.raw_requests,
        browser=not args.no_browser,
        browser_loads=args.browser_loads,
        seed=args.seed,
    )
    if min(config.workloads, config.projects, config.days, config.nodes, config.requests) < 1:
        parser.error("sizes and --requests must be positive")
    if not 1 <= config.gpus_per_node <= 64:
        parser.error("--gpus-per-node: 1 to 64")
    if not 0 <= config.raw_hours <= RAW_RETENTION_H:
        parser.error(f"--raw-hours: 0 to {RAW_RETENTION_H}")
    if config.browser_loads < 1 or config.raw_requests < 1 or config.warmup < 0:
        parser.error("--browser-loads and --raw-requests at least 1, --warmup at least 0")
    result = run(config, keep=args.keep)
    if args.json:
        print(json.dumps(payload(result), indent=2))
    else:
        render(result, Console(width=100))
    met = all(c["met"] for c in verdicts(result).values() if c["seconds"] is not None)
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
