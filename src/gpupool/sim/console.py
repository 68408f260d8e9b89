"""The short terminal summary of a comparison: one row per policy (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from gpupool.sim.compare import Comparison, format_duration_s

__all__ = ["print_summary"]


def print_summary(console: Console, comparison: Comparison) -> None:
    gpus = comparison.cluster.capacity_gpu_milli // 1000
    console.print(
        f"Simulated {comparison.workloads} workloads ({comparison.source}) on "
        f"{len(comparison.cluster.nodes)} nodes, {gpus} GPUs; averages over the first "
        f"{format_duration_s(comparison.window_s)}"
    )
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in (
        "policy",
        "alloc %",
        "util %",
        "queue p50",
        "queue p90",
        "evicted",
        "lost GPU-h",
        "all done",
    ):
        if column == "policy":
            table.add_column(column, no_wrap=True, min_width=len("guaranteed"))
        else:
            table.add_column(column, justify="right", min_width=min(len(column), 7))
    for run in comparison.runs:
        s = run.summary
        table.add_row(
            run.policy.value,
            f"{s.allocation_pct:.1f}",
            f"{s.utilization_pct:.1f}",
            format_duration_s(s.queueing_delay.p50_s),
            format_duration_s(s.queueing_delay.p90_s),
            str(s.preemptions),
            f"{s.lost_gpu_hours:.1f}",
            format_duration_s(s.makespan_s),
        )
    console.print(table)
    for run in comparison.runs:
        waiting = [o for o in run.result.outcomes if o.first_start_s is None]
        if waiting:
            first = waiting[0]
            console.print(
                f"[yellow]{run.policy.value}:[/] {len(waiting)} workload(s) never started, "
                f"like {first.name}: {first.reason or 'no reason recorded'}"
            )
    unsettled = [r.policy.value for r in comparison.runs if r.summary.unsettled_instants]
    if unsettled:
        console.print(
            f"[yellow]warning:[/] some instants did not reach a fixed point within the cycle "
            f"bound ({', '.join(unsettled)}); see docs/simulator.md"
        )
