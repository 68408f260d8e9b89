"""The simulated cluster on its own: a scripted core (a fake cycle) decides, the cluster carries
the decisions out in simulated time. Each table pins one setting that what-if and the simulator
set differently; the drivers' own tests pin the settings they use end to end."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

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
from gpupool.core.lifecycle import (
    WORKLOAD,
    TaskEvent,
    TransitionError,
    WorkloadEvent,
    WorkloadStatus,
)
from gpupool.core.model import (
    Project,
    Resources,
    Snapshot,
    TaskPlacement,
    Workload,
)
from gpupool.simcluster import (
    ClusterSettings,
    CoreContractError,
    Event,
    EventKind,
    SettleResult,
    SettleStatus,
    SimulatedCluster,
    State,
    WorkloadRecord,
)
from gpupool.simcluster.apply import apply_decisions

from .cluster_setup import NODES, PROJECTS, job


def running_job(
    name: str, *, started_at_s: int, preemptible: bool = True, seq: int = 0
) -> Workload:
    """`name`, running on n1:0 since `started_at_s`."""
    return replace(
        job(name, preemptible=preemptible, seq=seq),
        placements=(on("n1", 0),),
        started_at_s=started_at_s,
    )


def on(node: str, device: int, task: int = 0) -> TaskPlacement:
    return TaskPlacement(task_index=task, node=node, devices=(device,))


def bind(name: str, *placements: TaskPlacement) -> Bind:
    return Bind(name, placements or (on("n1", 0),), "fits")


def evict(name: str, *tasks: int) -> Evict:
    return Evict(name, EvictionCause.RECLAIM, "quota", task_indices=tasks)


def move(name: str, cause: MoveCause = MoveCause.CONSOLIDATE) -> Move:
    return Move(name, cause, on("n1", 0), on("n2", 0), "consolidate")


class Script:
    """A fake core: at each instant, the i-th cycle decides `plan[now_s][i]` (then nothing)."""

    def __init__(self, plan: dict[int, list[list[Decision]]]) -> None:
        self.plan = {t: list(cycles) for t, cycles in plan.items()}
        self.seen: list[int] = []

    def __call__(self, snapshot: Snapshot) -> CycleResult:
        self.seen.append(snapshot.now_s)
        cycles = self.plan.get(snapshot.now_s, [])
        decisions = tuple(cycles.pop(0)) if cycles else ()
        return CycleResult(decisions, {}, ())


@dataclass
class Recorder:
    """Hooks that write down what happened, in order; driver events submit `submits`."""

    cluster: SimulatedCluster | None = None
    submits: dict[str, Workload] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    settles: list[SettleStatus] = field(default_factory=list)

    def on_driver_event(self, event: Event, now_s: int) -> bool:
        self.log.append(f"{now_s} event {event.workload}")
        assert self.cluster is not None
        self.cluster.add(self.submits[event.workload], 100, State.PENDING)
        return True

    def on_decision(self, now_s: int, cycle: int, decision: Decision) -> None:
        self.log.append(f"{now_s} decide {decision.workload}")

    def on_stop_finished(self, record: WorkloadRecord, now_s: int) -> None:
        self.log.append(f"{now_s} stopped {record.name} {record.state}")

    def on_completed(self, record: WorkloadRecord, now_s: int) -> None:
        self.log.append(f"{now_s} completed {record.name}")

    def on_settled(self, now_s: int, result: SettleResult) -> None:
        self.settles.append(result.status)

    def on_instant_end(self, now_s: int, snapshot: Snapshot | None, changed: bool) -> None:
        self.log.append(f"{now_s} end")


def cluster_of(
    plan: dict[int, list[list[Decision]]], **settings: object
) -> tuple[SimulatedCluster, Script, Recorder]:
    script = Script(plan)
    settings.setdefault("cycle_every_instant", True)  # wake-ups alone change nothing
    cluster = SimulatedCluster(NODES, PROJECTS, ClusterSettings(**settings), script)  # type: ignore[arg-type]
    return cluster, script, Recorder(cluster)


def run(
    plan: dict[int, list[list[Decision]]],
    workloads: Iterable[Workload],
    wakeups: Iterable[int] = (0,),
    until_s: int | None = None,
    **settings: object,
) -> tuple[SimulatedCluster, Script, Recorder]:
    cluster, script, hooks = cluster_of(plan, **settings)
    for workload in workloads:
        cluster.add(workload, 100, State.PENDING)
    for t in wakeups:
        cluster.push_wakeup(t)
    cluster.run(hooks, until_s=until_s)
    return cluster, script, hooks


# --- bind, completion ----------------------------------------------------------------------------


def test_a_bound_workload_completes_after_its_duration() -> None:
    cluster, _, hooks = run({0: [[bind("x")]]}, [job("x")])
    x = cluster.records["x"]
    assert (x.state, x.finish_s, x.first_start_s, x.progress_s) == (State.SUCCEEDED, 100, 0, 100)
    assert x.workload.placements == ()
    assert "100 completed x" in hooks.log


# --- evictions: checkpoints, grace periods, counting ---------------------------------------------


@pytest.mark.parametrize(
    ("interval_s", "kept_s", "lost_gpu_milli_s"),
    [
        (1, 30, 0),  # what-if: time run before an eviction counts, as if checkpointed
        (20, 20, 10 * 1000),  # the last checkpoint at 20 s of 30 s run: 10 s of one GPU lost
        (0, 0, 30 * 1000),  # never checkpoints: everything lost
    ],
)
def test_an_eviction_keeps_the_last_checkpoint(
    interval_s: int, kept_s: int, lost_gpu_milli_s: int
) -> None:
    cluster, _, _ = run(
        {0: [[bind("x")]], 30: [[evict("x")]]},
        [job("x")],
        wakeups=(0, 30),
        checkpoint_interval_s=interval_s,
    )
    x = cluster.records["x"]
    # pending again (the script binds it no more), with the kept progress and the loss
    assert (x.state, x.progress_s, x.lost_gpu_milli_s, x.evictions) == (
        State.PENDING,
        kept_s,
        lost_gpu_milli_s,
        1,
    )
    assert x.reason == "evicted at t=30: quota"


def test_the_kept_progress_shortens_the_next_run() -> None:
    cluster, _, _ = run(
        {0: [[bind("x")]], 30: [[evict("x")], [bind("x")]]},
        [job("x")],
        wakeups=(0, 30),
        checkpoint_interval_s=20,
    )
    x = cluster.records["x"]
    assert (x.state, x.finish_s, x.progress_s) == (State.SUCCEEDED, 30 + 100 - 20, 100)


@pytest.mark.parametrize(
    ("preemptible", "after_grace", "reason"),
    [
        (True, State.PENDING, None),
        (False, State.FAILED, "evicted at t=10: quota"),
    ],
)
def test_a_grace_period_keeps_the_victim_stopping_until_it_ends(
    preemptible: bool, after_grace: State, reason: str | None
) -> None:
    cluster, script, hooks = cluster_of({0: [[bind("x")]], 10: [[evict("x")]]}, grace_period_s=30)
    cluster.add(job("x", preemptible=preemptible), 100, State.PENDING)
    cluster.push_wakeup(0)
    cluster.push_wakeup(10)
    end = cluster.run(hooks, until_s=39)
    x = cluster.records["x"]
    assert (end.end_s, x.state, x.stops_at_s) == (39, State.STOPPING, 40)
    assert x.workload not in cluster.snapshot(39).workloads  # its devices are free already
    cluster.run(hooks)
    x = cluster.records["x"]
    assert (x.state, x.reason, x.stops_at_s) == (after_grace, reason, None)
    assert f"40 stopped x {after_grace}" in hooks.log
    assert 40 in script.seen  # the stop is an instant: cycles ran at it


@pytest.mark.parametrize(
    ("words", "reason"),
    [
        (" (not preemptible)", "evicted at t=5: quota (not preemptible)"),
        (
            " (not preemptible, so it failed)",
            "evicted at t=5: quota (not preemptible, so it failed)",
        ),
    ],
)
def test_a_non_preemptible_victim_fails_at_once_without_grace(words: str, reason: str) -> None:
    cluster, _, _ = run(
        {0: [[bind("x")]], 5: [[evict("x")]]},
        [job("x", preemptible=False)],
        wakeups=(0, 5),
        not_preemptible_words=words,
    )
    x = cluster.records["x"]
    assert (x.state, x.reason, x.finish_s) == (State.FAILED, reason, 5)


@pytest.mark.parametrize(("count_partial", "evictions"), [(True, 1), (False, 0)])
def test_a_partial_eviction_counts_only_when_set(count_partial: bool, evictions: int) -> None:
    two = bind("g", on("n1", 0, 0), on("n2", 0, 1))
    cluster, _, _ = run(
        {0: [[two]], 5: [[evict("g", 1)]]},
        [job("g", tasks=2)],
        wakeups=(0, 5),
        until_s=50,
        count_partial_evictions=count_partial,
    )
    g = cluster.records["g"]
    assert (g.state, g.evictions, g.workload.placements) == (
        State.RUNNING,
        evictions,
        (on("n1", 0, 0),),
    )


# --- moves ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("restart", "cause", "restarts", "finish_s"),
    [
        (True, MoveCause.CONSOLIDATE, 1, 50 + 100 - 40),  # restarts from the checkpoint at 40
        (False, MoveCause.CONSOLIDATE, 0, 100),  # what-if: a move is live
        (True, MoveCause.SPREAD, 0, 100),  # node-level moves are live in any case
    ],
)
def test_a_consolidation_move_restarts_from_the_checkpoint_when_set(
    restart: bool, cause: MoveCause, restarts: int, finish_s: int
) -> None:
    cluster, _, _ = run(
        {0: [[bind("x")]], 50: [[move("x", cause)]]},
        [job("x")],
        wakeups=(0, 50),
        checkpoint_interval_s=20,
        restart_on_consolidation=restart,
    )
    x = cluster.records["x"]
    assert (x.state, x.restarts, x.finish_s) == (State.SUCCEEDED, restarts, finish_s)


# --- the order of an instant, stale events -------------------------------------------------------


def test_an_instant_runs_stops_then_completions_then_driver_events_then_cycles() -> None:
    cluster, _, hooks = cluster_of(
        {0: [[bind("done", on("n1", 0)), bind("victim", on("n1", 1))]], 70: [[evict("victim")]]},
        grace_period_s=30,
    )
    cluster.add(job("done"), 100, State.PENDING)
    cluster.add(job("victim", seq=1), 1000, State.PENDING)
    hooks.submits["late"] = job("late", seq=2)
    cluster.push_driver_event(100, workload="late")
    cluster.push_wakeup(0)
    cluster.push_wakeup(70)
    cluster.run(hooks)
    at_100 = [line for line in hooks.log if line.startswith("100 ")]
    assert at_100 == [
        "100 stopped victim pending",
        "100 completed done",
        "100 event late",
        "100 end",
    ]


@pytest.mark.parametrize(("skip", "instants"), [(True, 2), (False, 3)])
def test_a_stale_completion_is_ignored_and_skipped_when_set(skip: bool, instants: int) -> None:
    # x bound at 0 (completes at 100), evicted at 10 and never bound again: the completion is
    # stale. Cycles run only where something changed: y's submission at 10.
    cluster, script, hooks = cluster_of(
        {0: [[bind("x")]], 10: [[evict("x")]]},
        skip_stale_instants=skip,
        cycle_every_instant=False,
    )
    hooks.submits = {"x": job("x"), "y": job("y", seq=1)}
    cluster.push_driver_event(0, workload="x")
    cluster.push_driver_event(10, workload="y")
    end = cluster.run(hooks)
    assert cluster.records["x"].state is State.PENDING
    assert (cluster.instants, end.end_s) == (instants, 10 if skip else 100)
    assert script.seen == [0, 0, 10, 10]  # nothing changed at the stale instant: no cycle


def test_completions_after_the_limit_are_not_simulated() -> None:
    cluster, _, _ = run({0: [[bind("x")]]}, [job("x")], completions_until_s=99)
    assert cluster.records["x"].state is State.RUNNING


def test_cycles_wait_for_the_minimum_interval_and_a_wakeup_is_queued() -> None:
    cluster, script, hooks = cluster_of({}, min_cycle_interval_s=60, cycle_every_instant=False)
    for name, at in (("a", 0), ("b", 10), ("c", 20)):
        hooks.submits[name] = job(name)
        cluster.push_driver_event(at, workload=name)
    cluster.run(hooks)
    assert script.seen == [0, 60]  # 10 and 20 wait; one wake-up at 60 for both


# --- settling ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("confirming", "plan", "status", "cycles"),
    [
        (0, [[bind("x")]], SettleStatus.SETTLED, 2),
        (5, [[bind("x")]], SettleStatus.SETTLED, 7),
        (5, [[bind("x")], [], [evict("x")]], SettleStatus.PING_PONG, 3),
    ],
)
def test_settling_needs_confirming_cycles_and_detects_ping_pong(
    confirming: int, plan: list[list[Decision]], status: SettleStatus, cycles: int
) -> None:
    cluster, _, hooks = run({0: plan}, [job("x")], until_s=0, confirming_cycles=confirming)
    assert (hooks.settles[0], cluster.cycles) == (status, cycles)


def test_an_instant_that_never_settles_stops_at_the_cycle_bound() -> None:
    flip = [[bind("x")], [evict("x")]] * 10
    cluster, _, hooks = run({0: flip}, [job("x")], until_s=0, max_cycles_per_instant=4)
    assert (hooks.settles[0], cluster.cycles) == (SettleStatus.UNSETTLED, 4)


# --- the core's contract -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decisions", "message"),
    [
        ([bind("ghost")], "ghost"),
        ([evict("x")], "not running"),
        (
            [bind("x"), Move("x", MoveCause.CONSOLIDATE, on("n1", 0, 3), on("n2", 0, 3), "m")],
            "task 3",
        ),
    ],
)
def test_a_decision_the_cluster_cannot_carry_out_is_a_contract_error(
    decisions: list[Decision], message: str
) -> None:
    with pytest.raises(CoreContractError, match=message):
        run({0: [decisions]}, [job("x")])


# --- records and the snapshot --------------------------------------------------------------------


def test_the_snapshot_keeps_record_order_when_a_workload_comes_back() -> None:
    cluster, _, _ = cluster_of({})
    for seq, name in enumerate("abc"):
        cluster.add(job(name, seq=seq), None, State.PENDING)
    cluster.stop("a", WorkloadEvent.SUSPEND, 0, "suspended")
    assert [w.name for w in cluster.snapshot(0).workloads] == ["b", "c"]
    cluster.stop("a", WorkloadEvent.RESUME, 0, None)
    assert [w.name for w in cluster.snapshot(0).workloads] == ["a", "b", "c"]


def test_a_running_workload_enters_with_its_start_and_completes_on_time() -> None:
    started = running_job("r", started_at_s=-40)
    cluster, _, hooks = cluster_of({})
    cluster.add(started, 100, State.RUNNING)
    cluster.push_wakeup(0)
    cluster.run(hooks)
    assert (cluster.records["r"].state, cluster.records["r"].finish_s) == (State.SUCCEEDED, 60)


def test_set_project_replaces_it_in_the_snapshot() -> None:
    cluster, _, _ = cluster_of({})
    cluster.set_project(Project(name="a", quota=Resources(gpu_milli=1000)))
    assert cluster.snapshot(0).projects[0].quota.gpu_milli == 1000


@pytest.mark.parametrize(
    ("bad", "field_name"),
    [({"checkpoint_interval_s": -1}, "checkpoint"), ({"max_cycles_per_instant": 0}, "max_cycles")],
)
def test_settings_refuse_nonsense(bad: dict[str, int], field_name: str) -> None:
    with pytest.raises(ValueError, match=field_name):
        ClusterSettings(**bad)  # type: ignore[arg-type]


def test_event_kinds_order_stops_first_and_submit_is_the_driver_kind() -> None:
    assert list(EventKind) == [
        EventKind.STOP,
        EventKind.COMPLETE,
        EventKind.DRIVER,
        EventKind.CYCLE,
    ]
    assert EventKind.SUBMIT is EventKind.DRIVER


# --- apply_decisions: one cycle on a bare snapshot -----------------------------------------------


def snapshot_of(*workloads: Workload, now_s: int = 50) -> Snapshot:
    return Snapshot(nodes=NODES, projects=PROJECTS, workloads=workloads, now_s=now_s)


Check = Callable[[Snapshot], object]


@pytest.mark.parametrize(
    ("decision", "expected"),
    [
        (bind("p", on("n2", 1)), [("p", (on("n2", 1),), 50), ("r", (on("n1", 0),), 7)]),
        (evict("r"), [("p", (), None), ("r", (), None)]),
        (move("r"), [("p", (), None), ("r", (on("n2", 0),), 7)]),
    ],
)
def test_apply_decisions_gives_the_snapshot_after_them(
    decision: Decision, expected: list[tuple[str, tuple[TaskPlacement, ...], int | None]]
) -> None:
    r = running_job("r", started_at_s=7, seq=1)
    before = snapshot_of(job("p"), r)
    after = apply_decisions(before, [decision])
    assert [(w.name, w.placements, w.started_at_s) for w in after.workloads] == expected
    assert (after.nodes, after.projects, after.now_s) == (before.nodes, before.projects, 50)


def test_apply_decisions_drops_an_evicted_non_preemptible_workload() -> None:
    r = running_job("r", started_at_s=0, preemptible=False)
    after = apply_decisions(snapshot_of(job("p"), r), [evict("r")])
    assert [w.name for w in after.workloads] == ["p"]


# --- every state change goes through one method, and the lifecycle table -------------------------


class Spy(SimulatedCluster):
    """Writes down every `_change_state` call as (workload, status, event, state before, state
    after)."""

    changes: list[tuple[str, WorkloadStatus | None, WorkloadEvent | TaskEvent, State, State]]

    def _change_state(
        self, record: WorkloadRecord, event: WorkloadEvent | TaskEvent, **changes: object
    ) -> WorkloadRecord:
        changed = super()._change_state(record, event, **changes)
        self.changes.append((record.name, record.status, event, record.state, changed.state))
        return changed


def test_every_state_change_goes_through_change_state_and_the_table() -> None:
    """Each workload's chain of recorded changes is unbroken and ends in its final state (a
    state changed anywhere else would break the chain), and each workload event is one the
    lifecycle table allows from the status it was taken from."""
    script = Script(
        {
            0: [[bind("x", on("n1", 0)), bind("y", on("n1", 1)), bind("z", on("n2", 0))]],
            10: [[evict("x"), evict("y")]],
            40: [[bind("x", on("n1", 0))]],
        }
    )
    settings = ClusterSettings(grace_period_s=30, cycle_every_instant=True)
    cluster = Spy(NODES, PROJECTS, settings, script)
    cluster.changes = []
    cluster.add(job("x"), 100, State.PENDING)
    cluster.add(job("y", preemptible=False, seq=1), 100, State.PENDING)
    cluster.add(job("z", seq=2), None, State.PENDING)
    cluster.add(job("w", seq=3), None, State.PENDING)
    for t in (0, 10):
        cluster.push_wakeup(t)
    cluster.run(Recorder(cluster))
    cluster.stop("w", WorkloadEvent.SUSPEND, 200, "suspended by its user")
    cluster.stop("w", WorkloadEvent.RESUME, 201, None)
    cluster.stop("z", WorkloadEvent.DELETE, 202, "deleted by its user")
    for name, record in cluster.records.items():
        state: State | None = None
        for changed, _, _, before, after in cluster.changes:
            if changed == name:
                assert state is None or before is state, (name, cluster.changes)
                state = after
        assert state is record.state, name
    for _, status, event, _, _ in cluster.changes:
        if isinstance(event, WorkloadEvent):
            assert WORKLOAD.allows(status, event), (status, event)
    assert {(e, b, a) for _, _, e, b, a in cluster.changes if b is not State.DELETED} == {
        (WorkloadEvent.BIND, State.PENDING, State.RUNNING),
        (WorkloadEvent.PREEMPT, State.RUNNING, State.STOPPING),
        (WorkloadEvent.FAIL, State.RUNNING, State.STOPPING),
        (TaskEvent.END, State.STOPPING, State.PENDING),
        (TaskEvent.END, State.STOPPING, State.FAILED),
        (WorkloadEvent.SUCCEED, State.RUNNING, State.SUCCEEDED),
        (WorkloadEvent.SUSPEND, State.PENDING, State.SUSPENDED),
        (WorkloadEvent.RESUME, State.SUSPENDED, State.PENDING),
        (WorkloadEvent.DELETE, State.RUNNING, State.DELETED),
    }
    submits = [(n, s, b, a) for n, s, e, b, a in cluster.changes if e is WorkloadEvent.SUBMIT]
    assert submits == [(n, None, State.DELETED, State.PENDING) for n in "xyzw"]
    assert cluster.records["z"].status is None  # deleted: removed from the table's view


def test_the_status_behind_each_printed_state() -> None:
    """Stopping is the eviction's end already (pending, or failed when not preemptible);
    succeeded is completed; deleted is no status at all."""
    cluster, _, hooks = cluster_of(
        {0: [[bind("x"), bind("y", on("n1", 1))]], 5: [[evict("x"), evict("y")]]},
        grace_period_s=30,
    )
    cluster.add(job("x"), 100, State.PENDING)
    cluster.add(job("y", preemptible=False, seq=1), 100, State.PENDING)
    for t in (0, 5):
        cluster.push_wakeup(t)
    cluster.run(hooks, until_s=6)
    x, y = cluster.records["x"], cluster.records["y"]
    assert (x.state, x.status, x.stops_at_s) == (State.STOPPING, WorkloadStatus.PENDING, 35)
    assert (y.state, y.status, y.finish_s) == (State.STOPPING, WorkloadStatus.FAILED, None)
    cluster.run(hooks)
    y = cluster.records["y"]
    assert (y.state, y.status, y.finish_s) == (State.FAILED, WorkloadStatus.FAILED, 35)
    cluster.stop("y", WorkloadEvent.DELETE, 40, "deleted")
    assert (cluster.records["y"].state, cluster.records["y"].status) == (State.DELETED, None)


@pytest.mark.parametrize(
    ("setup", "event", "message"),
    [
        ([], WorkloadEvent.RESUME, "cannot resume a pending workload"),
        ([], WorkloadEvent.PREEMPT, "cannot preempt a pending workload"),
        ([WorkloadEvent.DELETE], WorkloadEvent.DELETE, "cannot delete no workload"),
        ([WorkloadEvent.SUSPEND], WorkloadEvent.SUSPEND, "cannot suspend a suspended"),
        ([WorkloadEvent.FAIL], WorkloadEvent.SUCCEED, "cannot succeed a failed workload"),
    ],
)
def test_a_change_the_lifecycle_table_refuses_raises_and_changes_nothing(
    setup: list[WorkloadEvent], event: WorkloadEvent, message: str
) -> None:
    cluster, _, _ = cluster_of({})
    cluster.add(job("x"), 100, State.PENDING)
    for earlier in setup:
        cluster.stop("x", earlier, 0, None)
    before = cluster.records["x"]
    with pytest.raises(TransitionError, match=message):
        cluster.stop("x", event, 1, None)
    assert cluster.records["x"] is before


def test_the_end_of_a_grace_period_for_a_workload_whose_tasks_do_not_stop_is_refused() -> None:
    """The tasks' END is checked against the task table: a pending workload has no live task."""
    cluster = Spy(NODES, PROJECTS, ClusterSettings(), Script({}))
    cluster.changes = []
    cluster.add(job("x"), 100, State.PENDING)
    with pytest.raises(TransitionError, match="cannot end no task"):
        cluster._change_state(cluster.records["x"], TaskEvent.END)


@pytest.mark.parametrize(
    ("workload", "finish", "word"),
    [
        (running_job("x", started_at_s=0), WorkloadEvent.SUCCEED, "succeeded"),
        (job("x"), WorkloadEvent.DELETE, "deleted"),
    ],
)
def test_a_core_that_binds_a_finished_or_deleted_workload_breaks_its_contract(
    workload: Workload, finish: WorkloadEvent, word: str
) -> None:
    cluster, _, hooks = cluster_of({0: [[bind("x")]]})
    cluster.add(workload, 100, State.RUNNING if workload.placements else State.PENDING)
    cluster.stop("x", finish, 0, None)
    cluster.push_wakeup(0)
    with pytest.raises(CoreContractError, match=f"that workload is {word}, not pending"):
        cluster.run(hooks)


def test_a_workload_enters_only_pending_or_running() -> None:
    cluster, _, _ = cluster_of({})
    with pytest.raises(ValueError, match="not suspended"):
        cluster.add(job("x"), 100, State.SUSPENDED)
