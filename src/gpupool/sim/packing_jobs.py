"""The jobs of `gpupool bench packing --all`: one policy (or the offline bound) on one openb
variant with one seed, run independently in worker processes (`run_job`)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

from gpupool.core.packing import PackNode, PolicyName
from gpupool.sim.openb import TracePod, load_nodes, load_pods
from gpupool.sim.packing import PackingRun, pack_nodes, run_offline, run_packing

BOUND_AT = 100
"""The arrival level (%) the offline bound is computed for in the matrix."""


OFFLINE = "offline"
"""The name of the offline bound among the policies of a matrix."""


@dataclass(frozen=True, slots=True)
class PackingJob:
    """One run of the matrix: a policy (None: the offline bound) on a variant with a seed.
    With `bound` the default policy's job also computes the bound, from its own online run
    (the bound's arrival order; `run_offline`'s `online`) and the other orders."""

    variant: str
    nodes_file: Path
    pods_file: Path
    policy: str | None
    seed: int
    inflation: float
    bound: bool = False

    def __post_init__(self) -> None:
        if self.bound and self.policy != PolicyName.DEFAULT:
            raise ValueError(
                f"{self.policy or OFFLINE}: only the default policy's job computes the bound "
                "alongside (give policy None for the bound alone)"
            )

    @property
    def kind(self) -> str:
        """What the job runs: a policy, `offline`, or `default+offline`."""
        name = str(self.policy or OFFLINE)
        return f"{name}+{OFFLINE}" if self.bound else name

    @property
    def label(self) -> str:
        return f"{self.variant} seed {self.seed} {self.kind}"

    @property
    def weight(self) -> float:
        """Relative cost (an FGD run is 1; about 3 s on the default trace): for the ETA and to
        start the longest first."""
        return JOB_WEIGHT.get(self.policy, 1.0) + (BOUND_WEIGHT if self.bound else 0.0)


JOB_WEIGHT: dict[str | None, float] = {PolicyName.DEFAULT: 1.4, None: 2.0}
"""Relative cost of a job of one policy (None: the bound alone); policies not named count 1."""

BOUND_WEIGHT = 0.7
"""What the bound adds to a default job that computes it alongside (two orders of three; such a
job took 2.0 to 2.1 times an FGD run's CPU in `--all` on 2026-11-27)."""


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
    packings, the 130% one above all, would triple its cost); a `bound` job hands it its own
    online run for the arrival order.
    """
    nodes, pods = _load(job)
    started = time.perf_counter()
    cpu_started = time.process_time()
    run: PackingRun | None = None
    offline: dict[int, float] | None = None
    if job.policy is None:
        offline = run_offline(nodes, pods, job.seed, job.inflation, points=(BOUND_AT,))
    else:
        online = run_packing(nodes, pods, job.policy, job.seed, job.inflation)
        if job.bound:
            offline = run_offline(
                nodes, pods, job.seed, job.inflation, points=(BOUND_AT,), online=online
            )
        run = grid_run(online)
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
