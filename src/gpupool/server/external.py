"""Pods someone else created for gpupool (Kubernetes: `schedulerName: gpupool`) as workloads.

Each scheduling iteration the loop hands the executor's current view of such pods to `sync`,
which keeps one workload row per pod, or per pod group (annotation `gpupool.dev/pod-group`):

- a new pod or group becomes a pending workload (`origin` kubernetes), its pods in task order
  (oldest first); a pod with a bad annotation becomes a failed workload that says why;
- while pending, the group follows its pods (more pods: more tasks; pods deleted: fewer; none
  left: the workload goes);
- a group with fewer pods than its `min-available` waits, out of the scheduler's sight, with a
  reason that says how many pods it still waits for;
- a running workload whose pods are all gone ends (its owner makes new pods, which come back as
  a new workload: that is how a Job or training operator resumes after a preemption).
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from gpupool.api.schemas import WorkloadStatus
from gpupool.core.lifecycle import NEW, WORKLOAD, WorkloadEvent
from gpupool.executors.kubernetes.objects import ExternalPod
from gpupool.server import eventlog
from gpupool.server.db import ProjectRow, TaskRow, WorkloadRow

ORIGIN = "kubernetes"
SUBMITTER = "kubernetes"
_ACTIVE = (
    WorkloadStatus.PENDING.value,
    WorkloadStatus.RUNNING.value,
    WorkloadStatus.COMPLETING.value,
    WorkloadStatus.SUSPENDED.value,
    WorkloadStatus.DELETING.value,
)
_NAME = re.compile(r"[^a-z0-9._-]+")


def pod_ref(pod: ExternalPod) -> str:
    """How a workload row names one of its pods: `namespace/name/uid`."""
    return f"{pod.namespace}/{pod.name}/{pod.uid}"


def ref_pod(ref: str) -> str:
    """`namespace/name` of a pod reference."""
    namespace, name, _ = ref.split("/", 2)
    return f"{namespace}/{name}"


def workload_name(text: str, taken: set[str], uid: str) -> str:
    """A valid, unused workload name for a pod or group name."""
    name = _NAME.sub("-", text.lower()).strip("._-") or "pod"
    if len(name) > 63:
        name = f"{name[:56].rstrip('._-')}-{hashlib.sha256(text.encode()).hexdigest()[:6]}"
    if name in taken:
        name = f"{name[:57].rstrip('._-')}-{uid[:5] or '0'}"
    return name


def sync(session: Session, pods: Sequence[ExternalPod], now_s: float) -> int:
    """Bring the external workloads in line with `pods`; returns how many rows changed."""
    project_ids = {
        name: project_id
        for project_id, name, is_department in session.execute(
            select(ProjectRow.id, ProjectRow.name, ProjectRow.is_department)
        )
        if not is_department
    }
    groups: dict[str, list[ExternalPod]] = defaultdict(list)
    for pod in pods:
        if pod.project in project_ids and not pod.terminating:
            groups[pod.workload_key].append(pod)
    rows = session.execute(
        select(
            WorkloadRow.id,
            WorkloadRow.external_key,
            WorkloadRow.status,
            WorkloadRow.pods,
            WorkloadRow.tasks,
            WorkloadRow.min_available,
            WorkloadRow.name,
            WorkloadRow.project_id,
            WorkloadRow.pending_reason,
        ).where(WorkloadRow.origin == ORIGIN, WorkloadRow.status.in_(_ACTIVE))
    ).all()
    changed = 0
    busy: set[str] = set()
    names = {pid: name for name, pid in project_ids.items()}
    for row in rows:
        key = row.external_key or ""
        busy.add(key)
        group = [p for p in groups.get(key, []) if not p.finished]
        if row.status in (WorkloadStatus.PENDING.value, WorkloadStatus.SUSPENDED.value):
            waiting = sorted((p for p in group if p.node is None), key=_order)
            if not waiting:
                project = names.get(row.project_id)
                _remove(session, row.id, row.status, row.project_id, project, row.name, now_s)
                changed += 1
                continue
            refs = [pod_ref(p) for p in waiting]
            reason = _group_reason(len(waiting), row.min_available)
            if refs != (row.pods or []) or (reason and reason != row.pending_reason):
                values: dict[str, object] = {
                    "pods": refs,
                    "tasks": len(refs),
                    "version": WorkloadRow.version + 1,
                }
                if reason:
                    values["pending_reason"] = reason
                session.execute(update(WorkloadRow).where(WorkloadRow.id == row.id).values(values))
                changed += 1
        elif row.status in (
            WorkloadStatus.RUNNING.value,
            WorkloadStatus.COMPLETING.value,
        ) and not groups.get(key):
            live = session.scalar(
                select(TaskRow.id)
                .where(TaskRow.workload_id == row.id, TaskRow.state != "done")
                .limit(1)
            )
            if live is None:
                project = names.get(row.project_id)
                _remove(session, row.id, row.status, row.project_id, project, row.name, now_s)
                changed += 1
    changed += _create(session, groups, busy, project_ids, now_s)
    return changed


def _order(pod: ExternalPod) -> tuple[str, str]:
    return (pod.created_at, pod.name)


def _group_reason(pods: int, min_available: int | None) -> str | None:
    if min_available is not None and pods < min_available:
        return (
            f"waiting for its pod group: {pods} of the {min_available} pods it needs to start "
            "together exist"
        )
    return None


def _remove(
    session: Session,
    workload_id: int,
    status: str,
    project_id: int,
    project: str | None,
    name: str,
    now_s: float,
) -> None:
    """Its pods are gone before it finished: the row goes (`vanish` in the lifecycle table)."""
    WORKLOAD.step(status, WorkloadEvent.VANISH)
    session.execute(delete(TaskRow).where(TaskRow.workload_id == workload_id))
    session.execute(delete(WorkloadRow).where(WorkloadRow.id == workload_id))
    eventlog.add(
        session,
        now_s,
        "deleted",
        "its pods are gone from Kubernetes",
        project=project,
        project_id=project_id,
        workload=name,
        workload_id=workload_id,
    )


def _create(
    session: Session,
    groups: dict[str, list[ExternalPod]],
    busy: set[str],
    project_ids: dict[str, int],
    now_s: float,
) -> int:
    """New rows for groups with waiting pods that no active row stands for, and that no
    finished row stood for either (the same pods, by uid)."""
    fresh = {
        key: sorted((p for p in pods if p.node is None and not p.finished), key=_order)
        for key, pods in groups.items()
        if key not in busy
    }
    fresh = {key: pods for key, pods in fresh.items() if pods}
    if not fresh:
        return 0
    done_uids: set[str] = set()
    keys = sorted(fresh)
    for start in range(0, len(keys), 500):
        for (refs,) in session.execute(
            select(WorkloadRow.pods).where(
                WorkloadRow.origin == ORIGIN,
                WorkloadRow.external_key.in_(keys[start : start + 500]),
            )
        ):
            done_uids.update(ref.rsplit("/", 1)[-1] for ref in refs or [])
    taken: dict[int, set[str]] = defaultdict(set)
    for project_id, name in session.execute(select(WorkloadRow.project_id, WorkloadRow.name)):
        taken[project_id].add(name)
    rows: list[dict[str, object]] = []
    events: list[dict[str, object]] = []
    for key, group in fresh.items():
        group = [p for p in group if p.uid not in done_uids]
        if not group:
            continue
        first = group[0]
        project_id = project_ids[first.project]
        name = workload_name(first.group or first.name, taken[project_id], first.uid)
        taken[project_id].add(name)
        problem = first.problem or _mismatch(group)
        birth = WorkloadEvent.REJECT if problem else WorkloadEvent.SUBMIT
        status = WORKLOAD.after(NEW, birth).value
        refs = [pod_ref(p) for p in group]
        rows.append(
            {
                "name": name,
                "project_id": project_id,
                "type": first.workload_type,
                "status": status,
                "version": 1,
                "gpu_kind": first.gpu_kind,
                "gpu_amount": first.gpu_amount,
                "gpu_limit_milli": first.gpu_limit_milli,
                "tasks": len(group),
                "min_available": first.min_available,
                "priority": first.priority,
                "preemptible": first.preemptible,
                "cpu_milli": first.cpu_milli,
                "memory_mib": first.memory_mib,
                "node_selector": {k: list(v) for k, v in first.node_selector},
                "command": list(first.command),
                "env": {},
                "duration_s": None,
                "grace_period_s": first.grace_period_s,
                "submitted_by": SUBMITTER,
                "submitted_at": now_s,
                "finished_at": now_s if problem else None,
                "pending_reason": (
                    None
                    if problem
                    else _group_reason(len(group), first.min_available)
                    or "waiting for the next scheduling cycle"
                ),
                "preemptions": 0,
                "working_dir": None,
                "image": (first.image or "")[:512] or None,
                "origin": ORIGIN,
                "external_key": key,
                "pods": refs,
                "tolerations": [asdict(t) for t in first.tolerations],
            }
        )
        where = first.namespace + "/" + (f"group {first.group}" if first.group else first.name)
        events.append(
            eventlog.event_row(
                now_s,
                "failed" if problem else "submitted",
                (
                    f"pod {where} cannot be scheduled: {problem}"
                    if problem
                    else f"from Kubernetes: {where} ({len(group)} pod(s))"
                ),
                project=first.project,
                project_id=project_id,
                workload=name,
            )
        )
    if rows:
        ids = session.scalars(
            insert(WorkloadRow).returning(WorkloadRow.id, sort_by_parameter_order=True), rows
        ).all()
        for event, workload_id in zip(events, ids, strict=True):
            event["workload_id"] = workload_id
        session.execute(eventlog.INSERT, events)
    return len(rows)


def _mismatch(group: list[ExternalPod]) -> str | None:
    """Pods of one group must ask for the same: gpupool places a gang of equal tasks."""
    first = group[0]
    shape = (first.gpu_kind, first.gpu_amount, first.gpu_limit_milli, first.cpu_milli)
    for pod in group[1:]:
        if pod.problem:
            return pod.problem
        if (pod.gpu_kind, pod.gpu_amount, pod.gpu_limit_milli, pod.cpu_milli) != shape:
            return (
                f"the pods of group {first.group} do not ask for the same resources "
                f"({first.name} and {pod.name} differ): give every pod of a group the same "
                "GPU, CPU and memory"
            )
    return None


WAITING_QUIET_S = 5.0
"""A pod of others gets its reason written once it has waited this long: the first cycles'
"waiting for the next scheduling cycle" would cost a write per pod in a burst and say nothing."""


def waiting_reasons(session: Session, now_s: float) -> dict[tuple[str, str], str]:
    """(namespace, pod) -> why it waits, for the pending workloads of others."""
    reasons: dict[tuple[str, str], str] = {}
    for refs, reason in session.execute(
        select(WorkloadRow.pods, WorkloadRow.pending_reason).where(
            WorkloadRow.origin == ORIGIN,
            WorkloadRow.status == WorkloadStatus.PENDING.value,
            WorkloadRow.submitted_at <= now_s - WAITING_QUIET_S,
            WorkloadRow.pending_reason.is_not(None),
        )
    ):
        for ref in refs or []:
            namespace, name, _ = ref.split("/", 2)
            reasons[(namespace, name)] = reason or ""
    return reasons
