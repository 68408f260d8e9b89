"""Summaries and plots of packing runs (`gpupool bench packing`), and the matrix of
`--all`: every openb variant x seeds x policies, as independent jobs (`run_job`, run in worker
processes), compared with the FGD artifact's published curves (`gpupool.sim.fgd_refs`)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gpupool.core.packing import PackNode, PolicyName
from gpupool.sim.fgd_refs import PublishedFgd
from gpupool.sim.openb import TracePod, load_nodes, load_pods
from gpupool.sim.packing import (
    CHECKPOINTS_PCT,
    PackingRun,
    pack_nodes,
    run_offline,
    run_packing,
)

__all__ = [
    "BOUND_AT",
    "JOB_WEIGHT",
    "OFFLINE",
    "JobResult",
    "PackingJob",
    "PolicySummary",
    "VariantResult",
    "grid_run",
    "matrix_header",
    "matrix_json",
    "matrix_markdown",
    "matrix_rows",
    "published_mean_curve",
    "run_job",
    "summarise",
    "summary_json",
    "variant_results",
    "write_curves_svg",
    "write_matrix_png",
]


@dataclass(frozen=True, slots=True)
class PolicySummary:
    """One policy over its seeds: means and standard deviations at each checkpoint."""

    policy: str
    seeds: tuple[int, ...]
    alloc_at: dict[int, float]
    alloc_std_at: dict[int, float]
    frag_at: dict[int, float]
    frag_of_capacity_at: dict[int, float]
    seconds: tuple[float, ...]
    offline_alloc_at: dict[int, float] | None = None


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _std(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def summarise(
    runs: Sequence[PackingRun], offline: Sequence[dict[int, float]] = ()
) -> PolicySummary:
    """Average the runs of one policy (one per seed)."""
    if not runs:
        raise ValueError("no runs to summarise")
    points = [p for p in CHECKPOINTS_PCT if all(p in r.alloc_at for r in runs)]

    def over(field: str) -> dict[int, float]:
        return {p: _mean([getattr(r, field)[p] for r in runs]) for p in points}

    offline_at = None
    if offline:
        offline_at = {
            p: _mean([o[p] for o in offline]) for p in points if all(p in o for o in offline)
        }
    return PolicySummary(
        policy=runs[0].policy,
        seeds=tuple(r.seed for r in runs),
        alloc_at=over("alloc_at"),
        alloc_std_at={p: _std([r.alloc_at[p] for r in runs]) for p in points},
        frag_at=over("frag_at"),
        frag_of_capacity_at=over("frag_of_capacity_at"),
        seconds=tuple(round(r.seconds, 3) for r in runs),
        offline_alloc_at=offline_at,
    )


def _keyed(values: dict[int, float]) -> dict[str, float]:
    return {str(k): round(v, 3) for k, v in values.items()}


def summary_json(summary: PolicySummary) -> dict[str, object]:
    """The JSON of one policy: `alloc_at`, `frag_at` keyed by arrived % as strings."""
    out: dict[str, object] = {
        "policy": summary.policy,
        "seeds": list(summary.seeds),
        "alloc_at": _keyed(summary.alloc_at),
        "alloc_std_at": _keyed(summary.alloc_std_at),
        "frag_at": _keyed(summary.frag_at),
        "frag_of_capacity_at": _keyed(summary.frag_of_capacity_at),
        "seconds": list(summary.seconds),
    }
    if summary.offline_alloc_at is not None:
        out["offline_alloc_at"] = _keyed(summary.offline_alloc_at)
    return out


def write_curves_svg(runs_by_policy: Mapping[str, Sequence[PackingRun]], path: Path) -> None:
    """Allocated vs arrived GPU, one line per policy (its first seed), as a standalone SVG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    try:
        for policy, runs in runs_by_policy.items():
            run = runs[0]
            axes.plot(run.arrived_pct, run.allocated_pct, label=policy, linewidth=1.2)
        top = max(r.arrived_pct[-1] for runs in runs_by_policy.values() for r in runs)
        axes.plot([0, 100, top], [0, 100, 100], color="grey", linestyle=":", label="bound")
        axes.set_xlabel("arrived GPU (% of capacity)")
        axes.set_ylabel("allocated GPU (% of capacity)")
        axes.set_title("Packing the openb trace, pods placed at once or dropped")
        axes.set_xlim(80, top)
        axes.set_ylim(70, 101)
        axes.grid(True, alpha=0.3)
        axes.legend(loc="lower right")
        figure.tight_layout()
        figure.savefig(path, format="svg")
    finally:
        plt.close(figure)


# --- every variant x seeds x policies (`gpupool bench packing --all`) --------------------------

BOUND_AT = 100
"""The arrival level (%) the offline bound is computed for in the matrix."""


OFFLINE = "offline"
"""The name of the offline bound among the policies of a matrix."""


@dataclass(frozen=True, slots=True)
class PackingJob:
    """One run of the matrix: a policy (None: the offline bound) on a variant with a seed."""

    variant: str
    nodes_file: Path
    pods_file: Path
    policy: str | None
    seed: int
    inflation: float

    @property
    def label(self) -> str:
        return f"{self.variant} seed {self.seed} {self.policy or OFFLINE}"


JOB_WEIGHT: dict[str | None, float] = {PolicyName.DEFAULT: 1.4, None: 2.0}
"""Relative cost of a job (an FGD run is 1; about 3 s on the default trace): for the ETA and to
start the longest first. Policies not named here count 1."""


@dataclass(frozen=True, slots=True)
class JobResult:
    """A job's outcome: `run` for a policy (its curve on the whole-percent grid, see
    `grid_run`), `offline` (allocated % at `BOUND_AT`% arrived) for the bound."""

    job: PackingJob
    nodes: int
    gpus: int
    pods: int
    run: PackingRun | None
    offline: dict[int, float] | None
    seconds: float
    """Wall time of the job in its worker."""
    cpu_s: float
    """CPU time of the job in its worker (what it costs on an idle core)."""


_LOADED: dict[tuple[Path, Path], tuple[tuple[PackNode, ...], tuple[TracePod, ...]]] = {}
"""A worker's trace files, read once per process."""


def _load(job: PackingJob) -> tuple[tuple[PackNode, ...], tuple[TracePod, ...]]:
    key = (job.nodes_file, job.pods_file)
    if key not in _LOADED:
        _LOADED[key] = (pack_nodes(load_nodes(job.nodes_file)), tuple(load_pods(job.pods_file)))
    return _LOADED[key]


def run_job(job: PackingJob) -> JobResult:
    """Run one job (in a worker process: everything in and out pickles).

    The bound is `run_offline` at `BOUND_AT`% arrived only (the other checkpoints' hindsight
    packings, the 130% one above all, would triple its cost).
    """
    nodes, pods = _load(job)
    started = time.perf_counter()
    cpu_started = time.process_time()
    run: PackingRun | None = None
    offline: dict[int, float] | None = None
    if job.policy is None:
        offline = run_offline(nodes, pods, job.seed, job.inflation, points=(BOUND_AT,))
    else:
        run = grid_run(run_packing(nodes, pods, job.policy, job.seed, job.inflation))
    return JobResult(
        job=job,
        nodes=len(nodes),
        gpus=sum(n.gpu_count for n in nodes),
        pods=len(pods),
        run=run,
        offline=offline,
        seconds=time.perf_counter() - started,
        cpu_s=time.process_time() - cpu_started,
    )


def grid_run(run: PackingRun) -> PackingRun:
    """`run` with its per-pod curve replaced by one value per whole arrival percent 0, 1, ...
    (about 130 points instead of one per pod, for the plot and the JSON): `run.alloc_levels`, the
    artifact's reading of the curve and comparable with its published ones, where the run has
    them; else the allocated % after the first pod at which x% had arrived."""
    if run.alloc_levels:
        levels = sorted(run.alloc_levels)
        return replace(
            run,
            arrived_pct=tuple(float(x) for x in levels),
            allocated_pct=tuple(run.alloc_levels[x] for x in levels),
        )
    if not run.arrived_pct:
        return run
    top = math.floor(run.arrived_pct[-1] + 1e-9)
    grid: list[float] = []
    allocated: list[float] = []
    i = 0
    last = len(run.arrived_pct) - 1
    for x in range(top + 1):
        while i < last and run.arrived_pct[i] < x - 1e-9:
            i += 1
        grid.append(float(x))
        allocated.append(run.allocated_pct[i])
    return replace(run, arrived_pct=tuple(grid), allocated_pct=tuple(allocated))


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
