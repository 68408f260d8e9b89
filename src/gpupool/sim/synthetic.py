"""A seeded synthetic workload: the founding story of a research lab sharing one GPU cluster.

About 20 researchers work in a handful of projects (researchers spread over the projects by
quota). Week by week each project goes through a four-week rhythm, shifted by one week per
project so that their busy weeks do not coincide: a *heavy* week (a deadline: many long
training jobs and hyper-parameter sweeps), a *normal* week, a *light* week and an *idle* week;
one week in five a project breaks its rhythm and takes a random level. That is when a static
partition wastes GPUs: one project queues while another's quota sits idle.

- **Notebooks** (interactive): on working days (Monday to Friday) a researcher opens a session
  between 09:00 and 11:00 with a probability set by the week's level; it holds one GPU or half
  of one for 2 to 8 hours at 10-25% utilization.
- **Training jobs** (train): submitted during working hours; they run from 2 hours to 3 days
  (log-uniform), on 1, 2, 4 or 8 GPUs (8 as one 8-GPU task or a gang of two 4-GPU tasks),
  capped at the project's quota and the largest node, at 80-95% utilization.
- **Sweeps** (train): in heavy weeks (sometimes normal ones) a researcher launches 16-48 short
  jobs (20-90 minutes, one GPU or half of one) within ten minutes, at 85-95% utilization.

Time 0 is a Monday 00:00. Every random draw comes from one `random.Random(seed)`, in a fixed
order, so a seed always gives the same workloads.
"""

from __future__ import annotations

import enum
import math
import random
from dataclasses import dataclass

from gpupool.core.model import MILLI_PER_GPU, GpuRequest, WorkloadType
from gpupool.sim.cluster import Cluster, default_cluster
from gpupool.sim.workload import SimWorkload

__all__ = ["DAY_S", "HOUR_S", "WEEK_S", "Level", "generate", "project_levels"]

HOUR_S = 3600
DAY_S = 24 * HOUR_S
WEEK_S = 7 * DAY_S
RESEARCHERS = 20
WORKDAYS = 5
RHYTHM_BREAK_PROBABILITY = 0.2


class Level(enum.Enum):
    """How busy a project is in a week."""

    HEAVY = "heavy"
    NORMAL = "normal"
    LIGHT = "light"
    IDLE = "idle"


RHYTHM = (Level.HEAVY, Level.NORMAL, Level.LIGHT, Level.IDLE)


@dataclass(frozen=True, slots=True)
class _Activity:
    notebook_day_probability: float
    training_jobs: tuple[int, int]
    """Per researcher per week, drawn uniformly from this range."""
    sweeps: tuple[int, int]
    """Per project per week."""


ACTIVITY = {
    Level.HEAVY: _Activity(0.8, (4, 8), (2, 3)),
    Level.NORMAL: _Activity(0.6, (2, 4), (0, 1)),
    Level.LIGHT: _Activity(0.3, (0, 2), (0, 0)),
    Level.IDLE: _Activity(0.05, (0, 0), (0, 0)),
}


def project_levels(rng: random.Random, projects: int, weeks: int) -> list[list[Level]]:
    """`levels[week][project]`: the rhythm shifted per project, broken now and then."""
    levels = []
    for week in range(weeks):
        row = []
        for project in range(projects):
            level = RHYTHM[(week + project) % len(RHYTHM)]
            if rng.random() < RHYTHM_BREAK_PROBABILITY:
                level = rng.choice(RHYTHM)
            row.append(level)
        levels.append(row)
    return levels


def generate(seed: int, weeks: int = 4, cluster: Cluster | None = None) -> tuple[SimWorkload, ...]:
    """The synthetic workload for `weeks` weeks on `cluster` (default: `default_cluster()`)."""
    if weeks < 1:
        raise ValueError(f"weeks must be at least 1 (got {weeks})")
    cluster = cluster or default_cluster()
    return _Generator(random.Random(seed), cluster).weeks(weeks)


class _Generator:
    def __init__(self, rng: random.Random, cluster: Cluster) -> None:
        self._rng = rng
        self._projects = cluster.leaf_projects
        if not self._projects:
            raise ValueError("the cluster has no projects to generate work for")
        largest_node = max((n.gpu_count for n in cluster.nodes), default=0)
        if largest_node == 0:
            raise ValueError("the cluster has no GPUs to generate work for")
        self._max_gpus = {
            p.name: max(1, min(8, largest_node, p.quota.gpu_milli // MILLI_PER_GPU))
            for p in self._projects
        }
        self._researchers = _spread(RESEARCHERS, [p.quota.gpu_milli for p in self._projects])
        self._out: list[SimWorkload] = []
        self._count = 0

    def weeks(self, weeks: int) -> tuple[SimWorkload, ...]:
        levels = project_levels(self._rng, len(self._projects), weeks)
        for week in range(weeks):
            for index, project in enumerate(self._projects):
                self._week(project.name, week * WEEK_S, levels[week][index], index)
        return tuple(sorted(self._out, key=lambda w: (w.submit_s, w.name)))

    def _week(self, project: str, start_s: int, level: Level, index: int) -> None:
        activity = ACTIVITY[level]
        rng = self._rng
        for researcher in range(self._researchers[index]):
            who = f"{project}-r{researcher + 1}"
            for day in range(WORKDAYS):
                if rng.random() < activity.notebook_day_probability:
                    self._notebook(who, project, start_s + day * DAY_S)
            for _ in range(rng.randint(*activity.training_jobs)):
                self._training(who, project, start_s)
        for _ in range(rng.randint(*activity.sweeps)):
            researcher = rng.randrange(self._researchers[index])
            self._sweep(f"{project}-r{researcher + 1}", project, start_s)

    def _notebook(self, who: str, project: str, day_s: int) -> None:
        rng = self._rng
        gpu = GpuRequest.whole(1) if rng.random() < 0.6 else GpuRequest.fraction(500)
        self._add(
            f"{who}-notebook",
            project,
            WorkloadType.INTERACTIVE,
            gpu,
            submit_s=day_s + 9 * HOUR_S + rng.randrange(2 * HOUR_S),
            duration_s=rng.randrange(2 * HOUR_S, 8 * HOUR_S + 1, 300),
            util=rng.randint(100, 250),
        )

    def _training(self, who: str, project: str, week_s: int) -> None:
        rng = self._rng
        duration = int(math.exp(rng.uniform(math.log(2 * HOUR_S), math.log(3 * DAY_S))))
        gpus = min(rng.choices((1, 2, 4, 8), weights=(40, 30, 20, 10))[0], self._max_gpus[project])
        tasks = 1
        if gpus == 8 and rng.random() < 0.5:
            gpus, tasks = 4, 2
        self._add(
            f"{who}-train",
            project,
            WorkloadType.TRAIN,
            GpuRequest.whole(gpus),
            submit_s=self._working_time(week_s),
            duration_s=duration,
            util=rng.randint(800, 950),
            tasks=tasks,
        )

    def _sweep(self, who: str, project: str, week_s: int) -> None:
        rng = self._rng
        start = self._working_time(week_s)
        half = rng.random() < 0.3
        for _ in range(rng.randint(16, 48)):
            self._add(
                f"{who}-sweep",
                project,
                WorkloadType.TRAIN,
                GpuRequest.fraction(500) if half else GpuRequest.whole(1),
                submit_s=start + rng.randrange(600),
                duration_s=rng.randrange(20 * 60, 90 * 60 + 1, 60),
                util=rng.randint(850, 950),
            )

    def _working_time(self, week_s: int) -> int:
        day = self._rng.randrange(WORKDAYS)
        return week_s + day * DAY_S + 9 * HOUR_S + self._rng.randrange(10 * HOUR_S)

    def _add(
        self,
        prefix: str,
        project: str,
        kind: WorkloadType,
        gpu: GpuRequest,
        *,
        submit_s: int,
        duration_s: int,
        util: int,
        tasks: int = 1,
    ) -> None:
        self._count += 1
        self._out.append(
            SimWorkload(
                name=f"{prefix}-{self._count}",
                project=project,
                type=kind,
                gpu=gpu,
                duration_s=duration_s,
                submit_s=submit_s,
                tasks=tasks,
                mean_gpu_util_permille=util,
            )
        )


def _spread(total: int, weights: list[int]) -> list[int]:
    """`total` split by `weights` (largest remainders), at least one each."""
    weight_sum = sum(weights)
    if weight_sum == 0:
        weights, weight_sum = [1] * len(weights), len(weights)
    exact = [total * w / weight_sum for w in weights]
    counts = [max(1, int(x)) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - int(exact[i])), i))
    for i in order:
        if sum(counts) >= total:
            break
        counts[i] += 1
    return counts
