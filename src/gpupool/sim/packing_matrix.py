"""The matrix of `gpupool bench packing --all`: the jobs' results grouped per variant and set
against the FGD artifact's published curves, as a table, JSON, Markdown and a PNG."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpupool.sim.fgd_refs import PublishedFgd
from gpupool.sim.packing import CHECKPOINTS_PCT, PackingRun
from gpupool.sim.packing_jobs import JobResult
from gpupool.sim.packing_summary import PolicySummary, _keyed, _mean, summarise, summary_json


def published_mean_curve(published: PublishedFgd, seeds: Sequence[int]) -> tuple[float, ...]:
    """The published allocation, mean over `seeds`, at 0, 1, ... % arrived (up to the last level
    every one of the seeds has)."""
    if not seeds:
        return ()
    curve: list[float] = []
    level = 0
    while all(level in published.alloc[s] for s in seeds):
        curve.append(published.alloc_mean(seeds, level))
        level += 1
    return tuple(curve)


@dataclass(frozen=True, slots=True)
class VariantResult:
    """One variant of the matrix: each policy over the seeds, the bound, the published FGD."""

    variant: str
    nodes: int
    gpus: int
    pods: int
    seeds: tuple[int, ...]
    summaries: dict[str, PolicySummary]
    curves: dict[str, tuple[float, ...]]
    """Mean allocated % over the seeds at 0, 1, ... % arrived, per policy."""
    offline_at: dict[int, float] | None
    """The offline bound, mean over the seeds, at `BOUND_AT` (and any other checkpoint run)."""
    published_seeds: tuple[int, ...]
    """The seeds the published FGD mean is over: ours that the artifact has."""
    published_curve: tuple[float, ...]
    """Published FGD, mean over `published_seeds` (empty when there is none)."""

    @property
    def published_at_100(self) -> float | None:
        return self.published_curve[100] if len(self.published_curve) > 100 else None

    @property
    def bound_at_100(self) -> float | None:
        return None if self.offline_at is None else self.offline_at.get(100)


def _mean_curve(runs: Sequence[PackingRun]) -> tuple[float, ...]:
    length = min(len(r.allocated_pct) for r in runs)
    return tuple(statistics.fmean(r.allocated_pct[i] for r in runs) for i in range(length))


def variant_results(
    results: Sequence[JobResult], published: Mapping[str, PublishedFgd]
) -> list[VariantResult]:
    """Group the jobs' results by variant (in the order they were asked for)."""
    by_variant: dict[str, list[JobResult]] = {}
    for result in results:
        by_variant.setdefault(result.job.variant, []).append(result)
    out: list[VariantResult] = []
    for variant, group in by_variant.items():
        runs: dict[str, list[PackingRun]] = {}
        for r in sorted(group, key=lambda r: r.job.seed):
            if r.run is not None:
                runs.setdefault(r.run.policy, []).append(r.run)
        offline = [r.offline for r in sorted(group, key=lambda r: r.job.seed) if r.offline]
        offline_at = None
        if offline:
            points = [p for p in CHECKPOINTS_PCT if all(p in o for o in offline)]
            offline_at = {p: _mean([o[p] for o in offline]) for p in points}
        seeds = tuple(sorted({r.job.seed for r in group}))
        reference = published.get(variant)
        published_seeds = (
            tuple(s for s in seeds if s in reference.alloc) if reference is not None else ()
        )
        first = group[0]
        out.append(
            VariantResult(
                variant=variant,
                nodes=first.nodes,
                gpus=first.gpus,
                pods=first.pods,
                seeds=seeds,
                summaries={p: summarise(rs) for p, rs in runs.items()},
                curves={p: _mean_curve(rs) for p, rs in runs.items()},
                offline_at=offline_at,
                published_seeds=published_seeds,
                published_curve=(
                    published_mean_curve(reference, published_seeds)
                    if reference is not None
                    else ()
                ),
            )
        )
    return out


def _delta(value: float | None, reference: float | None) -> str:
    if value is None or reference is None:
        return "n/a"
    return f"{value - reference:+.2f}"


def _value(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def curve_gap(ours: Sequence[float], published: Sequence[float]) -> tuple[float, int] | None:
    """The largest |ours - published| between two mean curves (allocated % at 0, 1, ... %
    arrived) and the arrival level where it is; None without a published curve."""
    levels = min(len(ours), len(published))
    if not levels:
        return None
    worst = max(range(levels), key=lambda x: abs(ours[x] - published[x]))
    return abs(ours[worst] - published[worst]), worst


def _gap_json(v: VariantResult) -> dict[str, float] | None:
    gap = curve_gap(v.curves.get(FGD, ()), v.published_curve)
    return None if gap is None else {"max_gap": round(gap[0], 3), "at_arrived_pct": gap[1]}


def _gap_cell(v: VariantResult) -> str:
    gap = curve_gap(v.curves.get(FGD, ()), v.published_curve)
    return "n/a" if gap is None else f"{gap[0]:.2f} (@{gap[1]})"


FGD = "fgd"
"""The policy whose whole curve the table compares with the published one (`fgd curve gap`)."""


def matrix_rows(variants: Sequence[VariantResult], policies: Sequence[str]) -> list[list[str]]:
    """The per-variant table's cells (alloc@100): variant, published FGD, then per policy its
    mean ± std and its difference to published FGD (for `fgd` also the largest gap between its
    mean curve and the published one), then the bound and its distance to the best policy.
    `matrix_header` names the columns."""
    rows: list[list[str]] = []
    for v in variants:
        cells = [v.variant, _value(v.published_at_100)]
        best: float | None = None
        for policy in policies:
            summary = v.summaries.get(policy)
            at = None if summary is None else summary.alloc_at.get(100)
            if at is None or summary is None:
                cells += ["n/a", "n/a"]
            else:
                best = at if best is None else max(best, at)
                cells += [
                    f"{at:.2f} ± {summary.alloc_std_at[100]:.2f}",
                    _delta(at, v.published_at_100),
                ]
            if policy == FGD:
                cells.append(_gap_cell(v))
        cells += [_value(v.bound_at_100), _delta(v.bound_at_100, best)]
        rows.append(cells)
    return rows


def matrix_header(policies: Sequence[str]) -> list[str]:
    header = ["variant", "published FGD"]
    for policy in policies:
        header += [policy, "Δ"]
        if policy == FGD:
            header.append("curve gap")
    return [*header, "bound", "bound - best"]


def matrix_json(
    variants: Sequence[VariantResult],
    policies: Sequence[str],
    meta: Mapping[str, object],
) -> dict[str, object]:
    """The whole matrix as one JSON document: `meta` (date, machine, command, wall time ...),
    then per variant the published FGD, each policy's summary and mean curve, and the bound."""
    out: dict[str, object] = dict(meta)
    out["policies"] = list(policies)
    out["variants"] = {
        v.variant: {
            "nodes": v.nodes,
            "gpus": v.gpus,
            "pods_in_list": v.pods,
            "seeds": list(v.seeds),
            "published_fgd": {
                "seeds": list(v.published_seeds),
                "alloc_at_100": None
                if v.published_at_100 is None
                else round(v.published_at_100, 3),
                "curve": [round(x, 3) for x in v.published_curve],
            },
            "policies": {
                p: {**summary_json(s), "curve": [round(x, 3) for x in v.curves[p]]}
                for p, s in v.summaries.items()
            },
            "offline_alloc_at": None if v.offline_at is None else _keyed(v.offline_at),
            "fgd_curve_gap": _gap_json(v),
        }
        for v in variants
    }
    return out


def matrix_markdown(
    variants: Sequence[VariantResult],
    policies: Sequence[str],
    title: str,
    preamble: Sequence[str],
    plot_name: str | None,
) -> str:
    """The per-variant table as a Markdown section, ready to paste into benchmarks/RESULTS.md."""
    header = matrix_header(policies)
    lines = [f"## {title}", "", *preamble, ""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|---|" + "---:|" * (len(header) - 1))
    for row in matrix_rows(variants, policies):
        lines.append("| " + " | ".join(row) + " |")
    if plot_name is not None:
        lines += ["", f"![allocated vs arrived GPU, per variant]({plot_name})"]
    return "\n".join(lines) + "\n"


ZOOM_FROM = 88
"""The plot's y axis starts just below the lowest curve from this arrival level (%) on."""


def write_matrix_png(
    variants: Sequence[VariantResult], policies: Sequence[str], path: Path
) -> None:
    """Small multiples, one panel per variant: allocated vs arrived GPU (70% arrived onwards)
    for each policy and the published FGD (means over the seeds), the trivial bound
    min(arrived, 100) and the offline bound at 100% arrived. From 80% arrived on, and the
    y axis from just under the lowest curve after `ZOOM_FROM`% arrived, where they part."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    if not variants:
        raise ValueError("no variant to plot")
    columns = min(3, len(variants))
    rows = math.ceil(len(variants) / columns)
    figure, grid = plt.subplots(
        rows, columns, figsize=(4.2 * columns, 3.3 * rows), squeeze=False, sharex=True
    )
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    try:
        for index, v in enumerate(variants):
            axes = grid[index // columns][index % columns]
            low = 100.0
            if v.published_curve:
                axes.plot(
                    range(len(v.published_curve)),
                    v.published_curve,
                    color="black",
                    linestyle="--",
                    linewidth=1.0,
                    zorder=3,
                    label="FGD (published)",
                )
                low = min(low, *v.published_curve[ZOOM_FROM:])
            for n, policy in enumerate(policies):
                curve = v.curves.get(policy)
                if not curve:
                    continue
                axes.plot(
                    range(len(curve)),
                    curve,
                    color=colours[n % len(colours)],
                    linewidth=1.2,
                    label=f"{policy} (ours)",
                )
                low = min(low, *curve[ZOOM_FROM:])
            top = max([len(c) - 1 for c in (v.published_curve, *v.curves.values()) if c] or [130])
            axes.plot([80, 100, top], [80, 100, 100], color="grey", linestyle=":", linewidth=0.8)
            if v.bound_at_100 is not None:
                axes.plot([100], [v.bound_at_100], marker="x", color="grey", label="offline bound")
            axes.set_title(v.variant, fontsize=10)
            axes.set_xlim(80, top)
            axes.set_ylim(max(0.0, math.floor(low) - 1), 101)
            axes.grid(True, alpha=0.3)
            axes.tick_params(labelsize=8)
            if index % columns == 0:
                axes.set_ylabel("allocated GPU %", fontsize=9)
            if index // columns == rows - 1:
                axes.set_xlabel("arrived GPU %", fontsize=9)
        for index in range(len(variants), rows * columns):
            grid[index // columns][index % columns].set_visible(False)
        handles, labels = grid[0][0].get_legend_handles_labels()
        ncol = min(len(labels), 2 * columns)
        legend_rows = math.ceil(len(labels) / max(ncol, 1))
        height = 3.3 * rows
        figure.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=9)
        figure.suptitle("Allocated vs arrived GPU, mean over seeds", fontsize=11)
        figure.tight_layout(rect=(0, (0.1 + 0.25 * legend_rows) / height, 1, 1))
        figure.savefig(path, format="png", dpi=110)
    finally:
        plt.close(figure)
