"""Consolidate: move preemptible, movable work so that a pending workload fits.

For pending work whose GPUs are idle in total but not where it needs them: 2 GPUs on one node
while two nodes have 1 free each, a whole GPU while two devices are half used, 0.75 of a device
while every device has 0.5 free. For a task that fits nowhere, a few candidate places are tried:
for whole GPUs a node (the nodes with the most empty devices first, then those whose shared
devices have the most room), for a fraction or a memory request one shared device (the most free
first). There, the devices that only movable work occupies are emptied (or the device is freed
as far as needed), movers taken in victim order; the pending task is placed, and every mover is
put back where it was if there is still room, else placed anew *now*: a whole-GPU mover on
another node, a fractional or memory mover on any device where it fits, the same node included
(several small jobs packed onto one device to free a whole one). Only when all of it works out
is anything moved. Of the candidates, the one whose movers come earliest in victim order wins
(G10's order decides which work moves), then the one with the fewest moves.

A move is a restart elsewhere, not a return to pending. Work that is not `movable` (a pod bound
by Kubernetes) is never moved. Only places that admit the pending workload (selector, taints)
are freed, and movers go only where they are admitted. Bounded: a few attempts per cycle, a few
moves per attempt, a few candidate places per task.
"""

from __future__ import annotations

from typing import Final

from gpupool.core.actions.victims import can_be_victim, fits_back, victim_order
from gpupool.core.context import CycleContext, gang_to_start
from gpupool.core.decisions import Move, MoveCause
from gpupool.core.model import MILLI_PER_GPU, GpuRequestKind
from gpupool.core.session import Statement, TaskAlloc, WorkRecord, WorkState

# Enum members as module globals: reading one from its class costs ten times as much in
# Python 3.11, and the loops here read them per workload.
_MEMORY: Final = GpuRequestKind.MEMORY
_WHOLE: Final = GpuRequestKind.WHOLE
_PENDING: Final = WorkState.PENDING
_RUNNING: Final = WorkState.RUNNING

_CANDIDATES: Final = 8
"""Candidate places (nodes, or devices for a shared request) tried per task."""
_DEVICES_EXAMINED: Final = 64
"""Shared devices looked at, at most, to find those candidates."""

Mover = tuple[int, WorkRecord, int]
"""(rank in victim order, workload, task index): first to move first."""
Slot = tuple[int, int | None]
"""Where room is made: (node, None) for whole GPUs, (node, device) for a shared request."""


def consolidate(ctx: CycleContext) -> None:
    session = ctx.session
    budget = session.settings.max_consolidation_attempts_per_cycle
    if budget <= 0:
        return
    movers: Movers | None = None
    idle_gpu_milli = session.idle_gpu_milli
    """Changes only with an attempt (read again after each): most of a long queue stops at the
    comparison with it."""
    for work in [w for w in session.works if w.state is _PENDING]:
        if budget <= 0:
            return
        gang_size = gang_to_start(work)
        if not gang_size or work.task_gpu_milli * gang_size > idle_gpu_milli:
            continue
        if ctx.policy_problem(work, gang_size) is not None:
            continue
        budget -= 1
        gang, extras = ctx.tasks_to_start(work)
        if movers is None:
            movers = Movers(ctx)
        statement = Statement(session)
        moves: list[Move] = []
        if _place_with_moves(ctx, statement, work, gang, movers, moves) and (
            ctx.holds_within_policy(work)
        ):
            statement.commit()
            for move in moves:
                ctx.add_move(move)
            ctx.mark_started(work, "fits after moving other work (consolidation)")
            ctx.place_extras(work, extras)
        else:
            statement.rollback()
        idle_gpu_milli = session.idle_gpu_milli


class Movers:
    """Tasks that may move, per (node, device) they are charged to, first to move first.

    Kept per node and split by device when a device is asked for: a consolidation looks at a
    few devices, and a list per device of the cluster is many objects for the garbage
    collector (at 10,000 nodes, tens of thousands) for the few attempts a cycle makes."""

    def __init__(self, ctx: CycleContext) -> None:
        session = ctx.session
        movable = [
            w for w in session.running_at_start if w.spec.movable and can_be_victim(session, w)
        ]
        movable.sort(key=victim_order)
        self._by_node: dict[int, list[tuple[int, WorkRecord, int, tuple[int, ...]]]] = {}
        by_node = self._by_node
        for rank, work in enumerate(movable):
            for task, alloc in sorted(work.allocs.items()):
                entry = (rank, work, task, alloc.devices)
                here = by_node.get(alloc.node)
                if here is None:
                    by_node[alloc.node] = [entry]
                else:
                    here.append(entry)
        self._by_device: dict[tuple[int, int], list[Mover]] = {}

    def get(self, slot: tuple[int, int], default: list[Mover]) -> list[Mover]:
        """The movers charged to (node, device) when the moves began, in victim order (then
        task order), or `default` when there are none."""
        found = self._by_device.get(slot)
        if found is None:
            node, device = slot
            found = self._by_device[slot] = [
                (rank, work, task)
                for rank, work, task, devices in self._by_node.get(node, ())
                if device in devices
            ]
        return found or default

    def __contains__(self, slot: tuple[int, int]) -> bool:
        return bool(self.get(slot, []))


def _place_with_moves(
    ctx: CycleContext,
    statement: Statement,
    work: WorkRecord,
    gang: list[int],
    movers: Movers,
    moves: list[Move],
) -> bool:
    """Place each task of `gang`, making room by moves where it fits nowhere."""
    session = ctx.session
    for task in gang:
        alloc = ctx.placer.find(work.spec, task, None, _headroom(ctx, work))
        if alloc is not None:
            statement.place(work, alloc)
            continue
        best: tuple[tuple[int, int], Slot] | None = None
        for slot in _candidate_slots(ctx, work, movers):
            attempt = Statement(session, parent=statement)
            cost = _try_slot(ctx, attempt, work, task, slot, movers, len(moves))
            attempt.rollback()
            if cost is not None and (best is None or cost < best[0]):
                best = (cost, slot)
        if best is None:
            return False
        attempt = Statement(session, parent=statement)
        changed: list[tuple[WorkRecord, TaskAlloc, TaskAlloc]] = []
        if _try_slot(ctx, attempt, work, task, best[1], movers, len(moves), changed) is None:
            # The best slot, tried again to be kept, did not work out this time: a policy that
            # chooses at random (`random`) may choose otherwise on the second try. The task
            # is then not placed, and the gang does not start (G9), rather than start short.
            attempt.rollback()
            return False
        attempt.commit()
        target = session.nodes[best[1][0]].name
        for mover, old, new in changed:
            moves.append(
                Move(
                    workload=mover.name,
                    cause=MoveCause.CONSOLIDATE,
                    source=session.to_placement(old),
                    target=session.to_placement(new),
                    reason=f"moved so that {work.name} fits on {target}",
                )
            )
    return True


def _headroom(ctx: CycleContext, work: WorkRecord) -> int | None:
    return None if work.spec.gpu.kind is not _MEMORY else ctx.gpu_headroom(work)


def _current(mover: Mover, node: int, device: int) -> TaskAlloc | None:
    """The mover's task if it is still placed on (node, device) (earlier attempts of this cycle
    may have moved or evicted it)."""
    _rank, work, task = mover
    alloc = work.allocs.get(task) if work.state is _RUNNING else None
    if alloc is None or alloc.node != node or device not in alloc.devices:
        return None
    return alloc


def _candidate_slots(ctx: CycleContext, work: WorkRecord, movers: Movers) -> list[Slot]:
    session = ctx.session
    admitted = ctx.placer.admitted_nodes(work.spec)
    spec = work.spec
    slots: dict[Slot, None] = {}
    if spec.gpu.kind is _WHOLE:
        for count in range(session.max_gpus_per_node, 0, -1):
            for node in session.nodes_by_empty[count]:
                if session.nodes[node].gpu_count >= spec.gpu.amount and (
                    admitted is None or node in admitted
                ):
                    slots[(node, None)] = None
                    if len(slots) >= _CANDIDATES:
                        return list(slots)
    examined = 0
    for free in reversed(session.shared_free_keys):
        for node, device in session.shared_by_free[free]:
            examined += 1
            if examined > _DEVICES_EXAMINED:
                return list(slots)
            if (node, device) not in movers or (admitted is not None and node not in admitted):
                continue
            if spec.gpu.kind is _WHOLE:
                if session.nodes[node].gpu_count < spec.gpu.amount:
                    continue
                slots[(node, None)] = None
            else:
                slots[(node, device)] = None
            if len(slots) >= _CANDIDATES:
                return list(slots)
    if spec.gpu.kind is _WHOLE:
        for node in session.nodes_by_empty[0]:
            if session.nodes[node].gpu_count >= spec.gpu.amount and (
                admitted is None or node in admitted
            ):
                slots[(node, None)] = None
                if len(slots) >= _CANDIDATES:
                    break
    return list(slots)


def _try_slot(
    ctx: CycleContext,
    attempt: Statement,
    work: WorkRecord,
    task: int,
    slot: Slot,
    movers: Movers,
    moves_so_far: int,
    changed: list[tuple[WorkRecord, TaskAlloc, TaskAlloc]] | None = None,
) -> tuple[int, int] | None:
    """Make room at `slot` by taking movers off it, place `task` there and the movers back or
    elsewhere, inside `attempt`. Returns (victim rank of the last mover that moves, number of
    moves), or None when it does not work out within the bounds."""
    session = ctx.session
    node, device = slot
    allowed = session.settings.max_moves_per_consolidation - moves_so_far
    if device is None:
        removed = _empty_devices(ctx, attempt, work, node, movers, allowed)
    else:
        removed = _free_device(ctx, attempt, work, node, device, movers, allowed)
    if removed is None:
        return None
    target = ctx.placer.find(work.spec, task, None, _headroom(ctx, work))
    if target is None or target.node != node:
        return None
    if device is not None and target.devices != (device,):
        return None
    attempt.place(work, target)
    # Put back whatever still fits where it was, the last taken first; move the rest.
    staying: set[int] = set()
    for position in range(len(removed) - 1, -1, -1):
        _rank, mover, old = removed[position]
        if fits_back(session, mover, old):
            attempt.place(mover, old)
            staying.add(position)
    latest = -1
    moved = 0
    for position, (rank, mover, old) in enumerate(removed):
        if position in staying:
            continue
        excluded = node if mover.spec.gpu.kind is _WHOLE else None
        new = ctx.placer.find(mover.spec, old.task_index, excluded, _headroom(ctx, mover))
        if new is None:
            return None
        attempt.place(mover, new)
        if new.milli_per_device > old.milli_per_device and not ctx.holds_within_policy(mover):
            return None  # a memory request charged more on a smaller device
        moved += 1
        latest = max(latest, rank)
        if changed is not None:
            changed.append((mover, old, new))
    return latest, moved


def _empty_devices(
    ctx: CycleContext,
    attempt: Statement,
    work: WorkRecord,
    node: int,
    movers: Movers,
    allowed: int,
) -> list[tuple[int, WorkRecord, TaskAlloc]] | None:
    """Empty devices of `node` until it has the empty devices a task of `work` needs: those
    that only movable work occupies, the ones whose movers come first in victim order first."""
    session = ctx.session
    needed = work.spec.gpu.amount
    used = session.device_used[node]
    options: list[tuple[tuple[int, int], int, list[Mover]]] = []
    for device in range(session.nodes[node].gpu_count):
        if used[device] == 0:
            continue
        here = [m for m in movers.get((node, device), []) if _current(m, node, device)]
        if sum(m[1].allocs[m[2]].milli_per_device for m in here) != used[device]:
            continue  # something that may not move is charged here too
        options.append(((max(m[0] for m in here), len(here)), device, here))
    options.sort(key=lambda option: (option[0], option[1]))
    removed: list[tuple[int, WorkRecord, TaskAlloc]] = []
    for _key, _device, here in options:
        if session.empty_count[node] >= needed:
            break
        for rank, mover, task in here:
            if task not in mover.allocs:
                continue  # a task on several devices, taken off with an earlier one
            if len(removed) >= allowed:
                return None
            removed.append((rank, mover, attempt.remove(mover, task)))
    return removed if session.empty_count[node] >= needed else None


def _free_device(
    ctx: CycleContext,
    attempt: Statement,
    work: WorkRecord,
    node: int,
    device: int,
    movers: Movers,
    allowed: int,
) -> list[tuple[int, WorkRecord, TaskAlloc]] | None:
    """Take movers off one shared device, in victim order, until a task of `work` fits there."""
    session = ctx.session
    device_memory = session.nodes[node].gpu_memory_mib
    milli = work.spec.gpu.milli_on(device_memory)
    memory = work.spec.gpu.memory_mib_on(device_memory)

    def fits() -> bool:
        return (
            session.device_used[node][device] + milli <= MILLI_PER_GPU
            and session.device_memory_used[node][device] + memory <= device_memory
        )

    removed: list[tuple[int, WorkRecord, TaskAlloc]] = []
    for mover in movers.get((node, device), []):
        if fits():
            break
        if _current(mover, node, device) is None:
            continue
        if len(removed) >= allowed:
            return None
        rank, work_moved, task = mover
        removed.append((rank, work_moved, attempt.remove(work_moved, task)))
    return removed if fits() else None
