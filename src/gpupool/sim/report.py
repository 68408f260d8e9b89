"""The simulator's HTML report: one self-contained file, plots as inline SVG (matplotlib, no JS).

Nothing in the page is fetched: no scripts, no stylesheets, no fonts (matplotlib draws text as
SVG paths), so it opens offline and can be mailed as is. Rendering is deterministic (a fixed SVG
hash salt, no dates), so the same simulation gives the same file.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Callable, Sequence

import matplotlib as mpl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from gpupool.core.model import MILLI_PER_GPU
from gpupool.sim.compare import Comparison, PolicyRun, format_duration_s
from gpupool.sim.engine import Sample
from gpupool.sim.metrics import Distribution, binned_average, series

__all__ = ["render_html"]

DAY_S = 86400
MAX_BINS = 800
POLICY_COLORS = ("#d95f02", "#1b9e77", "#7570b3", "#e7298a")
PROJECT_COLORS = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)


def render_html(comparison: Comparison) -> str:
    """The whole report page."""
    with mpl.rc_context(
        {
            "svg.hashsalt": "gpupool",
            "svg.fonttype": "path",
            "font.size": 8,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
        }
    ):
        figures = [
            ("Cluster allocation and utilization", _cluster_figure(comparison)),
            ("GPUs held per project (stacked) and used", _stacked_figure(comparison)),
            ("Holding vs quota vs fair share, per project", _shares_figure(comparison)),
            (
                "Queueing delay per project (share of workloads started within)",
                _delay_figure(comparison),
            ),
            ("Fragmentation over time", _fragmentation_figure(comparison)),
        ]
    body = [
        "<h1>gpupool simulation</h1>",
        _inputs(comparison),
        "<h2>Summary</h2>",
        _summary_table(comparison),
        "<h2>Queueing delay (submission to first start)</h2>",
        _distribution_table(comparison, "type", _delays_by_type),
        _distribution_table(comparison, "project", _delays_by_project),
        "<h2>Completion time (submission to finish)</h2>",
        _distribution_table(comparison, "type", _completions_by_type),
        "<h2>Projects</h2>",
        _projects_table(comparison),
    ]
    for title, svg in figures:
        body.append(f"<h2>{html.escape(title)}</h2>\n<figure>{svg}</figure>")
    body.append(_definitions())
    return _PAGE.format(body="\n".join(body))


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>gpupool simulation report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 0.25em 0.8em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
thead th {{ border-bottom: 2px solid #888; }}
figure {{ margin: 0; }}
figure svg {{ max-width: 100%; height: auto; }}
.note {{ color: #555; font-size: 0.9em; }}
</style>
</head>
<body>
{body}
</body>
</html>
"""


# --- tables --------------------------------------------------------------------------------------


def _e(text: object) -> str:
    return html.escape(str(text))


def _inputs(c: Comparison) -> str:
    gpus = c.cluster.capacity_gpu_milli // MILLI_PER_GPU
    quotas = ", ".join(
        f"{p.name} {p.quota.gpu_milli / MILLI_PER_GPU:g}" for p in c.cluster.leaf_projects
    )
    items = [
        f"Workload: {_e(c.source)} ({c.workloads} workloads)",
        f"Cluster: {_e(c.cluster.name)}: {len(c.cluster.nodes)} nodes, {gpus} GPUs; "
        f"quotas (GPUs): {_e(quotas)}",
        f"Checkpoint every {format_duration_s(c.settings.checkpoint_interval_s)} of progress"
        if c.settings.checkpoint_interval_s
        else "No checkpoints: an eviction loses all progress",
        f"Minimum cycle interval: {_e(format_duration_s(c.settings.min_cycle_interval_s))}",
        f"Averages over the window 0 to {_e(format_duration_s(c.window_s))} "
        f"({c.window_s} s), the same for every policy",
    ]
    return "<ul>" + "".join(f"<li>{item}</li>" for item in items) + "</ul>"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    out = ["<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in row) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _summary_table(c: Comparison) -> str:
    policies = [run.policy.value for run in c.runs]
    rows: list[tuple[str, Callable[[PolicyRun], str]]] = [
        ("GPU allocation (avg)", lambda r: f"{r.summary.allocation_pct:.1f} %"),
        ("GPU utilization (avg)", lambda r: f"{r.summary.utilization_pct:.1f} %"),
        ("Queueing delay p50", lambda r: format_duration_s(r.summary.queueing_delay.p50_s)),
        ("Queueing delay p90", lambda r: format_duration_s(r.summary.queueing_delay.p90_s)),
        ("Queueing delay mean", lambda r: format_duration_s(r.summary.queueing_delay.mean_s)),
        ("Completion time p50", lambda r: format_duration_s(r.summary.completion_time.p50_s)),
        ("Completion time p90", lambda r: format_duration_s(r.summary.completion_time.p90_s)),
        ("Preemptions", lambda r: str(r.summary.preemptions)),
        ("Lost GPU-hours", lambda r: f"{r.summary.lost_gpu_hours:.1f}"),
        ("Consolidation restarts", lambda r: str(r.summary.restarts)),
        ("Fragmented GPU (avg, % of cluster)", lambda r: f"{r.summary.fragmentation_pct:.1f} %"),
        ("Succeeded / failed / unfinished", _counts),
        ("All work done after", lambda r: format_duration_s(r.summary.makespan_s)),
    ]
    return _table(["", *policies], [[label, *(f(run) for run in c.runs)] for label, f in rows])


def _counts(run: PolicyRun) -> str:
    s = run.summary
    return f"{s.succeeded} / {s.failed} / {s.unfinished}"


def _delays_by_type(run: PolicyRun) -> dict[str, Distribution]:
    return dict(run.summary.queueing_delay_by_type)


def _delays_by_project(run: PolicyRun) -> dict[str, Distribution]:
    return {p.name: p.queueing_delay for p in run.summary.projects}


def _completions_by_type(run: PolicyRun) -> dict[str, Distribution]:
    return dict(run.summary.completion_time_by_type)


def _distribution_table(
    c: Comparison, what: str, pick: Callable[[PolicyRun], dict[str, Distribution]]
) -> str:
    per_run = [pick(run) for run in c.runs]
    keys = sorted({key for table in per_run for key in table})
    if what == "project":
        keys = [p.name for p in c.cluster.leaf_projects]
    head = [what]
    for run in c.runs:
        head += [f"{run.policy.value} p50", f"{run.policy.value} p90"]
    rows = []
    for key in keys:
        row = [key]
        for table in per_run:
            d = table.get(key, Distribution(0))
            row += [format_duration_s(d.p50_s), format_duration_s(d.p90_s)]
        rows.append(row)
    return _table(head, rows)


def _projects_table(c: Comparison) -> str:
    head = ["project", "quota"]
    for run in c.runs:
        name = run.policy.value
        head += [f"{name} holding", f"{name} fair share", f"{name} preempted", f"{name} lost GPU-h"]
    rows = []
    for index, project in enumerate(c.cluster.leaf_projects):
        row = [project.name, f"{project.quota.gpu_milli / MILLI_PER_GPU:g}"]
        for run in c.runs:
            p = run.summary.projects[index]
            row += [
                f"{p.avg_holding_gpus:.2f}",
                f"{p.avg_fair_share_gpus:.2f}",
                str(p.preemptions),
                f"{p.lost_gpu_hours:.1f}",
            ]
        rows.append(row)
    return _table(head, rows) + (
        '<p class="note">Holding and fair share are time-averaged GPUs over the window.</p>'
    )


def _definitions() -> str:
    items = [
        "Allocation: GPUs held by running workloads as a share of the cluster, time-averaged.",
        "Utilization: held GPUs times each workload's mean GPU utilization, as a share of the "
        "cluster.",
        "Queueing delay: from submission to the first start. Completion time: from submission "
        "to success.",
        "Preemptions: evictions of whole workloads. Lost GPU-hours: progress since the last "
        "checkpoint, thrown away at evictions and consolidation restarts.",
        "Fragmented GPU: idle GPU that the typical task shapes (weighted by how often they were "
        "submitted) could not use where it lies.",
        "static: each project capped at its quota. guaranteed: quotas guaranteed, idle quota "
        "lent out and reclaimed.",
    ]
    return "<h2>Definitions</h2><ul>" + "".join(f"<li>{_e(i)}</li>" for i in items) + "</ul>"


# --- figures -------------------------------------------------------------------------------------


def _svg(figure: Figure) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    text = buffer.getvalue()
    text = re.sub(r"<\?xml[^>]*\?>\s*", "", text)
    text = re.sub(r"<!DOCTYPE[^>]*>\s*", "", text)
    return re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.DOTALL)


def _plot_end_s(c: Comparison) -> int:
    return max(c.window_s, *(run.result.end_s for run in c.runs))


def _binned(
    run: PolicyRun, value: Callable[[Sample], float], end_s: int
) -> tuple[list[float], list[float]]:
    """Edges (days, one more than values) and bin means of a sampled value."""
    times, values = series(run.result, value)
    bins = max(1, min(MAX_BINS, end_s // 3600))
    starts, means = binned_average(times, values, 0, end_s, bins)
    return [s / DAY_S for s in starts] + [end_s / DAY_S], means


def _held_gpus(index: int) -> Callable[[Sample], float]:
    return lambda s: s.allocated_milli[index] / MILLI_PER_GPU


def _fair_share_gpus(index: int) -> Callable[[Sample], float]:
    return lambda s: s.fair_share_milli[index] / MILLI_PER_GPU


def _window_line(ax: Axes, c: Comparison) -> None:
    ax.axvline(c.window_s / DAY_S, color="#888", linestyle=":", linewidth=1)


def _cluster_figure(c: Comparison) -> str:
    end = _plot_end_s(c)
    capacity = c.cluster.capacity_gpu_milli or 1
    figure = Figure(figsize=(10, 4.5))
    axes = figure.subplots(2, 1, sharex=True)
    for i, run in enumerate(c.runs):
        color = POLICY_COLORS[i % len(POLICY_COLORS)]
        for ax, value in (
            (axes[0], lambda s: 100 * sum(s.allocated_milli) / capacity),
            (axes[1], lambda s: 100 * sum(s.utilized_milli) / capacity),
        ):
            edges, means = _binned(run, value, end)
            ax.stairs(means, edges, color=color, label=run.policy.value, linewidth=1)
    axes[0].set_ylabel("allocation %")
    axes[1].set_ylabel("utilization %")
    axes[1].set_xlabel("days (dotted: end of the averaging window)")
    for ax in axes:
        ax.set_ylim(0, 105)
        _window_line(ax, c)
    axes[0].legend(loc="upper right")
    return _svg(figure)


def _stacked_figure(c: Comparison) -> str:
    end = _plot_end_s(c)
    names = [p.name for p in c.cluster.leaf_projects]
    figure = Figure(figsize=(10, 2.4 * len(c.runs)))
    axes = figure.subplots(len(c.runs), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    gpus = c.cluster.capacity_gpu_milli / MILLI_PER_GPU
    for ax, run in zip(axes, c.runs, strict=True):
        layers = []
        edges: list[float] = []
        for index in range(len(names)):
            edges, means = _binned(run, _held_gpus(index), end)
            layers.append([*means, means[-1]] if means else [])
        ax.stackplot(
            edges,
            layers,
            labels=names,
            colors=PROJECT_COLORS[: len(names)],
            step="post",
            alpha=0.85,
        )
        used_edges, used = _binned(run, lambda s: sum(s.utilized_milli) / MILLI_PER_GPU, end)
        ax.stairs(used, used_edges, color="black", linewidth=0.8, label="used (utilization)")
        ax.axhline(gpus, color="#444", linestyle="--", linewidth=0.8)
        ax.set_ylabel(f"{run.policy.value}\nGPUs held")
        ax.set_ylim(0, gpus * 1.05)
        _window_line(ax, c)
    axes[0].legend(loc="upper right", ncols=min(len(names) + 1, 6))
    axes[-1].set_xlabel("days")
    return _svg(figure)


def _shares_figure(c: Comparison) -> str:
    end = _plot_end_s(c)
    projects = c.cluster.leaf_projects
    figure = Figure(figsize=(10, 1.8 * len(projects) + 0.6))
    axes = figure.subplots(len(projects), len(c.runs), sharex=True, sharey="row", squeeze=False)
    for row, project in enumerate(projects):
        for col, run in enumerate(c.runs):
            ax = axes[row][col]
            edges, holding = _binned(run, _held_gpus(row), end)
            color = PROJECT_COLORS[row % len(PROJECT_COLORS)]
            ax.stairs(holding, edges, fill=True, color=color, alpha=0.5, label="holding")
            edges, share = _binned(run, _fair_share_gpus(row), end)
            ax.stairs(share, edges, color="black", linewidth=0.8, label="fair share")
            ax.axhline(
                project.quota.gpu_milli / MILLI_PER_GPU,
                color="#c00",
                linestyle="--",
                linewidth=0.9,
                label="quota",
            )
            _window_line(ax, c)
            if row == 0:
                ax.set_title(run.policy.value)
            if col == 0:
                ax.set_ylabel(f"{project.name}\nGPUs")
    axes[0][-1].legend(loc="upper right", ncols=3)
    for ax in axes[-1]:
        ax.set_xlabel("days")
    return _svg(figure)


def _delay_figure(c: Comparison) -> str:
    projects = c.cluster.leaf_projects
    columns = min(len(projects), 4)
    rows = -(-len(projects) // columns)
    figure = Figure(figsize=(10, 2.6 * rows))
    axes = figure.subplots(rows, columns, sharey=True, squeeze=False).ravel()
    for index, project in enumerate(projects):
        ax = axes[index]
        for i, run in enumerate(c.runs):
            delays = sorted(
                d / 3600
                for o in run.result.outcomes
                if o.project == project.name and (d := o.queueing_delay_s) is not None
            )
            if not delays:
                continue
            shares = [(k + 1) / len(delays) for k in range(len(delays))]
            ax.step(
                [0.0, *delays],
                [0.0, *shares],
                where="post",
                color=POLICY_COLORS[i % len(POLICY_COLORS)],
                label=run.policy.value,
                linewidth=1,
            )
        ax.set_xscale("symlog", linthresh=0.1)
        ax.set_title(project.name)
        ax.set_xlabel("hours waited")
        ax.set_ylim(0, 1.02)
    for ax in axes[len(projects) :]:
        ax.set_visible(False)
    axes[0].set_ylabel("share of workloads")
    axes[0].legend(loc="lower right")
    return _svg(figure)


def _fragmentation_figure(c: Comparison) -> str:
    end = _plot_end_s(c)
    figure = Figure(figsize=(10, 3.8))
    axes = figure.subplots(2, 1, sharex=True)
    for i, run in enumerate(c.runs):
        color = POLICY_COLORS[i % len(POLICY_COLORS)]
        for ax, value in (
            (axes[0], lambda s: s.fragmented_milli / MILLI_PER_GPU),
            (axes[1], lambda s: s.idle_milli / MILLI_PER_GPU),
        ):
            edges, means = _binned(run, value, end)
            ax.stairs(means, edges, color=color, label=run.policy.value, linewidth=1)
    axes[0].set_ylabel("fragmented GPUs")
    axes[1].set_ylabel("idle GPUs")
    axes[1].set_xlabel("days")
    for ax in axes:
        _window_line(ax, c)
        ax.set_ylim(bottom=0)
    axes[0].legend(loc="upper right")
    return _svg(figure)
