"""The benchmark's output: the tables on the terminal and the JSON payload."""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from api_bench.model import PROJECT_B, BenchResult, Config, LoopCycle, LoopResult, PhaseResult
from gpupool.core.model import MILLI_PER_GPU


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _database(config: Config) -> str:
    if config.database_url is None:
        return "SQLite (WAL)"
    return config.database_url.split(":", 1)[0].split("+", 1)[0]


def _verdict(phase: PhaseResult) -> str:
    if not phase.completed:
        return "[red]incomplete[/red]"
    return "[green]met[/green]" if phase.met else "[red]missed[/red]"


def render(result: BenchResult, console: Console, timeline: bool) -> None:
    config = result.config
    table = Table(
        title=(
            f"gpupool API: {config.nodes:,} nodes x {config.gpus_per_node} GPUs, "
            f"{_database(config)}, {config.concurrency} concurrent POSTs"
        ),
        caption="seconds from the phase's first POST",
    )
    for column in (
        "phase",
        "workloads",
        "acknowledged",
        "POST/s",
        "p50 / p99 ms",
        "bound",
        "running / holding",
        "target",
        "verdict",
    ):
        table.add_column(column, justify="left" if column in ("phase", "verdict") else "right")
    for phase in result.phases:
        latency = (
            f"{phase.latency_ms['p50']:,.0f} / {phase.latency_ms['p99']:,.0f}"
            if phase.latency_ms
            else "—"
        )
        rate = phase.ack_rate
        table.add_row(
            f"{phase.name} ({phase.project})",
            f"{phase.count:,}",
            _s(phase.ack_s),
            "—" if rate is None else f"{rate:,.0f}",
            latency,
            _s(phase.bound_s),
            f"[bold]{_s(phase.done_s)}[/bold]",
            f"<= {phase.target_s:.0f}",
            _verdict(phase),
        )
    console.print(table)

    server = Table(
        title="The server meanwhile",
        caption="CPU from /proc; cycles, binds and evictions from the server's /metrics",
    )
    for column in (
        "phase",
        "wall s",
        "server CPU s",
        "client CPU s",
        "cycles",
        "in cycles s",
        "mean cycle ms",
        "longest ms",
        "binds",
        "evicts",
    ):
        server.add_column(column, justify="left" if column == "phase" else "right")
    for phase in result.phases:
        server.add_row(
            phase.name,
            _s(phase.wall_s),
            _s(phase.server_cpu_s),
            _s(phase.client_cpu_s),
            f"{phase.cycles:,}",
            _s(phase.cycle_sum_s),
            _ms(phase.cycle_sum_s / phase.cycles * 1000 if phase.cycles else None),
            _ms(None if phase.longest_cycle_s is None else phase.longest_cycle_s * 1000),
            f"{phase.binds:,}",
            f"{phase.evicts:,}",
        )
    console.print(server)

    if timeline:
        for phase in result.phases:
            spans = Table(title=f"{phase.name}: cycles seen by each poll of /metrics")
            for column in ("t s", "cycles", "mean cycle ms", "binds", "evicts", "pending after"):
                spans.add_column(column, justify="right")
            for span in phase.timeline:
                spans.add_row(
                    f"{span.at_s:.2f}",
                    str(span.cycles),
                    _ms(span.mean_cycle_s * 1000),
                    f"{span.binds:,}",
                    f"{span.evicts:,}",
                    f"{span.pending_after:,}",
                )
            console.print(spans)

    if result.loop is not None:
        _render_loop(result.loop, console)

    for phase in result.phases:
        label = (
            f"{phase.count:,} workloads all running"
            if phase.name == "burst"
            else f"{phase.project} holds its quota ({config.quota_b_gpus:,} GPUs)"
        )
        if not phase.completed:
            why = (
                f"{phase.errors} POST errors, e.g. {phase.error_samples[:1]}"
                if phase.errors
                else f"not done in {config.timeout_s:.0f} s (holding {phase.held_gpus} GPUs)"
            )
            console.print(f"{label} in <= {phase.target_s:.0f} s: [red]incomplete[/red] ({why})")
            continue
        console.print(
            f"{label} in <= {phase.target_s:.0f} s: {_verdict(phase)} ({phase.done_s:.2f} s)"
        )
    if len(result.phases) < 2:
        console.print("The reclaim phase did not run: the burst did not complete.")
    retried = sum(p.retried for p in result.phases)
    if retried:
        console.print(f"[dim]{retried} POSTs were sent again after their connection failed.[/dim]")
    console.print(
        "[dim]At the end (/top): "
        + "; ".join(
            f"{name} {v['allocated_gpu_milli'] / MILLI_PER_GPU:,.0f} GPUs, "
            f"{v['running']:,} running, {v['pending']:,} pending"
            for name, v in result.final.items()
        )
        + f". Server pid {result.server_pid}.[/dim]"
    )


def _render_loop(loop: LoopResult, console: Console) -> None:
    table = Table(
        title="The scheduling loop in-process (no HTTP), fresh SQLite database",
        caption=(
            "cycle = snapshot + core + persist (SchedulingLoop.cycle); dispatch starts and stops "
            "tasks on the simulated executor; ms"
        ),
    )
    for column in (
        "iteration",
        "pending",
        "snapshot",
        "core",
        "persist",
        "cycle",
        "dispatch",
        "binds",
        "evicts",
    ):
        table.add_column(column, justify="left" if column == "iteration" else "right")

    def row(label: str, c: LoopCycle) -> None:
        table.add_row(
            label,
            f"{c.pending:,}",
            _ms(c.snapshot_ms),
            _ms(c.core_ms),
            _ms(c.persist_ms),
            _ms(c.cycle_ms),
            _ms(c.dispatch_ms),
            f"{c.binds:,}",
            f"{c.evicts:,}",
        )

    row("burst: first cycle", loop.burst)
    if loop.reclaim:
        row("reclaim: first cycle", loop.reclaim[0])
        table.add_section()
        table.add_row(
            f"reclaim: {len(loop.reclaim)} cycles",
            "",
            "",
            "",
            "",
            _ms(sum(c.cycle_ms for c in loop.reclaim)),
            _ms(sum(c.dispatch_ms for c in loop.reclaim)),
            f"{sum(c.binds for c in loop.reclaim):,}",
            f"{sum(c.evicts for c in loop.reclaim):,}",
        )
    console.print(table)
    done = "holds its quota" if loop.reclaim_done else "[red]did not get its quota[/red]"
    console.print(
        f"[dim]In-process: {PROJECT_B} {done} after {len(loop.reclaim)} loop iterations, "
        f"{loop.reclaim_total_s:.2f} s of loop time (split timings add one snapshot + core "
        f"to the first); database set up in {loop.setup_s:.2f} s.[/dim]"
    )


def payload(result: BenchResult) -> dict[str, Any]:
    return {
        "config": asdict(result.config),
        "python": sys.version.split()[0],
        "server_pid": result.server_pid,
        "completed": result.completed,
        "targets_met": result.met,
        "phases": [
            {
                **asdict(p),
                "completed": p.completed,
                "met": p.met,
                "ack_rate_per_s": p.ack_rate,
            }
            for p in result.phases
        ],
        "final": result.final,
        "loop": None if result.loop is None else asdict(result.loop),
    }
