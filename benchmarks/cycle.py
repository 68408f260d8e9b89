"""Time one full scheduling cycle on synthetic, trace-shaped clusters of growing size.

    .venv/bin/python benchmarks/cycle.py                       # 100, 1000 and 10000 nodes
    .venv/bin/python benchmarks/cycle.py --nodes 1000 --repeat 5 --json
    .venv/bin/python benchmarks/cycle.py --gc on       # with the collector running (default: off,
                                                       # as the server loop runs a cycle)
    .venv/bin/python benchmarks/cycle.py --clock cpu   # process CPU time (a shared machine)
    .venv/bin/python benchmarks/cycle.py --settled     # a settled cluster's cycle (see below)

For each size the snapshot comes from `cycle_bench.workload.build_snapshot` (not timed); then
`gpupool.core.cycle.run_cycle` runs `--repeat` times on it, with an observer that reads
`time.perf_counter` around each phase (`--clock cpu`: `time.process_time`, the process's CPU
time, which other work on a shared machine disturbs less), and the median of each column is
reported; the line under the table gives every repeat's total and the best. After the timed
runs the decisions are checked for consistency (not timed): every decision names a workload in a
state it can apply to, and the snapshot after the decisions passes `validate_snapshot`.

With `--settled` the snapshot is first run to rest, untimed: each cycle's decisions are applied
as a driver would (the clock 30 s on each time) until a cycle makes none, at most 60 cycles;
the timed cycle is then the one a loaded server runs most often: nothing to start or evict,
the rest of the queue answered (fewer pending, more running than the generated snapshot).

Targets (issue 13): a 1,000-node cycle in at most 100 ms, a 10,000-node one in at most 1 s, and
no worse than linear: at most 10x the time per 10x the nodes, in at most 2 GB of memory: the
table shows the process's peak resident set size after each size (`ru_maxrss`, snapshot and
all), and with `--tracemalloc` the peak Python allocations of one more, untimed cycle. Below
the sizes, one row per step between consecutive sizes gives each phase's time ratio per 10x of
nodes ((t2 / t1) ** (1 / log10(n2 / n1)), t2 / t1 itself for a 10x step).

The table has a column per size and a row per phase, so it stays narrow; where the sizes do not
fit the terminal's width (100 columns when the output is piped) it is split into tables of fewer
sizes, never cut.
Exit status: 0, or 1 when the decisions were inconsistent (missed targets do not change it), or 2
when `run_cycle` does not exist.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

# The parts live next to this file (benchmarks/cycle_bench/), also when it is loaded by path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cycle_bench.measure import CLOCKS, GC_MODES, SizeResult, core_build, load_run_cycle, measure
from cycle_bench.report import FILE_WIDTH, render, steps, targets

from gpupool.cli.terminal import output_console
from gpupool.core.policies import canonical_name

__all__ = ["SizeResult", "core_build", "main", "measure", "steps", "targets"]

DEFAULT_NODES = (100, 1000, 10000)


def parse_nodes(text: str) -> list[int]:
    try:
        sizes = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text}") from exc
    if not sizes or any(n < 1 for n in sizes):
        raise argparse.ArgumentTypeError("node counts must be positive integers")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--nodes",
        type=parse_nodes,
        default=list(DEFAULT_NODES),
        help="comma-separated cluster sizes in nodes of 8 GPUs (default: 100,1000,10000)",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="cycles per size; the median is reported"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic workload")
    parser.add_argument(
        "--gc",
        choices=GC_MODES,
        default="off",
        help="garbage collector during the timed cycles (default: off, as the server loop"
        " pauses it for each cycle: gpupool.gcpause)",
    )
    parser.add_argument(
        "--placement",
        default="binpack",
        help="placement policy (binpack, default, fgd, ...; the server runs default)",
    )
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="after the timed cycles, run one more under tracemalloc and report its peak "
        "Python allocations (the cycle's own memory; slow, not timed)",
    )
    parser.add_argument(
        "--clock",
        choices=tuple(CLOCKS),
        default="wall",
        help="what the times measure: wall time, or the process's CPU time (steadier on a "
        "shared machine; default: wall)",
    )
    parser.add_argument(
        "--settled",
        action="store_true",
        help="time the cycle of a settled cluster: the generated snapshot's cycles applied one"
        " after the other (30 s apart, not timed) until one makes no decision",
    )
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    try:
        canonical_name(args.placement)
    except ValueError as error:  # one policy per run: say which names there are
        parser.error(f"--placement: {error}")

    try:
        run_cycle = load_run_cycle()
    except (ImportError, AttributeError) as exc:
        print(f"gpupool.core.cycle.run_cycle is not available: {exc}", file=sys.stderr)
        return 2

    console = output_console(stderr=args.json, highlight=True)
    if not console.is_terminal:
        console.width = FILE_WIDTH  # read in a terminal later: fit the usual one
    results: list[SizeResult] = []
    for nodes in args.nodes:
        with console.status(f"{nodes:,} nodes..."):
            results.append(
                measure(
                    nodes,
                    args.seed,
                    args.repeat,
                    run_cycle,
                    args.gc,
                    args.placement,
                    args.tracemalloc,
                    args.clock,
                    args.settled,
                )
            )

    if args.json:
        payload = {
            "seed": args.seed,
            "repeat": args.repeat,
            "gc": args.gc,
            "clock": args.clock,
            "placement": args.placement,
            "python": sys.version.split()[0],
            "core": core_build(),
            "results": [asdict(r) for r in results],
            "targets": targets(results),
        }
        print(json.dumps(payload, indent=2))
    else:
        render(results, args.seed, args.repeat, args.gc, console, args.clock)
    return 1 if any(r.problems for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
