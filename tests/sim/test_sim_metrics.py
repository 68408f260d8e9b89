"""Metrics on hand-checked step functions and outcomes; fragmentation on hand-checked nodes."""

from __future__ import annotations

import pytest

from gpupool.core.model import GpuRequest, Node, Snapshot, TaskPlacement, Workload, WorkloadType
from gpupool.sim.engine import OutcomeState, Sample, SimResult, WorkloadOutcome
from gpupool.sim.fragmentation import (
    TaskShape,
    node_fragmented_milli,
    node_free,
    shape_fragmentation,
    typical_shapes,
)
from gpupool.sim.metrics import (
    Distribution,
    binned_average,
    percentile,
    step_integral,
    summarize,
    time_weighted_average,
)
from gpupool.sim.workload import SimWorkload

# A step function: 2 on [0, 10), 4 on [10, 30), 0 from 30.
TIMES = [0, 10, 30]
VALUES = [2.0, 4.0, 0.0]


def test_step_integral_and_time_weighted_average() -> None:
    assert step_integral(TIMES, VALUES, 0, 40) == 2 * 10 + 4 * 20
    assert time_weighted_average(TIMES, VALUES, 0, 40) == 2.5
    assert time_weighted_average(TIMES, VALUES, 5, 15) == (2 * 5 + 4 * 5) / 10
    assert time_weighted_average(TIMES, VALUES, 0, 20) == (2 * 10 + 4 * 10) / 20
    assert time_weighted_average(TIMES, VALUES, 10, 10) == 0.0


def test_before_the_first_sample_the_value_is_zero() -> None:
    assert time_weighted_average([10], [5.0], 0, 20) == 2.5
    assert time_weighted_average([], [], 0, 20) == 0.0


def test_binned_average() -> None:
    assert binned_average(TIMES, VALUES, 0, 40, 4) == ([0, 10, 20, 30], [2.0, 4.0, 4.0, 0.0])
    assert binned_average(TIMES, VALUES, 0, 40, 2) == ([0, 20], [3.0, 2.0])
    starts, means = binned_average(TIMES, VALUES, 0, 40, 3)
    assert starts == [0, 13, 26]
    assert means == pytest.approx([(2 * 10 + 4 * 3) / 13, 4.0, (4 * 4 + 0) / 14])
    assert binned_average(TIMES, VALUES, 0, 3, 10)[0] == [0, 1, 2]  # no more bins than seconds
    assert binned_average(TIMES, VALUES, 5, 5, 10) == ([], [])


def test_percentiles_interpolate_between_ranks() -> None:
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile([1, 2, 3, 4], 0.9) == pytest.approx(3.7)
    assert percentile([1, 2, 3, 4], 0) == 1 and percentile([1, 2, 3, 4], 1) == 4
    assert percentile([7], 0.99) == 7
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_distribution() -> None:
    d = Distribution.of([30, 10, 20, 0, 40])
    assert (d.count, d.mean_s, d.p50_s, d.p90_s, d.max_s) == (5, 20.0, 20.0, 36.0, 40.0)
    assert d.p99_s == pytest.approx(39.6)
    assert Distribution.of([]) == Distribution(0)


def outcome(
    name: str,
    project: str,
    kind: str,
    submit_s: int,
    start_s: int | None,
    finish_s: int | None,
    state: OutcomeState = OutcomeState.SUCCEEDED,
    evictions: int = 0,
    lost: int = 0,
) -> WorkloadOutcome:
    return WorkloadOutcome(
        name, project, kind, submit_s, 1000, 10, state, start_s, finish_s, evictions, 0, lost
    )


def test_summarize_a_hand_built_run() -> None:
    """Capacity 4 GPUs. a holds 2 GPUs on [0, 50), b 1 GPU on [50, 100); window 0..100."""
    samples = (
        Sample(0, (2000, 0), (1000, 0), (2000, 2000), (0, 1), 500, 2000),
        Sample(50, (0, 1000), (0, 500), (0, 2000), (0, 0), 0, 3000),
    )
    outcomes = (
        outcome("a1", "a", "train", 0, 0, 50),
        outcome("a2", "a", "interactive", 0, 10, None, OutcomeState.FAILED, 1, 3_600_000),
        outcome("b1", "b", "train", 0, 50, 100, evictions=2, lost=1_800_000),
        outcome("b2", "b", "train", 90, None, None, OutcomeState.PENDING),
    )
    result = SimResult(("a", "b"), (2000, 2000), 4000, samples, outcomes, 100, 3, 4, 0)
    s = summarize("guaranteed", result, 100)
    assert s.allocation_pct == pytest.approx(100 * (2000 * 50 + 1000 * 50) / 100 / 4000)
    assert s.utilization_pct == pytest.approx(100 * (1000 * 50 + 500 * 50) / 100 / 4000)
    assert s.fragmentation_pct == pytest.approx(100 * 500 * 50 / 100 / 4000)
    assert s.fragmented_idle_pct == pytest.approx(100 * 250 / 2500)
    assert s.queueing_delay == Distribution.of([0, 10, 50])
    assert dict(s.queueing_delay_by_type)["interactive"] == Distribution.of([10])
    assert s.completion_time == Distribution.of([50, 100])
    assert (s.submitted, s.succeeded, s.failed, s.unfinished, s.never_started) == (4, 2, 1, 1, 1)
    assert s.preemptions == 3
    assert s.lost_gpu_hours == pytest.approx(1.5)
    a, b = s.projects
    assert a.avg_holding_gpus == 1.0 and b.avg_holding_gpus == 0.5
    assert a.avg_fair_share_gpus == 1.0 and b.avg_fair_share_gpus == 2.0
    assert a.lost_gpu_hours == pytest.approx(1.0) and b.preemptions == 2
    assert b.queueing_delay == Distribution.of([50])


# --- fragmentation -------------------------------------------------------------------------------

DEVICES = [1000, 500, 0, 250]  # idle milli-GPU per device: 1750 in all


@pytest.mark.parametrize(
    ("shape", "cpu_free", "fragmented"),
    [
        (TaskShape(1000), None, 500 + 250),  # fits on device 0; partly used devices are lost
        (TaskShape(2000), None, 1750),  # only one whole device: nothing fits
        (TaskShape(500), None, 250),  # fits; only the 250 device is too small
        (TaskShape(750), None, 500 + 250),
        (TaskShape(250), None, 0),
        (TaskShape(250, cpu_milli=4000), 2000, 1750),  # not enough CPU: all lost
        (TaskShape(250, cpu_milli=4000), 4000, 0),
    ],
)
def test_node_fragmentation(shape: TaskShape, cpu_free: int | None, fragmented: int) -> None:
    assert node_fragmented_milli(DEVICES, cpu_free, shape) == fragmented


def workload(name: str, gpu: GpuRequest, tasks: int = 1, cpu_milli: int = 0) -> SimWorkload:
    return SimWorkload(name, "a", WorkloadType.TRAIN, gpu, 10, 0, tasks, 1000, cpu_milli)


def test_typical_shapes_count_tasks() -> None:
    shapes = typical_shapes(
        [
            workload("x", GpuRequest.whole(1), tasks=3),
            workload("y", GpuRequest.fraction(500)),
            workload("z", GpuRequest.fraction(500), cpu_milli=100),
            workload("w", GpuRequest.whole(1)),
        ]
    )
    assert shapes == ((TaskShape(1000), 4), (TaskShape(500), 1), (TaskShape(500, 100), 1))


def test_cluster_fragmentation_of_a_snapshot() -> None:
    nodes = (Node("n1", 2, cpu_milli=8000), Node("n2", 1))
    running = (
        Workload(
            "half",
            "a",
            WorkloadType.TRAIN,
            GpuRequest.fraction(500),
            cpu_milli=2000,
            placements=(TaskPlacement(0, "n1", (0,)),),
        ),
        Workload(
            "whole",
            "a",
            WorkloadType.TRAIN,
            GpuRequest.whole(1),
            placements=(TaskPlacement(0, "n2", (0,)),),
        ),
    )
    snapshot = Snapshot(nodes, (), running)
    assert node_free(snapshot) == {"n1": ([500, 1000], 6000), "n2": ([0], None)}
    # Shapes: a whole GPU (weight 3) loses n1's half device; a half GPU (weight 1) loses nothing.
    measure = shape_fragmentation(((TaskShape(1000), 3), (TaskShape(500), 1)))
    assert measure(snapshot) == ((3 * 500 + 1 * 0) // 4, 1500)
    assert shape_fragmentation(())(snapshot) == (0, 1500)
