"""One policy's packing runs summed up over the seeds (`summarise`, `summary_json`) and their
curves drawn (`write_curves_svg`): the report of `gpupool bench packing` on one pod list."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpupool.sim.packing import CHECKPOINTS_PCT, PackingRun


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
