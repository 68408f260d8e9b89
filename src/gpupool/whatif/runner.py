"""The simulated-time driver behind `gpupool what-if`: scheduling cycles and a timeline.

Semantics (the contract scenario authors rely on):

Initial state. Every node, project and workload of the file exists at time 0. A workload's
`submitted_at` only orders it in line: `submit_seq` is a stable sort by `submitted_at`, then
file order; workloads submitted by events come after all of them, in time order. Workloads with
`running_on` run from time 0 on the devices given (or the first free ones: a whole-GPU task takes
`gpu` devices, a fraction or memory request one device), with `started_at_s` = `started_at`
(default 0).

States. pending, running, stopping (evicted, inside its grace period), succeeded, failed,
suspended, deleted. Only pending and running workloads are passed to the core: a stopping
workload's devices may be bound again at once, as the executor starts the new task only once the
old one is gone.

Each instant, in this order:
  1. stopping workloads whose grace period is over stop: back to pending if preemptible, else
     failed with the eviction's reason;
  2. running workloads whose accumulated running time reached `duration_s` succeed (time run
     before an eviction counts, as if checkpointed);
  3. the instant's events other than `expect` apply, in file order;
  4. cycles run on a snapshot with `now_s` = the instant, their decisions applied (Bind: running,
     `started_at_s` = now if it was not running; whole Evict: stopping if `grace_period_s` > 0,
     else at once pending (preemptible) or failed; Evict of some tasks: those placements go; Move:
     that task's placement is replaced), until a cycle decides nothing; then 5 more cycles must
     decide nothing too, else it is a "no fixed point (ping-pong)" failure. At most 200 cycles
     an instant;
  5. the instant's `expect` events are checked.
Time then advances to the next event, completion or end of a grace period.

End. The run ends at the fixed point after the last timeline event, with two refinements: grace
periods running out after it are still simulated (stopping is a transient state; without this a
scenario with a grace period could never expect its victims pending), completions after it are
not (they would only drain the cluster). Then the top-level `expect` is checked.

Events: submit (pending from that time), complete (running -> succeeded), delete (any ->
deleted), suspend (pending or running -> suspended), resume (suspended -> pending), set_quota
(only the amounts given change). An event that does not apply (completing a pending workload)
is reported as a failure, since the timeline then does not say what its author meant.

Expectations are checked by `gpupool.whatif.checks` (see its docstring for what each one
compares). The instants, states and decisions above are carried out by the one simulated
cluster, `gpupool.simcluster`, under what-if's settings: the grace period of the file,
progress kept whole on an eviction (checkpoint every second), partial evictions counted, cycles
at every instant with 5 confirming cycles, completions only up to the last timeline event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from gpupool.core.decisions import CycleResult, Decision, ProjectShare
from gpupool.core.lifecycle import WorkloadEvent
from gpupool.core.model import Resources, Snapshot
from gpupool.simcluster import (
    ClusterSettings,
    CoreContractError,
    CycleFunction,
    Event,
    SettleResult,
    SettleStatus,
    SimulatedCluster,
    State,
    WorkloadRecord,
)
from gpupool.simcluster.words import describe_decision, format_placement, format_placements
from gpupool.units import format_gpu_milli
from gpupool.whatif.checks import Failure, check_expectations, state_words
from gpupool.whatif.scenario import (
    Event as TimelineEvent,
)
from gpupool.whatif.scenario import (
    Expectations,
    Lifecycle,
    LifecycleAction,
    Scenario,
    SetQuota,
    Submit,
)

__all__ = [
    "CONFIRMING_CYCLES",
    "MAX_CYCLES_PER_INSTANT",
    "CoreContractError",
    "CycleFunction",
    "DecisionRecord",
    "Failure",
    "RunResult",
    "State",
    "TimelineRecord",
    "WorkloadRecord",
    "describe_decision",
    "format_placement",
    "format_placements",
    "run_scenario",
]

CONFIRMING_CYCLES = 5
"""Cycles after the fixed point that must decide nothing either (G8, no ping-pong)."""
MAX_CYCLES_PER_INSTANT = 200
MAX_INSTANTS = 10_000
"""A bound on simulated instants, against an evict/stop/rebind loop that never settles."""


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One core decision: when, and in which cycle of the run."""

    at_s: int
    cycle: int
    """Cycle number within the whole run, from 1."""
    decision: Decision


@dataclass(frozen=True, slots=True)
class TimelineRecord:
    """Something the runner did that is not a core decision: an event, a completion, a stop."""

    at_s: int
    text: str


@dataclass(frozen=True, slots=True)
class RunResult:
    scenario: Scenario
    end_s: int
    cycles: int
    workloads: tuple[WorkloadRecord, ...]
    """Final state, in submission order; pending ones carry the last cycle's reason."""
    projects: tuple[ProjectShare, ...]
    """The last cycle's project standings."""
    decisions: tuple[DecisionRecord, ...]
    timeline: tuple[TimelineRecord, ...]
    failures: tuple[Failure, ...]

    @property
    def passed(self) -> bool:
        return not self.failures


def run_scenario(scenario: Scenario, cycle: CycleFunction | None = None) -> RunResult:
    """Run `scenario` through `cycle` (default: the core's `run_cycle`) and check its `expect`."""
    if cycle is None:
        cycle = _core_cycle()
    return _Run(scenario, cycle).run()


def _core_cycle() -> CycleFunction:
    from gpupool.core.cycle import run_cycle

    def call(snapshot: Snapshot) -> CycleResult:
        return run_cycle(snapshot)

    return call


def _settings(scenario: Scenario) -> ClusterSettings:
    events = scenario.events
    return ClusterSettings(
        scheduler=scenario.settings,
        grace_period_s=scenario.grace_period_s,
        checkpoint_interval_s=1,
        restart_on_consolidation=False,
        count_partial_evictions=True,
        not_preemptible_words=" (not preemptible, so it failed)",
        max_cycles_per_instant=MAX_CYCLES_PER_INSTANT,
        confirming_cycles=CONFIRMING_CYCLES,
        cycle_every_instant=True,
        completions_until_s=events[-1].at_s if events else 0,
        skip_stale_instants=True,
    )


class _Run:
    """The what-if driver: the scenario's timeline into the simulated cluster, checks out."""

    def __init__(self, scenario: Scenario, cycle: CycleFunction) -> None:
        self._scenario = scenario
        self._cluster = SimulatedCluster(
            scenario.nodes, scenario.projects, _settings(scenario), cycle
        )
        for setup in scenario.workloads:
            state = State.RUNNING if setup.workload.placements else State.PENDING
            self._cluster.add(setup.workload, setup.duration_s, state)
        self._cluster.push_wakeup(0)
        for index, event in enumerate(scenario.events):
            self._cluster.push_driver_event(event.at_s, ref=index)
        self._decisions: list[DecisionRecord] = []
        self._timeline: list[TimelineRecord] = []
        self._failures: list[Failure] = []
        self._expects: list[Expectations] = []

    def run(self) -> RunResult:
        end = self._cluster.run(self, max_instants=MAX_INSTANTS)
        if end.exhausted:
            self._failures.append(
                Failure(
                    "settle",
                    end.end_s,
                    None,
                    "the run to end",
                    f"still going after {MAX_INSTANTS} instants (evictions and stops keep "
                    "following each other)",
                )
            )
        if self._scenario.expect is not None:
            self._check(self._scenario.expect, None)
        last = self._cluster.last_result
        return RunResult(
            scenario=self._scenario,
            end_s=end.end_s,
            cycles=self._cluster.cycles,
            workloads=tuple(self._with_reasons().values()),
            projects=() if last is None else last.projects,
            decisions=tuple(self._decisions),
            timeline=tuple(self._timeline),
            failures=tuple(self._failures),
        )

    # --- the hooks the simulated cluster calls -------------------------------------------------

    def on_driver_event(self, event: Event, now_s: int) -> bool:
        timeline = self._scenario.events[event.ref]
        action = timeline.action
        if isinstance(action, Expectations):
            self._expects.append(action)
        elif isinstance(action, Submit):
            workload = action.setup.workload
            self._cluster.add(workload, action.setup.duration_s, State.PENDING)
            self._note(now_s, f"submit {workload.name} (project {workload.project})")
        elif isinstance(action, SetQuota):
            self._set_quota(action, now_s)
        elif isinstance(action, LifecycleAction):
            self._lifecycle(action, timeline, now_s)
        return True

    def on_decision(self, now_s: int, cycle: int, decision: Decision) -> None:
        self._decisions.append(DecisionRecord(now_s, cycle, decision))

    def on_stop_finished(self, record: WorkloadRecord, now_s: int) -> None:
        if record.state is State.PENDING:
            self._note(now_s, f"{record.name} stopped; back to pending")
        else:
            self._note(now_s, f"{record.name} stopped; failed (not preemptible)")

    def on_completed(self, record: WorkloadRecord, now_s: int) -> None:
        self._note(now_s, f"{record.name} completed ({record.duration_s} s of running)")

    def on_settled(self, now_s: int, result: SettleResult) -> None:
        if result.status is SettleStatus.PING_PONG:
            self._failures.append(
                Failure(
                    "no fixed point (ping-pong)",
                    now_s,
                    None,
                    f"no decisions in the {CONFIRMING_CYCLES} cycles after a fixed point",
                    f"cycle {result.quiet_cycles} after the fixed point decided "
                    f"{len(result.decisions)}",
                    tuple(describe_decision(d) for d in result.decisions),
                )
            )
        elif result.status is SettleStatus.UNSETTLED:
            self._failures.append(
                Failure(
                    "no fixed point",
                    now_s,
                    None,
                    f"a cycle that decides nothing within {MAX_CYCLES_PER_INSTANT} cycles",
                    f"every one of {MAX_CYCLES_PER_INSTANT} cycles decided something",
                )
            )

    def on_instant_end(self, now_s: int, snapshot: Snapshot | None, changed: bool) -> None:
        expects, self._expects = self._expects, []
        for expect in expects:
            self._check(expect, now_s)

    # --- timeline events -----------------------------------------------------------------------

    def _note(self, now: int, text: str) -> None:
        self._timeline.append(TimelineRecord(now, text))

    def _set_quota(self, action: SetQuota, now: int) -> None:
        project = self._cluster.project(action.project)
        old = project.quota
        quota = Resources(
            gpu_milli=old.gpu_milli if action.gpu_milli is None else action.gpu_milli,
            cpu_milli=old.cpu_milli if action.cpu_milli is None else action.cpu_milli,
            memory_mib=old.memory_mib if action.memory_mib is None else action.memory_mib,
        )
        self._cluster.set_project(replace(project, quota=quota))
        self._note(
            now,
            f"set quota of {action.project}: gpu {format_gpu_milli(old.gpu_milli)} -> "
            f"{format_gpu_milli(quota.gpu_milli)}, cpu_milli {quota.cpu_milli}, "
            f"memory_mib {quota.memory_mib}",
        )

    def _lifecycle(self, action: LifecycleAction, event: TimelineEvent, now: int) -> None:
        record = self._cluster.records.get(action.workload)
        kind = action.action
        # Stricter than the lifecycle table, on purpose (a scenario's author gets a failure, not
        # a silent change): the table would also let a stopping preemptible workload (already
        # pending) be suspended or completed, and a pending or suspended one be completed.
        allowed = {
            Lifecycle.COMPLETE: (State.RUNNING,),
            Lifecycle.SUSPEND: (State.PENDING, State.RUNNING),
            Lifecycle.RESUME: (State.SUSPENDED,),
            Lifecycle.DELETE: tuple(s for s in State if s is not State.DELETED),
        }[kind]
        if record is None or record.state not in allowed:
            actual = "not submitted yet" if record is None else state_words(record)
            self._failures.append(
                Failure(
                    f"event {kind.value}",
                    now,
                    event.line,
                    f"{action.workload} to be {' or '.join(s.value for s in allowed)}",
                    f"{action.workload} is {actual}; the event was skipped",
                )
            )
            return
        lifecycle_event, reason = {
            Lifecycle.COMPLETE: (WorkloadEvent.SUCCEED, "completed by a timeline event"),
            Lifecycle.SUSPEND: (WorkloadEvent.SUSPEND, "suspended by its user"),
            Lifecycle.RESUME: (WorkloadEvent.RESUME, None),
            Lifecycle.DELETE: (WorkloadEvent.DELETE, "deleted by its user"),
        }[kind]
        self._cluster.stop(record.name, lifecycle_event, now, reason)
        self._note(now, f"{kind.value} {action.workload}")

    # --- results -------------------------------------------------------------------------------

    def _with_reasons(self) -> Mapping[str, WorkloadRecord]:
        """Every record; pending ones with the last cycle's reason."""
        last = self._cluster.last_result
        reasons: Mapping[str, str] = {} if last is None else last.pending_reasons
        return {
            name: replace(r, reason=reasons.get(name, r.reason)) if r.state is State.PENDING else r
            for name, r in self._cluster.records.items()
        }

    def _check(self, expect: Expectations, at: int | None) -> None:
        last = self._cluster.last_result
        shares = {} if last is None else {p.name: p for p in last.projects}
        self._failures.extend(check_expectations(expect, at, self._with_reasons(), shares))
