"""Departments and projects: create, change, delete when empty; quota warnings."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from gpupool.api.schemas import (
    Amounts,
    AmountsIn,
    DepartmentIn,
    ProjectIn,
    ProjectOut,
    ProjectPatch,
    WorkloadStatus,
)
from gpupool.core.decisions import ProjectShare
from gpupool.core.lifecycle import WORKLOAD, WorkloadEvent
from gpupool.core.model import Resources
from gpupool.server import eventlog
from gpupool.server.db import MembershipRow, NodeRow, ProjectRow, WorkloadRow
from gpupool.server.errors import ApiError, conflict, invalid, not_found
from gpupool.units import format_gpu_milli

LIVE_STATUSES = tuple(
    s.value for s in WorkloadStatus if not WORKLOAD.allows(s, WorkloadEvent.PURGE)
)
"""Workloads that keep their project from being deleted: all but the finished ones (the
lifecycle table's `purge`). Completing counts: its tasks still run."""


def _kind(is_department: bool) -> str:
    return "department" if is_department else "project"


def get_row(session: Session, name: str, is_department: bool | None = None) -> ProjectRow:
    row = session.execute(select(ProjectRow).where(ProjectRow.name == name)).scalar_one_or_none()
    if row is None or (is_department is not None and row.is_department != is_department):
        what = _kind(bool(is_department))
        raise not_found(what, name, f"list them with gpupool {what}s")
    return row


def _settings(row: ProjectRow) -> dict[str, str]:
    """What an admin sets on a project, as the audit log writes it."""
    limited = row.has_limit
    limit = {
        "limit gpu": _milli(row.limit_gpu_milli if limited else None),
        "limit cpu": _milli(row.limit_cpu_milli if limited else None),
        "limit memory": _mib(row.limit_memory_mib if limited else None),
    }
    return {
        "department": row.parent.name if row.parent is not None else "none",
        "quota gpu": _milli(row.quota_gpu_milli),
        "quota cpu": _milli(row.quota_cpu_milli),
        "quota memory": _mib(row.quota_memory_mib),
        **limit,
        "over-quota weight": str(row.over_quota_weight),
        "priority": str(row.priority),
        "min runtime": f"{row.min_runtime_s} s",
    }


def _milli(milli: int | None) -> str:
    return "none" if milli is None else format_gpu_milli(milli)


def _mib(mib: int | None) -> str:
    return "none" if mib is None else f"{mib} MiB"


def _audit(
    session: Session, row: ProjectRow, change: str, message: str, now_s: float, actor: str
) -> None:
    """`project-created` and the like: seen by admins and by the project's members."""
    eventlog.add(
        session,
        now_s,
        f"{_kind(row.is_department)}-{change}",
        f"{change} by {actor}: {message}",
        project=row.name,
        project_id=row.id,
        actor=actor,
    )


def create(
    session: Session,
    body: ProjectIn | DepartmentIn,
    now_s: float,
    shares: ShareMap,
    actor: str,
) -> ProjectOut:
    is_department = isinstance(body, DepartmentIn)
    existing = session.execute(
        select(ProjectRow.is_department).where(ProjectRow.name == body.name)
    ).scalar_one_or_none()
    if existing is not None:
        raise conflict(
            f"a {_kind(existing)} named {body.name!r} already exists: project and department "
            "names are unique together; pick another name",
            "name",
        )
    parent: ProjectRow | None = None
    if isinstance(body, ProjectIn) and body.department is not None:
        parent = session.execute(
            select(ProjectRow).where(ProjectRow.name == body.department)
        ).scalar_one_or_none()
        if parent is None or not parent.is_department:
            raise invalid(
                f"department {body.department!r} does not exist: create it first "
                "(gpupool department create) or leave department out",
                "department",
            )
    row = ProjectRow(
        name=body.name,
        is_department=is_department,
        parent_id=parent.id if parent else None,
        over_quota_weight=body.over_quota_weight,
        priority=body.priority,
        min_runtime_s=0 if isinstance(body, DepartmentIn) else body.min_runtime_s,
        created_at=now_s,
    )
    _set_quota(row, body.quota)
    _set_limit(row, body.limit)
    session.add(row)
    session.flush()
    settings = ", ".join(f"{key} {value}" for key, value in _settings(row).items())
    _audit(session, row, "created", settings, now_s, actor)
    return view(session, row, shares, warnings=quota_warnings(session, row))


def update(
    session: Session,
    row: ProjectRow,
    body: ProjectPatch,
    shares: ShareMap,
    now_s: float,
    actor: str,
) -> ProjectOut:
    before = _settings(row)
    if body.quota is not None:
        _set_quota(row, body.quota)
    if "limit" in body.model_fields_set:
        _set_limit(row, body.limit)
    if body.over_quota_weight is not None:
        row.over_quota_weight = body.over_quota_weight
    if body.priority is not None:
        row.priority = body.priority
    if body.min_runtime_s is not None:
        if row.is_department:
            raise invalid("min_runtime_s is set per project, not per department", "min_runtime_s")
        row.min_runtime_s = body.min_runtime_s
    session.flush()
    after = _settings(row)
    changed = [
        f"{key} {before[key]} -> {value}" for key, value in after.items() if before[key] != value
    ]
    _audit(session, row, "updated", ", ".join(changed) or "nothing changed", now_s, actor)
    return view(session, row, shares, warnings=quota_warnings(session, row))


def remove(session: Session, row: ProjectRow, now_s: float, actor: str) -> None:
    if row.is_department:
        children = session.scalar(
            select(func.count()).select_from(ProjectRow).where(ProjectRow.parent_id == row.id)
        )
        if children:
            raise conflict(
                f"department {row.name!r} still has {children} project(s): delete or move "
                "them first"
            )
    else:
        live = session.scalar(
            select(func.count())
            .select_from(WorkloadRow)
            .where(WorkloadRow.project_id == row.id, WorkloadRow.status.in_(LIVE_STATUSES))
        )
        if live:
            raise conflict(
                f"project {row.name!r} still has {live} workload(s) that are not finished: "
                "delete them first (gpupool delete NAME --project " + row.name + ")"
            )
        session.execute(delete(WorkloadRow).where(WorkloadRow.project_id == row.id))
        session.execute(delete(MembershipRow).where(MembershipRow.project_id == row.id))
    _audit(session, row, "deleted", f"its events stay under id {row.id}", now_s, actor)
    session.delete(row)


def quota_warnings(session: Session, row: ProjectRow) -> list[str]:
    """What an admin should know about this quota: the contract allows quotas to add up to more
    than their department's, or than the cluster; both mean not everyone gets theirs at once."""
    department = row if row.is_department else row.parent
    warnings = []
    if department is not None:
        children = session.scalars(select(ProjectRow).where(ProjectRow.parent_id == department.id))
        total = sum(child.quota_gpu_milli for child in children)
        warnings += _department_warning(department, total)
    return warnings + capacity_warnings(session)


def _department_warning(department: ProjectRow, children_milli: int) -> list[str]:
    if children_milli <= department.quota_gpu_milli:
        return []
    return [
        f"the projects of department {department.name!r} have quotas adding up to "
        f"{format_gpu_milli(children_milli)} GPUs, more than its quota of "
        f"{format_gpu_milli(department.quota_gpu_milli)}: they cannot all get their quota "
        "at once"
    ]


def capacity_warnings(session: Session) -> list[str]:
    """Guaranteed quotas (departments and projects outside one) above the ready nodes' GPUs."""
    devices = session.scalar(
        select(func.coalesce(func.sum(NodeRow.gpu_count), 0)).where(NodeRow.state == "ready")
    )
    guaranteed = session.scalar(
        select(func.coalesce(func.sum(ProjectRow.quota_gpu_milli), 0)).where(
            ProjectRow.parent_id.is_(None)
        )
    )
    capacity_milli = int(devices or 0) * 1000
    if not capacity_milli or int(guaranteed or 0) <= capacity_milli:
        return []  # no ready node yet: nothing to compare with
    return [
        f"guaranteed quotas add up to {format_gpu_milli(int(guaranteed or 0))} GPUs, more than "
        f"the {format_gpu_milli(capacity_milli)} GPUs of the cluster's ready nodes: not every "
        "project can have its quota at once; lower quotas (gpupool project set NAME --quota-gpu N) "
        "or add nodes"
    ]


ShareMap = Mapping[str, ProjectShare]


def _amounts(resources: Resources) -> Amounts:
    return Amounts(
        gpu_milli=resources.gpu_milli,
        cpu_milli=resources.cpu_milli,
        memory_mib=resources.memory_mib,
    )


def view(
    session: Session, row: ProjectRow, shares: ShareMap, warnings: list[str] | None = None
) -> ProjectOut:
    share = shares.get(row.name)
    return ProjectOut(
        name=row.name,
        kind=_kind(row.is_department),
        department=row.parent.name if row.parent else None,
        quota=Amounts(
            gpu_milli=row.quota_gpu_milli,
            cpu_milli=row.quota_cpu_milli,
            memory_mib=row.quota_memory_mib,
        ),
        over_quota_weight=row.over_quota_weight,
        limit=(
            Amounts(
                gpu_milli=row.limit_gpu_milli,
                cpu_milli=row.limit_cpu_milli,
                memory_mib=row.limit_memory_mib,
            )
            if row.has_limit
            else None
        ),
        priority=row.priority,
        min_runtime_s=row.min_runtime_s,
        fair_share=_amounts(share.fair_share) if share else None,
        holding=_amounts(share.holding) if share else None,
        demand=_amounts(share.demand) if share else None,
        warnings=warnings or [],
    )


def list_views(session: Session, is_department: bool, shares: ShareMap) -> list[ProjectOut]:
    rows = session.scalars(
        select(ProjectRow)
        .where(ProjectRow.is_department == is_department)
        .order_by(ProjectRow.name)
    ).all()
    cluster = capacity_warnings(session)
    children: dict[int | None, int] = {}
    for parent_id, quota_milli in session.execute(
        select(ProjectRow.parent_id, ProjectRow.quota_gpu_milli).where(
            ProjectRow.parent_id.is_not(None)
        )
    ):
        children[parent_id] = children.get(parent_id, 0) + quota_milli
    out = []
    for row in rows:
        department = row if row.is_department else row.parent
        warnings = (
            []
            if department is None
            else _department_warning(department, children.get(department.id, 0))
        )
        out.append(view(session, row, shares, warnings=warnings + cluster))
    return out


def _set_quota(row: ProjectRow, quota: AmountsIn) -> None:
    row.quota_gpu_milli = quota.gpu_milli or 0
    row.quota_cpu_milli = quota.cpu_milli or 0
    row.quota_memory_mib = quota.memory_mib or 0


def _set_limit(row: ProjectRow, limit: AmountsIn | None) -> None:
    row.has_limit = limit is not None
    row.limit_gpu_milli = limit.gpu_milli if limit else None
    row.limit_cpu_milli = limit.cpu_milli if limit else None
    row.limit_memory_mib = limit.memory_mib if limit else None
    if limit is not None and limit.gpu_milli is not None and limit.gpu_milli < row.quota_gpu_milli:
        raise ApiError(
            422,
            f"limit gpu ({format_gpu_milli(limit.gpu_milli)}) is below the quota "
            f"({format_gpu_milli(row.quota_gpu_milli)}): a limit caps use above the quota; "
            "raise the limit or lower the quota",
            "limit.gpu",
        )
