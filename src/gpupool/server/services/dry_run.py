"""`submit --dry-run`: where a submission would run now, or why it would wait.

The submission is checked exactly as a real one (same validation, same permissions, same name
rule) and then handed, with the current snapshot, to the same pure core the scheduling loop
runs: one cycle, nothing stored, nothing started. The answer is the core's own: the placement
it would bind, the workloads it would preempt for it, or its pending reason. It is "now": the
loop's next cycle may differ if anything changes meanwhile.
"""

from __future__ import annotations

import dataclasses

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.api.schemas import DryRunOut, PlacementOut, WorkloadIn
from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import Bind, Evict
from gpupool.core.model import SchedulerSettings
from gpupool.server.auth import Principal
from gpupool.server.db import ProjectRow, WorkloadRow
from gpupool.server.services.feasibility import ClusterNodes
from gpupool.server.services.workloads import workload_values
from gpupool.server.snapshot import WorkloadColumns, build_snapshot, core_name, core_workload

LAST_IN_LINE = 2**62
"""The submission's place in first-come order: after everything already submitted."""


def dry_run(
    session: Session, body: WorkloadIn, who: Principal, now_s: float, settings: SchedulerSettings
) -> DryRunOut:
    project = session.execute(
        select(ProjectRow.id, ProjectRow.name, ProjectRow.is_department).where(
            ProjectRow.name == body.project
        )
    ).one_or_none()
    taken: dict[tuple[int, str], str] = {}
    if project is not None:
        status = session.scalar(
            select(WorkloadRow.status).where(
                WorkloadRow.project_id == project.id, WorkloadRow.name == body.name
            )
        )
        if status is not None:
            taken[(project.id, body.name)] = status
    values = workload_values(body, who, project, taken, now_s, ClusterNodes.load(session))
    columns = {f.name for f in dataclasses.fields(WorkloadColumns)}
    given = {key: value for key, value in values.items() if key in columns}
    row = WorkloadColumns(**(given | {"id": LAST_IN_LINE, "started_at": None}))
    built = build_snapshot(session, now_s, settings)
    snapshot = built.snapshot
    candidate = core_workload(row, body.project)
    snapshot = dataclasses.replace(snapshot, workloads=(*snapshot.workloads, candidate))
    result = run_cycle(snapshot)
    name = core_name(body.project, body.name)
    placements = [
        PlacementOut(task_index=p.task_index, node=p.node, devices=list(p.devices))
        for decision in result.decisions
        if isinstance(decision, Bind) and decision.workload == name
        for p in decision.placements
    ]
    victims = [
        decision.workload
        for decision in result.decisions
        if isinstance(decision, Evict) and decision.for_workload == name
    ]
    visible = sorted(v for v in victims if who.may_use(built.keys[v].project))
    hidden = len(victims) - len(visible)
    if placements:
        where = ", ".join(
            f"{p.node} (GPU {','.join(map(str, p.devices)) or '-'})" for p in placements
        )
        reason = f"would start now on {where}"
        if victims:
            named = visible + ([f"{hidden} of other projects"] if hidden else [])
            reason += f", after preempting {len(victims)} workload(s): {', '.join(named)}"
    elif victims:
        reason = f"would preempt {len(victims)} workload(s) and start once they have stopped"
    else:
        reason = f"would wait: {result.pending_reasons.get(name, 'not scheduled this cycle')}"
    return DryRunOut(
        project=body.project,
        name=body.name,
        would_start=bool(placements),
        placements=placements,
        preempts=len(victims),
        preempts_visible=visible,
        reason=reason,
    )
