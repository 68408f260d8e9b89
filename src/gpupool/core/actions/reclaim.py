"""Reclaim (G2, G4, G5): evict other projects' work to start pending work that did not fit.

Reclaim takes preemptible work of *other* projects. Each eviction must be justified at every
level of the project tree below the point where the two projects' paths part, in one of two ways:
(a) fairness: the victim's side holds more than its fair share, and the reclaimer's side does not
end above its own fair share; (b) guarantee: the same with quota instead of fair share. The
reclaimer's guard is what prevents ping-pong. Victims justified by (a) are tried first, and (b)
only if they do not make the work fit: a project taken below its fair share would reclaim in
turn, one eviction more a cycle later. Fairness alone never takes a victim's side so far below
its quota that its own work would reclaim back by guarantee (`reverse_claims`). One reclaim may
take victims of several projects, in any departments, as the victim order and the
justifications allow.

A limit is not capacity: work held back by a department's limit may still reclaim, but only from
the department's other projects (evicting them is what lowers the department's holding), under
the same justifications (a higher-priority sibling is deserved more of the department's share).
Work held back by its own project's limit reclaims nothing; only its own lower-priority work may
make room (`preempt`).

Reclaim is bounded per cycle: at most `max_reclaim_attempts_per_cycle` attempts, at most
`max_victims_per_attempt` victims tried per attempt (one-task attempts count victims node by node
instead, all attempts of the action together within a `CountBudget`), and a shape that failed for
a project is not tried again for that project in the same cycle. Reclaim also passes over a shape
that needs as much GPU and at least as much CPU and memory per task as one that failed for the
project (the same victims free no more room for it): its attempts go to work that can start.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Final

from gpupool.core.actions.allocate import pending_in_order
from gpupool.core.actions.reverse_claims import ReverseClaims
from gpupool.core.actions.victim_walk import Freeable
from gpupool.core.actions.victims import (
    Attempt,
    CountBudget,
    Reason,
    VictimUnit,
    can_be_victim,
    evict_to_place,
    victim_units,
)
from gpupool.core.context import GPU, CycleContext, format_gpu, gang_to_start
from gpupool.core.decisions import EvictionCause
from gpupool.core.session import ProjectRecord, WorkRecord, WorkState

# Enum members as module globals: reading one from its class costs ten times as much in
# Python 3.11, and the loops here read them per workload.
_RUNNING: Final = WorkState.RUNNING

_FAIR, _QUOTA = 0, 1
_order = operator.attrgetter("order")
_NOTHING_TO_RECLAIM: Final = "no over-quota work of other projects can be reclaimed to make it fit"
_BOUNDED: Final = "reclaim is bounded per cycle; it will be tried again"


def _bar(record: ProjectRecord, kind: int) -> int:
    return record.fair_share[GPU] if kind == _FAIR else record.spec.quota.gpu_milli


def _reclaimer_guards(ctx: CycleContext, work: WorkRecord, ask_gpu: int) -> dict[int, set[int]]:
    """For each tree level of the reclaimer's path, the bars it stays within once placed."""
    guards: dict[int, set[int]] = {}
    for p in ctx.session.project_path(work):
        record = ctx.session.projects[p]
        after = record.holding[GPU] + ask_gpu
        guards[p] = {kind for kind in (_FAIR, _QUOTA) if after <= _bar(record, kind)}
    return guards


def reclaim(ctx: CycleContext) -> None:
    session = ctx.session
    budget = session.settings.max_reclaim_attempts_per_cycle
    counts = CountBudget(session.settings)
    failed: dict[tuple[int, int], list[tuple[int, int]]] = {}
    """Per project and shape less its CPU and memory per task (`Session.reduced_shape`): those
    of the failed attempts."""
    failed_projects: set[int] = set()
    """The projects with an entry in `failed`: the others' work needs no shape looked up."""
    victims: list[VictimUnit] | None = None
    victim_projects: list[int] = []
    freeable: Freeable | None = None
    claims = ReverseClaims(ctx)
    waits: list[dict[int, str]] = [{} for _ in session.projects]
    """Per project, `_no_reclaim_note` by shape id (which fixes the GPU asked), for as long as
    the project holds `waits_at[project]` (its fair share and quota are the cycle's): most of
    a long queue gets one of a few notes."""
    waits_at = [-1] * len(session.projects)
    last_base: str | None = None
    last_note = last_joined = ""
    """The last `_joined(base, note)`, reused while the next work's are the same objects: a
    long queue's reasons come from a few shared strings."""
    limited = [bool(ctx.limit_levels(p)) for p in range(len(session.projects))]
    projects = session.projects
    reasons = ctx.reasons
    bounded: dict[str | None, str] = {}
    """Once the budget is spent, the reason each earlier reason becomes with the note appended
    (`_append_reason`, kept here by the earlier reason: most of the queue comes here)."""
    for work in pending_in_order(ctx):
        gang_size = gang_to_start(work)
        if not gang_size:
            continue
        project = work.project
        scope = None
        if not work.preemptible or limited[project]:
            ask = ctx.ask(work, gang_size)
            if ctx.quota_problem(work, ask) is not None:
                continue
            # A limit is lifted only by evicting work below it: at the project's own limit,
            # only its own work (preempt); at a department's, the work of the department's
            # projects.
            over = ctx.over_limit(work, ask)
            if project in over:
                continue
            if over:
                scope = over[-1]
        leaf = projects[project]
        ask_gpu = work.task_gpu_milli * gang_size
        after = leaf.holding[GPU] + ask_gpu
        if after > leaf.fair_share[GPU] and after > leaf.spec.quota.gpu_milli:
            notes = waits[project]
            if waits_at[project] != leaf.holding[GPU]:
                notes.clear()
                waits_at[project] = leaf.holding[GPU]
            shape = session.shape_id(work)
            note = notes.get(shape)
            if note is None:
                note = notes[shape] = _no_reclaim_note(leaf, ask_gpu)
            # `_append_reason`, inline
            index = work.index
            base = reasons[index]
            if base is not last_base or note is not last_note:
                last_base = base
                last_note = note
                last_joined = _joined(ctx, base, note)
            reasons[index] = last_joined
            continue
        spec = work.spec
        key = None
        if project in failed_projects:
            # A shape that failed for the project fails again, and so does one that needs as
            # much GPU and at least as much CPU and memory per task: the same victims, less
            # room.
            key = (project, session.reduced_shape(session.shape_id(work)))
            needs = failed.get(key)
            if needs is not None and _dominated(needs, spec.cpu_milli, spec.memory_mib):
                continue
        if budget <= 0 or counts.left <= 0:
            base = reasons[work.index]
            joined = bounded.get(base)
            if joined is None:
                joined = bounded[base] = _joined(ctx, base, _BOUNDED)
            reasons[work.index] = joined
            continue
        budget -= 1
        if victims is None:
            victims = _reclaim_candidates(ctx)
            victim_projects = sorted({u.work.project for u in victims})
            freeable = Freeable(ctx, dict.fromkeys(u.work for u in victims))
        path = session.project_path(work)
        guards = _reclaimer_guards(ctx, work, ask_gpu)
        inside = [
            p
            for p in victim_projects
            if p != work.project and (scope is None or scope in session.projects[p].ancestors)
        ]
        nothing = _NOTHING_TO_RECLAIM if scope is None else _nothing_below(ctx, scope)
        gang, extras = ctx.tasks_to_start(work)
        claims.held_back = -1
        attempt = _reclaim_for(
            ctx, work, gang, victims, inside, path, guards, claims, Attempt(counts, freeable)
        )
        if attempt is None:
            ctx.place_extras(work, extras)
        else:
            if key is None:
                key = (project, session.reduced_shape(session.shape_id(work)))
            # Short of devices with every victim it could count: the shape fails with any CPU
            # and memory (recorded as needing none).
            failed.setdefault(key, []).append(
                (0, 0) if attempt.short_of_devices else (spec.cpu_milli, spec.memory_mib)
            )
            failed_projects.add(project)
            if attempt.bounded:
                _append_reason(ctx, work, _BOUNDED)
            elif claims.held_back >= 0:
                _append_reason(ctx, work, _held_back_note(ctx, work, claims.held_back))
            else:
                _append_reason(ctx, work, nothing)


def _dominated(needs: list[tuple[int, int]], cpu_milli: int, memory_mib: int) -> bool:
    """Whether a failed attempt asked no more CPU and memory per task than this one."""
    return any(c <= cpu_milli and m <= memory_mib for c, m in needs)


def _reclaim_for(
    ctx: CycleContext,
    work: WorkRecord,
    gang: list[int],
    victims: list[VictimUnit],
    projects: list[int],
    path: tuple[int, ...],
    guards: dict[int, set[int]],
    claims: ReverseClaims,
    found: Attempt,
) -> Attempt | None:
    """Evict victims of `projects` to start `gang`: first only what G4's fairness bar
    justifies, so that no victim's project goes below its fair share and reclaims in turn (an
    eviction more, a cycle later); only if that does not make it fit, also what the quota bar
    justifies (a quota is a guarantee even where fairness alone cannot make room).
    Returns None once started, else `found` (whose count budget and `Freeable` each pass
    draws on), saying what the attempt found: short of devices in every pass
    (`Attempt.short_of_devices`), or stopped by the count budget in one (`Attempt.bounded`)."""
    options: tuple[tuple[int, ...], ...] = ((_FAIR,), (_FAIR, _QUOTA))
    sides: Sides = {}
    found.short_of_devices = True
    passes = [
        kinds
        for kinds in options
        if any(_justified(ctx, p, path, guards, kinds[-1:], sides) is not None for p in projects)
    ]
    for kinds in passes:
        eligible = {
            p for p in projects if _justified(ctx, p, path, guards, kinds, sides) is not None
        }
        # A project turned down once stays so until the attempt ends (`evict_to_place`):
        # once every eligible one is, the scan stops (a long victim list after the one or two
        # projects it could take from).
        attempt = Attempt(found.counts, found.freeable)
        candidates = _while_any_left(victims, eligible, attempt.turned_down)

        def justify(
            victim: WorkRecord, freed_gpu: int, kinds: tuple[int, ...] = kinds
        ) -> Reason | None:
            return _justify(ctx, victim, freed_gpu, work, path, guards, kinds, sides, claims)

        if evict_to_place(ctx, work, gang, candidates, justify, EvictionCause.RECLAIM, attempt):
            return None
        found.short_of_devices = found.short_of_devices and attempt.short_of_devices
        found.bounded = found.bounded or attempt.bounded
    found.short_of_devices = found.short_of_devices and bool(passes) and not found.bounded
    return found


def _while_any_left(
    victims: list[VictimUnit], eligible: set[int], turned_down: set[int]
) -> Iterator[VictimUnit]:
    """The running units of `eligible` projects, in victim order, until every one of them is
    `turned_down`. Victims evicted earlier in this cycle are passed over here rather than
    counted against the per-attempt bound on candidates examined."""
    for unit in victims:
        work = unit.work
        if work.project in eligible and work.state is _RUNNING:
            if len(turned_down) >= len(eligible):  # `turned_down` holds eligible ones only
                return
            yield unit


def _held_back_note(ctx: CycleContext, work: WorkRecord, victim_project: int) -> str:
    projects = ctx.session.projects
    victim = projects[victim_project]
    return (
        f"reclaiming from project {victim.name} would take it below its quota"
        f" ({format_gpu(victim.spec.quota.gpu_milli)}) and it would reclaim back, while project"
        f" {projects[work.project].name} would be above its own quota: it waits for GPUs to"
        " free up"
    )


def _nothing_below(ctx: CycleContext, department: int) -> str:
    name = ctx.session.projects[department].name
    return (
        f"no work of the other projects of department {name} can be reclaimed to make room"
        " under its limit (only preemptible work past its min runtime, of a project above its"
        " fair share or quota)"
    )


def _reclaim_candidates(ctx: CycleContext) -> list[VictimUnit]:
    """Units of work in projects above their fair share or quota, in victim order."""
    session = ctx.session
    over = {
        record.index
        for record in session.projects
        if record.holding[GPU] > min(record.fair_share[GPU], record.spec.quota.gpu_milli)
    }
    units = [
        unit
        for work in session.running_at_start
        if work.project in over and can_be_victim(session, work)
        for unit in victim_units(work)
    ]
    units.sort(key=_order)
    return units


Side = tuple[tuple[int, ...], tuple[int, ...], int, bool]
Sides = dict[int, Side]
"""Per victim project, for one reclaimer: (the victim's levels from where the two paths part,
the bars the reclaimer's side stays within there, that first level, whether the reclaimer's side
ends above its quota at every level there: the victim's side could then reclaim back by
guarantee, `ReverseClaims`)."""


def _sides(
    ctx: CycleContext,
    victim_project: int,
    reclaimer_path: tuple[int, ...],
    guards: dict[int, set[int]],
) -> Side:
    victim_path = ctx.session.projects[victim_project].ancestors
    split = 0
    while (
        split < len(victim_path)
        and split < len(reclaimer_path)
        and victim_path[split] == reclaimer_path[split]
    ):
        split += 1
    side = reclaimer_path[split:]
    allowed = tuple(kind for kind in (_FAIR, _QUOTA) if all(kind in guards[p] for p in side))
    reverse = all(_QUOTA not in guards[p] for p in side)
    return victim_path[split:], allowed, split, reverse


def _justified(
    ctx: CycleContext,
    victim_project: int,
    reclaimer_path: tuple[int, ...],
    guards: dict[int, set[int]],
    kinds: tuple[int, ...],
    sides: Sides,
    victim: WorkRecord | None = None,
    freed_gpu: int = 0,
    claims: ReverseClaims | None = None,
) -> tuple[int, int] | None:
    """(the first of `kinds` that justifies evicting work of `victim_project` now, the level
    below the point where the two paths part), or None. The reclaimer's side is fixed for an
    attempt (`sides` keeps it per victim project); the victim's side is read live. With a
    `victim` freeing `freed_gpu`, fairness does not justify an eviction that would let the
    victim's side reclaim back by guarantee (`ReverseClaims`); without one, whether the project
    could give anything at all."""
    side = sides.get(victim_project)
    if side is None:
        side = sides[victim_project] = _sides(ctx, victim_project, reclaimer_path, guards)
    below, allowed, split, reverse = side
    projects = ctx.session.projects
    for kind in kinds:
        if kind not in allowed:
            continue
        for p in below:  # every level holds more than its bar (`_bar`, inline)
            record = projects[p]
            bar = record.fair_share[GPU] if kind == _FAIR else record.spec.quota.gpu_milli
            if record.holding[GPU] <= bar:
                break
        else:
            if (
                kind == _FAIR
                and reverse
                and victim is not None
                and claims is not None
                and claims.opens_claim(below, freed_gpu, victim)
            ):
                continue
            return kind, projects[victim_project].ancestors[split]
    return None


def _justify(
    ctx: CycleContext,
    victim: WorkRecord,
    freed_gpu: int,
    work: WorkRecord,
    reclaimer_path: tuple[int, ...],
    guards: dict[int, set[int]],
    kinds: tuple[int, ...],
    sides: Sides,
    claims: ReverseClaims,
) -> Reason | None:
    found = _justified(
        ctx, victim.project, reclaimer_path, guards, kinds, sides, victim, freed_gpu, claims
    )
    if found is None:
        return None
    claims.taken(victim)
    kind, level = found
    record = ctx.session.projects[level]
    holding = record.holding[GPU]
    bar_amount = _bar(record, kind)

    def reason() -> str:
        session = ctx.session
        bar = "fair share" if kind == _FAIR else "quota"
        return (
            f"{_kind(ctx, record)} {record.name} holds {format_gpu(holding)},"
            f" above its {bar} of {format_gpu(bar_amount)}; reclaimed for"
            f" {work.name} of project {session.projects[work.project].name}"
        )

    return reason


def _kind(ctx: CycleContext, record: ProjectRecord) -> str:
    return "department" if record.children else "project"


def _no_reclaim_note(leaf: ProjectRecord, ask_gpu: int) -> str:
    return (
        f"project {leaf.name} would hold {format_gpu(leaf.holding[GPU] + ask_gpu)}, above both"
        f" its fair share ({format_gpu(leaf.fair_share[GPU])}) and its quota"
        f" ({format_gpu(leaf.spec.quota.gpu_milli)}), so it waits for GPUs to free up"
    )


def _append_reason(ctx: CycleContext, work: WorkRecord, note: str) -> None:
    ctx.reasons[work.index] = _joined(ctx, ctx.reasons[work.index], note)


def _joined(ctx: CycleContext, base: str | None, note: str) -> str:
    """`base` with `note` appended (just `note` if there is no `base`)."""
    if base is None:
        return note
    # Most of a long queue appends one of a few notes to one of a few reasons: the outcome is
    # kept by the pair (the same text, found without searching the reason again).
    joined = ctx.joined_reasons.get((base, note))
    if joined is None:
        joined = ctx.joined_reasons[(base, note)] = base if note in base else f"{base}; {note}"
    return joined
