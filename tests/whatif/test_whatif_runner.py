"""The what-if runner's simulated time, against small stand-in schedulers.

The stand-ins are deliberately dumb (first fit of whole GPUs in submission order, plus scripted
evictions) so that these tests pin the runner's own semantics: event order, completions, grace
periods, checkpointed run time, fixed points and expectation checks. The real core is exercised
by the scenario tests in test_whatif_cli.py.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from gpupool.core.decisions import (
    Bind,
    CycleResult,
    Decision,
    Evict,
    EvictionCause,
    Move,
    MoveCause,
    ProjectShare,
)
from gpupool.core.model import Resources, Snapshot, TaskPlacement
from gpupool.whatif.loader import load_scenario_text
from gpupool.whatif.runner import CoreContractError, RunResult, State, run_scenario

HEAD = """\
version: 1
nodes:
  - {name: node-1, gpus: 2}
projects:
  - {name: a, quota: {gpu: 1}}
  - {name: b, quota: {gpu: 1}}
"""


def first_fit(snapshot: Snapshot) -> tuple[list[Decision], dict[str, str]]:
    """Bind pending whole-GPU workloads, in submission order, to the lowest free devices."""
    used = {
        (p.node, d) for w in snapshot.workloads for p in w.placements for d in p.physical_devices
    }
    decisions: list[Decision] = []
    reasons: dict[str, str] = {}
    pending = sorted(
        (w for w in snapshot.workloads if not w.placements), key=lambda w: w.submit_seq
    )
    for workload in pending:
        placements: list[TaskPlacement] = []
        taken: set[tuple[str, int]] = set()
        for task in range(workload.tasks):
            for node in snapshot.nodes:
                free = [
                    d
                    for d in range(node.gpu_count)
                    if (node.name, d) not in used and (node.name, d) not in taken
                ]
                count = max(1, workload.gpu.amount) if not workload.gpu.is_shared else 1
                if len(free) >= count:
                    chosen = tuple(free[:count])
                    taken.update((node.name, d) for d in chosen)
                    placements.append(TaskPlacement(task, node.name, chosen))
                    break
        if len(placements) == workload.tasks:
            used |= taken
            decisions.append(Bind(workload.name, tuple(placements), "first fit"))
        else:
            reasons[workload.name] = "no free GPU"
    return decisions, reasons


def shares(snapshot: Snapshot) -> tuple[ProjectShare, ...]:
    result = []
    for project in snapshot.projects:
        holding = sum(
            w.gpu.milli_on(81920) * len(w.placements)
            for w in snapshot.workloads
            if w.project == project.name
        )
        result.append(
            ProjectShare(
                project.name,
                project.quota,
                Resources(gpu_milli=project.quota.gpu_milli),
                Resources(gpu_milli=holding),
                Resources(),
            )
        )
    return tuple(result)


@dataclass
class FakeCore:
    """First fit, plus `script`: decisions returned (once each) when a cycle sees `now_s`."""

    script: dict[int, list[Decision]] = field(default_factory=dict)
    snapshots: list[Snapshot] = field(default_factory=list)

    def __call__(self, snapshot: Snapshot) -> CycleResult:
        self.snapshots.append(snapshot)
        scripted = self.script.pop(snapshot.now_s, None)
        if scripted is not None:
            return CycleResult(tuple(scripted), {}, shares(snapshot))
        decisions, reasons = first_fit(snapshot)
        return CycleResult(tuple(decisions), reasons, shares(snapshot))

    def seen_at(self, now_s: int) -> list[Snapshot]:
        return [s for s in self.snapshots if s.now_s == now_s]


def run(body: str, core: Callable[[Snapshot], CycleResult] | None = None) -> RunResult:
    scenario = load_scenario_text(HEAD + textwrap.dedent(body), "t.yaml")
    return run_scenario(scenario, core or FakeCore())


def state(result: RunResult, name: str) -> State:
    return next(r.state for r in result.workloads if r.name == name)


def evict(name: str) -> Evict:
    return Evict(name, EvictionCause.RECLAIM, "scripted")


def test_initial_cycles_reach_a_fixed_point_then_five_quiet_cycles() -> None:
    core = FakeCore()
    result = run("workloads: [{name: x, project: a, type: train, gpu: 1}]\n", core)
    assert state(result, "x") is State.RUNNING
    assert len(core.snapshots) == 1 + 1 + 5  # a cycle that binds, the fixed point, 5 to confirm
    assert result.cycles == 7
    assert result.end_s == 0
    assert [d.at_s for d in result.decisions] == [0]
    assert result.passed


def test_submission_order_and_events_submits_come_after() -> None:
    core = FakeCore()
    run(
        """\
        workloads:
          - {name: late, project: a, type: train, gpu: 1, submitted_at: 10}
          - {name: early, project: a, type: train, gpu: 1, submitted_at: -5}
          - {name: waits, project: b, type: train, gpu: 1, submitted_at: 20}
        events:
          - {at: 3, submit: {name: s, project: b, type: train, gpu: 1}}
        """,
        core,
    )
    first = core.snapshots[0]
    assert [(w.name, w.submit_seq) for w in first.workloads] == [
        ("early", 0),
        ("late", 1),
        ("waits", 2),
    ]
    later = core.seen_at(3)[0]
    assert [(w.name, w.submit_seq) for w in later.workloads][-1] == ("s", 3)
    assert later.now_s == 3


def test_completion_frees_devices_and_counts_running_time() -> None:
    result = run(
        """\
        workloads:
          - {name: x, project: a, type: train, gpu: 2, duration_s: 100}
          - {name: y, project: b, type: train, gpu: 2}
        events:
          - {at: 50, expect: {running: [x], pending: [y]}}
          - {at: 150, expect: {running: [y]}}
        """
    )
    assert result.passed, result.failures
    assert state(result, "x") is State.SUCCEEDED
    assert [(d.at_s, d.decision.workload) for d in result.decisions] == [(0, "x"), (100, "y")]
    y = next(r for r in result.workloads if r.name == "y")
    assert y.workload.started_at_s == 100
    assert any(t.text.startswith("x completed") and t.at_s == 100 for t in result.timeline)


def test_completions_after_the_last_event_are_not_simulated() -> None:
    result = run(
        """\
        workloads: [{name: x, project: a, type: train, gpu: 1, duration_s: 100}]
        events: [{at: 10, expect: {running: [x]}}]
        expect: {running: [x]}
        """
    )
    assert result.passed
    assert result.end_s == 10


def test_started_at_counts_towards_duration_and_min_runtime() -> None:
    core = FakeCore()
    result = run(
        """\
        workloads:
          - {name: x, project: a, type: train, gpu: 1, running_on: [node-1], started_at: -60,
             duration_s: 100}
        events: [{at: 50, expect: {pending: []}}]
        """,
        core,
    )
    assert core.snapshots[0].workloads[0].started_at_s == -60
    assert state(result, "x") is State.SUCCEEDED
    assert any(t.at_s == 40 and "x completed" in t.text for t in result.timeline)


def test_evicted_time_counts_as_checkpointed() -> None:
    # x runs 0..30, is evicted at 30 (grace 0: pending, rebound at once by first fit),
    # so with duration 100 it completes at 100 even though its last start was 30.
    core = FakeCore(script={30: [evict("x")]})
    result = run(
        """\
        workloads: [{name: x, project: a, type: train, gpu: 1, duration_s: 100}]
        events:
          - {at: 30, expect: {running: [x], evicted: [x]}}
          - {at: 200, expect: {running: []}}
        """,
        core,
    )
    assert result.passed, result.failures
    assert any(t.at_s == 100 and "x completed" in t.text for t in result.timeline)


def test_grace_period_keeps_victims_stopping_and_out_of_the_snapshot() -> None:
    core = FakeCore(script={5: [evict("x")]})
    result = run(
        """\
        settings: {grace_period_s: 30}
        workloads: [{name: x, project: a, type: train, gpu: 1}]
        events:
          - {at: 5, submit: {name: y, project: b, type: train, gpu: 2}}
          - {at: 6, expect: {running: [y], pending: []}}
        expect: {pending: [x], running: [y], evicted: [x]}
        """,
        core,
    )
    assert result.passed, result.failures
    assert all("x" not in {w.name for w in s.workloads} for s in core.seen_at(6))
    # the grace period ends after the last event and is still simulated
    assert result.end_s == 35
    assert any(t.at_s == 35 and "x stopped" in t.text for t in result.timeline)


def test_a_non_preemptible_victim_fails() -> None:
    core = FakeCore(script={5: [evict("nb")]})
    result = run(
        """\
        workloads: [{name: nb, project: a, type: interactive, gpu: 1}]
        events: [{at: 5, expect: {running: []}}]
        """,
        core,
    )
    assert result.passed
    record = next(r for r in result.workloads if r.name == "nb")
    assert record.state is State.FAILED
    assert record.reason is not None and "not preemptible" in record.reason


def test_partial_eviction_and_move() -> None:
    core = FakeCore(
        script={
            5: [Evict("e", EvictionCause.RECLAIM, "elastic", task_indices=(1,))],
            6: [
                Move(
                    "e",
                    MoveCause.SPREAD,
                    TaskPlacement(0, "node-1", (0,)),
                    TaskPlacement(0, "node-1", (0,), burst_device=1),
                    "burst",
                )
            ],
        }
    )
    result = run(
        """\
        workloads: [{name: e, project: a, type: train, gpu: 1, tasks: 2, min_available: 1}]
        events:
          - {at: 5, expect: {running: [e], evicted: [e]}}
          - {at: 6, expect: {placements: {e: [node-1]}}}
        """,
        core,
    )
    # first fit re-binds the whole workload only when it is pending, so one task stays
    assert result.passed, result.failures
    record = next(r for r in result.workloads if r.name == "e")
    assert record.workload.placements == (TaskPlacement(0, "node-1", (0,), burst_device=1),)


def test_ping_pong_is_reported() -> None:
    def flip_flop(snapshot: Snapshot) -> CycleResult:
        (workload,) = snapshot.workloads
        decision: Decision
        if workload.placements:
            decision = evict(workload.name)
        else:
            decision = Bind(workload.name, (TaskPlacement(0, "node-1", (0,)),), "bind")
        return CycleResult((decision,), {}, ())

    result = run("workloads: [{name: x, project: a, type: train, gpu: 1}]\n", flip_flop)
    (failure,) = result.failures
    assert failure.check == "no fixed point"
    assert failure.at_s == 0


def test_late_decision_after_the_fixed_point_is_ping_pong() -> None:
    calls: list[int] = []

    def late(snapshot: Snapshot) -> CycleResult:
        calls.append(1)
        if len(calls) == 3:
            return CycleResult((Bind("x", (TaskPlacement(0, "node-1", (0,)),), "late"),), {}, ())
        return CycleResult((), {"x": "waiting"} if len(calls) < 3 else {}, ())

    result = run(
        "workloads: [{name: x, project: a, type: train, gpu: 1}]\nexpect: {pending: [x]}\n", late
    )
    checks = [f.check for f in result.failures]
    assert checks == ["no fixed point (ping-pong)", "pending"]
    assert "bind x" in result.failures[0].detail[0]


def test_lifecycle_events() -> None:
    result = run(
        """\
        workloads:
          - {name: x, project: a, type: train, gpu: 2}
          - {name: y, project: b, type: train, gpu: 2}
        events:
          - {at: 10, suspend: x}
          - {at: 10, expect: {running: [y], pending: []}}
          - {at: 20, resume: x}
          - {at: 20, expect: {running: [y], pending: [x]}}
          - {at: 30, complete: y}
          - {at: 30, expect: {running: [x]}}
          - {at: 40, delete: x}
          - {at: 40, set_quota: {project: a, quota: {gpu: 2}}}
          - {at: 40, expect: {running: [], fair_share: {a: {gpu: 2}, b: {gpu: 1}}}}
        """
    )
    assert result.passed, result.failures
    assert {r.name: r.state for r in result.workloads} == {
        "x": State.DELETED,
        "y": State.SUCCEEDED,
    }
    assert next(t.text for t in result.timeline if t.at_s == 40) == "delete x"


def test_an_event_that_does_not_apply_is_a_failure() -> None:
    result = run(
        """\
        workloads:
          - {name: x, project: a, type: train, gpu: 2}
          - {name: y, project: b, type: train, gpu: 2}
        events:
          - {at: 5, complete: y}
          - {at: 6, resume: x}
        """
    )
    assert [(f.check, f.at_s, f.line) for f in result.failures] == [
        ("event complete", 5, 11),
        ("event resume", 6, 12),
    ]
    assert "y is pending" in result.failures[0].actual


def test_expectation_failures_say_expected_and_actual() -> None:
    result = run(
        """\
        workloads:
          - {name: x, project: a, type: train, gpu: 1}
          - {name: y, project: b, type: train, gpu: 1}
          - {name: z, project: b, type: train, gpu: 1}
        expect:
          running: [x, z]
          pending: [y]
          evicted: [x]
          not_evicted: [y]
          count: {running: 1, pending: 1, evicted: 0}
          placements: {x: [node-1, node-1]}
          same_device: [[x, y]]
          different_devices: [[x, z]]
          fair_share: {a: {gpu: 0.5}}
        """
    )
    failures = {f.check: f for f in result.failures}
    assert set(failures) == {
        "running",
        "pending",
        "evicted",
        "count.running",
        "placements.x",
        "same_device",
        "different_devices",
        "fair_share.a.gpu",
    }
    running = failures["running"]
    assert (running.expected, running.actual, running.at_s) == ("[x, z]", "[x, y]", None)
    assert "z is pending: no free GPU" in running.detail
    assert "y is running on node-1:1 but not expected" in running.detail
    assert failures["count.running"].actual == "2"
    assert failures["fair_share.a.gpu"].expected == "0.5"
    assert failures["fair_share.a.gpu"].actual == "1"
    assert failures["same_device"].actual == "x on node-1:0; y on node-1:1"
    assert failures["different_devices"].actual == "z is pending: no free GPU"
    assert failures["running"].line == 12
    assert failures["fair_share.a.gpu"].line == 20


def test_same_and_different_devices_use_physical_devices() -> None:
    bind_a = Bind("p", (TaskPlacement(0, "node-1", (0,)),), "x")
    bind_b = Bind("q", (TaskPlacement(0, "node-1", (0,), burst_device=1),), "x")
    core = FakeCore(script={0: [bind_a, bind_b]})
    result = run(
        """\
        workloads:
          - {name: p, project: a, type: train, gpu: 0.5}
          - {name: q, project: a, type: train, gpu: 0.5}
        expect: {different_devices: [[p, q]]}
        """,
        core,
    )
    assert result.passed, result.failures


def test_a_decision_on_an_unknown_workload_is_a_core_error() -> None:
    def rogue(snapshot: Snapshot) -> CycleResult:
        return CycleResult((evict("ghost"),), {}, ())

    with pytest.raises(CoreContractError, match="ghost"):
        run("workloads: []\n", rogue)


def test_pending_reason_comes_from_the_last_cycle() -> None:
    result = run(
        """\
        workloads:
          - {name: x, project: a, type: train, gpu: 2}
          - {name: y, project: b, type: train, gpu: 1}
        """
    )
    y = next(r for r in result.workloads if r.name == "y")
    assert (y.state, y.reason) == (State.PENDING, "no free GPU")
