"""Preempt (G6): evict lower-priority preemptible work of the *same* project to start pending
work that did not fit; priority never crosses projects.

Bounded per cycle like reclaim: at most `max_reclaim_attempts_per_cycle` attempts, victims
counted within a `CountBudget`, and a (priority, shape) that failed for a project is not tried
again in the same cycle.
"""

from __future__ import annotations

import bisect
import operator

from gpupool.core.actions.allocate import pending_in_order
from gpupool.core.actions.victims import (
    Attempt,
    CountBudget,
    Reason,
    VictimUnit,
    can_be_victim,
    evict_to_place,
    victim_units,
)
from gpupool.core.context import CycleContext, gang_to_start
from gpupool.core.decisions import EvictionCause
from gpupool.core.session import WorkRecord

_order = operator.attrgetter("order")


def preempt(ctx: CycleContext) -> None:
    """G6. Victim order sorts by priority first, so lower-priority candidates are a prefix."""
    session = ctx.session
    budget = session.settings.max_reclaim_attempts_per_cycle
    counts = CountBudget(session.settings)
    failed: set[tuple[int, int, int]] = set()
    """(project, priority, shape id) of the attempts that found too little to evict."""
    by_project: dict[int, tuple[list[VictimUnit], list[int]]] | None = None
    lowest: dict[int, int] = {}
    """Per project with candidates: the lowest priority among them (most pending work is at
    or below it, and is passed over before anything else is looked up)."""
    for work in pending_in_order(ctx):
        if budget <= 0 or counts.left <= 0:
            return
        if by_project is None:
            if not gang_to_start(work):
                continue
            by_project = _candidates_by_project(ctx)
            lowest = {p: priorities[0] for p, (_units, priorities) in by_project.items()}
        floor = lowest.get(work.project)
        if floor is None or floor >= work.priority:
            continue  # no candidate of lower priority: `cut` below would be 0
        gang_size = gang_to_start(work)
        if not gang_size:
            continue
        units, priorities = by_project[work.project]
        cut = bisect.bisect_left(priorities, work.priority)
        key = (work.project, work.priority, session.shape_id(work))
        # Limits are checked once the victims are out (in `evict_to_place`): evicting the
        # project's own work lowers its holding, so a project at its limit may still preempt.
        if key in failed or ctx.quota_problem(work, ctx.ask(work, gang_size)) is not None:
            continue
        budget -= 1
        gang, extras = ctx.tasks_to_start(work)

        def justify(victim: WorkRecord, _freed_gpu: int, work: WorkRecord = work) -> Reason | None:
            def reason() -> str:
                return (
                    f"priority {victim.priority} yields to {work.name} of priority"
                    f" {work.priority} in the same project"
                )

            return reason

        attempt = Attempt(counts)
        if evict_to_place(ctx, work, gang, units[:cut], justify, EvictionCause.PREEMPT, attempt):
            ctx.place_extras(work, extras)
        elif not attempt.bounded:
            failed.add(key)


def _candidates_by_project(ctx: CycleContext) -> dict[int, tuple[list[VictimUnit], list[int]]]:
    """Per project: its victim units in victim order, and their priorities (ascending)."""
    session = ctx.session
    units: dict[int, list[VictimUnit]] = {}
    for work in session.running_at_start:
        if can_be_victim(session, work):
            units.setdefault(work.project, []).extend(victim_units(work))
    result: dict[int, tuple[list[VictimUnit], list[int]]] = {}
    for project, project_units in units.items():
        project_units.sort(key=_order)
        result[project] = (project_units, [u.order[0] for u in project_units])
    return result
