"""Metrics of a simulation: pure functions over the recorded samples and workload outcomes.

Samples are step functions: a sample's values hold from its `time_s` until the next sample (the
last one until the end of the run); before the first sample everything is 0. Averages are
time-weighted over a *window* `[0, window_s]`, the same for every policy compared, so that two
policies are judged over the same hours (see `gpupool.sim.report` for how the window is chosen).

Definitions (all GPU amounts in milli-GPU inside, shown as GPUs or percent):

- allocation %: GPU held by running workloads / cluster GPUs, time-averaged;
- utilization %: sum over running workloads of GPU held x mean utilization / cluster GPUs;
- fragmentation %: fragmented idle GPU (see `gpupool.sim.fragmentation`) / cluster GPUs, and
  as a share of the idle GPU;
- queueing delay: first start - submission, for every workload that started;
- completion time: finish - submission, for every workload that succeeded;
- preemptions: evictions of whole workloads (reclaim or preempt); lost GPU-hours: the GPU-hours
  of progress thrown away since the last checkpoint, at evictions and consolidation restarts.

Percentiles interpolate linearly between the closest ranks (numpy's default "linear").
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gpupool.core.model import MILLI_PER_GPU
from gpupool.sim.engine import OutcomeState, Sample, SimResult, WorkloadOutcome

__all__ = [
    "Distribution",
    "PolicySummary",
    "ProjectSummary",
    "binned_average",
    "percentile",
    "series",
    "step_integral",
    "summarize",
    "time_weighted_average",
]

SECONDS_PER_HOUR = 3600


@dataclass(frozen=True, slots=True)
class Distribution:
    """Summary of a set of durations in seconds; the statistics are None when it is empty."""

    count: int
    mean_s: float | None = None
    p50_s: float | None = None
    p90_s: float | None = None
    p99_s: float | None = None
    max_s: float | None = None

    @staticmethod
    def of(values: Iterable[float]) -> Distribution:
        ordered = sorted(values)
        if not ordered:
            return Distribution(0)
        return Distribution(
            count=len(ordered),
            mean_s=math.fsum(ordered) / len(ordered),
            p50_s=percentile(ordered, 0.5),
            p90_s=percentile(ordered, 0.9),
            p99_s=percentile(ordered, 0.99),
            max_s=float(ordered[-1]),
        )


def percentile(ordered: Sequence[float], q: float) -> float:
    """The `q` quantile (0..1) of sorted values, interpolating between the closest ranks."""
    if not ordered:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 1:
        raise ValueError(f"q must be in 0..1 (got {q})")
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


def step_integral(
    times_s: Sequence[int], values: Sequence[float], start_s: int, end_s: int
) -> float:
    """Integral over `[start_s, end_s]` of the step function `values[i]` from `times_s[i]`."""
    if len(times_s) != len(values):
        raise ValueError("times_s and values differ in length")
    total = 0.0
    for i, value in enumerate(values):
        begin = max(times_s[i], start_s)
        end = min(times_s[i + 1] if i + 1 < len(times_s) else end_s, end_s)
        if end > begin:
            total += value * (end - begin)
    return total


def time_weighted_average(
    times_s: Sequence[int], values: Sequence[float], start_s: int, end_s: int
) -> float:
    """Mean of the step function over `[start_s, end_s]` (0 for an empty window)."""
    if end_s <= start_s:
        return 0.0
    return step_integral(times_s, values, start_s, end_s) / (end_s - start_s)


def binned_average(
    times_s: Sequence[int], values: Sequence[float], start_s: int, end_s: int, bins: int
) -> tuple[list[int], list[float]]:
    """Bin starts and the step function's mean in each of (up to) `bins` equal bins (for plots)."""
    if len(times_s) != len(values):
        raise ValueError("times_s and values differ in length")
    bins = min(bins, end_s - start_s)
    if bins < 1:
        return [], []
    edges = [start_s + (end_s - start_s) * i // bins for i in range(bins + 1)]
    means: list[float] = []
    first = 0
    for low, high in itertools.pairwise(edges):
        while first + 1 < len(times_s) and times_s[first + 1] <= low:
            first += 1
        total = 0.0
        k = first
        while k < len(times_s) and times_s[k] < high:
            begin = max(times_s[k], low)
            end = min(times_s[k + 1] if k + 1 < len(times_s) else high, high)
            if end > begin:
                total += values[k] * (end - begin)
            k += 1
        means.append(total / (high - low))
    return edges[:-1], means


def series(result: SimResult, value: Callable[[Sample], float]) -> tuple[list[int], list[float]]:
    """Times and `value(sample)` of every sample: a step function for the functions above."""
    return [s.time_s for s in result.samples], [value(s) for s in result.samples]


# --- summaries -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProjectSummary:
    name: str
    quota_gpus: float
    avg_holding_gpus: float
    avg_fair_share_gpus: float
    avg_utilized_gpus: float
    queueing_delay: Distribution
    completion_time: Distribution
    submitted: int
    preemptions: int
    lost_gpu_hours: float


@dataclass(frozen=True, slots=True)
class PolicySummary:
    policy: str
    window_s: int
    makespan_s: int
    """When the last workload finished (or the run stopped)."""
    capacity_gpus: float
    allocation_pct: float
    utilization_pct: float
    fragmentation_pct: float
    """Fragmented idle GPU as a percentage of the cluster."""
    fragmented_idle_pct: float
    """Fragmented idle GPU as a percentage of the idle GPU."""
    queueing_delay: Distribution
    queueing_delay_by_type: tuple[tuple[str, Distribution], ...]
    completion_time: Distribution
    completion_time_by_type: tuple[tuple[str, Distribution], ...]
    submitted: int
    succeeded: int
    failed: int
    unfinished: int
    never_started: int
    preemptions: int
    restarts: int
    lost_gpu_hours: float
    projects: tuple[ProjectSummary, ...]
    cycles: int
    unsettled_instants: int


def summarize(policy: str, result: SimResult, window_s: int) -> PolicySummary:
    """Every number of the report for one policy's run, averaged over `[0, window_s]`."""
    capacity = result.capacity_milli

    def average(value: Callable[[Sample], float]) -> float:
        times, values = series(result, value)
        return time_weighted_average(times, values, 0, window_s)

    def pct(value: Callable[[Sample], float], of: float) -> float:
        return 100.0 * average(value) / of if of > 0 else 0.0

    avg_idle = average(lambda s: s.idle_milli)
    outcomes = result.outcomes
    projects = tuple(
        _project_summary(result, index, name, average) for index, name in enumerate(result.projects)
    )
    return PolicySummary(
        policy=policy,
        window_s=window_s,
        makespan_s=result.end_s,
        capacity_gpus=capacity / MILLI_PER_GPU,
        allocation_pct=pct(lambda s: sum(s.allocated_milli), capacity),
        utilization_pct=pct(lambda s: sum(s.utilized_milli), capacity),
        fragmentation_pct=pct(lambda s: s.fragmented_milli, capacity),
        fragmented_idle_pct=pct(lambda s: s.fragmented_milli, avg_idle),
        queueing_delay=_delays(outcomes),
        queueing_delay_by_type=_by_type(outcomes, _delays),
        completion_time=_completions(outcomes),
        completion_time_by_type=_by_type(outcomes, _completions),
        submitted=len(outcomes),
        succeeded=sum(1 for o in outcomes if o.state is OutcomeState.SUCCEEDED),
        failed=sum(1 for o in outcomes if o.state is OutcomeState.FAILED),
        unfinished=sum(
            1 for o in outcomes if o.state in (OutcomeState.PENDING, OutcomeState.RUNNING)
        ),
        never_started=sum(1 for o in outcomes if o.first_start_s is None),
        preemptions=sum(o.evictions for o in outcomes),
        restarts=sum(o.restarts for o in outcomes),
        lost_gpu_hours=_gpu_hours(o.lost_gpu_milli_s for o in outcomes),
        projects=projects,
        cycles=result.cycles,
        unsettled_instants=result.unsettled_instants,
    )


def _project_summary(
    result: SimResult, index: int, name: str, average: Callable[[Callable[[Sample], float]], float]
) -> ProjectSummary:
    mine = [o for o in result.outcomes if o.project == name]
    return ProjectSummary(
        name=name,
        quota_gpus=result.quota_milli[index] / MILLI_PER_GPU,
        avg_holding_gpus=average(lambda s: s.allocated_milli[index]) / MILLI_PER_GPU,
        avg_fair_share_gpus=average(lambda s: s.fair_share_milli[index]) / MILLI_PER_GPU,
        avg_utilized_gpus=average(lambda s: s.utilized_milli[index]) / MILLI_PER_GPU,
        queueing_delay=_delays(mine),
        completion_time=_completions(mine),
        submitted=len(mine),
        preemptions=sum(o.evictions for o in mine),
        lost_gpu_hours=_gpu_hours(o.lost_gpu_milli_s for o in mine),
    )


def _delays(outcomes: Iterable[WorkloadOutcome]) -> Distribution:
    return Distribution.of(d for o in outcomes if (d := o.queueing_delay_s) is not None)


def _completions(outcomes: Iterable[WorkloadOutcome]) -> Distribution:
    return Distribution.of(c for o in outcomes if (c := o.completion_time_s) is not None)


def _by_type(
    outcomes: Sequence[WorkloadOutcome],
    measure: Callable[[Iterable[WorkloadOutcome]], Distribution],
) -> tuple[tuple[str, Distribution], ...]:
    kinds = sorted({o.type for o in outcomes})
    return tuple((kind, measure(o for o in outcomes if o.type == kind)) for kind in kinds)


def _gpu_hours(milli_seconds: Iterable[int]) -> float:
    return sum(milli_seconds) / MILLI_PER_GPU / SECONDS_PER_HOUR
