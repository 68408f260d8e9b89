"""One size of the cycle benchmark, measured: build the snapshot, time `run_cycle` on it.

`measure` times `--repeat` cycles with a `PhaseTimer` (an observer that sums each phase's time
on the chosen clock), with the garbage collector as `--gc` says, checks the decisions (not
timed) and gives a `SizeResult`: medians per phase, decisions, peak memory.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import statistics
import sys
import time
import tracemalloc
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, cast

from cycle_bench.checks import snapshot_stats, validate_decisions, validate_snapshot
from cycle_bench.workload import build_snapshot
from gpupool.core.decisions import Bind, CycleResult, Evict, Move
from gpupool.core.model import Snapshot
from gpupool.core.observer import PHASES, CycleObserver
from gpupool.corebuild import core_build as core_build
from gpupool.simcluster.apply import apply_decisions


class RunCycle(Protocol):
    def __call__(
        self, snapshot: Snapshot, observer: CycleObserver | None = None
    ) -> CycleResult: ...


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
    settled_after: int | None = None
    """With `--settled`: how many cycles were run and applied to the snapshot before the timed
    ones (until one made no decision, at most `SETTLE_MAX_CYCLES`); None for the snapshot as
    generated."""
    cycle_peak_mib: float | None = None
    """With `--tracemalloc`: the peak of Python allocations during one more (untimed) cycle,
    above what was allocated when it began (`tracemalloc.get_traced_memory`); the cycle's own
    memory, the snapshot left out."""


SETTLE_MAX_CYCLES = 60
SETTLE_STEP_S = 30
"""`--settled`: cycles applied one after the other, the clock moved this far between them (the
server's loop runs one every few seconds; min runtimes end as they would)."""


def settle(snapshot: Snapshot, run_cycle: RunCycle) -> tuple[Snapshot, int]:
    """The cluster once its cycles stop changing it: each cycle's decisions applied as a driver
    would, until a cycle makes none (at most `SETTLE_MAX_CYCLES`). Returns the snapshot and the
    number of cycles applied. The cycle a loaded server runs most: nothing to start, nothing to
    evict, a long queue to answer."""
    for applied in range(SETTLE_MAX_CYCLES):
        decisions = run_cycle(snapshot).decisions
        if not decisions:
            return snapshot, applied
        snapshot = dataclasses.replace(
            apply_decisions(snapshot, decisions), now_s=snapshot.now_s + SETTLE_STEP_S
        )
    return snapshot, SETTLE_MAX_CYCLES


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
    settled: bool = False,
) -> SizeResult:
    now = CLOCKS[clock]
    t0 = time.perf_counter()
    snapshot = build_snapshot(nodes, seed)
    snapshot = dataclasses.replace(
        snapshot, settings=dataclasses.replace(snapshot.settings, placement=placement)
    )
    settled_after = None
    if settled:
        snapshot, settled_after = settle(snapshot, run_cycle)
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
        settled_after=settled_after,
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
