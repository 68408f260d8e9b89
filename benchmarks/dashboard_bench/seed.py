"""Seeding the database: projects, users, nodes, workloads, tasks and events, through the
server's own services and Core bulk inserts; the simulated executor's journal."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, insert, select

from gpupool.api.schemas import (
    DepartmentIn,
    ProjectIn,
    Role,
    TaskState,
    UserIn,
    WorkloadStatus,
)
from gpupool.executors.base import Launch
from gpupool.executors.simulated import SIM_UTILIZATION_ENV, parse_simulated_nodes
from gpupool.server.db import (
    EventRow,
    ProjectRow,
    TaskRow,
    WorkloadRow,
    make_sessionmakers,
)
from gpupool.server.services import cluster as cluster_service
from gpupool.server.services import projects as project_service
from gpupool.server.services import users as user_service

from .common import RESEARCHER
from .plan import Plan, ProjectPlan, TaskPlan, WorkloadPlan


def seed_state(engine: Engine, data_dir: Path, plan_: Plan) -> tuple[str, str]:
    """Projects, users, nodes, workloads, tasks, events; the simulated executor's journal.
    Returns (admin token, researcher token)."""
    config, now_s = plan_.config, plan_.now_s
    writer, _ = make_sessionmakers(engine)
    with writer.begin() as session:
        token_file = user_service.bootstrap_admin(session, data_dir, now_s)
        assert token_file is not None, "the database must be empty"
        admin_token = token_file.read_text(encoding="utf-8").strip()
        for department in sorted({p.department for p in plan_.projects if p.department}):
            quota = sum(p.quota_gpus for p in plan_.projects if p.department == department)
            project_service.create(
                session,
                DepartmentIn.model_validate({"name": department, "quota": {"gpu": quota}}),
                now_s,
                {},
                "admin",
            )
        for project in plan_.projects:
            body = ProjectIn.model_validate(
                {
                    "name": project.name,
                    "department": project.department,
                    "quota": {"gpu": project.quota_gpus},
                }
            )
            project_service.create(session, body, now_s, {}, "admin")
        ids = dict(session.execute(select(ProjectRow.name, ProjectRow.id)).all())
        for project in plan_.projects:
            project.id = ids[project.name]
        memberships: dict[str, list[str]] = {user: [] for user in plan_.users}
        for project in plan_.projects:
            for member in project.members:
                memberships[member].append(project.name)
        for user in plan_.users:
            user_service.create(
                session, UserIn(name=user, projects=memberships[user]), now_s, "admin"
            )
        # The measured researcher: a member of three projects (the biggest, a middle one and
        # one without quota when there is one), as a typical user is.
        ranked = sorted(plan_.projects, key=lambda p: -p.quota_gpus)
        chosen = {ranked[0].name, ranked[len(ranked) // 2].name, ranked[-1].name}
        user_service.create(
            session,
            UserIn(name=RESEARCHER, role=Role.RESEARCHER, projects=sorted(chosen)),
            now_s,
            "admin",
        )
        row = user_service.get_row(session, RESEARCHER)
        researcher_token = user_service.issue_token(session, row, "benchmark", now_s, "admin").token
        for node in parse_simulated_nodes(f"{config.nodes}x{config.gpus_per_node}"):
            cluster_service.register(session, node, "simulated", now_s)

    workload_rows: list[dict[str, Any]] = []
    task_rows: list[dict[str, Any]] = []
    event_rows: list[dict[str, Any]] = []
    journal: list[str] = []
    names = plan_.node_names
    launch_serial = itertools.count(1)
    for index, w in enumerate(plan_.workloads):
        project = plan_.projects[w.project]
        workload_rows.append(
            {
                "id": index + 1,
                "name": w.name,
                "project_id": project.id,
                "type": w.type,
                "status": w.status,
                "version": 1 + 2 * w.preemptions + (w.started_at is not None),
                "gpu_kind": w.gpu_kind,
                "gpu_amount": w.gpu_amount,
                "gpu_limit_milli": None,
                "tasks": w.tasks,
                "min_available": None,
                "priority": None,
                "preemptible": None,
                "cpu_milli": 4000 * w.devices_per_task,
                "memory_mib": 32768 * w.devices_per_task,
                "node_selector": {},
                "command": ["python", "train.py"] if w.type == "train" else ["python", "app.py"],
                "env": _env(w, project),
                "duration_s": None,
                "grace_period_s": 30,
                "submitted_by": w.submitted_by,
                "submitted_at": w.submitted_at,
                "started_at": w.started_at,
                "finished_at": w.finished_at,
                "pending_reason": w.pending_reason,
                "preemptions": w.preemptions,
                "working_dir": None,
                "image": None,
                "origin": "api",
                "external_key": None,
                "pods": None,
                "tolerations": [],
            }
        )
        event_rows.append(_event_row(w.submitted_at, "submitted", project.name, w, None))
        running = w.status == WorkloadStatus.RUNNING.value
        if w.started_at is not None:
            event_rows.append(_event_row(w.started_at, "bound", project.name, w, None))
            placements = (
                w.placements
                or [
                    TaskPlan(
                        random.Random(index).randrange(config.nodes),
                        tuple(range(w.devices_per_task)),
                    )
                ]
                * w.tasks
            )
            for task_index, placement in enumerate(placements):
                launch_id = f"seed{next(launch_serial):012x}"
                failed = w.status == WorkloadStatus.FAILED.value
                task_rows.append(
                    {
                        "launch_id": launch_id,
                        "workload_id": index + 1,
                        "task_index": task_index,
                        "node": names[placement.node],
                        "devices": list(placement.devices),
                        "burst_device": None,
                        "state": TaskState.RUNNING.value if running else TaskState.DONE.value,
                        "stop_requested_at": None,
                        "created_at": w.started_at,
                        "started_at": w.started_at,
                        "finished_at": w.finished_at,
                        "exit_code": None if running else (1 if failed else 0),
                        "reason": None if running else ("exit code 1" if failed else "completed"),
                    }
                )
                if running:
                    launch = Launch(
                        launch_id=launch_id,
                        project=project.name,
                        workload=w.name,
                        task_index=task_index,
                        node=names[placement.node],
                        devices=placement.devices,
                        gpu_milli=w.milli_per_device,
                        gpu_memory_mib=81920 * w.milli_per_device // 1000,
                        command=tuple(workload_rows[-1]["command"]),
                        env=tuple(sorted(workload_rows[-1]["env"].items())),
                        world_size=w.tasks,
                        workload_type=w.type,
                        cpu_milli=workload_rows[-1]["cpu_milli"],
                        memory_mib=workload_rows[-1]["memory_mib"],
                    )
                    journal.append(
                        json.dumps({"op": "start", "at": w.started_at, "launch": launch.to_json()})
                    )
        if w.finished_at is not None:
            kind = "completed" if w.status == WorkloadStatus.COMPLETED.value else "failed"
            event_rows.append(_event_row(w.finished_at, kind, project.name, w, None))
    with engine.begin() as connection:
        connection.execute(insert(WorkloadRow), workload_rows)
        connection.execute(insert(TaskRow), task_rows)
        event_rows.sort(key=lambda e: e["at"])
        connection.execute(insert(EventRow), event_rows)
    (data_dir / "simulated.jsonl").write_text(
        "".join(line + "\n" for line in journal), encoding="utf-8"
    )
    return admin_token, researcher_token


def _env(w: WorkloadPlan, project: ProjectPlan) -> dict[str, str]:
    """Running work tells the simulated executor how busy it keeps its GPUs: about its
    project's efficiency, as in the seeded history."""
    if w.status != WorkloadStatus.RUNNING.value:
        return {}
    jitter = random.Random(w.name).uniform(-0.1, 0.1)
    percent = round(100 * min(1.0, max(0.02, project.efficiency + jitter)))
    return {SIM_UTILIZATION_ENV: str(percent)}


def _event_row(
    at: float, kind: str, project: str, w: WorkloadPlan, node: str | None
) -> dict[str, Any]:
    message = {
        "submitted": f"submitted by {w.submitted_by}",
        "bound": f"bound: {w.tasks} task(s) placed",
        "completed": "completed: every task exited 0",
        "failed": "failed: task 0 exited with code 1",
    }[kind]
    return {
        "at": at,
        "kind": kind,
        "project": project,
        "workload": w.name,
        "node": node,
        "message": message,
    }
