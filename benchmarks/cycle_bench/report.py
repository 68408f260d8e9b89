"""The cycle benchmark's report: time ratios per 10x of nodes, the targets, and the table.

`steps` gives the ratio per 10x of nodes between consecutive sizes, `targets` the verdicts on
issue 13's targets (also in the JSON), and `render` the table and the lines under it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import cast

from rich.console import Console
from rich.table import Table

from cycle_bench.measure import SizeResult, core_build
from gpupool.core.observer import PHASES

TARGET_1K_MS = 100.0
TARGET_10K_MS = 1000.0
TARGET_SCALING_1K_10K = 10.0


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


def _print_target(
    console: Console, label: str, met: object, measured: Callable[[], str], how_to_measure: str
) -> None:
    """One line per benchmark target: met, missed, or not measured (and how to measure it)."""
    if met is None:
        console.print(f"{label}: not measured ({how_to_measure})")
        return
    verdict = "[green]met[/green]" if met else "[red]missed[/red]"
    console.print(f"{label}: {verdict} ({measured()})")
