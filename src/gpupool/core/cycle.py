"""One scheduling cycle: snapshot in, decisions out.

Phases, in order: build the session (indexes) from the snapshot, fair share, then the actions
allocate -> consolidate -> reclaim -> preempt, then the node-level spread/pack of dynamic
fractions. This is the only entry point drivers call.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from gpupool.core.actions.allocate import allocate
from gpupool.core.actions.consolidate import consolidate
from gpupool.core.actions.node_level import node_level
from gpupool.core.actions.preempt import preempt
from gpupool.core.actions.reclaim import reclaim
from gpupool.core.candidates import typical_of
from gpupool.core.context import CycleContext
from gpupool.core.decisions import Bind, CycleResult, Decision, Evict, Move, ProjectShare
from gpupool.core.fairshare import compute_fair_shares
from gpupool.core.model import Resources, Snapshot, TaskPlacement
from gpupool.core.observer import CycleObserver, NullObserver
from gpupool.core.placement import Placer
from gpupool.core.session import Session, WorkState

# Enum members as module globals: reading one from its class costs ten times as much in
# Python 3.11, and the loops here read them per workload.
_RUNNING: Final = WorkState.RUNNING


def run_cycle(snapshot: Snapshot, observer: CycleObserver | None = None) -> CycleResult:
    watch = observer or NullObserver()

    watch.phase_started("snapshot")
    session = Session(snapshot)
    typical = typical_of(session.pending_shapes)
    ctx = CycleContext(session, Placer(session, typical))
    watch.phase_finished("snapshot")

    watch.phase_started("fair_share")
    demands = _assign_fair_shares(ctx)
    watch.phase_finished("fair_share")

    for name, action in (
        ("allocate", allocate),
        ("consolidate", consolidate),
        ("reclaim", reclaim),
        ("preempt", preempt),
        ("node_level", node_level),
    ):
        watch.phase_started(name)
        action(ctx)
        watch.phase_finished(name)

    return CycleResult(
        decisions=_decisions(ctx),
        pending_reasons=_pending_reasons(ctx),
        projects=_project_shares(ctx, demands),
    )


def _assign_fair_shares(ctx: CycleContext) -> dict[str, Resources]:
    """Compute every project's demand and fair share and store the shares in the session."""
    session = ctx.session
    leaf: dict[int, list[int]] = {p.index: list(p.holding) for p in session.projects}
    for project, missing in session.missing_at_start.items():
        totals = leaf[project]
        totals[0] += missing.gpu_milli
        totals[1] += missing.cpu_milli
        totals[2] += missing.memory_mib
    leaf_demand = {
        session.projects[p].name: Resources(d[0], d[1], d[2])
        for p, d in leaf.items()
        if not session.projects[p].children
    }
    capacity = Resources(
        gpu_milli=session.capacity_gpu_milli,
        cpu_milli=_capacity(
            [n.cpu_milli for n in session.nodes], sum(d.cpu_milli for d in leaf_demand.values())
        ),
        memory_mib=_capacity(
            [n.memory_mib for n in session.nodes], sum(d.memory_mib for d in leaf_demand.values())
        ),
    )
    shares = compute_fair_shares(session.snapshot.projects, leaf_demand, capacity)
    for record in session.projects:
        share = shares[record.name]
        record.fair_share = [share.gpu_milli, share.cpu_milli, share.memory_mib]
    return leaf_demand


def _capacity(per_node: list[int | None], total_demand: int) -> int:
    """Cluster capacity of CPU or memory; when a node does not declare it, demand is the cap."""
    declared = [amount for amount in per_node if amount is not None]
    if len(declared) < len(per_node):
        return total_demand
    return sum(declared)


def _decisions(ctx: CycleContext) -> tuple[Decision, ...]:
    session = ctx.session
    binds: list[Decision] = []
    works = session.works
    bind_reasons = ctx.bind_reasons
    names = [node.name for node in session.nodes]
    """`Session.to_placement`, inline: a cycle makes a placement per started task."""
    for index in ctx.bound:
        work = works[index]
        spec = work.spec
        allocs = sorted(work.allocs.items())
        if spec.placements:
            initial = {p.task_index for p in spec.placements}
            allocs = [item for item in allocs if item[0] not in initial]
        placements = tuple(
            [
                TaskPlacement(a.task_index, names[a.node], a.devices, a.burst_device)
                for _t, a in allocs
            ]
        )
        if placements:
            binds.append(Bind(spec.name, placements, bind_reasons.get(index, "")))
    moves = (*ctx.pack_moves, *ctx.moves)
    spread_moves = tuple(ctx.spread_moves)
    if ctx.evictions and (moves or spread_moves):
        moves = _not_evicted(ctx.evictions, moves)
        spread_moves = _not_evicted(ctx.evictions, spread_moves)
    return (*ctx.evictions, *moves, *binds, *spread_moves)


def _not_evicted(evictions: Iterable[Evict], moves: tuple[Move, ...]) -> tuple[Move, ...]:
    """The moves whose task is not evicted in the same cycle.

    A later action may evict a task that consolidation moved earlier in the cycle (preempt takes
    a workload that consolidate had just moved): the eviction stops the task wherever it runs, so
    its move is not decided at all; drivers get no move of a task they are told to stop.
    """
    whole = {e.workload for e in evictions if not e.task_indices}
    tasks = {(e.workload, t) for e in evictions for t in e.task_indices}
    return tuple(
        m
        for m in moves
        if m.workload not in whole and (m.workload, m.source.task_index) not in tasks
    )


def _pending_reasons(ctx: CycleContext) -> dict[str, str]:
    reasons: dict[str, str] = {}
    known = ctx.reasons
    running = _RUNNING
    for work in ctx.session.works:
        if work.state is running:
            continue
        reasons[work.spec.name] = known[work.index] or "waiting for the next cycle"
    return reasons


def _project_shares(ctx: CycleContext, demands: dict[str, Resources]) -> tuple[ProjectShare, ...]:
    shares = []
    for record in ctx.session.projects:
        spec = record.spec
        demand = demands.get(spec.name)
        if demand is None:
            demand = _department_demand(ctx, record.index, demands)
        shares.append(
            ProjectShare(
                name=spec.name,
                quota=spec.quota,
                fair_share=Resources(*record.fair_share),
                holding=Resources(*record.holding),
                demand=demand,
            )
        )
    return tuple(shares)


def _department_demand(ctx: CycleContext, index: int, demands: dict[str, Resources]) -> Resources:
    totals = [0, 0, 0]
    for child in ctx.session.projects[index].children:
        record = ctx.session.projects[child]
        child_demand = demands.get(record.name) or _department_demand(ctx, child, demands)
        totals[0] += child_demand.gpu_milli
        totals[1] += child_demand.cpu_milli
        totals[2] += child_demand.memory_mib
    return Resources(*totals)
