"""Time one full scheduling cycle on synthetic, trace-shaped clusters of growing size.

    .venv/bin/python benchmarks/cycle.py                       # 100, 1000 and 10000 nodes
    .venv/bin/python benchmarks/cycle.py --nodes 1000 --repeat 5 --json
    .venv/bin/python benchmarks/cycle.py --gc on       # with the collector running (default: off,
                                                       # as the server loop runs a cycle)
    .venv/bin/python benchmarks/cycle.py --clock cpu   # process CPU time (a shared machine)

For each size the snapshot comes from `cycle_workload.build_snapshot` (not timed); then
`gpupool.core.cycle.run_cycle` runs `--repeat` times on it, with an observer that reads
`time.perf_counter` around each phase (`--clock cpu`: `time.process_time`, the process's CPU
time, which other work on a shared machine disturbs less), and the median of each column is
reported; the line under the table gives every repeat's total and the best. After the timed
runs the decisions are checked for consistency (not timed): every decision names a workload in a
state it can apply to, and the snapshot after the decisions passes `validate_snapshot`.

Targets (issue 13): a 1,000-node cycle in at most 100 ms, a 10,000-node one in at most 1 s, and
no worse than linear: at most 10x the time per 10x the nodes, in at most 2 GB of memory: the
table shows the process's peak resident set size after each size (`ru_maxrss`, snapshot and
all), and with `--tracemalloc` the peak Python allocations of one more, untimed cycle. Below
the sizes, one row per step between consecutive sizes gives each phase's time ratio per 10x of
nodes ((t2 / t1) ** (1 / log10(n2 / n1)), t2 / t1 itself for a 10x step).

The table is as wide as the terminal, or whole (no column cut) when the output is piped.
Exit status: 0, or 1 when the decisions were inconsistent (missed targets do not change it), or 2
when `run_cycle` does not exist.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import importlib.machinery
import itertools
import json
import math
import statistics
import sys
import time
import tracemalloc
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Protocol, cast

from cycle_workload import (
    build_snapshot,
    snapshot_stats,
    validate_decisions,
    validate_snapshot,
)
from rich.console import Console
from rich.table import Table

from gpupool.cli.terminal import output_console
from gpupool.core.decisions import Bind, CycleResult, Evict, Move
from gpupool.core.model import Snapshot
from gpupool.core.observer import PHASES, CycleObserver
from gpupool.simcluster.apply import apply_decisions

TARGET_1K_MS = 100.0
TARGET_10K_MS = 1000.0
TARGET_SCALING_1K_10K = 10.0
DEFAULT_NODES = (100, 1000, 10000)


class RunCycle(Protocol):
    def __call__(
        self, snapshot: Snapshot, observer: CycleObserver | None = None
    ) -> CycleResult: ...


def core_build() -> str:
    """ "compiled" when `gpupool.core.cycle` was loaded from an extension module (a mypyc build,
    benchmarks/compile_core.py), else "pure Python"."""
    module = importlib.import_module("gpupool.core.cycle")
    path = getattr(module, "__file__", None) or ""
    compiled = path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    return "compiled" if compiled else "pure Python"


def load_run_cycle() -> RunCycle:
    """`gpupool.core.cycle.run_cycle`, looked up at run time (the core may not have it yet)."""
    module = importlib.import_module("gpupool.core.cycle")
    return cast(RunCycle, module.run_cycle)


CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
"""What the timings read: wall time, or the process's CPU time (user + system)."""


class PhaseTimer:
    """A `CycleObserver` that sums time per phase on `clock` (`time.perf_counter` unless told)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._started: dict[str, float] = {}
        self.elapsed_s: dict[str, float] = defaultdict(float)

    def phase_started(self, phase: str) -> None:
        self._started[phase] = self._clock()

    def phase_finished(self, phase: str) -> None:
        start = self._started.pop(phase, None)
        if start is not None:
            self.elapsed_s[phase] += self._clock() - start


@dataclass(slots=True)
class SizeResult:
    nodes: int
    gpus: int
    running: int
    pending: int
    generate_s: float
    phases_ms: dict[str, float]
    """Median over the repeats, per phase."""
    unattributed_ms: float
    """Median of (total - sum of phases): time in run_cycle outside any observed phase."""
    total_ms: float
    """Median wall time of the whole run_cycle call."""
    totals_ms: list[float]
    """Every repeat's total, in order."""
    bind: int
    evict: int
    move: int
    still_pending: int
    """Workloads with a pending reason after the cycle."""
    problems: list[str] = field(default_factory=list)
    """Consistency problems found in the decisions (empty when all is well)."""
    peak_rss_mib: float | None = None
    """The process's peak resident set size (`resource.getrusage(RUSAGE_SELF).ru_maxrss`) once
    this size was measured: snapshot and cycles together, and a peak over the whole run so far
    (sizes are measured in the order given, so in ascending order it is this size's). None
    where `resource` is missing (Windows)."""
    cycle_peak_mib: float | None = None
    """With `--tracemalloc`: the peak of Python allocations during one more (untimed) cycle,
    above what was allocated when it began (`tracemalloc.get_traced_memory`); the cycle's own
    memory, the snapshot left out."""


GC_MODES = ("on", "freeze", "off")
"""Garbage collector during the timed cycles: as is, with the snapshot frozen out of it
(`gc.freeze()`, as a long-running driver might), or disabled."""


def measure(
    nodes: int,
    seed: int,
    repeat: int,
    run_cycle: RunCycle,
    gc_mode: str = "off",
    placement: str = "binpack",
    trace_memory: bool = False,
    clock: str = "wall",
) -> SizeResult:
    now = CLOCKS[clock]
    t0 = time.perf_counter()
    snapshot = build_snapshot(nodes, seed)
    snapshot = dataclasses.replace(
        snapshot, settings=dataclasses.replace(snapshot.settings, placement=placement)
    )
    generate_s = time.perf_counter() - t0
    stats = snapshot_stats(snapshot)

    per_phase: dict[str, list[float]] = {phase: [] for phase in PHASES}
    totals: list[float] = []
    unattributed: list[float] = []
    result: CycleResult | None = None
    for _ in range(repeat):
        gc.collect()
        if gc_mode == "freeze":
            gc.freeze()
        elif gc_mode == "off":
            gc.disable()
        try:
            timer = PhaseTimer(now)
            start = now()
            result = run_cycle(snapshot, timer)
            total = now() - start
        finally:
            gc.enable()
            gc.unfreeze()
        totals.append(total * 1000)
        for phase in PHASES:
            per_phase[phase].append(timer.elapsed_s.get(phase, 0.0) * 1000)
        unattributed.append((total - sum(timer.elapsed_s.values())) * 1000)
    assert result is not None

    problems = validate_decisions(snapshot, result.decisions)
    problems += validate_snapshot(apply_decisions(snapshot, result.decisions))
    cycle_peak_mib = _traced_cycle_peak_mib(snapshot, run_cycle) if trace_memory else None
    return SizeResult(
        nodes=nodes,
        gpus=stats.gpus,
        running=stats.running,
        pending=stats.pending,
        generate_s=generate_s,
        phases_ms={phase: statistics.median(values) for phase, values in per_phase.items()},
        unattributed_ms=statistics.median(unattributed),
        total_ms=statistics.median(totals),
        totals_ms=totals,
        bind=sum(1 for d in result.decisions if isinstance(d, Bind)),
        evict=sum(1 for d in result.decisions if isinstance(d, Evict)),
        move=sum(1 for d in result.decisions if isinstance(d, Move)),
        still_pending=len(result.pending_reasons),
        problems=problems,
        peak_rss_mib=peak_rss_mib(),
        cycle_peak_mib=cycle_peak_mib,
    )


def peak_rss_mib() -> float | None:
    """The process's peak resident set size so far, MiB (`ru_maxrss`: KiB on Linux, bytes on
    macOS); None where the `resource` module is missing."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _traced_cycle_peak_mib(snapshot: Snapshot, run_cycle: RunCycle) -> float:
    """Peak Python allocations of one cycle above the allocations when it starts, MiB. Under
    tracemalloc a cycle runs several times slower, so this run is not timed."""
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        run_cycle(snapshot)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return (peak - base) / (1024 * 1024)


def _by_nodes(results: list[SizeResult], nodes: int) -> SizeResult | None:
    return next((r for r in results if r.nodes == nodes), None)


@dataclass(frozen=True, slots=True)
class Step:
    """From one measured size to the next: time ratios per 10x of nodes."""

    from_nodes: int
    to_nodes: int
    total: float | None
    phases: dict[str, float | None]


def _per_10x(before: float, after: float, nodes_factor: float) -> float | None:
    if before <= 0 or after <= 0 or nodes_factor <= 1:
        return None
    return float((after / before) ** (1 / math.log10(nodes_factor)))


def steps(results: list[SizeResult]) -> list[Step]:
    """Each pair of consecutive sizes (by node count), with the ratio per 10x of nodes."""
    ordered = sorted(results, key=lambda r: r.nodes)
    out: list[Step] = []
    for a, b in itertools.pairwise(ordered):
        if b.nodes <= a.nodes:
            continue
        factor = b.nodes / a.nodes
        out.append(
            Step(
                from_nodes=a.nodes,
                to_nodes=b.nodes,
                total=_per_10x(a.total_ms, b.total_ms, factor),
                phases={p: _per_10x(a.phases_ms[p], b.phases_ms[p], factor) for p in PHASES},
            )
        )
    return out


def targets(results: list[SizeResult]) -> dict[str, object]:
    one_k = _by_nodes(results, 1000)
    ten_k = _by_nodes(results, 10000)
    out: dict[str, object] = {
        "total_1k_ms": None if one_k is None else one_k.total_ms,
        "target_1k_ms": TARGET_1K_MS,
        "meets_1k": None if one_k is None else one_k.total_ms <= TARGET_1K_MS,
        "total_10k_ms": None if ten_k is None else ten_k.total_ms,
        "target_10k_ms": TARGET_10K_MS,
        "meets_10k": None if ten_k is None else ten_k.total_ms <= TARGET_10K_MS,
        "scaling_per_10x": [asdict(step) for step in steps(results)],
        "scaling_1k_10k": None,
        "target_scaling_1k_10k": TARGET_SCALING_1K_10K,
        "meets_scaling": None,
        "phase_scaling_1k_10k": None,
    }
    if one_k is not None and ten_k is not None and one_k.total_ms > 0:
        factor = ten_k.total_ms / one_k.total_ms
        out["scaling_1k_10k"] = factor
        out["meets_scaling"] = factor <= TARGET_SCALING_1K_10K
        out["phase_scaling_1k_10k"] = {
            phase: (ten_k.phases_ms[phase] / one_k.phases_ms[phase])
            if one_k.phases_ms[phase] > 0
            else None
            for phase in PHASES
        }
    return out


def _ms(value: float) -> str:
    return f"{value:,.1f}"


def _mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}x"


def _short(nodes: int) -> str:
    """1000 -> 1k, 10000 -> 10k, 250 -> 250."""
    return f"{nodes // 1000}k" if nodes >= 1000 and nodes % 1000 == 0 else f"{nodes:,}"


def render(
    results: list[SizeResult],
    seed: int,
    repeat: int,
    gc_mode: str,
    console: Console,
    clock: str = "wall",
) -> None:
    what = "CPU ms" if clock == "cpu" else "ms"
    table = Table(
        title=f"gpupool: one scheduling cycle, {what} (median of {repeat}, seed {seed}, "
        f"gc {gc_mode}, core {core_build()})",
        caption="snapshot generation is not timed; 'other' = total - sum of phases; "
        "a→b: time ratio per 10x of nodes (linear: 10.0x); peak RSS: the process's "
        "(ru_maxrss), snapshot included, after this size",
    )
    for column in ("nodes", "GPUs", "running", "pending"):
        table.add_column(column, justify="right")
    for phase in PHASES:
        table.add_column(phase, justify="right")
    table.add_column("other", justify="right")
    table.add_column("total", justify="right", style="bold")
    for column in ("bind", "evict", "move"):
        table.add_column(column, justify="right")
    table.add_column("peak RSS MiB", justify="right")
    traced = any(r.cycle_peak_mib is not None for r in results)
    if traced:
        table.add_column("cycle MiB", justify="right")
    for r in results:
        table.add_row(
            f"{r.nodes:,}",
            f"{r.gpus:,}",
            f"{r.running:,}",
            f"{r.pending:,}",
            *(_ms(r.phases_ms[phase]) for phase in PHASES),
            _ms(r.unattributed_ms),
            _ms(r.total_ms),
            f"{r.bind:,}",
            f"{r.evict:,}",
            f"{r.move:,}",
            _mib(r.peak_rss_mib),
            *([_mib(r.cycle_peak_mib)] if traced else []),
        )
    goals = targets(results)
    ladder = steps(results)
    if ladder:
        table.add_section()
    for step in ladder:
        table.add_row(
            f"{_short(step.from_nodes)}→{_short(step.to_nodes)}",
            "",
            "",
            "",
            *(_ratio(step.phases[phase]) for phase in PHASES),
            "",
            _ratio(step.total),
            "",
            "",
            "",
            "",
            *([""] if traced else []),
        )
    console.print(table)

    _print_target(
        console,
        f"1,000-node target (<= {TARGET_1K_MS:.0f} ms)",
        goals["meets_1k"],
        lambda: f"{_ms(cast(float, goals['total_1k_ms']))} ms",
        "add 1000 to --nodes",
    )
    _print_target(
        console,
        f"10,000-node target (<= {TARGET_10K_MS:,.0f} ms)",
        goals["meets_10k"],
        lambda: f"{_ms(cast(float, goals['total_10k_ms']))} ms",
        "add 10000 to --nodes",
    )
    _print_target(
        console,
        f"Scaling 1k→10k (<= {TARGET_SCALING_1K_10K:.0f}x, linear)",
        goals["meets_scaling"],
        lambda: f"{cast(float, goals['scaling_1k_10k']):.2f}x",
        "needs 1000 and 10000 in --nodes",
    )
    if ladder:
        console.print(
            "Time per 10x of nodes: "
            + ", ".join(
                f"{_short(s.from_nodes)}→{_short(s.to_nodes)} {_ratio(s.total)}" for s in ladder
            )
            + " (linear: 10.0x)"
        )
    for r in results:
        console.print(
            f"[dim]{r.nodes:,} nodes: generated in {r.generate_s:.2f} s; totals "
            f"{', '.join(_ms(t) for t in r.totals_ms)} {what} (best {_ms(min(r.totals_ms))}); "
            f"{r.still_pending:,} still pending[/dim]"
        )
        if r.problems:
            console.print(f"[red]{r.nodes:,} nodes: inconsistent decisions:[/red]")
            for text in r.problems:
                console.print(f"  [red]- {text}[/red]")


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
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    try:
        run_cycle = load_run_cycle()
    except (ImportError, AttributeError) as exc:
        print(f"gpupool.core.cycle.run_cycle is not available: {exc}", file=sys.stderr)
        return 2

    console = output_console(stderr=args.json, highlight=True)
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


def _print_target(
    console: Console, label: str, met: object, measured: Callable[[], str], how_to_measure: str
) -> None:
    """One line per benchmark target: met, missed, or not measured (and how to measure it)."""
    if met is None:
        console.print(f"{label}: not measured ({how_to_measure})")
        return
    verdict = "[green]met[/green]" if met else "[red]missed[/red]"
    console.print(f"{label}: {verdict} ({measured()})")


if __name__ == "__main__":
    sys.exit(main())
