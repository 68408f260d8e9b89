"""Count the instructions of one warm scheduling cycle, a figure the machine's load does not move.

    .venv/bin/python benchmarks/cycle_instructions.py                  # 1,000 nodes, 3 policies
    .venv/bin/python benchmarks/cycle_instructions.py --nodes 200 --placement binpack

CPU time on a shared machine moves by up to 1.7x between identical runs (benchmarks/RESULTS.md),
which hides the 1-15% that a change to the core's hot path makes. This runs the same snapshot
as `benchmarks/cycle.py` (`cycle_bench.workload.build_snapshot`, seed 0, collector paused) under
valgrind's cachegrind without its cache simulation, once with one cycle and once with two, and
reports the difference: the instructions of one warm cycle, snapshot generation and start-up
excluded. Needs valgrind (`apt-get install valgrind`); about two minutes per policy at 1,000
nodes. Exit status 2 when valgrind is missing.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

DEFAULT_PLACEMENTS = ("binpack", "default", "fgd")
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def run_cycles(nodes: int, placement: str, cycles: int) -> None:
    """The measured process: build the snapshot, then run `cycles` cycles on it."""
    from cycle_bench.workload import build_snapshot

    from gpupool.core.cycle import run_cycle

    snapshot = build_snapshot(nodes, 0)
    settings = dataclasses.replace(snapshot.settings, placement=placement)
    snapshot = dataclasses.replace(snapshot, settings=settings)
    gc.disable()
    for _ in range(cycles):
        run_cycle(snapshot)


def instruction_refs(valgrind_output: str) -> int:
    """The total instructions cachegrind reports ("I refs: 1,234,567")."""
    found = _REFS.search(valgrind_output)
    if found is None:
        raise ValueError(f"no 'I refs' line in valgrind's output:\n{valgrind_output[-2000:]}")
    return int(found.group(1).replace(",", ""))


def count(valgrind: str, nodes: int, placement: str, cycles: int) -> int:
    command = [
        valgrind,
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
        sys.executable,
        str(Path(__file__).resolve()),
        "--run-cycles",
        str(cycles),
        "--nodes",
        str(nodes),
        "--placement",
        placement,
    ]
    # The same hash seed in both runs, so that dict and set layouts match.
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{placement}, {cycles} cycle(s) failed:\n{done.stderr[-2000:]}")
    return instruction_refs(done.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="cluster size (default 1000)")
    parser.add_argument(
        "--placement",
        default=",".join(DEFAULT_PLACEMENTS),
        help="comma-separated placement policies (default: binpack,default,fgd)",
    )
    parser.add_argument("--run-cycles", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error("--nodes must be a positive integer")
    placements = [p.strip() for p in args.placement.split(",") if p.strip()]
    from gpupool.core.policies import canonical_name

    try:
        for placement in placements:
            canonical_name(placement)
    except ValueError as error:
        parser.error(f"--placement: {error}")
    if not placements:
        parser.error("--placement: name at least one policy")
    if args.run_cycles is not None:  # inside valgrind
        run_cycles(args.nodes, placements[0], args.run_cycles)
        return 0
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    print(f"instructions of one warm cycle, {args.nodes:,} nodes (valgrind, 2 cycles - 1 cycle)")
    print(f"{'placement':<12} {'M instructions':>15}")
    for placement in placements:
        if sys.stdout.isatty():  # progress: a policy takes minutes at 1,000 nodes
            print(f"{placement:<12} ... running", end="\r", flush=True)
        one = count(valgrind, args.nodes, placement, 1)
        two = count(valgrind, args.nodes, placement, 2)
        print(f"{placement:<12} {(two - one) / 1e6:>15,.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
