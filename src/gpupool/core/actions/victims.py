"""Evicting to make room: victim order, min runtime, and least disruption (G7, G10).

A victim *unit* is what one eviction takes: an elastic workload's task above `min_available`
(those go first, one at a time), or the rest of a workload, whole. Units are tried in victim
order (lowest priority, then most recently started, then most recently submitted), each only if
the caller's justification holds just before it. After each eviction the pending workload is
tried; once it fits, every victim its placement does not need is put back where it was. If it
never fits within `max_victims_per_attempt`, nothing is evicted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sized
from dataclasses import dataclass
from typing import Final, NamedTuple, cast

from gpupool.core.actions.victim_walk import Freeable, VirtualVictims, is_local
from gpupool.core.context import CycleContext
from gpupool.core.decisions import Evict, EvictionCause
from gpupool.core.model import (
    MILLI_PER_GPU,
    GpuRequest,
    GpuRequestKind,
    SchedulerSettings,
    Workload,
)
from gpupool.core.session import (
    NEW_TUPLE,
    Session,
    Statement,
    TaskAlloc,
    WorkRecord,
    WorkState,
)

# Enum members as module globals: reading one from its class costs ten times as much in
# Python 3.11, and the loops here read them per workload.
_WHOLE: Final = GpuRequestKind.WHOLE
_EVICTED: Final = WorkState.EVICTED
_RUNNING: Final = WorkState.RUNNING


class VictimUnit(NamedTuple):
    """A named tuple rather than a frozen dataclass (as `TaskAlloc`): reclaim and preempt
    make one or more per running workload, every cycle, and a tuple is built several times
    faster."""

    work: WorkRecord
    task_indices: tuple[int, ...]
    """Tasks this unit evicts; empty means every task still placed (the whole workload)."""
    order: tuple[int, int, int, int]


def victim_units(work: WorkRecord) -> list[VictimUnit]:
    """A running workload's units: elastic surplus tasks (highest index first), then the rest."""
    spec = work.spec
    started = spec.started_at_s if spec.started_at_s is not None else 0
    gang = spec.tasks if spec.min_available is None else spec.min_available
    if gang >= 0 and len(work.allocs) <= gang:
        return [NEW_TUPLE(VictimUnit, (work, (), (work.priority, -started, -spec.submit_seq, 0)))]
    base = (work.priority, -started, -spec.submit_seq)
    placed = sorted(work.allocs)
    surplus = placed[gang:]
    units = [
        NEW_TUPLE(VictimUnit, (work, (task,), (*base, position)))
        for position, task in enumerate(reversed(surplus))
    ]
    units.append(NEW_TUPLE(VictimUnit, (work, (), (*base, len(surplus)))))
    return units


def victim_order(work: WorkRecord) -> tuple[int, int, int, int]:
    """`victim_units(work)[-1].order`: where the rest of the workload, whole, comes."""
    spec = work.spec
    started = spec.started_at_s if spec.started_at_s is not None else 0
    gang = spec.tasks if spec.min_available is None else spec.min_available
    surplus = len(work.allocs) - gang if gang >= 0 else len(range(len(work.allocs))[gang:])
    return (work.priority, -started, -spec.submit_seq, max(surplus, 0))


def can_be_victim(session: Session, work: WorkRecord) -> bool:
    """Preemptible, running since before this cycle, and past its min runtime (G7). Only
    works in `session.running_at_start` can be."""
    if work.state is not _RUNNING or not work.preemptible:
        return False
    if work.started_this_cycle or not work.allocs:
        return False
    spec = work.spec
    min_runtime = spec.min_runtime_s
    if min_runtime is None:
        min_runtime = session.projects[work.project].spec.min_runtime_s
    if min_runtime <= 0 or spec.started_at_s is None:
        return True
    return session.snapshot.now_s - spec.started_at_s >= min_runtime


_EXAMINE_FACTOR: Final = 8
"""Candidates looked at per attempt, as a multiple of the victim bound: keeps a scan bounded."""

Reason = Callable[[], str]
"""Says why in words; called only for the victims that are finally evicted (most candidates
of an attempt are put back, and their reasons would be formatted for nothing)."""
Justify = Callable[[WorkRecord, int], Reason | None]
"""Given a victim and the GPU milli its unit would free, returns why evicting that unit is
allowed now, or None if it is not. What the
reason says is fixed when `justify` is called. It reads the victim's project and the holdings:
while an attempt looks for victims they only go down (victims go out, or are counted out), and
a project turned down once is not asked again in that attempt."""


class CountBudget:
    """The victims the node-by-node walks (`_evict_node_by_node`) of one action may count in a
    cycle, all its attempts together: 8 times `max_victims_per_attempt` times
    `max_reclaim_attempts_per_cycle`, what the attempts could count when each stopped at 8 times
    `max_victims_per_attempt`. One attempt may count deeper than that: in a 10,000-node
    cluster the first device that the victim order frees is often 500 to 1,000 victims in, and
    a bound per attempt left projects thousands of GPUs below their quota for hours."""

    __slots__ = ("left",)

    def __init__(self, settings: SchedulerSettings) -> None:
        self.left = (
            _EXAMINE_FACTOR
            * settings.max_victims_per_attempt
            * settings.max_reclaim_attempts_per_cycle
        )


class Attempt:
    """What one eviction attempt found, for its caller (reclaim's cache of failed shapes), and
    the count budget it draws on."""

    __slots__ = ("bounded", "counts", "freeable", "short_of_devices", "turned_down")

    def __init__(self, counts: CountBudget | None = None, freeable: Freeable | None = None) -> None:
        self.counts = counts
        """The action's `CountBudget`; without one, the walk counts at most 8 times
        `max_victims_per_attempt` victims."""
        self.freeable = freeable
        """What the action's candidates hold per device, where it knows: a one-task attempt
        passes over the candidates on nodes that could not take the task (`Freeable`)."""
        self.turned_down: set[int] = set()
        """The projects whose work `justify` turned down: the caller's candidates may stop once
        it holds every project they offer."""
        self.short_of_devices = False
        """Set when the attempt failed with no node that has, or would have with the victims
        counted on it out, the devices for the task (one task walked node by node, a whole-GPU
        or fractional request): the same request with less CPU or memory fails too."""
        self.bounded = False
        """Set when the walk stopped at its count budget: the attempt says nothing about the
        victims past it."""


@dataclass(slots=True)
class _Evicted:
    unit: VictimUnit
    allocs: list[TaskAlloc]
    reason: Reason

    def __init__(self, unit: VictimUnit, allocs: list[TaskAlloc], reason: Reason) -> None:
        # Written out: the compiled core compiles this one, not the one `dataclass` generates.
        self.unit = unit
        self.allocs = allocs
        self.reason = reason


def evict_to_place(
    ctx: CycleContext,
    work: WorkRecord,
    gang: list[int],
    candidates: Iterable[VictimUnit],
    justify: Justify,
    cause: EvictionCause,
    attempt: Attempt | None = None,
) -> bool:
    """Try to start `gang` of `work` by evicting candidates; commit and record on success.
    Work that fits already (in room an earlier eviction of the cycle left: a 4-GPU victim freed
    for a 1-GPU task) starts without a victim. `attempt`, where given, says what the attempt
    found (`Attempt`)."""
    if fits_now(ctx, work, gang):  # `_settle` with no victim: `_record` says so
        return _settle(ctx, Statement(ctx.session), [], work, gang, justify, cause)
    if attempt is None:
        attempt = Attempt()
    if is_local(ctx, work, gang):
        if attempt.freeable is not None:
            candidates = attempt.freeable.on_possible_nodes(candidates, work.spec)
        return _evict_node_by_node(ctx, work, gang, candidates, justify, cause, attempt)
    return _evict_in_turn(ctx, work, gang, candidates, justify, cause, attempt)


def _evict_in_turn(
    ctx: CycleContext,
    work: WorkRecord,
    gang: list[int],
    candidates: Iterable[VictimUnit],
    justify: Justify,
    cause: EvictionCause,
    attempt: Attempt,
) -> bool:
    """`evict_to_place` for work whose fit may depend on more than one node (a gang, a limit
    that evicting elsewhere lowers the holding under): each victim taken out in turn, the
    placer asked after each."""
    turned_down = attempt.turned_down
    statement = Statement(ctx.session)
    evicted: list[_Evicted] = []
    limit = ctx.session.settings.max_victims_per_attempt
    examine = _EXAMINE_FACTOR * limit
    for unit, tasks, reason in _justified_units(
        candidates, evicted, justify, _tasks_left, turned_down, limit, examine
    ):
        victim = unit.work
        allocs = [statement.remove(victim, t) for t in tasks]
        if not victim.allocs:
            victim.state = _EVICTED
        evicted.append(_Evicted(unit, allocs, reason))
        if fits_now(ctx, work, gang):
            return _settle(ctx, statement, evicted, work, gang, justify, cause)
    statement.rollback()
    for item in evicted:
        item.unit.work.state = _RUNNING
    return False


_FITS_FREED: Final = "fits in capacity freed earlier in this cycle"


def _justified_units(
    candidates: Iterable[VictimUnit],
    taken: Sized,
    justify: Justify,
    tasks_left: Callable[[WorkRecord, tuple[int, ...]], tuple[int, ...] | None],
    turned_down: set[int],
    limit: int,
    examine: int,
) -> Iterator[tuple[VictimUnit, tuple[int, ...], Reason]]:
    """The candidates an attempt takes, in order, with their tasks and why: running, with tasks
    left (`tasks_left`), justified now; within the bounds (at most `limit` taken, read from
    `taken` as the attempt goes, and `examine` looked at). A project `justify` turned down goes
    into `turned_down`, and its later units are passed over unasked (they still count as looked
    at)."""
    examined = 0
    for unit in candidates:
        examined += 1
        if examined > examine or len(taken) >= limit:
            return
        victim = unit.work
        if victim.state is not _RUNNING or victim.project in turned_down:
            continue
        tasks = tasks_left(victim, unit.task_indices)
        if tasks is None:
            continue
        reason = justify(victim, _gpu_of(victim, tasks))
        if reason is None:
            turned_down.add(victim.project)
            continue
        yield unit, tasks, reason


def _gpu_of(victim: WorkRecord, tasks: tuple[int, ...]) -> int:
    """The GPU milli that `tasks` of `victim` hold."""
    allocs = victim.allocs
    total = 0
    for t in tasks:
        alloc = allocs[t]
        total += alloc.milli_per_device * len(alloc.devices)
    return total


def _tasks_left(victim: WorkRecord, tasks: tuple[int, ...]) -> tuple[int, ...] | None:
    """A unit's tasks (every placed one for an empty `tasks`), or None if one is gone."""
    if not tasks:
        return tuple(sorted(victim.allocs))
    if any(t not in victim.allocs for t in tasks):
        return None
    return tasks


def _evict_node_by_node(
    ctx: CycleContext,
    work: WorkRecord,
    gang: list[int],
    candidates: Iterable[VictimUnit],
    justify: Justify,
    cause: EvictionCause,
    attempt: Attempt,
) -> bool:
    """`evict_to_place` for work whose fit depends on each node alone: the victims are counted,
    not taken out, until one of their nodes could take it (`victim_walk`).

    Counting changes nothing in the session, so the walk has no bound of its own on the victims
    it counts: it goes on in victim order until a node could take the task or the candidates
    run out, drawing on the action's `CountBudget` (G10's prefix, however long; at most
    `max_victims_per_attempt` are taken out at once). Without a budget it counts at most 8
    times `max_victims_per_attempt`."""
    session = ctx.session
    walk = VirtualVictims(ctx)
    spec = work.spec
    limit = session.settings.max_victims_per_attempt
    counts = attempt.counts
    countable = _EXAMINE_FACTOR * limit if counts is None else counts.left
    try:
        for unit, tasks, reason in _justified_units(
            candidates,
            walk,
            justify,
            walk.tasks_left,
            attempt.turned_down,
            countable,
            _NO_BOUND,
        ):
            victim = unit.work
            nodes = [n for n in walk.count(unit, victim, tasks, reason) if walk.could_take(spec, n)]
            if not nodes:
                continue
            positions = walk.positions_on(nodes)
            if len(positions) > limit:
                continue
            statement = Statement(session)
            walk.take_out(statement, positions)
            if not fits_now(ctx, work, gang):
                walk.put_back(statement, positions)
                continue
            walk.release()
            evicted = [
                _Evicted(
                    cast(VictimUnit, walk.units[p].unit),
                    walk.units[p].allocs[:],
                    cast(Reason, walk.reasons[p]),
                )
                for p in positions
            ]
            return _settle(ctx, statement, evicted, work, gang, justify, cause)
        if len(walk) >= countable:
            attempt.bounded = True
        else:
            attempt.short_of_devices = not walk.devices_anywhere(spec)
        return False
    finally:
        walk.release()
        if counts is not None:
            counts.left -= len(walk)


_NO_BOUND: Final = 1 << 62
"""`_justified_units`' `examine` for the walk: its candidates are bounded by what it counts."""


def _settle(
    ctx: CycleContext,
    statement: Statement,
    evicted: list[_Evicted],
    work: WorkRecord,
    gang: list[int],
    justify: Justify,
    cause: EvictionCause,
) -> bool:
    """The work fits with `evicted` out (in `statement`): put back the victims it does not need
    (G10), evict the rest again in order, place it; commit and record, or undo everything."""
    _restore_unneeded(ctx, statement, evicted, work, gang)
    _replay(statement, evicted, justify)
    final = Statement(ctx.session, parent=statement)
    if _place_within_policy(ctx, final, work, gang):
        final.commit()
        statement.commit()
        _record(ctx, work, evicted, cause)
        return True
    final.rollback()
    statement.rollback()
    for item in evicted:
        item.unit.work.state = _RUNNING
    return False


def _place_within_policy(
    ctx: CycleContext, statement: Statement, work: WorkRecord, gang: list[int]
) -> bool:
    """Place `gang` in `statement` and check the limits (and G3) with the victims out: a
    project at its limit may make room by evicting its own lower-priority work (G6)."""
    return ctx.place_tasks(statement, work, gang) and ctx.holds_within_policy(work)


def fits_now(ctx: CycleContext, work: WorkRecord, gang: list[int]) -> bool:
    """Whether `_place_within_policy` would succeed now; changes nothing.

    When the capacity indexes show room for fewer tasks than the gang has (`_room_for`), the
    placer would fail, so the answer is known without trying. (A tentative placement is not
    free of effects: taking it off again moves a node (device) to the end of its bucket, which
    later placements see as their order among equals; a gang that is not tried leaves the
    order as it was.)
    """
    if gang and not _room_for(ctx.session, work.spec, len(gang)):
        return False
    attempt = Statement(ctx.session)
    fits = _place_within_policy(ctx, attempt, work, gang)
    attempt.rollback()
    return fits


def _room_for(session: Session, spec: Workload, tasks: int = 1) -> bool:
    """False only where the placer would certainly not place `tasks` tasks of `spec`: the
    devices the capacity indexes show hold fewer (a node with e empty devices holds e // n
    tasks of n whole GPUs; a device with f milli-GPU free f // m tasks of m; nodes' selectors,
    taints, CPU, memory and pinned devices only take room away)."""
    buckets = session.nodes_by_empty
    request = spec.gpu
    whole = request.kind is _WHOLE
    needed = request.amount if whole else 1
    if tasks > 1:
        return _task_slots(session, request, whole, needed, tasks) >= tasks
    # Loops rather than `any(...)` over a generator: every eviction attempt asks this.
    for count in range(needed if needed > 0 else 0, len(buckets)):
        if buckets[count]:
            return True
    if whole:
        return False
    keys = session.shared_free_keys
    return bool(keys) and keys[-1] >= request.milli_on(session.max_device_memory_mib)


def _task_slots(
    session: Session, request: GpuRequest, whole: bool, needed: int, enough: int
) -> int:
    """How many tasks the devices could hold at most (see `_room_for`); counting stops at
    `enough`."""
    buckets = session.nodes_by_empty
    if whole:
        if needed <= 0:
            return enough
        slots = 0
        for empty in range(len(buckets) - 1, needed - 1, -1):
            slots += len(buckets[empty]) * (empty // needed)
            if slots >= enough:
                break
        return slots
    milli = request.milli_on(session.max_device_memory_mib)
    if milli <= 0:
        return enough
    slots = 0
    per_empty_device = MILLI_PER_GPU // milli
    for empty in range(len(buckets) - 1, 0, -1):
        slots += len(buckets[empty]) * empty * per_empty_device
        if slots >= enough:
            return slots
    keys = session.shared_free_keys
    by_free = session.shared_by_free
    for free in reversed(keys):
        if free < milli:
            break
        slots += len(by_free[free]) * (free // milli)
        if slots >= enough:
            break
    return slots


def _restore_unneeded(
    ctx: CycleContext,
    statement: Statement,
    evicted: list[_Evicted],
    work: WorkRecord,
    gang: list[int],
) -> None:
    """G10: give back every victim the pending workload can do without.

    First, together, every victim on none of the nodes the pending workload is placed on now
    (`_restore_off_placement`); then each of the others, the least preferred (the last taken)
    first: put back where it was (task by task, each checked against the state after the
    previous ones, since two tasks of one victim may share a device), then the pending workload
    is placed afresh; if it no longer fits, the victim is taken again. An elastic surplus task
    comes back only if the rest of its workload still runs (G9).
    """
    _restore_off_placement(ctx, statement, evicted, work, gang)
    for item, victim in _restorable(evicted):
        if not _put_back(statement, victim, item.allocs):
            continue
        if fits_now(ctx, work, gang):
            victim.state = _RUNNING
            item.allocs.clear()
        else:
            for alloc in item.allocs:
                statement.remove(victim, alloc.task_index)
    evicted[:] = [item for item in evicted if item.allocs]


def _restorable(evicted: list[_Evicted]) -> Iterator[tuple[_Evicted, WorkRecord]]:
    """The victims to try putting back, the last taken first; an elastic surplus task only
    while the rest of its workload runs (G9), as read when its turn comes."""
    for item in reversed(evicted):
        victim = item.unit.work
        if item.unit.task_indices and victim.state is _EVICTED:
            continue
        yield item, victim


def _put_back(statement: Statement, victim: WorkRecord, allocs: list[TaskAlloc]) -> bool:
    """Put `allocs` of `victim` back where they were, all or none: task by task, each checked
    against the state after the previous ones (two tasks of one victim may share a device)."""
    session = statement.session
    for placed, alloc in enumerate(allocs):
        if not fits_back(session, victim, alloc):
            for undo in allocs[:placed]:
                statement.remove(victim, undo.task_index)
            return False
        statement.place(victim, alloc)
    return True


def _restore_off_placement(
    ctx: CycleContext,
    statement: Statement,
    evicted: list[_Evicted],
    work: WorkRecord,
    gang: list[int],
) -> None:
    """Put back, together, every victim none of whose tasks ran on a node where the pending
    workload is placed now: the room it freed is not what the placement uses. Checked once
    with all of them back (a limit the victims were taken to stay under (G6) may still need
    them); if the workload then no longer fits, they are taken again, and `_restore_unneeded`
    tries each. The victims put back leave `evicted`.

    One at a time, each victim put back is a placement and its undo; most of an attempt's
    victims are far from where the workload goes."""
    if len(evicted) < 2:
        return
    attempt = Statement(ctx.session)
    if not _place_within_policy(ctx, attempt, work, gang):
        attempt.rollback()
        return
    used = {work.allocs[task].node for task in gang}
    attempt.rollback()
    back: list[_Evicted] = []
    for item, victim in _restorable(evicted):
        if any(alloc.node in used for alloc in item.allocs):
            continue
        if _put_back(statement, victim, item.allocs):
            victim.state = _RUNNING
            back.append(item)
    if not back:
        return
    if fits_now(ctx, work, gang):
        for item in back:
            item.allocs.clear()
        evicted[:] = [item for item in evicted if item.allocs]
        return
    for item in reversed(back):
        victim = item.unit.work
        for alloc in item.allocs:
            statement.remove(victim, alloc.task_index)
        if not victim.allocs:
            victim.state = _EVICTED


def _replay(statement: Statement, evicted: list[_Evicted], justify: Justify) -> None:
    """Evict again, from the start, only the victims that stay, so that each reason says what
    held just before that eviction (a victim put back no longer counts). Each still holds:
    with fewer victims out, every project holds at least what it held when it was checked."""
    for item in evicted:
        item.unit.work.state = _RUNNING
    statement.rollback()
    for item in evicted:
        victim = item.unit.work
        freed_gpu = sum(a.milli_per_device * len(a.devices) for a in item.allocs)
        item.reason = justify(victim, freed_gpu) or item.reason
        item.allocs = [statement.remove(victim, alloc.task_index) for alloc in item.allocs]
        if not victim.allocs:
            victim.state = _EVICTED


def fits_back(session: Session, work: WorkRecord, alloc: TaskAlloc) -> bool:
    """Whether `alloc` of `work` fits again where it was, as things stand in `session`."""
    node = alloc.node
    device_memory = session.nodes[node].gpu_memory_mib
    for device in alloc.devices:
        used = session.device_used[node][device]
        if alloc.milli_per_device >= MILLI_PER_GPU and used != 0:
            return False
        if used + alloc.milli_per_device > MILLI_PER_GPU:
            return False
        if session.device_memory_used[node][device] + alloc.memory_mib_per_device > device_memory:
            return False
    return (
        session.cpu_free[node] >= work.spec.cpu_milli
        and session.memory_free[node] >= work.spec.memory_mib
    )


def _record(
    ctx: CycleContext, work: WorkRecord, evicted: list[_Evicted], cause: EvictionCause
) -> None:
    """One Evict per victim: whole if nothing of it is left, else the tasks it lost."""
    if not evicted:  # every victim went back: room an earlier eviction left was enough
        ctx.mark_started(work, _FITS_FREED)
        return
    by_victim: dict[int, list[_Evicted]] = {}
    for item in evicted:
        by_victim.setdefault(item.unit.work.index, []).append(item)
    for items in by_victim.values():
        victim = items[0].unit.work
        whole = victim.state is _EVICTED
        reason = items[0].reason()
        tasks = () if whole else tuple(sorted(a.task_index for i in items for a in i.allocs))
        ctx.evictions.append(
            Evict(
                workload=victim.name,
                cause=cause,
                reason=reason,
                task_indices=tasks,
                for_workload=work.name,
            )
        )
        if whole:
            ctx.reasons[victim.index] = f"evicted for {work.name}: {reason}"
    verb = "reclaimed" if cause is EvictionCause.RECLAIM else "preempted"
    names = ", ".join(ctx.session.works[i].name for i in by_victim)
    ctx.mark_started(work, f"starts on GPUs {verb} from {names}")
