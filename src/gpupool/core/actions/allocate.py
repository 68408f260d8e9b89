"""Allocate: start pending work in the capacity that is idle now (G11).

Projects take turns, the one furthest below its fair share (holding / fair share) first; inside a
project, pending workloads go by priority, then submission. A workload that does not fit does not
block the ones behind it. Within one allocate pass capacity only shrinks, so a shape (request,
gang size, CPU, memory, selector, tolerations) that failed once fails again: later workloads of
that shape are answered from a cache, which keeps a long queue cheap.
"""

from __future__ import annotations

import heapq
import operator
from typing import Final

from gpupool.core.context import GPU, CycleContext
from gpupool.core.model import GpuRequestKind
from gpupool.core.session import Statement, WorkRecord, WorkState

# Enum members as module globals: reading one from its class costs ten times as much in
# Python 3.11, and the loops here read them per workload.
_WHOLE: Final = GpuRequestKind.WHOLE
_FRACTION: Final = GpuRequestKind.FRACTION
_MEMORY: Final = GpuRequestKind.MEMORY
_PENDING: Final = WorkState.PENDING
_RUNNING: Final = WorkState.RUNNING

_FITS: Final = "fits in idle capacity"
_ONE_TASK = [0]
"""The gang of a one-task workload, for the pending reason (read, never changed)."""


_NO_SHARE: Final = float("inf")


def share_ratio(ctx: CycleContext, project: int) -> float:
    """Holding / fair share on GPU; used only to order projects, never to admit work."""
    record = ctx.session.projects[project]
    share = record.fair_share[GPU]
    if share <= 0:
        return _NO_SHARE
    return record.holding[GPU] / share


_submit_seq = operator.attrgetter("submit_seq")
_priority = operator.attrgetter("priority")


def queues_by_project(ctx: CycleContext) -> dict[int, list[WorkRecord]]:
    """Work waiting to start tasks, per project, by priority then submission."""
    queues: dict[int, list[WorkRecord]] = {}
    for work in ctx.session.works:
        if work.state is _PENDING or (
            work.state is _RUNNING and len(work.allocs) < work.spec.tasks
        ):
            queue = queues.get(work.project)
            if queue is None:  # not `setdefault`, which would build a list per work
                queue = queues[work.project] = []
            queue.append(work)
    return sorted_queues(queues)


def sorted_queues(queues: dict[int, list[WorkRecord]]) -> dict[int, list[WorkRecord]]:
    """`queues`, each sorted in place by priority then submission."""
    for queue in queues.values():
        # (-priority, submission) in two stable passes with C-level keys: by submission, then
        # by priority, highest first (a reverse sort keeps equal keys in their order).
        queue.sort(key=_submit_seq)
        queue.sort(key=_priority, reverse=True)
    return queues


def allocate(ctx: CycleContext) -> None:
    """The cycle's first action: its queues are those of the session's start."""
    queues = ctx.queues = sorted_queues(ctx.session.queues_at_start)
    projects = ctx.session.projects
    cursor = dict.fromkeys(queues, 0)
    heap = [(share_ratio(ctx, p), projects[p].name, p) for p in queues]
    heapq.heapify(heap)
    failed: dict[int, str] = {}
    """Per shape id (`Session.shape_id`): why the first work of that shape did not fit."""
    reasons = ctx.reasons
    unlimited = [not ctx.limit_levels(p) for p in range(len(projects))]
    memory = _MEMORY
    placer = ctx.placer
    session = ctx.session  # their methods called on them: a bound method is a boxed call compiled
    while heap:
        _, name, project = heap[0]
        queue = queues[project]
        position = cursor[project]
        end = len(queue)
        answered = False
        """Whether the project's queue ended in work answered from the failed shapes."""
        single = False
        """Whether the loop stopped at a one-task workload of the common case, not answered."""
        while True:
            # The project's queue in a row for as long as its work is answered from the failed
            # shapes: nothing changes then, so its share ratio neither, and it stays first.
            # Only the record is read until the work is tried (its spec is another object,
            # and in a long queue every object read is a cache miss).
            work = queue[position]
            position += 1
            more = position < end
            if work.allocs:
                break
            # Inline: nothing placed yet, so `try_allocate` would check the policy (where one
            # could hold it back) and then ask the failed-shape cache.
            gang = work.gang
            if not gang:
                break
            key = work.shape
            if key < 0:
                key = session.shape_id(work)
            cached = failed.get(key)
            common = work.preemptible and unlimited[project]
            """No policy that could hold it back (the common case)."""
            if cached is None:
                spec = work.spec
                single = common and spec.tasks == 1 and spec.gpu.kind is not memory
                break
            if common:
                reasons[work.index] = cached
            else:  # `try_allocate`'s policy check comes first, and its reason wins
                problem = ctx.policy_problem(work, gang)
                if problem is None:
                    reasons[work.index] = cached
                else:
                    reasons[work.index] = problem
                    if ctx.quota_problem(work, ctx.ask(work, gang)) is not None:
                        ctx.policy_blocked.add(work.index)
            if not more:
                answered = True
                break
        cursor[project] = position
        if answered:
            heapq.heappop(heap)
            continue
        if single:
            # `try_allocate` for the common case, whose checks the loop above has made: one
            # task, nothing placed, no policy that could hold it back, an exact GPU charge
            # (no headroom to pass, nothing to check after placing), a shape not failed yet.
            # A single placement needs no statement: it is the only change, made or not.
            alloc = placer.find(work.spec, 0, None, None)
            if alloc is None:
                reason = ctx.capacity_reason(work, _ONE_TASK)
                reasons[work.index] = failed[key] = reason  # `key` is set when `single`
            else:
                session._add_alloc(work, alloc)
                ctx.mark_started(work, _FITS)
        else:
            try_allocate(ctx, work, failed)
        if more:
            record = projects[project]  # `share_ratio(ctx, project)`, inline
            share = record.fair_share[GPU]
            ratio = record.holding[GPU] / share if share > 0 else _NO_SHARE
            heapq.heapreplace(heap, (ratio, name, project))
        else:
            heapq.heappop(heap)


def try_allocate(ctx: CycleContext, work: WorkRecord, failed: dict[int, str]) -> bool:
    gang, extras = ctx.tasks_to_start(work)
    if not gang:
        if extras:
            ctx.place_extras(work, extras)
        return True
    problem = ctx.policy_problem(work, len(gang))
    if problem is not None:
        ctx.reasons[work.index] = problem
        if ctx.quota_problem(work, ctx.ask(work, len(gang))) is not None:
            ctx.policy_blocked.add(work.index)
        return False
    # A GPU-memory request's shape is its project's (`Session.shape_id`): its charge, hence
    # whether its project's headroom admits it, depends on the device, so a failure says
    # something about this project only (whose headroom only shrinks here).
    key = ctx.session.shape_id(work)
    cached = failed.get(key)
    if cached is not None:
        ctx.reasons[work.index] = cached
        return False
    statement = Statement(ctx.session)
    if not ctx.place_tasks(statement, work, gang):
        statement.rollback()
        reason = ctx.capacity_reason(work, gang)
        failed[key] = reason
        ctx.reasons[work.index] = reason
        return False
    statement.commit()
    ctx.mark_started(work, _FITS)
    if extras:
        ctx.place_extras(work, extras)
    return True


def pending_in_order(ctx: CycleContext) -> list[WorkRecord]:
    """Pending work that evictions could help (G3 holds none of it back), in reclaim order."""
    blocked = ctx.policy_blocked
    queues = ctx.queues if ctx.queues is not None else queues_by_project(ctx)
    # Each queue is already in (priority, submission) order, ties in workload order: sort the
    # projects by ratio and merge only the queues of projects whose ratios are equal.
    by_ratio: dict[float, list[int]] = {}
    for project in queues:
        by_ratio.setdefault(share_ratio(ctx, project), []).append(project)
    pending_state = _PENDING
    pending: list[WorkRecord] = []
    for ratio in sorted(by_ratio):
        projects = by_ratio[ratio]
        waiting = [
            w
            for p in projects
            for w in queues[p]
            if w.state is pending_state and w.index not in blocked
        ]
        if len(projects) > 1:
            waiting.sort(key=lambda w: (-w.priority, w.submit_seq, w.index))
        pending.extend(waiting)
    return pending
