"""The discrete-event engine: event order, hand-checked runs through the real core, lost work,
policies, determinism; engine mechanics (evictions of non-preemptible work, consolidation
restarts, stale completions, the minimum cycle interval) through a scripted fake core."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from gpupool.core.decisions import (
    Bind,
    CycleResult,
    Decision,
    Evict,
    EvictionCause,
    Move,
    MoveCause,
)
from gpupool.core.model import (
    GpuRequest,
    Node,
    Project,
    Resources,
    Snapshot,
    TaskPlacement,
    WorkloadType,
)
from gpupool.sim.cluster import Policy, apply_policy, default_cluster
from gpupool.sim.compare import compare_policies, summary_json
from gpupool.sim.engine import (
    EngineSettings,
    EventKind,
    EventQueue,
    OutcomeState,
    SimResult,
    WorkloadOutcome,
    checkpointed_s,
    run_simulation,
)
from gpupool.sim.errors import SimulationError
from gpupool.sim.synthetic import WEEK_S, generate
from gpupool.sim.workload import SimWorkload


def node(name: str = "node-1", gpus: int = 1) -> Node:
    return Node(name=name, gpu_count=gpus)


def project(name: str, quota_gpus: int) -> Project:
    return Project(name=name, quota=Resources(gpu_milli=quota_gpus * 1000))


def train(
    name: str, project: str, *, submit_s: int, duration_s: int, gpus: int = 1, util: int = 1000
) -> SimWorkload:
    return SimWorkload(
        name=name,
        project=project,
        type=WorkloadType.TRAIN,
        gpu=GpuRequest.whole(gpus),
        duration_s=duration_s,
        submit_s=submit_s,
        mean_gpu_util_permille=util,
    )


def outcomes(result: SimResult) -> dict[str, WorkloadOutcome]:
    return {o.name: o for o in result.outcomes}


# --- the event queue -----------------------------------------------------------------------------


def test_event_queue_pops_one_instant_in_kind_then_push_order() -> None:
    pushes = [
        (10, EventKind.SUBMIT, "s1"),
        (10, EventKind.CYCLE, ""),
        (10, EventKind.COMPLETE, "c1"),
        (5, EventKind.SUBMIT, "early"),
        (10, EventKind.SUBMIT, "s2"),
        (10, EventKind.COMPLETE, "c2"),
    ]
    queue = EventQueue()
    for time_s, kind, name in pushes:
        queue.push(time_s, kind, name)
    assert [e.workload for e in queue.pop_instant()] == ["early"]
    assert queue.next_time_s() == 10
    assert [(e.kind, e.workload) for e in queue.pop_instant()] == [
        (EventKind.COMPLETE, "c1"),
        (EventKind.COMPLETE, "c2"),
        (EventKind.SUBMIT, "s1"),
        (EventKind.SUBMIT, "s2"),
        (EventKind.CYCLE, ""),
    ]
    assert len(queue) == 0
    assert queue.pop_instant() == []


@pytest.mark.parametrize("seed", range(5))
def test_event_queue_order_is_time_kind_seq_whatever_the_push_order(seed: int) -> None:
    rng = random.Random(seed)
    pushes = [(rng.randrange(4), rng.choice(list(EventKind))) for _ in range(30)]
    queue = EventQueue()
    for i, (time_s, kind) in enumerate(pushes):
        queue.push(time_s, kind, str(i))
    popped = []
    while len(queue):
        popped.extend(queue.pop_instant())
    assert [(e.time_s, e.kind, e.seq) for e in popped] == sorted(
        (t, k, i) for i, (t, k) in enumerate(pushes)
    )


# --- hand-checked runs through the real core -----------------------------------------------------


def test_checkpoint_loses_progress_since_the_last_checkpoint() -> None:
    """a borrows b's idle GPU; b's job at t=250 reclaims it. Checkpoints every 100 s: a keeps 200
    s of its 250 s, loses 50 s, waits for b's 100 s job and finishes at 350 + 800 = 1150."""
    nodes = [node()]
    projects = [project("a", 0), project("b", 1)]
    work = [
        train("a-job", "a", submit_s=0, duration_s=1000),
        train("b-job", "b", submit_s=250, duration_s=100),
    ]

    def finish(interval_s: int) -> tuple[WorkloadOutcome, WorkloadOutcome]:
        result = run_simulation(nodes, projects, work, EngineSettings(interval_s))
        got = outcomes(result)
        return got["a-job"], got["b-job"]

    a, b = finish(100)
    assert (b.first_start_s, b.finish_s) == (250, 350)
    assert a.evictions == 1
    assert a.lost_gpu_milli_s == 50 * 1000
    assert (a.first_start_s, a.finish_s, a.state) == (0, 1150, OutcomeState.SUCCEEDED)
    assert a.completion_time_s == 1150

    a_no_loss, _ = finish(1)  # checkpoints every second: the pause only
    assert a_no_loss.finish_s == 1100 and a_no_loss.lost_gpu_milli_s == 0
    a_never, _ = finish(0)  # no checkpoint: starts over
    assert a_never.finish_s == 350 + 1000 and a_never.lost_gpu_milli_s == 250 * 1000
    assert a.finish_s - a_no_loss.finish_s == 50


def test_checkpointed_s() -> None:
    assert checkpointed_s(250, 100) == 200
    assert checkpointed_s(200, 100) == 200
    assert checkpointed_s(99, 100) == 0
    assert checkpointed_s(250, 0) == 0


def test_static_leaves_idle_quota_idle_guaranteed_lends_and_reclaims_it() -> None:
    """2 GPUs, a and b with quota 1 each. a submits two 1000 s jobs at 0; b is idle until 500."""
    nodes = [node(gpus=2)]
    projects = [project("a", 1), project("b", 1)]
    work = [
        train("a-1", "a", submit_s=0, duration_s=1000),
        train("a-2", "a", submit_s=0, duration_s=1000),
        train("b-1", "b", submit_s=500, duration_s=100),
    ]
    settings = EngineSettings(checkpoint_interval_s=100)
    static = run_simulation(nodes, apply_policy(projects, Policy.STATIC), work, settings)
    lent = run_simulation(nodes, apply_policy(projects, Policy.GUARANTEED), work, settings)

    by_time = {s.time_s: s.allocated_milli for s in static.samples}
    assert by_time[0] == (1000, 0)  # one GPU idle although a waits
    assert outcomes(static)["a-2"].first_start_s == 1000
    assert outcomes(static)["a-2"].finish_s == 2000
    assert outcomes(static)["b-1"].queueing_delay_s == 0

    by_time = {s.time_s: s.allocated_milli for s in lent.samples}
    assert by_time[0] == (2000, 0)  # lent to a
    assert by_time[500] == (1000, 1000)  # reclaimed the moment b asks
    got = outcomes(lent)
    assert got["b-1"].queueing_delay_s == 0
    assert got["a-2"].evictions == 1 and got["a-2"].lost_gpu_milli_s == 0
    assert got["a-2"].finish_s == 600 + 500
    assert got["a-1"].finish_s == 1000
    assert lent.end_s < static.end_s


def test_capacity_freed_at_an_instant_is_used_by_work_submitted_at_that_instant() -> None:
    work = [
        train("first", "a", submit_s=0, duration_s=100),
        train("second", "a", submit_s=100, duration_s=100),
    ]
    result = run_simulation([node()], [project("a", 1)], work)
    assert outcomes(result)["second"].first_start_s == 100
    assert result.end_s == 200


def test_a_workload_that_can_never_fit_waits_with_its_reason() -> None:
    work = [train("too-big", "a", submit_s=0, duration_s=10, gpus=2)]
    result = run_simulation([node()], [project("a", 1)], work)
    got = outcomes(result)["too-big"]
    assert got.state is OutcomeState.PENDING and got.first_start_s is None
    assert got.reason and "GPU" in got.reason


def test_until_s_stops_the_run_with_work_still_running() -> None:
    work = [train("long", "a", submit_s=0, duration_s=10_000)]
    result = run_simulation([node()], [project("a", 1)], work, EngineSettings(until_s=500))
    assert result.end_s == 500
    assert outcomes(result)["long"].state is OutcomeState.RUNNING


def test_utilization_is_allocation_times_mean_utilization() -> None:
    work = [
        train("busy", "a", submit_s=0, duration_s=100, util=900),
        SimWorkload("nb", "a", WorkloadType.INTERACTIVE, GpuRequest.fraction(500), 100, 0, 1, 200),
    ]
    result = run_simulation([node(gpus=2)], [project("a", 2)], work)
    first = result.samples[0]
    assert first.time_s == 0
    assert first.allocated_milli == (1500,)
    assert first.utilized_milli == (900 + 100,)


def test_unknown_project_is_refused() -> None:
    with pytest.raises(ValueError, match="not a leaf project"):
        run_simulation([node()], [project("a", 1)], [train("x", "b", submit_s=0, duration_s=1)])


# --- determinism ---------------------------------------------------------------------------------


def test_same_seed_gives_the_identical_summary() -> None:
    cluster = default_cluster()

    def summary(seed: int) -> str:
        work = generate(seed, weeks=1)
        comparison = compare_policies(
            cluster,
            work,
            [Policy.STATIC, Policy.GUARANTEED],
            EngineSettings(),
            source="test",
            window_s=WEEK_S,
        )
        return json.dumps(summary_json(comparison), sort_keys=True)

    assert summary(3) == summary(3)
    assert generate(3, weeks=1) != generate(4, weeks=1)


def test_input_order_does_not_matter_for_distinct_submit_times() -> None:
    work = list(generate(2, weeks=1))
    times = [w.submit_s for w in work]
    assert len(set(times)) < len(times)  # the generator has ties; keep their order below
    cluster = default_cluster()
    rng = random.Random(0)
    shuffled = work[:]
    rng.shuffle(shuffled)
    shuffled.sort(key=lambda w: (w.submit_s, work.index(w)))  # ties as before, rest shuffled
    shuffled_again = work[::-1]
    shuffled_again.sort(key=lambda w: (w.submit_s, work.index(w)))

    def run(items: Sequence[SimWorkload]) -> SimResult:
        return run_simulation(cluster.nodes, cluster.projects, items)

    assert run(work) == run(shuffled) == run(shuffled_again)


def test_ties_in_submit_time_keep_the_input_order() -> None:
    """Same instant, one free GPU: the workload listed first is first in line."""
    one = train("one", "a", submit_s=0, duration_s=10)
    two = train("two", "a", submit_s=0, duration_s=10)
    first = outcomes(run_simulation([node()], [project("a", 1)], [one, two]))
    second = outcomes(run_simulation([node()], [project("a", 1)], [two, one]))
    assert first["one"].first_start_s == 0 and first["two"].first_start_s == 10
    assert second["two"].first_start_s == 0 and second["one"].first_start_s == 10


# --- engine mechanics, with a scripted core ------------------------------------------------------


Script = Callable[[Snapshot], tuple[Decision, ...]]


class ScriptedCore:
    """Decides what `script` says for a snapshot; records the instants of the cycles it ran."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.cycles_at: list[int] = []

    def __call__(self, snapshot: Snapshot) -> CycleResult:
        self.cycles_at.append(snapshot.now_s)
        pending = {w.name: "scripted" for w in snapshot.workloads if not w.placements}
        return CycleResult(self.script(snapshot), pending, ())


def bind_all_pending(snapshot: Snapshot) -> tuple[Decision, ...]:
    return tuple(
        Bind(w.name, (TaskPlacement(0, "node-1", (0,)),), "scripted")
        for w in snapshot.workloads
        if not w.placements
    )


def test_an_evicted_non_preemptible_workload_fails() -> None:
    notebook = SimWorkload("nb", "a", WorkloadType.INTERACTIVE, GpuRequest.whole(1), 1000)
    ticker = train("ticker", "a", submit_s=300, duration_s=1)  # makes t=300 an instant

    def script(snapshot: Snapshot) -> tuple[Decision, ...]:
        running = [w.name for w in snapshot.workloads if w.placements]
        if snapshot.now_s == 300 and "nb" in running:
            return (Evict("nb", EvictionCause.PREEMPT, "scripted"),)
        return bind_all_pending(snapshot)

    result = run_simulation(
        [node(gpus=2)], [project("a", 2)], [notebook, ticker], cycle=ScriptedCore(script)
    )
    got = outcomes(result)["nb"]
    assert got.state is OutcomeState.FAILED
    assert got.finish_s == 300 and got.evictions == 1
    assert got.reason and "not preemptible" in got.reason
    assert got.completion_time_s is None


def test_a_consolidation_move_restarts_from_the_checkpoint() -> None:
    job = train("job", "a", submit_s=0, duration_s=1000)
    ticker = train("ticker", "a", submit_s=250, duration_s=1)

    def script(snapshot: Snapshot) -> tuple[Decision, ...]:
        running = {w.name: w for w in snapshot.workloads if w.placements}
        if snapshot.now_s == 250 and "job" in running:
            source = running["job"].placements[0]
            if source.devices == (0,):
                target = TaskPlacement(0, "node-1", (1,))
                return (Move("job", MoveCause.CONSOLIDATE, source, target, "scripted"),)
        return tuple(
            Bind(w.name, (TaskPlacement(0, "node-1", (2,)),), "scripted")
            if w.name == "ticker"
            else Bind(w.name, (TaskPlacement(0, "node-1", (0,)),), "scripted")
            for w in snapshot.workloads
            if not w.placements
        )

    result = run_simulation(
        [node(gpus=3)],
        [project("a", 3)],
        [job, ticker],
        EngineSettings(checkpoint_interval_s=100),
        cycle=ScriptedCore(script),
    )
    got = outcomes(result)["job"]
    assert got.restarts == 1 and got.evictions == 0
    assert got.lost_gpu_milli_s == 50 * 1000
    assert got.finish_s == 1050  # the completion queued for t=1000 was stale


def test_min_cycle_interval_holds_cycles_back_and_queues_a_wakeup() -> None:
    work = [train(f"j{i}", "a", submit_s=t, duration_s=5) for i, t in enumerate((0, 10, 20, 130))]
    core = ScriptedCore(lambda s: ())  # never binds: only the cycle times matter
    run_simulation(
        [node()], [project("a", 1)], work, EngineSettings(min_cycle_interval_s=60), cycle=core
    )
    assert sorted(set(core.cycles_at)) == [0, 60, 130]


def test_a_decision_about_an_unknown_workload_is_a_simulation_error() -> None:
    core = ScriptedCore(lambda s: (Bind("ghost", (TaskPlacement(0, "node-1", (0,)),), "x"),))
    with pytest.raises(SimulationError, match="ghost"):
        run_simulation(
            [node()], [project("a", 1)], [train("x", "a", submit_s=0, duration_s=1)], cycle=core
        )


def test_cycles_per_instant_are_bounded() -> None:
    def ping_pong(snapshot: Snapshot) -> tuple[Decision, ...]:
        if not snapshot.workloads:
            return ()
        workload = snapshot.workloads[0]
        if workload.placements:
            return (Evict(workload.name, EvictionCause.PREEMPT, "ping"),)
        return bind_all_pending(snapshot)

    work = [train("x", "a", submit_s=0, duration_s=10)]
    result = run_simulation(
        [node()],
        [project("a", 1)],
        work,
        EngineSettings(max_cycles_per_instant=7),
        cycle=ScriptedCore(ping_pong),
    )
    assert result.unsettled_instants >= 1
    assert result.cycles >= 7


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        EngineSettings(checkpoint_interval_s=-1)
    with pytest.raises(ValueError):
        EngineSettings(max_cycles_per_instant=0)


def test_policy_static_caps_projects_at_quota() -> None:
    projects = [project("a", 2), replace(project("b", 4), over_quota_weight=3)]
    capped = apply_policy(projects, Policy.STATIC)
    assert [p.limit.gpu_milli for p in capped] == [2000, 4000]
    assert [p.over_quota_weight for p in capped] == [0, 0]
    assert apply_policy(projects, Policy.GUARANTEED) == tuple(projects)
