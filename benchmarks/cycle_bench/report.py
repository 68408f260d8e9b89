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

from cycle_bench.measure import SETTLE_MAX_CYCLES, SizeResult, core_build
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
    """1000 -> 1k, 10000 -> 10k, 2000000 -> 2M, 250 -> 250."""
    if nodes >= 1_000_000 and nodes % 1_000_000 == 0:
        return f"{nodes // 1_000_000}M"
    return f"{nodes // 1000}k" if nodes >= 1000 and nodes % 1000 == 0 else f"{nodes:,}"


FILE_WIDTH = 100
"""The width of the report when the output is not a terminal (a file, a pipe): it is read in a
terminal later, and 100 columns fit the usual ones (`render` splits the table to fit)."""


def render(
    results: list[SizeResult],
    seed: int,
    repeat: int,
    gc_mode: str,
    console: Console,
    clock: str = "wall",
) -> None:
    what = "CPU ms" if clock == "cpu" else "ms"
    settled = any(r.settled_after is not None for r in results)
    title = (
        f"gpupool: one scheduling cycle{' of a settled cluster' if settled else ''}, {what}"
        f" (median of {repeat}, seed {seed}, gc {gc_mode}, core {core_build()})"
    )
    goals = targets(results)
    ladder = steps(results)
    console.print(title, style="bold")
    for table in fit_tables(results, ladder, console, console.width):
        console.print(table)
    console.print(
        "[dim]Snapshot generation is not timed; 'other' = total - sum of phases; a→b: time"
        " ratio per 10x of nodes (linear: 10.0x); peak RSS: the process's (ru_maxrss),"
        " snapshot included, after this size.[/dim]"
    )

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
            f"{r.still_pending:,} still pending"
            + (
                ""
                if r.settled_after is None
                else f"; settled: {r.settled_after} cycles applied before the timed ones"
                + (" (the cap: not at rest)" if r.settled_after >= SETTLE_MAX_CYCLES else "")
            )
            + "[/dim]"
        )
        if r.problems:
            console.print(f"[red]{r.nodes:,} nodes: inconsistent decisions:[/red]")
            for text in r.problems:
                console.print(f"  [red]- {text}[/red]")


def _rows(traced: bool) -> list[tuple[str, Callable[[SizeResult], str], bool]]:
    """The table's rows: (label, the value of one size, whether the row has a ratio per 10x)."""
    rows: list[tuple[str, Callable[[SizeResult], str], bool]] = [
        ("GPUs", lambda r: f"{r.gpus:,}", False),
        ("running", lambda r: f"{r.running:,}", False),
        ("pending", lambda r: f"{r.pending:,}", False),
    ]
    rows += [(phase, _phase_value(phase), True) for phase in PHASES]
    rows += [
        ("other", lambda r: _ms(r.unattributed_ms), False),
        ("total", lambda r: _ms(r.total_ms), True),
        ("bind", lambda r: f"{r.bind:,}", False),
        ("evict", lambda r: f"{r.evict:,}", False),
        ("move", lambda r: f"{r.move:,}", False),
        ("peak RSS MiB", lambda r: _mib(r.peak_rss_mib), False),
    ]
    if traced:
        rows.append(("cycle MiB", lambda r: _mib(r.cycle_peak_mib), False))
    return rows


def _phase_value(phase: str) -> Callable[[SizeResult], str]:
    return lambda r: _ms(r.phases_ms[phase])


def build_table(results: list[SizeResult], ladder: list[Step]) -> Table:
    """One column per size, then one per step between sizes (the ratio per 10x of nodes); one
    row per measure. Sizes run across, so the table stays narrow however many phases there are."""
    table = Table()
    table.add_column("nodes", justify="left", no_wrap=True)
    for r in results:
        table.add_column(f"{r.nodes:,}", justify="right", no_wrap=True)
    for step in ladder:
        label = f"{_short(step.from_nodes)}→{_short(step.to_nodes)}"
        table.add_column(label, justify="right", no_wrap=True)
    traced = any(r.cycle_peak_mib is not None for r in results)
    for label, value, has_ratio in _rows(traced):
        ratios = [
            _ratio(step.total if label == "total" else step.phases[label]) if has_ratio else ""
            for step in ladder
        ]
        table.add_row(
            label,
            *(value(r) for r in results),
            *ratios,
            style="bold" if label == "total" else None,
            end_section=label in ("pending", "total"),
        )
    return table


def fit_tables(
    results: list[SizeResult], ladder: list[Step], console: Console, width: int
) -> list[Table]:
    """The table, split by sizes into as few tables as fit in `width` columns (a step goes
    with the size it leads to); a single size that does not fit gets a table of its own."""
    ordered = sorted(results, key=lambda r: r.nodes)
    steps_to = {step.to_nodes: step for step in ladder}
    tables: list[Table] = []
    chunk: list[SizeResult] = []

    def table_of(sizes: list[SizeResult]) -> Table:
        own = [steps_to[r.nodes] for r in sizes if r.nodes in steps_to]
        return build_table(sizes, own)

    unbounded = console.options.update_width(1_000_000)
    for r in ordered:
        candidate = table_of([*chunk, r])
        if chunk and console.measure(candidate, options=unbounded).maximum > width:
            tables.append(table_of(chunk))
            chunk = [r]
        else:
            chunk.append(r)
    if chunk:
        tables.append(table_of(chunk))
    return tables


def _print_target(
    console: Console, label: str, met: object, measured: Callable[[], str], how_to_measure: str
) -> None:
    """One line per benchmark target: met, missed, or not measured (and how to measure it)."""
    if met is None:
        console.print(f"{label}: not measured ({how_to_measure})")
        return
    verdict = "[green]met[/green]" if met else "[red]missed[/red]"
    console.print(f"{label}: {verdict} ({measured()})")
