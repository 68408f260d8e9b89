"""Consolidate: move preemptible, movable work so that a pending whole-GPU workload fits.

Only for pending work whose GPUs are idle in total but not where it needs them (e.g. 2 GPUs on
one node while two nodes have 1 free each). For a task that fits nowhere, the nodes with the
most empty devices are tried: movable tasks there are taken in victim order until the node has
room, each of them must find a new place elsewhere *now*, and only then is anything moved. A
move is a restart elsewhere, not a return to pending. Work that is not `movable` (a pod bound by
Kubernetes) is never moved. Only nodes that admit the pending workload (selector, taints) are
freed, and movers go only where they are admitted. Bounded: a few attempts per cycle, a few
moves per attempt.
"""

from __future__ import annotations

from gpupool.core.actions.victims import can_be_victim, victim_units
from gpupool.core.context import CycleContext
from gpupool.core.decisions import Move, MoveCause
from gpupool.core.model import MILLI_PER_GPU, GpuRequestKind
from gpupool.core.session import Statement, TaskAlloc, WorkRecord, WorkState

_CANDIDATE_NODES = 8


def consolidate(ctx: CycleContext) -> None:
    session = ctx.session
    budget = session.settings.max_consolidation_attempts_per_cycle
    if budget <= 0:
        return
    tasks_on_node: dict[int, list[tuple[int, WorkRecord, int]]] | None = None
    for work in [w for w in session.works if w.state is WorkState.PENDING]:
        if budget <= 0:
            return
        spec = work.spec
        if spec.gpu.kind is not GpuRequestKind.WHOLE:
            continue
        gang, extras = ctx.tasks_to_start(work)
        if not gang or ctx.policy_problem(work, len(gang)) is not None:
            continue
        if spec.gpu.amount * len(gang) * MILLI_PER_GPU > session.idle_gpu_milli:
            continue
        budget -= 1
        if tasks_on_node is None:
            tasks_on_node = _movable_tasks_by_node(ctx)
        statement = Statement(session)
        moves: list[Move] = []
        if _place_with_moves(ctx, statement, work, gang, tasks_on_node, moves) and (
            ctx.holds_within_policy(work)
        ):
            statement.commit()
            for move in moves:
                ctx.add_move(move)
            ctx.mark_started(work, "fits after moving work to other nodes (consolidation)")
            ctx.place_extras(work, extras)
        else:
            statement.rollback()


def _movable_tasks_by_node(
    ctx: CycleContext,
) -> dict[int, list[tuple[int, WorkRecord, int]]]:
    """Tasks that may move, per node, as (rank in victim order, work, task), first to move first."""
    session = ctx.session
    movable = [w for w in session.works if w.spec.movable and can_be_victim(session, w)]
    movable.sort(key=lambda w: victim_units(w)[-1].order)
    by_node: dict[int, list[tuple[int, WorkRecord, int]]] = {}
    for rank, work in enumerate(movable):
        for task, alloc in sorted(work.allocs.items()):
            by_node.setdefault(alloc.node, []).append((rank, work, task))
    return by_node


def _place_with_moves(
    ctx: CycleContext,
    statement: Statement,
    work: WorkRecord,
    gang: list[int],
    tasks_on_node: dict[int, list[tuple[int, WorkRecord, int]]],
    moves: list[Move],
) -> bool:
    """Place each task of `gang`, making room on one node by moves where it fits nowhere.

    Every candidate node is tried; the one whose movers come earliest in victim order wins
    (G10's order decides which work moves), ties to the roomier node.
    """
    session = ctx.session
    for task in gang:
        alloc = ctx.placer.find(work.spec, task)
        if alloc is not None:
            statement.place(work, alloc)
            continue
        best: tuple[int, int] | None = None
        for node in _roomiest_nodes(ctx, work):
            attempt = Statement(session, parent=statement)
            latest = _try_node(ctx, attempt, work, task, node, tasks_on_node, len(moves))
            attempt.rollback()
            if latest is not None and (best is None or latest < best[0]):
                best = (latest, node)
        if best is None:
            return False
        attempt = Statement(session, parent=statement)
        removed: list[tuple[WorkRecord, TaskAlloc]] = []
        new_places: list[TaskAlloc] = []
        _try_node(ctx, attempt, work, task, best[1], tasks_on_node, len(moves), removed, new_places)
        attempt.commit()
        node_name = session.nodes[best[1]].name
        for (mover, old), new in zip(removed, new_places, strict=True):
            moves.append(
                Move(
                    workload=mover.name,
                    cause=MoveCause.CONSOLIDATE,
                    source=session.to_placement(old),
                    target=session.to_placement(new),
                    reason=f"moved so that {work.name} fits on {node_name}",
                )
            )
    return True


def _try_node(
    ctx: CycleContext,
    attempt: Statement,
    work: WorkRecord,
    task: int,
    node: int,
    tasks_on_node: dict[int, list[tuple[int, WorkRecord, int]]],
    moves_so_far: int,
    removed: list[tuple[WorkRecord, TaskAlloc]] | None = None,
    new_places: list[TaskAlloc] | None = None,
) -> int | None:
    """Free `node` by moving its movable tasks in victim order, place `task` there and the movers
    elsewhere, inside `attempt`. Returns the victim rank of the last mover needed (-1 if none),
    or None when it does not work out."""
    session = ctx.session
    needed = work.spec.gpu.amount
    max_moves = session.settings.max_moves_per_consolidation
    removed = [] if removed is None else removed
    latest = -1
    for rank, mover, mover_task in tasks_on_node.get(node, []):
        if session.empty_count[node] >= needed or moves_so_far + len(removed) >= max_moves:
            break
        if mover.state is not WorkState.RUNNING or mover_task not in mover.allocs:
            continue
        removed.append((mover, attempt.remove(mover, mover_task)))
        latest = rank
    if session.empty_count[node] < needed:
        return None
    target = ctx.placer.find(work.spec, task)
    if target is None or target.node != node:
        return None
    attempt.place(work, target)
    placed = _replace_elsewhere(ctx, attempt, removed, node)
    if placed is None:
        return None
    if new_places is not None:
        new_places.extend(placed)
    return latest


def _roomiest_nodes(ctx: CycleContext, work: WorkRecord) -> list[int]:
    session = ctx.session
    admitted = ctx.placer.admitted_nodes(work.spec)
    nodes: list[int] = []
    for count in range(session.max_gpus_per_node, -1, -1):
        for node in session.nodes_by_empty[count]:
            if session.nodes[node].gpu_count >= work.spec.gpu.amount and (
                admitted is None or node in admitted
            ):
                nodes.append(node)
                if len(nodes) >= _CANDIDATE_NODES:
                    return nodes
    return nodes


def _replace_elsewhere(
    ctx: CycleContext,
    statement: Statement,
    removed: list[tuple[WorkRecord, TaskAlloc]],
    node: int,
) -> list[TaskAlloc] | None:
    placed: list[TaskAlloc] = []
    for mover, old in removed:
        new = ctx.placer.find(mover.spec, old.task_index, excluded=node)
        if new is None:
            return None
        statement.place(mover, new)
        placed.append(new)
    return placed
