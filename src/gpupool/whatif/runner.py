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

Expectations: `running` / `pending` are exact sets (order ignored; stopping and suspended
workloads are neither); `evicted` / `not_evicted` count any Evict decision so far, partial ones
included, and `count.evicted` is how many distinct workloads were evicted; `placements` compares
the nodes of the running tasks, as a multiset (task numbering is the scheduler's business);
`same_device` / `different_devices` compare PHYSICAL devices (`TaskPlacement.physical_devices`,
so a dynamic fraction spread out to burst is where it really runs); `fair_share` compares the
last cycle's `ProjectShare.fair_share`, only in the amounts given. Each failure names the
expectation, the time (or the end), the line, what was expected and what was found.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from gpupool.core.decisions import Bind, CycleResult, Decision, Evict, Move, ProjectShare
from gpupool.core.model import Project, Resources, Snapshot, TaskPlacement, Workload
from gpupool.units import format_gpu_milli
from gpupool.whatif.scenario import (
    Event,
    Expectations,
    Lifecycle,
    LifecycleAction,
    Scenario,
    SetQuota,
    Submit,
    WorkloadSetup,
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
    "run_scenario",
]

CycleFunction = Callable[[Snapshot], CycleResult]

CONFIRMING_CYCLES = 5
"""Cycles after the fixed point that must decide nothing either (G8, no ping-pong)."""
MAX_CYCLES_PER_INSTANT = 200
MAX_INSTANTS = 10_000
"""A bound on simulated instants, against an evict/stop/rebind loop that never settles."""


class State(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SUSPENDED = "suspended"
    DELETED = "deleted"


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    """The runner's view of one workload; `workload` is what the core sees when it is active.

    `ran_s` is the running time accumulated before the current run (runs end at evictions,
    suspensions); the current run started at `workload.started_at_s`.
    """

    workload: Workload
    state: State
    duration_s: int | None = None
    ran_s: int = 0
    stops_at_s: int | None = None
    evictions: int = 0
    reason: str | None = None
    """Why it is not running (pending, failed, stopping, suspended, succeeded), in words."""

    @property
    def name(self) -> str:
        return self.workload.name

    def run_time_s(self, now_s: int) -> int:
        started = self.workload.started_at_s
        if self.state is State.RUNNING and started is not None:
            return self.ran_s + now_s - started
        return self.ran_s

    def completes_at_s(self) -> int | None:
        started = self.workload.started_at_s
        if self.state is not State.RUNNING or self.duration_s is None or started is None:
            return None
        return started + self.duration_s - self.ran_s


@dataclass(frozen=True, slots=True)
class DecisionRecord:
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
class Failure:
    """One expectation (or run-level check) that did not hold."""

    check: str
    at_s: int | None
    """When it was checked; `None` = at the end of the run."""
    line: int | None
    expected: str
    actual: str
    detail: tuple[str, ...] = ()


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


class CoreContractError(RuntimeError):
    """The core returned a decision the runner cannot apply (a bug in the core, not the file)."""


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


class _Run:
    def __init__(self, scenario: Scenario, cycle: CycleFunction) -> None:
        self._scenario = scenario
        self._cycle = cycle
        self._projects: dict[str, Project] = {p.name: p for p in scenario.projects}
        self._records: dict[str, WorkloadRecord] = {}
        for setup in scenario.workloads:
            state = State.RUNNING if setup.workload.placements else State.PENDING
            self._records[setup.workload.name] = WorkloadRecord(
                setup.workload, state, setup.duration_s
            )
        self._decisions: list[DecisionRecord] = []
        self._timeline: list[TimelineRecord] = []
        self._failures: list[Failure] = []
        self._cycles = 0
        self._last: CycleResult | None = None

    # --- the loop ------------------------------------------------------------------------------

    def run(self) -> RunResult:
        events = self._scenario.events
        last_event_s = events[-1].at_s if events else 0
        position = 0
        now = 0
        for _ in range(MAX_INSTANTS):
            self._finish_stops(now)
            if now <= last_event_s:
                self._finish_completions(now)
            batch: list[Event] = []
            while position < len(events) and events[position].at_s == now:
                batch.append(events[position])
                position += 1
            for event in batch:
                if not isinstance(event.action, Expectations):
                    self._apply_event(event, now)
            self._settle(now)
            for event in batch:
                if isinstance(event.action, Expectations):
                    self._check(event.action, now)
            upcoming = self._next_instant(now, events[position:], last_event_s)
            if upcoming is None:
                break
            now = upcoming
        else:
            self._failures.append(
                Failure(
                    "settle",
                    now,
                    None,
                    "the run to end",
                    f"still going after {MAX_INSTANTS} instants (evictions and stops keep "
                    "following each other)",
                )
            )
        if self._scenario.expect is not None:
            self._check(self._scenario.expect, None)
        return RunResult(
            scenario=self._scenario,
            end_s=now,
            cycles=self._cycles,
            workloads=self._final_records(),
            projects=() if self._last is None else self._last.projects,
            decisions=tuple(self._decisions),
            timeline=tuple(self._timeline),
            failures=tuple(self._failures),
        )

    def _next_instant(self, now: int, events: Iterable[Event], last_event_s: int) -> int | None:
        candidates = [e.at_s for e in events if e.at_s > now][:1]
        for record in self._records.values():
            if record.state is State.STOPPING and record.stops_at_s is not None:
                candidates.append(record.stops_at_s)
            completes = record.completes_at_s()
            if completes is not None and completes <= last_event_s:
                candidates.append(completes)
        later = [t for t in candidates if t > now]
        return min(later) if later else None

    def _settle(self, now: int) -> None:
        """Cycles until a fixed point, then `CONFIRMING_CYCLES` that must decide nothing."""
        quiet = 0
        for _ in range(MAX_CYCLES_PER_INSTANT):
            result = self._cycle(self._snapshot(now))
            self._cycles += 1
            self._last = result
            if not result.decisions:
                quiet += 1
                if quiet > CONFIRMING_CYCLES:
                    return
                continue
            self._apply_decisions(result.decisions, now)
            if quiet:
                self._failures.append(
                    Failure(
                        "no fixed point (ping-pong)",
                        now,
                        None,
                        f"no decisions in the {CONFIRMING_CYCLES} cycles after a fixed point",
                        f"cycle {quiet} after the fixed point decided {len(result.decisions)}",
                        tuple(describe_decision(d) for d in result.decisions),
                    )
                )
                return
        self._failures.append(
            Failure(
                "no fixed point",
                now,
                None,
                f"a cycle that decides nothing within {MAX_CYCLES_PER_INSTANT} cycles",
                f"every one of {MAX_CYCLES_PER_INSTANT} cycles decided something",
            )
        )

    def _snapshot(self, now: int) -> Snapshot:
        active = (State.PENDING, State.RUNNING)
        return Snapshot(
            nodes=self._scenario.nodes,
            projects=tuple(self._projects.values()),
            workloads=tuple(r.workload for r in self._records.values() if r.state in active),
            now_s=now,
            settings=self._scenario.settings,
        )

    # --- state changes -------------------------------------------------------------------------

    def _set(self, record: WorkloadRecord) -> None:
        self._records[record.name] = record

    def _note(self, now: int, text: str) -> None:
        self._timeline.append(TimelineRecord(now, text))

    def _stopped(self, record: WorkloadRecord, now: int, state: State, reason: str | None) -> None:
        """`record` stops running (or waiting) and enters `state`; its run time is kept."""
        self._set(
            replace(
                record,
                workload=replace(record.workload, placements=(), started_at_s=None),
                state=state,
                ran_s=record.run_time_s(now),
                stops_at_s=None,
                reason=reason,
            )
        )

    def _finish_stops(self, now: int) -> None:
        for record in list(self._records.values()):
            if record.state is not State.STOPPING or record.stops_at_s is None:
                continue
            if record.stops_at_s <= now:
                if record.workload.is_preemptible:
                    self._stopped(record, now, State.PENDING, None)
                    self._note(now, f"{record.name} stopped; back to pending")
                else:
                    self._stopped(record, now, State.FAILED, record.reason)
                    self._note(now, f"{record.name} stopped; failed (not preemptible)")

    def _finish_completions(self, now: int) -> None:
        for record in list(self._records.values()):
            completes = record.completes_at_s()
            if completes is not None and completes <= now:
                self._stopped(
                    record, now, State.SUCCEEDED, f"completed after {record.duration_s} s"
                )
                self._note(now, f"{record.name} completed ({record.duration_s} s of running)")

    def _apply_event(self, event: Event, now: int) -> None:
        action = event.action
        if isinstance(action, Submit):
            self._submit(action.setup, now)
        elif isinstance(action, SetQuota):
            self._set_quota(action, now)
        elif isinstance(action, LifecycleAction):
            self._lifecycle(action, event, now)

    def _submit(self, setup: WorkloadSetup, now: int) -> None:
        self._records[setup.workload.name] = WorkloadRecord(
            setup.workload, State.PENDING, setup.duration_s
        )
        self._note(now, f"submit {setup.workload.name} (project {setup.workload.project})")

    def _set_quota(self, action: SetQuota, now: int) -> None:
        project = self._projects[action.project]
        old = project.quota
        quota = Resources(
            gpu_milli=old.gpu_milli if action.gpu_milli is None else action.gpu_milli,
            cpu_milli=old.cpu_milli if action.cpu_milli is None else action.cpu_milli,
            memory_mib=old.memory_mib if action.memory_mib is None else action.memory_mib,
        )
        self._projects[action.project] = replace(project, quota=quota)
        self._note(
            now,
            f"set quota of {action.project}: gpu {format_gpu_milli(old.gpu_milli)} -> "
            f"{format_gpu_milli(quota.gpu_milli)}, cpu_milli {quota.cpu_milli}, "
            f"memory_mib {quota.memory_mib}",
        )

    def _lifecycle(self, action: LifecycleAction, event: Event, now: int) -> None:
        record = self._records.get(action.workload)
        kind = action.action
        allowed = {
            Lifecycle.COMPLETE: (State.RUNNING,),
            Lifecycle.SUSPEND: (State.PENDING, State.RUNNING),
            Lifecycle.RESUME: (State.SUSPENDED,),
            Lifecycle.DELETE: tuple(s for s in State if s is not State.DELETED),
        }[kind]
        if record is None or record.state not in allowed:
            actual = "not submitted yet" if record is None else _state_words(record)
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
        target, reason = {
            Lifecycle.COMPLETE: (State.SUCCEEDED, "completed by a timeline event"),
            Lifecycle.SUSPEND: (State.SUSPENDED, "suspended by its user"),
            Lifecycle.RESUME: (State.PENDING, None),
            Lifecycle.DELETE: (State.DELETED, "deleted by its user"),
        }[kind]
        self._stopped(record, now, target, reason)
        self._note(now, f"{kind.value} {action.workload}")

    def _apply_decisions(self, decisions: Iterable[Decision], now: int) -> None:
        for decision in decisions:
            self._decisions.append(DecisionRecord(now, self._cycles, decision))
            record = self._records.get(decision.workload)
            if record is None or record.state not in (State.PENDING, State.RUNNING):
                state = "unknown" if record is None else record.state.value
                raise CoreContractError(
                    f"the core decided {describe_decision(decision)} at t={now}, but that "
                    f"workload is {state}, not pending or running"
                )
            if isinstance(decision, Bind):
                self._bind(record, decision, now)
            elif isinstance(decision, Evict):
                self._evict(record, decision, now)
            elif isinstance(decision, Move):
                self._move(record, decision, now)

    def _bind(self, record: WorkloadRecord, bind: Bind, now: int) -> None:
        was_running = record.state is State.RUNNING
        placements = tuple(
            sorted(record.workload.placements + bind.placements, key=lambda p: p.task_index)
        )
        started = record.workload.started_at_s if was_running else now
        workload = replace(record.workload, placements=placements, started_at_s=started)
        self._set(replace(record, workload=workload, state=State.RUNNING, reason=None))

    def _evict(self, record: WorkloadRecord, evict: Evict, now: int) -> None:
        record = replace(record, evictions=record.evictions + 1)
        if evict.task_indices:
            gone = set(evict.task_indices)
            kept = tuple(p for p in record.workload.placements if p.task_index not in gone)
            if kept:
                self._set(replace(record, workload=replace(record.workload, placements=kept)))
                return
        why = f"evicted at t={now}: {evict.reason}"
        grace = self._scenario.grace_period_s
        if grace > 0:
            self._stopped(record, now, State.STOPPING, why)
            self._set(replace(self._records[record.name], stops_at_s=now + grace))
        elif record.workload.is_preemptible:
            self._stopped(record, now, State.PENDING, why)
        else:
            self._stopped(record, now, State.FAILED, f"{why} (not preemptible, so it failed)")

    def _move(self, record: WorkloadRecord, move: Move, now: int) -> None:
        index = move.target.task_index
        placements = tuple(
            move.target if p.task_index == index else p for p in record.workload.placements
        )
        if placements == record.workload.placements and move.target not in placements:
            raise CoreContractError(
                f"the core moved task {index} of {record.name} at t={now}, which is not running"
            )
        self._set(replace(record, workload=replace(record.workload, placements=placements)))

    # --- results -------------------------------------------------------------------------------

    def _pending_reasons(self) -> Mapping[str, str]:
        return {} if self._last is None else self._last.pending_reasons

    def _final_records(self) -> tuple[WorkloadRecord, ...]:
        reasons = self._pending_reasons()
        return tuple(
            replace(r, reason=reasons.get(r.name, r.reason)) if r.state is State.PENDING else r
            for r in self._records.values()
        )

    def _check(self, expect: Expectations, at: int | None) -> None:
        records = {
            name: replace(r, reason=self._pending_reasons().get(name, r.reason))
            if r.state is State.PENDING
            else r
            for name, r in self._records.items()
        }
        shares = {} if self._last is None else {p.name: p for p in self._last.projects}
        self._failures.extend(_Checker(expect, at, records, shares).failures())


# --- expectations ---------------------------------------------------------------------------------


class _Checker:
    def __init__(
        self,
        expect: Expectations,
        at: int | None,
        records: Mapping[str, WorkloadRecord],
        shares: Mapping[str, ProjectShare],
    ) -> None:
        self._expect = expect
        self._at = at
        self._records = records
        self._shares = shares
        self._out: list[Failure] = []

    def _fail(self, check: str, expected: str, actual: str, detail: Iterable[str] = ()) -> None:
        line = self._expect.line_of(check.split(".")[0])
        self._out.append(Failure(check, self._at, line, expected, actual, tuple(detail)))

    def _in_state(self, state: State) -> list[str]:
        return [name for name, r in self._records.items() if r.state is state]

    def _explain(self, names: Iterable[str]) -> list[str]:
        return [f"{name} is {_state_words(self._records[name])}" for name in names]

    def failures(self) -> list[Failure]:
        e = self._expect
        self._exact("running", e.running, State.RUNNING)
        self._exact("pending", e.pending, State.PENDING)
        evicted = [name for name, r in self._records.items() if r.evictions > 0]
        if e.evicted is not None:
            never = [n for n in e.evicted if n not in evicted]
            if never:
                self._fail(
                    "evicted",
                    f"evicted at least once: {_names(e.evicted)}",
                    f"never evicted: {_names(never)}",
                    self._explain(n for n in never if n in self._records),
                )
        if e.not_evicted is not None:
            were = [n for n in e.not_evicted if n in evicted]
            if were:
                self._fail(
                    "not_evicted",
                    f"never evicted: {_names(e.not_evicted)}",
                    "evicted: " + ", ".join(f"{n} ({self._records[n].evictions}x)" for n in were),
                )
        self._count("count.running", e.count_running, len(self._in_state(State.RUNNING)))
        self._count("count.pending", e.count_pending, len(self._in_state(State.PENDING)))
        self._count("count.evicted", e.count_evicted, len(evicted))
        for name, nodes in e.placements:
            self._placement(name, nodes)
        for group in e.same_device:
            self._same_device(group)
        for group in e.different_devices:
            self._different_devices(group)
        for project, share in e.fair_share:
            self._fair_share(project, share.gpu_milli, share.cpu_milli, share.memory_mib)
        return self._out

    def _exact(self, check: str, expected: tuple[str, ...] | None, state: State) -> None:
        if expected is None:
            return
        actual = self._in_state(state)
        missing = [n for n in expected if n not in actual]
        extra = [n for n in actual if n not in expected]
        if missing or extra:
            detail = self._explain(n for n in missing if n in self._records)
            detail += [f"{n} is {_state_words(self._records[n])} but not expected" for n in extra]
            detail += [f"{n} is not submitted yet" for n in missing if n not in self._records]
            self._fail(check, _names(sorted(expected)), _names(sorted(actual)), detail)

    def _count(self, check: str, expected: int | None, actual: int) -> None:
        if expected is not None and expected != actual:
            self._fail(check, str(expected), str(actual))

    def _running(self, check: str, name: str) -> WorkloadRecord | None:
        record = self._records.get(name)
        if record is None or record.state is not State.RUNNING:
            actual = "not submitted yet" if record is None else _state_words(record)
            self._fail(check, f"{name} running", f"{name} is {actual}")
            return None
        return record

    def _placement(self, name: str, nodes: tuple[str, ...]) -> None:
        record = self._running(f"placements.{name}", name)
        if record is None:
            return
        actual = sorted(p.node for p in record.workload.placements)
        if actual != sorted(nodes):
            self._fail(
                f"placements.{name}",
                _names(sorted(nodes)),
                _names(actual),
                [f"{name} runs on {format_placements(record.workload.placements)}"],
            )

    def _devices(self, check: str, group: tuple[str, ...]) -> dict[str, set[tuple[str, int]]]:
        """The physical devices each workload of `group` runs on; failures for non-running."""
        used: dict[str, set[tuple[str, int]]] = {}
        for name in group:
            record = self._running(check, name)
            if record is not None:
                used[name] = {
                    (p.node, d) for p in record.workload.placements for d in p.physical_devices
                }
        return used

    def _same_device(self, group: tuple[str, ...]) -> None:
        used = self._devices("same_device", group)
        if len(used) != len(group):
            return
        distinct = {frozenset(devices) for devices in used.values()}
        if len(distinct) != 1 or len(next(iter(distinct))) != 1:
            self._fail(
                "same_device",
                f"{_names(group)} on one device",
                "; ".join(f"{n} on {_device_list(d)}" for n, d in used.items()),
            )

    def _different_devices(self, group: tuple[str, ...]) -> None:
        used = self._devices("different_devices", group)
        if len(used) != len(group):
            return
        owners: dict[tuple[str, int], list[str]] = {}
        for name, devices in used.items():
            for device in devices:
                owners.setdefault(device, []).append(name)
        shared = {d: names for d, names in owners.items() if len(names) > 1}
        if shared:
            self._fail(
                "different_devices",
                f"{_names(group)} on distinct devices",
                "; ".join(
                    f"{_names(names)} share {node}:{index}"
                    for (node, index), names in sorted(shared.items())
                ),
            )

    def _fair_share(
        self, project: str, gpu_milli: int | None, cpu_milli: int | None, memory_mib: int | None
    ) -> None:
        check = f"fair_share.{project}"
        share = self._shares.get(project)
        if share is None:
            self._fail(check, "a fair share", "the scheduler reported none for this project")
            return
        actual = share.fair_share
        if gpu_milli is not None and gpu_milli != actual.gpu_milli:
            self._fail(
                f"{check}.gpu", format_gpu_milli(gpu_milli), format_gpu_milli(actual.gpu_milli)
            )
        if cpu_milli is not None and cpu_milli != actual.cpu_milli:
            self._fail(f"{check}.cpu_milli", str(cpu_milli), str(actual.cpu_milli))
        if memory_mib is not None and memory_mib != actual.memory_mib:
            self._fail(f"{check}.memory_mib", str(memory_mib), str(actual.memory_mib))


# --- words ----------------------------------------------------------------------------------------


def _names(names: Iterable[str]) -> str:
    return "[" + ", ".join(names) + "]"


def _device_list(devices: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{node}:{index}" for node, index in sorted(devices)) or "no device"


def _state_words(record: WorkloadRecord) -> str:
    if record.state is State.RUNNING:
        return f"running on {format_placements(record.workload.placements)}"
    if record.reason:
        return f"{record.state}: {record.reason}"
    return str(record.state)


def format_placement(placement: TaskPlacement) -> str:
    """`node-1:0,1`, or `node-1:0 (bursting on 1)` for a spread dynamic fraction."""
    text = f"{placement.node}:{','.join(str(d) for d in placement.devices)}"
    if placement.burst_device is not None:
        text += f" (bursting on {placement.burst_device})"
    return text


def format_placements(placements: Iterable[TaskPlacement]) -> str:
    return ", ".join(format_placement(p) for p in placements) or "nothing"


def describe_decision(decision: Decision) -> str:
    """One line for a decision, as shown in reports and failure details."""
    if isinstance(decision, Bind):
        return f"bind {decision.workload} -> {format_placements(decision.placements)}"
    if isinstance(decision, Evict):
        tasks = (
            f" tasks {','.join(str(i) for i in decision.task_indices)}"
            if decision.task_indices
            else ""
        )
        target = f" for {decision.for_workload}" if decision.for_workload else ""
        return f"evict {decision.workload}{tasks} ({decision.cause.value}{target})"
    return (
        f"move {decision.workload} task {decision.target.task_index}: "
        f"{format_placement(decision.source)} -> {format_placement(decision.target)} "
        f"({decision.cause.value})"
    )
