"""Property tests of the engine over small random clusters and workloads, through the real core.

At every instant: no device holds more than 1000 milli-GPU, a whole-GPU task has its devices to
itself, no node's CPU is overcommitted. Over the run: the GPU allocated never exceeds the
cluster's capacity, so allocated GPU-seconds stay within capacity x time; every workload that
succeeded ran at least its duration between its first start and its finish; work is lost only
by workloads that were evicted or restarted.

Set GPUPOOL_PROPERTY_EXAMPLES to change how many examples run (CI=1 derandomizes).
"""

from __future__ import annotations

import os
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.core.model import (
    MILLI_PER_GPU,
    GpuRequest,
    GpuRequestKind,
    Node,
    Project,
    Resources,
    Snapshot,
    WorkloadType,
)
from gpupool.sim.cluster import Policy, apply_policy
from gpupool.sim.engine import EngineSettings, OutcomeState, run_simulation
from gpupool.sim.fragmentation import shape_fragmentation, typical_shapes
from gpupool.sim.metrics import step_integral
from gpupool.sim.workload import SimWorkload

PROPERTY_SETTINGS = settings(
    max_examples=int(os.environ.get("GPUPOOL_PROPERTY_EXAMPLES", "100")),
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

PROJECTS = ("a", "b", "c")


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[Node], list[Project], list[SimWorkload], EngineSettings]:
    cpu_choices = st.sampled_from([None, 8000, 32000])
    nodes = [
        Node(name=f"n{i}", gpu_count=draw(st.integers(1, 4)), cpu_milli=draw(cpu_choices))
        for i in range(draw(st.integers(1, 3)))
    ]
    largest = max(n.gpu_count for n in nodes)
    projects = [
        Project(
            name=name,
            quota=Resources(gpu_milli=draw(st.integers(0, 4)) * 500),
            over_quota_weight=draw(st.integers(0, 2)),
        )
        for name in PROJECTS[: draw(st.integers(1, 3))]
    ]
    workloads = []
    for i in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(list(WorkloadType)))
        if draw(st.booleans()):
            gpu = GpuRequest.whole(draw(st.integers(1, largest)))
        else:
            gpu = GpuRequest.fraction(draw(st.sampled_from([250, 500, 750])))
        workloads.append(
            SimWorkload(
                name=f"w{i}",
                project=draw(st.sampled_from([p.name for p in projects])),
                type=kind,
                gpu=gpu,
                duration_s=draw(st.integers(1, 2000)),
                submit_s=draw(st.integers(0, 3000)),
                tasks=draw(st.integers(1, 2)),
                mean_gpu_util_permille=draw(st.integers(0, 1000)),
                cpu_milli=draw(st.sampled_from([0, 0, 2000, 6000])),
            )
        )
    engine = EngineSettings(
        checkpoint_interval_s=draw(st.sampled_from([0, 1, 100, 1800])),
        min_cycle_interval_s=draw(st.sampled_from([0, 0, 30, 600])),
    )
    policy = draw(st.sampled_from(list(Policy)))
    return nodes, list(apply_policy(projects, policy)), workloads, engine


def check_snapshot(snapshot: Snapshot) -> None:
    used: dict[tuple[str, int], int] = defaultdict(int)
    whole: dict[tuple[str, int], int] = defaultdict(int)
    cpu: dict[str, int] = defaultdict(int)
    for workload in snapshot.workloads:
        for placement in workload.placements:
            cpu[placement.node] += workload.cpu_milli
            if workload.gpu.kind is GpuRequestKind.WHOLE:
                assert len(placement.devices) == workload.gpu.amount
                for device in placement.devices:
                    used[(placement.node, device)] += MILLI_PER_GPU
                    whole[(placement.node, device)] += 1
            else:
                used[(placement.node, placement.devices[0])] += workload.gpu.amount
    gpus = {n.name: n.gpu_count for n in snapshot.nodes}
    for (name, device), milli in used.items():
        assert 0 <= device < gpus[name]
        assert milli <= MILLI_PER_GPU, f"{name}:{device} holds {milli} milli"
        assert whole[(name, device)] == 0 or milli == MILLI_PER_GPU
    for n in snapshot.nodes:
        if n.cpu_milli is not None:
            assert cpu[n.name] <= n.cpu_milli


@PROPERTY_SETTINGS
@given(cases())
def test_conservation_and_accounting(
    case: tuple[list[Node], list[Project], list[SimWorkload], EngineSettings],
) -> None:
    nodes, projects, workloads, engine = case
    result = run_simulation(
        nodes,
        projects,
        workloads,
        engine,
        fragmentation=shape_fragmentation(typical_shapes(workloads)),
        observer=check_snapshot,
    )
    capacity = sum(n.gpu_count for n in nodes) * MILLI_PER_GPU
    assert result.capacity_milli == capacity
    times = [s.time_s for s in result.samples]
    assert times == sorted(times) and len(set(times)) == len(times)
    for sample in result.samples:
        assert 0 <= sum(sample.allocated_milli) <= capacity
        pairs = zip(sample.utilized_milli, sample.allocated_milli, strict=True)
        assert all(0 <= used <= held for used, held in pairs)
        assert 0 <= sample.fragmented_milli <= sample.idle_milli
        assert sample.idle_milli == capacity - sum(sample.allocated_milli)
    end = max(result.end_s, 1)
    allocated = [sum(s.allocated_milli) for s in result.samples]
    assert step_integral(times, allocated, 0, end) <= capacity * end
    assert result.unsettled_instants == 0
    for outcome in result.outcomes:
        assert outcome.lost_gpu_milli_s >= 0
        if outcome.lost_gpu_milli_s:
            assert outcome.evictions + outcome.restarts > 0
        if outcome.state is OutcomeState.SUCCEEDED:
            assert outcome.first_start_s is not None and outcome.finish_s is not None
            assert outcome.finish_s - outcome.first_start_s >= outcome.duration_s
            assert outcome.first_start_s >= outcome.submit_s
        if outcome.state is OutcomeState.FAILED:
            assert outcome.type != WorkloadType.TRAIN.value
