"""The verdicts against the targets, the table, and the JSON payload."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from .browser import VIEWS
from .common import PAGE, TARGET_OVERVIEW_S, TARGET_WORKLOADS_S, ms
from .measure import HISTORY_RANGES, RANGE_HOURS
from .run import Result


def overview_api_s(result: Result) -> float | None:
    """The overview's reads at its default range (history 1h, top, the 5 oldest pending),
    issued together as the page does, p50: the server's part of drawing it."""
    found = [t.p50_s for t in result.pages if t.name == "reads: overview 1h"]
    return found[0] if found else None


RENDER_CHECKS = {
    "overview 1h": ("overview", TARGET_OVERVIEW_S),
    "overview 30d": ("overview_30d", TARGET_OVERVIEW_S),
    "workloads": ("workloads_render", TARGET_WORKLOADS_S),
}
"""Browser view -> (its check's key, target)."""


def verdicts(result: Result) -> dict[str, dict[str, Any]]:
    """Each target with what measured it: the browser's renders when it ran (the overview at
    its default hour and at 30 days, the workloads page), and the workload list's first page
    through the API; without a browser, the overview's API reads stand in for its render."""
    out: dict[str, dict[str, Any]] = {}
    for view, (key, target) in RENDER_CHECKS.items():
        seconds = result.browser.median(view)
        if seconds is not None:
            out[key] = {
                "seconds": seconds,
                "target_s": target,
                "measured_by": f"browser, {VIEWS[view][1]} until drawn, median",
                "met": seconds <= target,
            }
    if "overview" not in out:
        seconds = overview_api_s(result)
        out["overview"] = {
            "seconds": seconds,
            "target_s": TARGET_OVERVIEW_S,
            "measured_by": "API reads only (history 1h + top + 5 oldest pending, together)",
            "met": seconds is not None and seconds <= TARGET_OVERVIEW_S,
        }
    page = result.first_page
    out["workloads_first_page"] = {
        "seconds": page.p50_s if page else None,
        "target_s": TARGET_WORKLOADS_S,
        "measured_by": f"GET /api/v1/workloads, {PAGE} rows, admin, p50",
        "met": page is not None and page.p50_s <= TARGET_WORKLOADS_S,
    }
    return out


def render(result: Result, console: Console) -> None:
    config = result.config
    table = Table(
        title=(
            f"gpupool dashboard: {config.workloads:,} workloads, {config.projects} projects, "
            f"{config.days} days of history, {config.nodes} x {config.gpus_per_node} GPUs"
        ),
        caption=(
            f"ms. page: in Chromium, navigation until drawn, median of {config.browser_loads}. "
            f"GET /api/v1/...: {config.requests} requests after {config.warmup} warm-up, "
            f"keep-alive; the researcher is in {len(result.researcher_projects)} projects. reads: "
            "a page's API calls issued together, admin"
        ),
    )
    for column in ("what", "admin p50", "p95", "researcher p50", "p95", "KiB", "target", ""):
        table.add_column(column, justify="left" if column in ("what", "") else "right")
    checks = verdicts(result)

    def verdict(key: str) -> str:
        check = checks.get(key)
        if check is None or check["seconds"] is None:
            return ""
        return "[green]met[/green]" if check["met"] else "[red]missed[/red]"

    browser = result.browser
    if browser.skipped is None:
        for view, (key, target) in RENDER_CHECKS.items():
            table.add_row(
                f"[bold]page: {view}[/bold]",
                f"[bold]{ms(browser.median(view))}[/bold]", "", "", "", "",
                f"<= {target * 1000:,.0f}", verdict(key),
            )  # fmt: skip
        table.add_section()
    researcher = {t.name: t for t in result.timings if t.role == "researcher"}
    first = result.first_page
    for timing in (t for t in result.timings if t.role == "admin"):
        other = researcher.get(timing.name)
        is_first = first is not None and timing is first
        table.add_row(
            timing.name,
            f"[bold]{ms(timing.p50_s)}[/bold]" if is_first else ms(timing.p50_s),
            ms(timing.p95_s),
            ms(other.p50_s if other else None),
            ms(other.p95_s if other else None),
            f"{timing.bytes / 1024:,.0f}",
            f"<= {TARGET_WORKLOADS_S * 1000:,.0f}" if is_first else "",
            verdict("workloads_first_page") if is_first else "",
        )
    if result.pages:
        table.add_section()
    for timing in result.pages:
        stands_in = browser.skipped is not None and timing.name == "reads: overview 1h"
        table.add_row(
            timing.name, ms(timing.p50_s), ms(timing.p95_s), "", "",
            f"{timing.bytes / 1024:,.0f}",
            f"<= {TARGET_OVERVIEW_S * 1000:,.0f}" if stands_in else "",
            verdict("overview") if stands_in else "",
        )  # fmt: skip
    console.print(table)

    if result.peer:
        peer = Table(
            title="What the history store buys: the raw per-minute usage table, same window",
            caption=(
                f"GET /api/v1/usage?by=project (raw rows, {config.raw_requests} requests) vs "
                "GET /api/v1/history (downsampled), admin, p50 ms"
            ),
        )
        for column in ("window", "raw rows read", "raw usage", "history", "ratio"):
            peer.add_column(column, justify="left" if column == "window" else "right")
        for p in result.peer:
            peer.add_row(
                p.window,
                f"~{p.raw_rows_read:,}",
                ms(p.raw_p50_s),
                ms(p.history_p50_s),
                "—" if p.ratio is None else f"{p.ratio:,.0f}x",
            )
        month = result.p50("history 30d")
        if month is not None:
            peer.add_row("30d", "(cannot: 14-day cap)", "—", ms(month), "")
        console.print(peer)

    counts = result.seed_counts
    console.print(
        f"[dim]Seeded in {result.seed_s:.1f} s: "
        + ", ".join(f"{n:,} {s}" for s, n in result.statuses.items())
        + f"; {result.running_gpus:,.0f} GPUs held; {counts.minute_rows:,} per-minute and "
        f"{counts.hour_rows:,} hourly history rows, {counts.raw_usage_rows:,} raw usage rows "
        f"({config.raw_hours} h); database {result.database_mib:,.0f} MiB. The loop ran "
        f"{result.settle.get('cycles', 0):.0f} cycles before measuring "
        f"({result.settle.get('binds', 0):.0f} binds, {result.settle.get('evicts', 0):.0f} "
        f"evictions) and {result.loop_during.get('cycles', 0):.0f} cycles taking "
        f"{result.loop_during.get('cycle_s', 0):.1f} s of the API measurement's "
        f"{result.loop_during.get('wall_s', 0):.1f} s. "
        f"{result.machine}, Python {result.python}, {result.date}; load average "
        + " -> ".join(f"{x:.1f}" for x in result.load)
        + ".[/dim]"
    )
    if browser.skipped is not None:
        console.print(f"Browser render rows skipped: {browser.skipped}.")
    for view in browser.loads_s:
        calls = ", ".join(
            f"{path.split('?')[0]} {ms(sent)}-{ms(answered)}"
            for path, sent, answered in browser.calls.get(view, [])
        )
        console.print(
            f"[dim]Page {view}: modules run by {ms(browser.scripts_s.get(view))}, drawn by "
            f"{ms(browser.median(view))} (medians); its median load's API calls: {calls} "
            "(ms from navigation start).[/dim]"
        )
    for note in result.notes:
        console.print(f"Note: {note}.")
    for key, check in checks.items():
        if check["seconds"] is None:
            continue
        state = "[green]met[/green]" if check["met"] else "[red]missed[/red]"
        console.print(
            f"{key.replace('_', ' ')} <= {check['target_s'] * 1000:,.0f} ms: {state} "
            f"({check['seconds'] * 1000:,.0f} ms, {check['measured_by']})"
        )


def payload(result: Result) -> dict[str, Any]:
    checks = verdicts(result)
    ranges = {f"history_{r}_s": result.p50(f"history {r}") for r in HISTORY_RANGES}
    widest = max(result.peer, key=lambda p: RANGE_HOURS.get(p.window, 0), default=None)
    first = result.first_page
    return {
        "config": asdict(result.config),
        "machine": result.machine,
        "python": result.python,
        "date": result.date,
        "overview_render_s": result.browser.median("overview 1h"),
        "overview_30d_render_s": result.browser.median("overview 30d"),
        "workloads_render_s": result.browser.median("workloads"),
        "overview_api_s": overview_api_s(result),
        "pages_api": {
            t.name.removeprefix("reads: "): {"p50_s": t.p50_s, "p95_s": t.p95_s, "bytes": t.bytes}
            for t in result.pages
        },
        "workloads_first_page_s": first.p50_s if first else None,
        **ranges,
        "history_30d_allocated_only_s": result.p50("history 30d, allocated only"),
        "top_s": result.p50("top"),
        "names_s": result.p50("names"),
        "projects_s": result.p50("projects"),
        "raw_usage_s": widest.raw_p50_s if widest else None,
        "raw_usage_window": widest.window if widest else None,
        "ratio_raw_to_history": widest.ratio if widest else None,
        "targets": checks,
        "targets_met": all(c["met"] for c in checks.values() if c["seconds"] is not None),
        "api": [
            {
                "name": t.name.strip(" +"),
                "role": t.role,
                "path": t.path,
                "params": t.params,
                "p50_s": t.p50_s,
                "p95_s": t.p95_s,
                "bytes": t.bytes,
                "rows": t.rows,
                "samples_s": t.samples_s,
            }
            for t in result.timings
        ],
        "peer": [
            {
                "window": p.window,
                "raw_rows_read": p.raw_rows_read,
                "raw_p50_s": p.raw_p50_s,
                "raw_samples_s": p.raw_samples_s,
                "history_p50_s": p.history_p50_s,
                "ratio": p.ratio,
            }
            for p in result.peer
        ],
        "browser": {
            "skipped": result.browser.skipped,
            "loads_s": result.browser.loads_s,
            "first_load_s": result.browser.first_load_s,
            "scripts_s": result.browser.scripts_s,
            "last_api_answer_s": result.browser.api_s,
            "api_calls_of_median_load": {
                view: [{"path": p, "sent_s": a, "answered_s": b} for p, a, b in calls]
                for view, calls in result.browser.calls.items()
            },
        },
        "seed": {
            "seconds": result.seed_s,
            "statuses": result.statuses,
            "running_gpus": result.running_gpus,
            "database_mib": result.database_mib,
            **asdict(result.seed_counts),
        },
        "server": {
            "start_s": result.server_start_s,
            "before_measuring": result.settle,
            "loop_while_measuring": result.loop_during,
        },
        "researcher_projects": result.researcher_projects,
        "load_average": result.load,
        "notes": result.notes,
    }
