"""The synthetic lab workload: seeded, shaped like the founding story, fits the cluster."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from gpupool.core.model import MILLI_PER_GPU, GpuRequestKind, Node, Project, Resources, WorkloadType
from gpupool.sim.cluster import Cluster, default_cluster
from gpupool.sim.synthetic import DAY_S, HOUR_S, WEEK_S, Level, generate, project_levels


def test_same_seed_same_workload_other_seed_other_workload() -> None:
    assert generate(7, weeks=2) == generate(7, weeks=2)
    assert generate(7, weeks=2) != generate(8, weeks=2)


def test_the_global_random_state_is_neither_used_nor_changed() -> None:
    random.seed(1)
    before = random.getstate()
    first = generate(5, weeks=1)
    assert random.getstate() == before
    random.seed(99)
    assert generate(5, weeks=1) == first


def test_shape_of_the_default_workload() -> None:
    cluster = default_cluster()
    work = generate(1, weeks=4)
    quotas = {p.name: p.quota.gpu_milli for p in cluster.leaf_projects}
    assert {w.project for w in work} == set(quotas)
    assert len({w.name for w in work}) == len(work)
    assert [w.submit_s for w in work] == sorted(w.submit_s for w in work)
    assert all(0 <= w.submit_s < 4 * WEEK_S for w in work)
    kinds = Counter(w.type for w in work)
    assert kinds[WorkloadType.INTERACTIVE] > 50 and kinds[WorkloadType.TRAIN] > 200
    for w in work:
        per_task = w.gpu.amount * MILLI_PER_GPU if w.gpu.kind is GpuRequestKind.WHOLE else 500
        assert w.tasks * per_task <= max(quotas[w.project], MILLI_PER_GPU)
        assert w.gpu.kind is not GpuRequestKind.WHOLE or w.gpu.amount <= 8
        if w.type is WorkloadType.INTERACTIVE:
            day, second = divmod(w.submit_s % WEEK_S, DAY_S)
            assert day < 5 and 9 * HOUR_S <= second < 11 * HOUR_S
            assert 100 <= w.mean_gpu_util_permille <= 250
            assert w.gpu.kind is not GpuRequestKind.WHOLE or w.gpu.amount == 1
        else:
            assert 800 <= w.mean_gpu_util_permille <= 950
    long_jobs = [w for w in work if w.duration_s >= 2 * HOUR_S and w.type is WorkloadType.TRAIN]
    sweeps = [w for w in work if "sweep" in w.name]
    assert max(w.duration_s for w in long_jobs) > DAY_S
    assert len(sweeps) > 50 and all(w.duration_s <= 90 * 60 for w in sweeps)


def test_projects_are_busy_out_of_phase() -> None:
    levels = project_levels(random.Random(0), projects=4, weeks=12)
    for week in levels:
        assert Counter(week)[Level.HEAVY] <= 2
    per_project = list(zip(*levels, strict=True))
    assert len(set(per_project)) == 4


def test_busy_weeks_submit_more_work_than_idle_weeks() -> None:
    cluster = default_cluster()
    levels = project_levels(random.Random(3), len(cluster.leaf_projects), 8)
    work = generate(3, weeks=8)
    gpu_seconds: Counter[Level] = Counter()
    weeks: Counter[Level] = Counter()
    names = [p.name for p in cluster.leaf_projects]
    for week in range(8):
        for index, level in enumerate(levels[week]):
            weeks[level] += 1
            gpu_seconds[level] += sum(
                w.duration_s * w.tasks * w.gpu.milli_on(81920)
                for w in work
                if w.project == names[index] and w.submit_s // WEEK_S == week
            )
    average = {level: gpu_seconds[level] / weeks[level] for level in weeks}
    assert average[Level.HEAVY] > average[Level.NORMAL] > average[Level.IDLE]


def test_another_cluster_caps_jobs_at_its_quotas_and_nodes() -> None:
    cluster = Cluster(
        nodes=(Node("n1", 4),),
        projects=(
            Project("big", quota=Resources(gpu_milli=3000)),
            Project("none", quota=Resources()),
        ),
    )
    work = generate(2, weeks=2, cluster=cluster)
    assert {w.project for w in work} <= {"big", "none"}
    for w in work:
        if w.gpu.kind is GpuRequestKind.WHOLE:
            assert w.gpu.amount * w.tasks <= (3 if w.project == "big" else 1)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="weeks"):
        generate(1, weeks=0)
    with pytest.raises(ValueError, match="no GPUs"):
        generate(1, cluster=Cluster((Node("n", 0),), (Project("p"),)))
