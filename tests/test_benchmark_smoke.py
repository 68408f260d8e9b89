"""Smoke test of the cycle benchmark's workload generator, and of one cycle on its snapshot.

No timing here: the benchmark itself is `benchmarks/cycle.py`.
"""

from __future__ import annotations

import importlib
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from cycle_bench.checks import snapshot_stats, validate_decisions, validate_snapshot
from cycle_bench.trace import (
    FRACTION_SHARE,
    GPUS_PER_NODE,
    ONE_GPU_SHARE,
    PENDING_PER_NODE,
    TRACE_FRACTION_MILLI,
)
from cycle_bench.workload import build_snapshot

from gpupool.core.decisions import Bind, Evict, EvictionCause
from gpupool.core.model import MILLI_PER_GPU, GpuRequest, Snapshot, TaskPlacement, Workload
from gpupool.simcluster.apply import apply_decisions

NODES = 10
SEED = 7


@pytest.fixture(scope="module")
def snapshot() -> Snapshot:
    return build_snapshot(NODES, SEED)


def test_generated_snapshot_is_consistent(snapshot: Snapshot) -> None:
    assert validate_snapshot(snapshot) == []


def test_devices_never_over_one_gpu_and_whole_devices_exclusive(snapshot: Snapshot) -> None:
    charged: dict[tuple[str, int], int] = defaultdict(int)
    users: dict[tuple[str, int], int] = defaultdict(int)
    whole: set[tuple[str, int]] = set()
    for w in snapshot.workloads:
        for p in w.placements:
            for d in p.devices:
                assert 0 <= d < GPUS_PER_NODE
                charged[(p.node, d)] += w.gpu.amount if w.gpu.is_shared else MILLI_PER_GPU
                users[(p.node, d)] += 1
                if not w.gpu.is_shared:
                    whole.add((p.node, d))
    assert charged, "some work is running"
    assert max(charged.values()) <= MILLI_PER_GPU
    assert all(users[key] == 1 for key in whole)
    assert any(users[key] > 1 for key in charged if key not in whole), "fractions share devices"


def test_sizes_and_fill(snapshot: Snapshot) -> None:
    stats = snapshot_stats(snapshot)
    assert stats.nodes == NODES
    assert stats.gpus == NODES * GPUS_PER_NODE
    assert stats.pending == PENDING_PER_NODE * NODES
    assert 0.6 <= stats.held_gpu_milli / (stats.gpus * MILLI_PER_GPU) <= 0.75
    seqs = [w.submit_seq for w in snapshot.workloads]
    assert len(set(seqs)) == len(seqs)


def test_projects_quotas_and_imbalance(snapshot: Snapshot) -> None:
    capacity = sum(n.gpu_count for n in snapshot.nodes) * MILLI_PER_GPU
    departments = [p for p in snapshot.projects if p.parent is None]
    leaves = [p for p in snapshot.projects if p.parent is not None]
    assert len(departments) == 2
    assert len(leaves) == 10
    assert sum(p.quota.gpu_milli for p in leaves) == capacity
    for dept in departments:
        children = [p for p in leaves if p.parent == dept.name]
        assert dept.quota.gpu_milli == sum(p.quota.gpu_milli for p in children)
    assert {p.over_quota_weight for p in leaves} == {1, 2, 3}
    assert sum(1 for p in leaves if p.limit.gpu_milli is not None) >= 2

    held: Counter[str] = Counter()
    for w in snapshot.workloads:
        held[w.project] += sum(w.gpu.milli_on(80 * 1024) for _ in w.placements)
    over = [p for p in leaves if held[p.name] > p.quota.gpu_milli]
    under = [p for p in leaves if held[p.name] < p.quota.gpu_milli]
    assert over and under


def test_shape_mix_follows_the_trace() -> None:
    big = build_snapshot(100, SEED)
    stats = snapshot_stats(big)
    assert stats.pending == 1000
    assert abs(stats.pending_fraction_share - FRACTION_SHARE) < 0.05
    assert abs(stats.pending_one_gpu_share - ONE_GPU_SHARE) < 0.05
    assert 0.08 < stats.pending_gang_share < 0.20
    trace_values = {milli for milli, _ in TRACE_FRACTION_MILLI}
    fractions = {w.gpu.amount for w in big.workloads if not w.is_running and w.gpu.is_shared}
    assert fractions <= trace_values
    assert len(fractions) >= 8
    gangs = [w for w in big.workloads if not w.is_running and not w.gpu.is_shared]
    assert all(1 <= w.gpu.amount <= 8 and 1 <= w.tasks <= 4 for w in gangs)
    assert any(w.tasks > 1 for w in gangs)


def test_deterministic_by_seed(snapshot: Snapshot) -> None:
    assert build_snapshot(NODES, SEED) == snapshot
    assert build_snapshot(NODES, SEED + 1) != snapshot


def test_validator_catches_an_overcommitted_device(snapshot: Snapshot) -> None:
    running = next(w for w in snapshot.workloads if w.is_running and not w.gpu.is_shared)
    placement = running.placements[0]
    intruder = Workload(
        name="intruder",
        project=running.project,
        type=running.type,
        gpu=GpuRequest.fraction(500),
        placements=(TaskPlacement(0, placement.node, (placement.devices[0],)),),
    )
    broken = Snapshot(
        nodes=snapshot.nodes,
        projects=snapshot.projects,
        workloads=(*snapshot.workloads, intruder),
        now_s=snapshot.now_s,
    )
    assert validate_snapshot(broken)


@pytest.mark.parametrize(("nodes", "seed"), [(NODES, SEED), (100, 0)])
def test_one_cycle_makes_consistent_decisions(nodes: int, seed: int) -> None:
    try:
        cycle = importlib.import_module("gpupool.core.cycle")
    except ImportError:
        pytest.skip("gpupool.core.cycle.run_cycle does not exist yet")
    snapshot = build_snapshot(nodes, seed)
    result = cycle.run_cycle(snapshot)

    assert validate_decisions(snapshot, result.decisions) == []
    after = apply_decisions(snapshot, result.decisions)
    assert validate_snapshot(after) == []
    # 30% of the GPUs are idle and small work is waiting: something starts (G11).
    assert any(isinstance(d, Bind) for d in result.decisions)

    by_name = {w.name: w for w in snapshot.workloads}
    projects = {p.name: p for p in snapshot.projects}
    for d in result.decisions:
        if not isinstance(d, Evict) or d.for_workload is None:
            continue
        victim = by_name[d.workload]
        reclaimer = by_name[d.for_workload]
        assert victim.is_preemptible, d
        if d.cause is EvictionCause.RECLAIM:
            assert victim.project != reclaimer.project, d
        else:
            assert victim.project == reclaimer.project, d
            assert victim.effective_priority < reclaimer.effective_priority, d
        min_runtime = victim.min_runtime_s
        if min_runtime is None:
            min_runtime = projects[victim.project].min_runtime_s
        assert victim.started_at_s is not None
        assert snapshot.now_s - victim.started_at_s >= min_runtime, d  # G7

    # Every workload left waiting says why.
    started = {d.workload for d in result.decisions if isinstance(d, Bind)}
    for w in snapshot.workloads:
        if not w.is_running and w.name not in started:
            assert result.pending_reasons.get(w.name), w.name
    assert set(result.pending_reasons) <= set(by_name)


def test_settling_runs_the_cluster_to_rest() -> None:
    # `benchmarks/cycle.py --settled`: the timed cycle is one that changes nothing.
    from cycle_bench.measure import SETTLE_MAX_CYCLES, settle

    from gpupool.core.cycle import run_cycle

    snapshot = build_snapshot(30, SEED)
    settled, applied = settle(snapshot, run_cycle)
    assert 0 < applied < SETTLE_MAX_CYCLES  # the generated cluster has work to start
    assert validate_snapshot(settled) == []
    assert run_cycle(settled).decisions == ()
    assert settled.now_s > snapshot.now_s
    assert sum(1 for w in settled.workloads if w.placements) > sum(
        1 for w in snapshot.workloads if w.placements
    )
