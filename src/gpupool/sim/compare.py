"""Simulate one workload under several policies and summarize them over one common window.

The window over which allocation and utilization are averaged is the same for every policy:
the synthetic workload's weeks (the period in which work arrives), or else the earliest
makespan among the policies (until the fastest policy has finished everything; after that the
comparison would only measure which one idles longer). Queueing delay and completion time cover
every workload, whenever it ran.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpupool.sim.cluster import Cluster, Policy, apply_policy
from gpupool.sim.durations import format_duration_s
from gpupool.sim.engine import EngineSettings, ProgressFunction, SimResult, run_simulation
from gpupool.sim.fragmentation import shape_fragmentation, typical_shapes
from gpupool.sim.metrics import Distribution, PolicySummary, summarize
from gpupool.sim.workload import SimWorkload

__all__ = [
    "Comparison",
    "PolicyRun",
    "compare_policies",
    "format_duration_s",
    "summary_json",
]

JSON_VERSION = 1


@dataclass(frozen=True, slots=True)
class PolicyRun:
    policy: Policy
    result: SimResult
    summary: PolicySummary


@dataclass(frozen=True, slots=True)
class Comparison:
    source: str
    """Where the workload came from, in words (a file, or the synthetic generator and seed)."""
    cluster: Cluster
    workloads: int
    settings: EngineSettings
    window_s: int
    runs: tuple[PolicyRun, ...]


def compare_policies(
    cluster: Cluster,
    workloads: Sequence[SimWorkload],
    policies: Sequence[Policy],
    settings: EngineSettings,
    *,
    source: str,
    window_s: int | None = None,
    progress: Callable[[Policy], ProgressFunction | None] | None = None,
) -> Comparison:
    """Run `workloads` under each policy (same engine settings) and summarize them."""
    if not policies:
        raise ValueError("no policy to simulate")
    fragmentation = shape_fragmentation(typical_shapes(workloads))
    results: list[tuple[Policy, SimResult]] = []
    for policy in policies:
        result = run_simulation(
            cluster.nodes,
            apply_policy(cluster.projects, policy),
            workloads,
            settings,
            fragmentation=fragmentation,
            progress=None if progress is None else progress(policy),
        )
        results.append((policy, result))
    window = window_s if window_s is not None else min(r.end_s for _, r in results)
    window = max(window, 1)
    runs = tuple(PolicyRun(p, r, summarize(p.value, r, window)) for p, r in results)
    return Comparison(source, cluster, len(workloads), settings, window, runs)


def summary_json(comparison: Comparison) -> dict[str, object]:
    """The report's numbers as JSON-ready data (floats rounded to 3 decimals)."""
    settings = comparison.settings
    return {
        "version": JSON_VERSION,
        "source": comparison.source,
        "cluster": {
            "name": comparison.cluster.name,
            "nodes": len(comparison.cluster.nodes),
            "gpus": comparison.cluster.capacity_gpu_milli // 1000,
            "projects": {
                p.name: {"quota_gpus": p.quota.gpu_milli / 1000}
                for p in comparison.cluster.leaf_projects
            },
        },
        "workloads": comparison.workloads,
        "settings": {
            "checkpoint_interval_s": settings.checkpoint_interval_s,
            "min_cycle_interval_s": settings.min_cycle_interval_s,
        },
        "window_s": comparison.window_s,
        "policies": {run.policy.value: _policy_json(run.summary) for run in comparison.runs},
    }


def _policy_json(s: PolicySummary) -> dict[str, object]:
    return {
        "allocation_pct": _r(s.allocation_pct),
        "utilization_pct": _r(s.utilization_pct),
        "fragmentation_pct": _r(s.fragmentation_pct),
        "fragmented_idle_pct": _r(s.fragmented_idle_pct),
        "makespan_s": s.makespan_s,
        "queueing_delay_s": {
            "all": _dist(s.queueing_delay),
            "by_type": {kind: _dist(d) for kind, d in s.queueing_delay_by_type},
            "by_project": {p.name: _dist(p.queueing_delay) for p in s.projects},
        },
        "completion_time_s": {
            "all": _dist(s.completion_time),
            "by_type": {kind: _dist(d) for kind, d in s.completion_time_by_type},
            "by_project": {p.name: _dist(p.completion_time) for p in s.projects},
        },
        "workloads": {
            "submitted": s.submitted,
            "succeeded": s.succeeded,
            "failed": s.failed,
            "unfinished": s.unfinished,
            "never_started": s.never_started,
        },
        "preemptions": s.preemptions,
        "restarts": s.restarts,
        "lost_gpu_hours": _r(s.lost_gpu_hours),
        "projects": {
            p.name: {
                "quota_gpus": _r(p.quota_gpus),
                "avg_holding_gpus": _r(p.avg_holding_gpus),
                "avg_fair_share_gpus": _r(p.avg_fair_share_gpus),
                "avg_utilized_gpus": _r(p.avg_utilized_gpus),
                "submitted": p.submitted,
                "preemptions": p.preemptions,
                "lost_gpu_hours": _r(p.lost_gpu_hours),
            }
            for p in s.projects
        },
        "cycles": s.cycles,
        "unsettled_instants": s.unsettled_instants,
    }


def _dist(d: Distribution) -> dict[str, object]:
    return {
        "count": d.count,
        "mean": _r(d.mean_s),
        "p50": _r(d.p50_s),
        "p90": _r(d.p90_s),
        "p99": _r(d.p99_s),
        "max": _r(d.max_s),
    }


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
