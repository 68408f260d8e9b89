"""Node-level scheduling of dynamic fractions: spread to burst, pack back on demand.

The cluster-level view charges a dynamic fraction (request below limit) to the device it was
placed on, packed with others. On its node, it may physically run on a device nobody is charged
for, so it can burst up to its limit. When a placement claims that device, the task returns to
the device it is charged to (a PACK move, ordered before the binds that need the device); it is
not evicted. Spreading is deterministic: per device, the earliest-submitted burstable task stays,
later ones take idle devices in index order, so repeated cycles change nothing (G8).

A task the node level may not move is *fixed*: its workload is not `movable` (a pod Kubernetes
bound cannot be bound again), or its node now has taints it does not tolerate (a move is a
restart there). A fixed task is never spread, not even when it starts: once on an idle device
it could not be packed back when that device is claimed. One that arrives already on a burst
device stays there; the placer keeps new placements off that device (`Placer` pins it).
"""

from __future__ import annotations

from typing import Final

from gpupool.core.context import CycleContext
from gpupool.core.decisions import Move, MoveCause
from gpupool.core.session import TaskAlloc, WorkRecord, WorkState

# Enum members as module globals: reading one from its class costs ten times as much in
# Python 3.11, and the loops here read them per workload.
_RUNNING: Final = WorkState.RUNNING


def node_level(ctx: CycleContext) -> None:
    session = ctx.session
    by_node: dict[int, list[tuple[WorkRecord, TaskAlloc]]] = {}
    for index in session.burstable_works:
        work = session.works[index]
        if work.state is not _RUNNING:
            continue
        for alloc in work.allocs.values():
            by_node.setdefault(alloc.node, []).append((work, alloc))
    for node in sorted(by_node):
        tasks = sorted(by_node[node], key=lambda wa: (wa[0].spec.submit_seq, wa[1].task_index))
        _pack_and_spread(ctx, node, tasks)


def _pack_and_spread(
    ctx: CycleContext, node: int, tasks: list[tuple[WorkRecord, TaskAlloc]]
) -> None:
    session = ctx.session
    used = session.device_used[node]
    fixed = {
        work.index
        for work, _alloc in tasks
        if not work.spec.movable or not ctx.placer.tolerated_on(work.spec, node)
    }
    taken: set[int] = set()
    staying: list[tuple[WorkRecord, TaskAlloc]] = []
    displaced: list[tuple[WorkRecord, TaskAlloc]] = []
    # Fixed tasks first: the burst device they hold is theirs whatever the others do.
    for work, alloc in sorted(tasks, key=lambda wa: wa[0].index not in fixed):
        burst = alloc.burst_device
        if burst is None:
            staying.append((work, alloc))
        elif work.index in fixed:
            taken.add(burst)
        elif used[burst] != 0 or burst in taken:
            displaced.append((work, alloc))
        else:
            taken.add(burst)
    idle = [d for d in range(len(used)) if used[d] == 0 and d not in taken]
    for work, alloc in displaced:
        if idle:
            target = idle.pop(0)
            reason = "its idle device is claimed; spread to another idle device"
            _change(ctx, work, alloc, target, MoveCause.SPREAD, reason, before_binds=True)
        else:
            _change(ctx, work, alloc, None, MoveCause.PACK, "packed back: its device is claimed")
            staying.append((work, work.allocs[alloc.task_index]))
    if not idle:
        return
    charged_burstable: dict[int, int] = {}
    residents: dict[int, list[tuple[WorkRecord, TaskAlloc]]] = {}
    for _work, alloc in tasks:
        device = alloc.devices[0]
        charged_burstable[device] = charged_burstable.get(device, 0) + alloc.milli_per_device
    for work, alloc in staying:
        residents.setdefault(alloc.devices[0], []).append((work, alloc))
    for device in sorted(residents):
        here = residents[device]
        free_to_move = [(work, alloc) for work, alloc in here if work.index not in fixed]
        others_there = used[device] > charged_burstable.get(device, 0)
        # One burstable task stays on the device (a fixed one if there is one), unless a
        # non-burstable task shares it: then every one that may move leaves to burst.
        stays_anyway = others_there or len(free_to_move) < len(here)
        movers = free_to_move if stays_anyway else free_to_move[1:]
        for work, alloc in movers:
            if not idle:
                return
            target = idle.pop(0)
            _change(ctx, work, alloc, target, MoveCause.SPREAD, "spread to an idle device to burst")


def _change(
    ctx: CycleContext,
    work: WorkRecord,
    alloc: TaskAlloc,
    burst_device: int | None,
    cause: MoveCause,
    reason: str,
    before_binds: bool = False,
) -> None:
    """Record a node-level change; `before_binds` for moves that vacate a device being bound."""
    session = ctx.session
    session.set_burst_device(work, alloc.task_index, burst_device)
    if work.started_this_cycle and alloc.task_index not in _initial_tasks(work):
        return
    target = session.to_placement(work.allocs[alloc.task_index])
    move = Move(
        workload=work.name,
        cause=cause,
        source=session.to_placement(alloc),
        target=target,
        reason=reason,
    )
    if ctx.moved_this_cycle(work.name, alloc.task_index):
        # Consolidation moved it this cycle: one Move, to where it will physically run.
        ctx.add_move(move)
        return
    vacates = before_binds or cause is MoveCause.PACK
    (ctx.pack_moves if vacates else ctx.spread_moves).append(move)


def _initial_tasks(work: WorkRecord) -> set[int]:
    return {p.task_index for p in work.spec.placements}
