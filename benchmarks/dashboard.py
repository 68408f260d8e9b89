"""The dashboard at a realistic size: the APIs its pages read, and the pages in a browser.

    .venv/bin/python benchmarks/dashboard.py              # 10,000 workloads, 50 projects, 30 days
    .venv/bin/python benchmarks/dashboard.py --workloads 200 --projects 3 --days 2 --nodes 4
    .venv/bin/python benchmarks/dashboard.py --json

1. **Seed** (not timed as a target, shown as progress): a fresh data directory's SQLite database,
   made by the server's own Alembic migrations, filled with SQLAlchemy Core bulk inserts:
   `--nodes` x `--gpus-per-node` simulated nodes (64 x 8), `--projects` projects (a few under
   departments; one in ten without quota) with quotas adding up to the cluster, users and their
   memberships, and `--workloads` workloads in a realistic mix: the running ones fill every GPU,
   each project exactly at its quota (so the scheduler has nothing to change: pending work can
   neither borrow nor reclaim), pending ones with pending reasons (some preempted before),
   suspended, completed and failed ones over the whole period, with their tasks and events.
   History: `--days` days in the downsampled store, per-minute rows (`resolution_s` 60) for the
   last 7 days and hourly rows (3600) for all of them, for every project, the cluster and every
   device, with a daily and weekly rhythm; hourly rows are the sums of their minutes' rows. The
   raw per-minute `usage` table (a row per device and per workload on it, per minute) is filled
   for the last `--raw-hours` (24): its endpoint's peer.
2. **Serve**: a real `gpupool server` on that data directory, with the simulated executor on the
   same nodes (the running tasks are in its journal, so it adopts them) and its scheduling loop
   running at its default interval (there is no setting to turn it off).
3. **Measure** over HTTP (keep-alive, `--requests` timed after `--warmup`), as the admin and as
   a researcher in three projects: `GET /api/v1/history?range=30d|7d|24h|1h`, `/top`,
   `/projects`, `/nodes`, and the first page of `/api/v1/workloads` (50 rows, newest first; the
   overview's 5 oldest pending; filtered by project, by status and by a name search, for the
   parameters the server's OpenAPI has). Then each page's reads issued together, as the page
   issues them (the overview at 1 h and at 30 days, the workloads page).
4. **Peer**, in the same run: the raw per-minute `usage` table through `GET /api/v1/usage`
   (`by=project`, `--raw-requests` each) over the last hour and the last `--raw-hours`, against
   the history store over the same window; `ratio` = raw / history. The raw table keeps and its
   endpoint reads at most 14 days, and a day of it at this size is 1.3 M rows, read in tens of
   seconds: 30 days cannot be read raw at all, and the default seeds one day of it.
5. **Browser** (when Playwright and `/usr/bin/chromium` (or `$GPUPOOL_CHROMIUM`) are there and
   the server serves the pages): log in once through `#login=TOKEN`, then time each view from
   navigation start until `main[data-ready]` names it: the overview (its default hour, and 30
   days) and the workloads page, median of `--browser-loads` fresh loads after one.

Targets (issue 12): the overview renders in <= 1 s (the browser's render; without a browser its
API reads stand in), the first page of workloads in <= 300 ms (the API's answer; the browser's
render of the page is shown against the same bound). Exit status 0 (an error stops the run);
with `--check`, 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import math
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table
from sqlalchemy import Connection, Engine, insert, select

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
from gpupool.server import history, migrate, usage
from gpupool.server.db import (
    ClusterHistoryRow,
    DeviceHistoryRow,
    EventRow,
    ProjectHistoryRow,
    ProjectRow,
    TaskRow,
    UsageRow,
    WorkloadRow,
    make_engine,
    make_sessionmakers,
    sqlite_url,
)
from gpupool.server.process import ServerProcess
from gpupool.server.services import cluster as cluster_service
from gpupool.server.services import projects as project_service
from gpupool.server.services import users as user_service

API = "/api/v1"
TARGET_OVERVIEW_S = 1.0
TARGET_WORKLOADS_S = 0.3
MINUTE_DAYS = history.MINUTE_RETENTION_S // 86_400
"""Per-minute history rows are kept this long (7 days)."""
RAW_RETENTION_H = int(usage.RETENTION_S // 3600)
"""The raw `usage` table's retention (14 days), also the most its endpoint reads."""
SAMPLES_PER_MINUTE = round(history.MINUTE_S / history.STEP_S)
"""History steps folded into a per-minute row (12: the recorder takes one every 5 s); an hourly
row holds 60 times as many."""
RAW_SAMPLES_PER_MINUTE = 6
"""Device samples folded into a raw `usage` row (one every 10 s)."""
PAGE = 50
CHROMIUM = Path(os.environ.get("GPUPOOL_CHROMIUM", "/usr/bin/chromium"))
"""Debian's Chromium (or the one GPUPOOL_CHROMIUM names, as the browser tests take it)."""
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
RESEARCHER = "bench-researcher"

AREAS = (
    "vision", "nlp", "speech", "rl", "recsys", "genomics", "robotics", "llm", "search", "ads",
    "forecast", "safety", "multimodal", "chem", "weather", "maps", "fraud", "audio",
)  # fmt: skip
SUFFIXES = ("pretrain", "finetune", "eval", "research", "serving", "sweeps", "infra", "lab")
DEPARTMENTS = ("research", "product", "platform", "applied")
FIRST_NAMES = (
    "alice", "bruno", "chen", "dana", "emeka", "fatima", "gus", "hana", "ivan", "jun", "kofi",
    "lena", "mateo", "nadia", "omar", "priya", "quinn", "rosa", "sven", "tara", "uma", "victor",
    "wei", "ximena", "yusuf", "zoe",
)  # fmt: skip
TRAIN_MODELS = (
    "resnet50", "vit-l", "bert-base", "llama-7b", "gpt-small", "whisper", "t5-xl", "unet",
    "ppo", "dlrm", "diffusion", "mae", "clip", "mistral-7b",
)  # fmt: skip
TRAIN_KINDS = ("sweep", "ft", "pretrain", "ablation", "eval", "repro")
INTERACTIVE_NAMES = ("notebook", "jupyter", "debug-shell", "vscode")
INFERENCE_NAMES = ("serve", "batch-infer", "embed", "rerank")


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class Config:
    workloads: int = 10_000
    projects: int = 50
    days: int = 30
    nodes: int = 64
    gpus_per_node: int = 8
    raw_hours: int = 24
    """Hours of the raw per-minute `usage` table to seed (the peer's window)."""
    requests: int = 20
    warmup: int = 3
    raw_requests: int = 3
    """Timed requests of the raw `usage` peer (each reads every row of its window)."""
    browser: bool = True
    browser_loads: int = 5
    seed: int = 0
    cycle_interval_s: float = 1.0
    """The server's --cycle-interval (its default)."""

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def minute_days(self) -> int:
        return min(MINUTE_DAYS, self.days)


# -- the plan: projects, nodes, workloads ---------------------------------------------------------


@dataclass(slots=True)
class ProjectPlan:
    name: str
    department: str | None
    quota_gpus: int
    members: list[str]
    efficiency: float
    """Mean utilization of what it holds (0..1)."""
    base: float
    amplitude: float
    phase_h: float
    id: int = 0
    """Database id, once created."""


@dataclass(frozen=True, slots=True)
class TaskPlan:
    node: int
    devices: tuple[int, ...]


@dataclass(slots=True)
class WorkloadPlan:
    project: int
    name: str
    type: str
    status: str
    gpu_kind: str
    gpu_amount: int
    tasks: int
    submitted_by: str
    submitted_at: float
    started_at: float | None = None
    finished_at: float | None = None
    pending_reason: str | None = None
    preemptions: int = 0
    placements: list[TaskPlan] = field(default_factory=list)

    @property
    def milli_per_device(self) -> int:
        return self.gpu_amount if self.gpu_kind == "fraction" else 1000

    @property
    def gpus(self) -> float:
        return self.milli_per_device * self.tasks * self.devices_per_task / 1000

    @property
    def devices_per_task(self) -> int:
        return self.gpu_amount if self.gpu_kind == "whole" else 1


@dataclass(slots=True)
class Plan:
    config: Config
    now_s: float
    projects: list[ProjectPlan]
    users: list[str]
    workloads: list[WorkloadPlan]
    owner: list[int]
    """Per device (node * gpus_per_node + index): the project holding it now, -1 for none."""
    charges: list[list[tuple[int, int]]]
    """Per device: (workload index, milli) of the running tasks on it."""

    @property
    def node_names(self) -> list[str]:
        return [f"sim-{i + 1}" for i in range(self.config.nodes)]


def _quotas(rng: random.Random, projects: int, gpus: int) -> list[int]:
    """Whole-GPU quotas adding up to `gpus`: skewed (a few big projects), one in ten at 0."""
    zero = projects // 10
    funded = projects - zero
    weights = [rng.lognormvariate(0.0, 0.9) for _ in range(funded)]
    total = sum(weights)
    quotas = [max(1, int(w / total * gpus)) for w in weights]
    while sum(quotas) > gpus:
        quotas[quotas.index(max(quotas))] -= 1
    biggest = sorted(range(funded), key=lambda i: -quotas[i])
    for i in itertools.islice(itertools.cycle(biggest), gpus - sum(quotas)):
        quotas[i] += 1
    return quotas + [0] * zero


def _names(rng: random.Random, count: int) -> list[str]:
    names = [f"{a}-{s}" for a in AREAS for s in SUFFIXES]
    rng.shuffle(names)
    while len(names) < count:
        names.append(f"team-{len(names)}")
    return names[:count]


def plan_projects(config: Config, rng: random.Random) -> tuple[list[ProjectPlan], list[str]]:
    quotas = _quotas(rng, config.projects, config.gpus)
    names = _names(rng, config.projects)
    departments = DEPARTMENTS[: min(len(DEPARTMENTS), config.projects // 12)]
    per_department = 8
    first = len(FIRST_NAMES)
    users = [
        FIRST_NAMES[i % first] + ("" if i < first else str(i // first))
        for i in range(max(4, config.projects * 2))
    ]
    projects = []
    for i, (name, quota) in enumerate(zip(names, quotas, strict=True)):
        department = (
            departments[i // per_department] if i // per_department < len(departments) else None
        )
        members = rng.sample(users, k=min(len(users), rng.randint(2, 6)))
        projects.append(
            ProjectPlan(
                name=name,
                department=department,
                quota_gpus=quota,
                members=members,
                efficiency=rng.uniform(0.25, 0.9),
                base=rng.uniform(0.45, 0.7),
                amplitude=rng.uniform(0.2, 0.45),
                phase_h=rng.uniform(-2.0, 2.0),
            )
        )
    return projects, users


def _workload_name(rng: random.Random, kind: str, serial: int, user: str) -> str:
    if kind == "train":
        base = f"{rng.choice(TRAIN_MODELS)}-{rng.choice(TRAIN_KINDS)}"
    elif kind == "interactive":
        base = f"{rng.choice(INTERACTIVE_NAMES)}-{user}"
    else:
        base = f"{rng.choice(INFERENCE_NAMES)}-{rng.choice(TRAIN_MODELS)}"
    return f"{base}-{serial:05d}"


# (devices per group, tasks, gpu_kind, amount, workloads sharing a device, types), weight
_RUNNING_SHAPES: list[tuple[tuple[int, int, str, int, int, tuple[str, ...]], float]] = [
    ((8, 2, "whole", 8, 1, ("train",)), 0.04),
    ((8, 1, "whole", 8, 1, ("train",)), 0.08),
    ((4, 1, "whole", 4, 1, ("train",)), 0.14),
    ((2, 1, "whole", 2, 1, ("train", "inference")), 0.18),
    ((1, 1, "whole", 1, 1, ("train", "train", "interactive", "inference")), 0.36),
    ((1, 1, "fraction", 500, 2, ("interactive", "inference", "train")), 0.12),
    ((1, 1, "fraction", 250, 4, ("interactive", "inference")), 0.08),
]


def plan_running(
    config: Config,
    projects: list[ProjectPlan],
    rng: random.Random,
    now_s: float,
    serial: itertools.count[int],
    budget: int,
) -> tuple[list[WorkloadPlan], list[int], list[list[tuple[int, int]]]]:
    """Running workloads holding each project's quota exactly, placed first-fit decreasing
    (device groups of 8, 4, 2, 1 fill the nodes without gaps). At most `budget` workloads."""
    gpn = config.gpus_per_node
    workloads: list[WorkloadPlan] = []
    groups: list[tuple[int, list[tuple[int, int]]]] = []
    """(devices, [(workload index, task index)]) to place."""
    for p, project in enumerate(projects):
        left = project.quota_gpus
        while left > 0 and len(workloads) < budget:
            fitting = [
                (shape, w)
                for shape, w in _RUNNING_SHAPES
                if shape[0] * shape[1] <= left and shape[0] <= gpn
            ]
            if not fitting:
                break
            shape = rng.choices([s for s, _ in fitting], weights=[w for _, w in fitting])[0]
            devices, tasks, kind, amount, sharing, types = shape
            members: list[tuple[int, int]] = []
            for _ in range(sharing):
                user = rng.choice(project.members)
                wtype = rng.choice(types)
                started = now_s - min(config.days * 86400 - 3600, rng.expovariate(1 / 18000))
                workloads.append(
                    WorkloadPlan(
                        project=p,
                        name=_workload_name(rng, wtype, next(serial), user),
                        type=wtype,
                        status=WorkloadStatus.RUNNING.value,
                        gpu_kind=kind,
                        gpu_amount=amount,
                        tasks=tasks,
                        submitted_by=user,
                        submitted_at=started - rng.expovariate(1 / 900),
                        started_at=started,
                    )
                )
                members.append((len(workloads) - 1, 0))
            if sharing > 1:
                groups.append((1, members))
            else:
                index = members[0][0]
                groups.extend((devices, [(index, t)]) for t in range(tasks))
            left -= devices * tasks
    free = [gpn] * config.nodes
    owner = [-1] * config.gpus
    charges: list[list[tuple[int, int]]] = [[] for _ in range(config.gpus)]
    placed: set[int] = set()
    for size, members in sorted(groups, key=lambda g: -g[0]):
        node = next((n for n in range(config.nodes) if free[n] >= size), None)
        if node is None:
            continue  # no room (odd node sizes): the workload stays unplaced and is dropped
        first = gpn - free[node]
        free[node] -= size
        slots = tuple(range(first, first + size))
        for index, _task in members:
            workload = workloads[index]
            workload.placements.append(TaskPlan(node, slots))
            for d in slots:
                owner[node * gpn + d] = workload.project
                charges[node * gpn + d].append((index, workload.milli_per_device))
            if len(workload.placements) == workload.tasks:
                placed.add(index)
    keep = sorted(placed)
    renumber = {old: new for new, old in enumerate(keep)}
    charges = [[(renumber[i], m) for i, m in c if i in renumber] for c in charges]
    owner = [o if charges[d] else -1 for d, o in enumerate(owner)]
    return [workloads[i] for i in keep], owner, charges


_PENDING_REASONS = (
    "project {p} holds its quota ({q} GPUs) and no GPUs are idle to lend over quota",
    "needs {g} GPU(s) on one node; no node has {g} free (the cluster is fully allocated)",
    "waiting behind {n} earlier workloads of project {p} in the queue",
    "project {p} is at its quota; the idle GPUs of other projects are all in use",
)


def plan_others(
    config: Config,
    projects: list[ProjectPlan],
    rng: random.Random,
    now_s: float,
    serial: itertools.count[int],
    count: int,
) -> list[WorkloadPlan]:
    """Pending (some preempted before), suspended, completed and failed workloads."""
    span = config.days * 86400
    weights = [max(0.5, p.quota_gpus) for p in projects]
    pending_n = round(count * 0.16)
    suspended_n = round(count * 0.01)
    failed_n = round(count * 0.09)
    out: list[WorkloadPlan] = []
    for i in range(count):
        p = rng.choices(range(len(projects)), weights=weights)[0]
        project = projects[p]
        user = rng.choice(project.members)
        if i < pending_n:
            status = WorkloadStatus.PENDING.value
        elif i < pending_n + suspended_n:
            status = WorkloadStatus.SUSPENDED.value
        elif i < pending_n + suspended_n + failed_n:
            status = WorkloadStatus.FAILED.value
        else:
            status = WorkloadStatus.COMPLETED.value
        pending = status == WorkloadStatus.PENDING.value
        # Pending work is training (priority 50, the lowest): it preempts nothing that runs.
        wtype = "train" if pending else rng.choice(("train", "train", "interactive", "inference"))
        gpu = rng.choice((1, 1, 1, 2, 2, 4, 8)) if wtype == "train" else 1
        tasks = rng.choice((1, 1, 1, 2, 4)) if gpu == 8 else 1
        fraction = wtype != "train" and rng.random() < 0.4
        workload = WorkloadPlan(
            project=p,
            name=_workload_name(rng, wtype, next(serial), user),
            type=wtype,
            status=status,
            gpu_kind="fraction" if fraction else "whole",
            gpu_amount=rng.choice((250, 500)) if fraction else gpu,
            tasks=tasks,
            submitted_by=user,
            submitted_at=0.0,
        )
        if pending:
            workload.submitted_at = now_s - min(span - 60, rng.expovariate(1 / 10800))
            if rng.random() < 0.15:
                workload.preemptions = rng.randint(1, 3)
                workload.pending_reason = (
                    f"preempted (reclaim): project {project.name} was over its quota while "
                    "another project needed its GPUs; waiting for GPUs"
                )
            elif project.quota_gpus == 0:
                workload.pending_reason = (
                    f"project {project.name} has no quota: it runs only on idle GPUs, and none "
                    "are idle"
                )
            else:
                workload.pending_reason = rng.choice(_PENDING_REASONS).format(
                    p=project.name,
                    q=project.quota_gpus,
                    g=workload.devices_per_task,
                    n=rng.randint(1, 40),
                )
        else:
            submitted = now_s - rng.uniform(600, span - 60)
            workload.submitted_at = submitted
            if status != WorkloadStatus.SUSPENDED.value:
                started = submitted + rng.expovariate(1 / 1200)
                finished = min(now_s - 30, started + rng.expovariate(1 / 10800))
                workload.started_at = min(started, finished)
                workload.finished_at = finished
        out.append(workload)
    return out


def plan(config: Config) -> Plan:
    rng = random.Random(config.seed)
    now_s = time.time()
    projects, users = plan_projects(config, rng)
    serial = itertools.count(1)
    running, owner, charges = plan_running(
        config, projects, rng, now_s, serial, budget=max(1, config.workloads * 2 // 5)
    )
    others = plan_others(config, projects, rng, now_s, serial, config.workloads - len(running))
    return Plan(config, now_s, projects, users, running + others, owner, charges)


# -- seeding the database ------------------------------------------------------------------------


def _bulk(connection: Connection, table: str, columns: Sequence[str], rows: list[Any]) -> None:
    """Insert tuples through the DB-API's executemany (SQLite's `?` style): for the millions
    of history rows, about 2.5 times as fast as Core's insert() with a dict per row."""
    if not rows:
        return
    marks = ", ".join("?" for _ in columns)
    connection.exec_driver_sql(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)


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
            )
        for project in plan_.projects:
            body = ProjectIn.model_validate(
                {
                    "name": project.name,
                    "department": project.department,
                    "quota": {"gpu": project.quota_gpus},
                }
            )
            project_service.create(session, body, now_s, {})
        ids = dict(session.execute(select(ProjectRow.name, ProjectRow.id)).all())
        for project in plan_.projects:
            project.id = ids[project.name]
        memberships: dict[str, list[str]] = {user: [] for user in plan_.users}
        for project in plan_.projects:
            for member in project.members:
                memberships[member].append(project.name)
        for user in plan_.users:
            user_service.create(session, UserIn(name=user, projects=memberships[user]), now_s)
        # The measured researcher: a member of three projects (the biggest, a middle one and
        # one without quota when there is one), as a typical user is.
        ranked = sorted(plan_.projects, key=lambda p: -p.quota_gpus)
        chosen = {ranked[0].name, ranked[len(ranked) // 2].name, ranked[-1].name}
        user_service.create(
            session, UserIn(name=RESEARCHER, role=Role.RESEARCHER, projects=sorted(chosen)), now_s
        )
        row = user_service.get_row(session, RESEARCHER)
        researcher_token = user_service.issue_token(session, row, "benchmark", now_s).token
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


# -- seeding the history -------------------------------------------------------------------------

_DEVICE_COLUMNS = (
    "resolution_s", "bucket_s", "node", "device_index", "samples", "allocated_milli_sum",
    "utilized_milli_sum", "utilized_samples", "memory_used_max_mib",
)  # fmt: skip
_PROJECT_COLUMNS = (
    "resolution_s", "bucket_s", "project_id", "samples", "allocated_milli_sum",
    "utilized_milli_sum", "utilized_samples", "requested_milli_sum",
)  # fmt: skip
_CLUSTER_COLUMNS = (
    "resolution_s", "bucket_s", "samples", "allocated_milli_sum", "utilized_milli_sum",
    "utilized_samples", "capacity_milli_sum", "pending_workloads_sum", "pending_milli_sum",
)  # fmt: skip
_USAGE_COLUMNS = (
    "bucket_s", "node", "device_index", "project", "workload", "samples",
    "allocated_milli_sum", "utilized_milli_sum", "memory_used_max_mib",
)  # fmt: skip

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def _day_curve(hours: FloatArray) -> FloatArray:
    """0 at 03:00 UTC, 1 at 15:00 UTC."""
    return 0.5 - 0.5 * np.cos(2 * np.pi * (hours - 3.0) / 24.0)


@dataclass(slots=True)
class _Series:
    """One chunk of minutes, per device, project and the cluster (values per sample)."""

    times: FloatArray
    alloc: IntArray
    """(minutes, devices) milli-GPU."""
    util: IntArray
    memory: IntArray
    project_alloc: IntArray
    """(minutes, projects)."""
    project_util: IntArray
    project_requested: IntArray
    pending: IntArray
    """(minutes,) pending workloads."""
    pending_milli: IntArray


class HistoryModel:
    """The cluster's past, minute by minute: each project's activity follows a day (busy at
    15:00 UTC, quiet at 03:00), quieter weekends and its own hourly wiggle; a device held by a
    project now is allocated while that activity is above the device's threshold; utilization
    is the project's efficiency, the time of day and noise."""

    def __init__(self, plan_: Plan) -> None:
        config = plan_.config
        self.rng = np.random.default_rng(config.seed)
        self.projects = plan_.projects
        count = len(self.projects)
        self.devices = config.gpus
        self.start_s = float(math.floor(plan_.now_s / 3600) * 3600 - config.days * 86400)
        self.end_s = float(math.floor(plan_.now_s / 60) * 60)
        """Exclusive: the minute under way has no row yet."""
        self.minutes = int((self.end_s - self.start_s) // 60)
        hours = self.minutes // 60 + 2
        self.knots = self.start_s + 3600.0 * np.arange(hours)
        self.wiggle = self.rng.normal(0.0, 0.07, size=(count, hours))
        owner = np.array(plan_.owner, dtype=np.int64)
        self.owner = np.where(owner >= 0, owner, 0)
        self.threshold = np.full(self.devices, 2.0)  # not held by anyone: never allocated
        for p in range(count):
            held = np.flatnonzero(owner == p)
            if len(held):
                order = self.rng.permutation(len(held))
                self.threshold[held[order]] = (np.arange(len(held)) + 0.5) / len(held)
        efficiency = np.array([p.efficiency for p in self.projects])
        self.device_efficiency = efficiency[self.owner] + self.rng.normal(0, 0.08, self.devices)
        self.onehot = np.zeros((self.devices, count), dtype=np.int64)
        self.onehot[np.flatnonzero(owner >= 0), owner[owner >= 0]] = 1
        self.base = np.array([p.base for p in self.projects])
        self.amplitude = np.array([p.amplitude for p in self.projects])
        self.phase = np.array([p.phase_h for p in self.projects])
        pending = [w for w in plan_.workloads if w.status == WorkloadStatus.PENDING.value]
        self.pending_now = len(pending)
        self.pending_mean_milli = (
            sum(w.gpus for w in pending) * 1000 / len(pending) if pending else 0.0
        )
        share = np.array([sum(1 for w in pending if w.project == p) for p in range(count)])
        self.pending_share = share / max(1, share.sum())

    def chunk(self, first: int, last: int) -> _Series:
        """Minutes [first, last) since `start_s`."""
        times = (self.start_s + 60.0 * np.arange(first, last)).astype(np.float64)
        hours = (times % 86400) / 3600
        weekday = ((times // 86400).astype(np.int64) + 3) % 7  # 1970-01-01 was a Thursday
        weekend = np.where(weekday >= 5, 0.55, 1.0)
        day = 0.5 - 0.5 * np.cos(2 * np.pi * (hours[:, None] - 3.0 - self.phase[None, :]) / 24)
        wiggle = np.stack([np.interp(times, self.knots, w) for w in self.wiggle], axis=1)
        activity = np.clip(self.base + self.amplitude * day * weekend[:, None] + wiggle, 0.0, 1.0)
        allocated = activity[:, self.owner] > self.threshold[None, :]
        noise = self.rng.standard_normal((last - first, self.devices))
        fraction = np.clip(
            self.device_efficiency[None, :]
            + 0.12 * (_day_curve(hours)[:, None] - 0.5)
            + 0.1 * noise,
            0.02,
            1.0,
        )
        alloc = allocated.astype(np.int64) * 1000
        util = (fraction * 1000).astype(np.int64) * allocated
        memory = np.minimum(81920, (12000 + 64000 * fraction).astype(np.int64)) * allocated
        project_alloc = alloc @ self.onehot
        project_util = util @ self.onehot
        busy = alloc.sum(axis=1) / (self.devices * 1000)
        pending = np.round(self.pending_now * (0.3 + 0.7 * busy)).astype(np.int64)
        pending_milli = np.round(pending * self.pending_mean_milli).astype(np.int64)
        requested = project_alloc + np.round(
            pending_milli[:, None] * self.pending_share[None, :]
        ).astype(np.int64)
        return _Series(
            times,
            alloc,
            util,
            memory,
            project_alloc,
            project_util,
            requested,
            pending,
            pending_milli,
        )


@dataclass(slots=True)
class SeedCounts:
    minute_rows: int = 0
    hour_rows: int = 0
    raw_usage_rows: int = 0


def _hour_sums(values: IntArray, starts: IntArray) -> IntArray:
    return np.add.reduceat(values, starts, axis=0)


def seed_history(engine: Engine, plan_: Plan) -> SeedCounts:
    """Per-minute rows for the last 7 days, hourly rows for all `days`, for every project, the
    cluster and every device; raw `usage` rows for the last `raw_hours`."""
    config = plan_.config
    model = HistoryModel(plan_)
    counts = SeedCounts()
    s = SAMPLES_PER_MINUTE
    nodes = plan_.node_names
    gpn = config.gpus_per_node
    device_node = [nodes[d // gpn] for d in range(config.gpus)]
    device_index = [d % gpn for d in range(config.gpus)]
    project_ids = np.array([p.id for p in plan_.projects], dtype=np.int64)
    capacity = config.gpus * 1000
    minute_from = model.end_s - config.minute_days * 86400
    raw_from = model.end_s - config.raw_hours * 3600
    said = time.perf_counter()
    for first in range(0, model.minutes, 1440):
        last = min(model.minutes, first + 1440)
        series = model.chunk(first, last)
        starts = np.arange(0, last - first, 60)
        per_hour = np.diff(np.append(starts, last - first)) * s
        hours = series.times[starts]
        hour_rows = _hour_rows(series, starts, per_hour, hours, project_ids, capacity)
        device_hours = _device_rows(
            3600,
            hours,
            per_hour,
            _hour_sums(series.alloc, starts) * s,
            _hour_sums(series.util, starts) * s,
            np.maximum.reduceat(series.memory, starts, axis=0),
            device_node,
            device_index,
        )
        minute = series.times >= minute_from
        with engine.begin() as connection:
            _bulk(connection, ProjectHistoryRow.__tablename__, _PROJECT_COLUMNS, hour_rows[0])
            _bulk(connection, ClusterHistoryRow.__tablename__, _CLUSTER_COLUMNS, hour_rows[1])
            _bulk(connection, DeviceHistoryRow.__tablename__, _DEVICE_COLUMNS, device_hours)
            counts.hour_rows += len(hour_rows[0]) + len(hour_rows[1]) + len(device_hours)
            if minute.any():
                rows = _minute_rows(series, minute, project_ids, capacity)
                devices = _device_rows(
                    60,
                    series.times[minute],
                    np.full(int(minute.sum()), s),
                    series.alloc[minute] * s,
                    series.util[minute] * s,
                    series.memory[minute],
                    device_node,
                    device_index,
                )
                _bulk(connection, ProjectHistoryRow.__tablename__, _PROJECT_COLUMNS, rows[0])
                _bulk(connection, ClusterHistoryRow.__tablename__, _CLUSTER_COLUMNS, rows[1])
                _bulk(connection, DeviceHistoryRow.__tablename__, _DEVICE_COLUMNS, devices)
                counts.minute_rows += len(rows[0]) + len(rows[1]) + len(devices)
            raw = series.times >= raw_from
            if raw.any():
                usage_rows = _raw_usage_rows(plan_, series, raw, device_node, device_index)
                _bulk(connection, UsageRow.__tablename__, _USAGE_COLUMNS, usage_rows)
                counts.raw_usage_rows += len(usage_rows)
        if time.perf_counter() - said > 3 or last == model.minutes:
            said = time.perf_counter()
            say(
                f"  history: day {math.ceil(last / 1440)}/{math.ceil(model.minutes / 1440)}, "
                f"{counts.minute_rows:,} per-minute + {counts.hour_rows:,} hourly rows, "
                f"{counts.raw_usage_rows:,} raw usage rows"
            )
    return counts


def _hour_rows(
    series: _Series,
    starts: IntArray,
    per_hour: IntArray,
    hours: FloatArray,
    project_ids: IntArray,
    capacity: int,
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    s = SAMPLES_PER_MINUTE
    alloc = _hour_sums(series.project_alloc, starts) * s
    util = _hour_sums(series.project_util, starts) * s
    requested = _hour_sums(series.project_requested, starts) * s
    projects = [
        (3600, hour, int(pid), n, a, u, n, r)
        for hour, n, a_row, u_row, r_row in zip(
            hours.tolist(),
            per_hour.tolist(),
            alloc.tolist(),
            util.tolist(),
            requested.tolist(),
            strict=True,
        )
        for pid, a, u, r in zip(project_ids.tolist(), a_row, u_row, r_row, strict=True)
    ]
    cluster = list(
        zip(
            itertools.repeat(3600),
            hours.tolist(),
            per_hour.tolist(),
            (_hour_sums(series.alloc.sum(axis=1), starts) * s).tolist(),
            (_hour_sums(series.util.sum(axis=1), starts) * s).tolist(),
            per_hour.tolist(),
            (per_hour * capacity).tolist(),
            (_hour_sums(series.pending, starts) * s).tolist(),
            (_hour_sums(series.pending_milli, starts) * s).tolist(),
        )
    )
    return projects, cluster


def _minute_rows(
    series: _Series, minute: npt.NDArray[np.bool_], project_ids: IntArray, capacity: int
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    s = SAMPLES_PER_MINUTE
    times = series.times[minute].tolist()
    projects = [
        (60, t, pid, s, a * s, u * s, s, r * s)
        for t, a_row, u_row, r_row in zip(
            times,
            series.project_alloc[minute].tolist(),
            series.project_util[minute].tolist(),
            series.project_requested[minute].tolist(),
            strict=True,
        )
        for pid, a, u, r in zip(project_ids.tolist(), a_row, u_row, r_row, strict=True)
    ]
    n = len(times)
    cluster = list(
        zip(
            itertools.repeat(60),
            times,
            itertools.repeat(s),
            (series.alloc[minute].sum(axis=1) * s).tolist(),
            (series.util[minute].sum(axis=1) * s).tolist(),
            itertools.repeat(s),
            itertools.repeat(capacity * s),
            (series.pending[minute] * s).tolist(),
            (series.pending_milli[minute] * s).tolist(),
        )
    )
    assert len(cluster) == n
    return projects, cluster


def _device_rows(
    resolution: int,
    times: FloatArray,
    samples: IntArray,
    alloc: IntArray,
    util: IntArray,
    memory: IntArray,
    device_node: list[str],
    device_index: list[int],
) -> list[tuple[Any, ...]]:
    devices = len(device_node)
    n = len(times)
    return list(
        zip(
            itertools.repeat(resolution),
            np.repeat(times, devices).tolist(),
            device_node * n,
            device_index * n,
            np.repeat(samples, devices).tolist(),
            alloc.ravel().tolist(),
            util.ravel().tolist(),
            np.repeat(samples, devices).tolist(),
            memory.ravel().tolist(),
        )
    )


def _raw_usage_rows(
    plan_: Plan,
    series: _Series,
    raw: npt.NDArray[np.bool_],
    device_node: list[str],
    device_index: list[int],
) -> list[tuple[Any, ...]]:
    """The raw table as `gpupool.server.usage.record` writes it: per minute, a row per device
    (project and workload empty) and a row per workload on an allocated device."""
    s = RAW_SAMPLES_PER_MINUTE
    times = series.times[raw]
    alloc, util, memory = series.alloc[raw], series.util[raw], series.memory[raw]
    empty = itertools.repeat("")
    rows: list[tuple[Any, ...]] = list(
        zip(
            np.repeat(times, len(device_node)).tolist(),
            device_node * len(times),
            device_index * len(times),
            empty,
            empty,
            itertools.repeat(s),
            (alloc * s).ravel().tolist(),
            (util * s).ravel().tolist(),
            memory.ravel().tolist(),
        )
    )
    names = [(plan_.projects[w.project].name, w.name) for w in plan_.workloads]
    minute_list = times.tolist()
    util_list = util.tolist()
    for m, d in zip(*np.nonzero(alloc), strict=True):
        used = util_list[m][d]
        for index, milli in plan_.charges[d]:
            project, workload = names[index]
            share = used * milli // 1000
            rows.append(
                (
                    minute_list[m],
                    device_node[d],
                    device_index[d],
                    project,
                    workload,
                    s,
                    milli * s,
                    share * s,
                    0,
                )
            )
    return rows


# -- measuring -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Timing:
    name: str
    role: str
    path: str
    params: dict[str, str | int]
    samples_s: list[float]
    bytes: int
    rows: int | None = None
    """Items in the answer where it is a list (`total` for the workload list)."""

    @property
    def p50_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def p95_s(self) -> float:
        ordered = sorted(self.samples_s)
        return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def timed_get(
    client: httpx.Client, path: str, params: dict[str, str | int], warmup: int, requests: int
) -> tuple[list[float], httpx.Response]:
    response = None
    for _ in range(warmup):
        response = client.get(path, params=params)
        response.raise_for_status()
    samples = []
    for _ in range(requests):
        began = time.perf_counter()
        response = client.get(path, params=params)
        samples.append(time.perf_counter() - began)
        response.raise_for_status()
    assert response is not None
    return samples, response


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    path: str
    params: dict[str, str | int]


def endpoints(openapi: dict[str, Any], project: str, notes: list[str]) -> list[Endpoint]:
    """What the dashboard reads, as far as this server offers it (from its OpenAPI)."""
    paths: dict[str, Any] = openapi.get("paths", {})
    out: list[Endpoint] = []
    if f"{API}/history" in paths:
        out += [Endpoint(f"history {r}", f"{API}/history", {"range": r}) for r in HISTORY_RANGES]
    else:
        notes.append("GET /api/v1/history is not served: its rows were skipped")
    out.append(Endpoint("top", f"{API}/top", {}))
    out.append(Endpoint("projects", f"{API}/projects", {}))
    out.append(Endpoint("nodes", f"{API}/nodes", {}))
    parameters = {
        p["name"]: p for p in paths.get(f"{API}/workloads", {}).get("get", {}).get("parameters", [])
    }
    page: dict[str, str | int] = {"limit": PAGE}
    if "submitted_at" in _enum_values(openapi, parameters.get("sort")) and "order" in parameters:
        page |= {"sort": "submitted_at", "order": "desc"}
        label = "workloads p1, newest first"
    else:
        notes.append("GET /api/v1/workloads has no sort=submitted_at&order=desc: default order")
        label = "workloads page 1"
    out.append(Endpoint(label, f"{API}/workloads", page))
    if "sort" in page:
        oldest: dict[str, str | int] = {
            "status": "pending",
            "sort": "submitted_at",
            "order": "asc",
            "limit": 5,
        }
        out.append(Endpoint(OLDEST_PENDING, f"{API}/workloads", oldest))
    out.append(Endpoint("  + project filter", f"{API}/workloads", page | {"project": project}))
    out.append(Endpoint("  + status=pending", f"{API}/workloads", page | {"status": "pending"}))
    if "q" in parameters:
        out.append(Endpoint("  + name search q=sweep", f"{API}/workloads", page | {"q": "sweep"}))
    else:
        notes.append("GET /api/v1/workloads has no q (name search): skipped")
    return out


def _enum_values(openapi: dict[str, Any], parameter: dict[str, Any] | None) -> set[str]:
    """The values a query parameter's schema allows, following `$ref`s and `anyOf`."""
    found: set[str] = set()
    todo = [parameter.get("schema", {})] if parameter else []
    while todo:
        schema = todo.pop()
        ref = schema.get("$ref")
        if isinstance(ref, str):
            node: Any = openapi
            for part in ref.removeprefix("#/").split("/"):
                node = node.get(part, {})
            todo.append(node)
        todo.extend(schema.get("anyOf", []) + schema.get("oneOf", []))
        found.update(str(value) for value in schema.get("enum", []))
    return found


HISTORY_RANGES = ("30d", "7d", "24h", "1h")
OLDEST_PENDING = "  5 oldest pending"
PAGE_READS = {
    "overview 1h": ("top", "history 1h", OLDEST_PENDING),
    "overview 30d": ("top", "history 30d", OLDEST_PENDING),
    "workloads": ("workloads p1, newest first", "projects", "nodes"),
}
"""The reads each page makes when it opens, together (the overview opens on its last hour)."""
RANGE_HOURS = {"1h": 1, "24h": 24, "7d": 168, "30d": 720}


def _rows(body: Any) -> int | None:
    if isinstance(body, list):
        return len(body)
    if isinstance(body, dict):
        if "total" in body:
            return int(body["total"])
        if "times" in body:
            return len(body["times"])
        if "projects" in body:
            return len(body["projects"])
    return None


def measure_api(
    server: ServerProcess, tokens: dict[str, str], config: Config, project: str, notes: list[str]
) -> list[Timing]:
    with httpx.Client(base_url=server.url, timeout=300) as anonymous:
        openapi = anonymous.get("/openapi.json").json()
    timings: list[Timing] = []
    for role, token in tokens.items():
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=300
        ) as client:
            for endpoint in endpoints(openapi, project, notes if role == "admin" else []):
                samples, response = timed_get(
                    client, endpoint.path, endpoint.params, config.warmup, config.requests
                )
                timing = Timing(
                    endpoint.name,
                    role,
                    endpoint.path,
                    endpoint.params,
                    samples,
                    len(response.content),
                    _rows(response.json()),
                )
                timings.append(timing)
                say(
                    f"  {role:<10} {endpoint.name:<34} p50 {timing.p50_s * 1000:8.1f} ms  "
                    f"p95 {timing.p95_s * 1000:8.1f} ms  {timing.bytes / 1024:8.0f} KiB"
                )
    return timings


def measure_pages(
    server: ServerProcess, token: str, config: Config, timings: list[Timing]
) -> list[Timing]:
    """Each page's reads issued together as the page does (one connection each, as a browser
    opens several), timed until the last answer: the server's part of drawing the page."""
    known = {t.name.strip(): t for t in timings if t.role == "admin"}
    out = []
    clients = [
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=300)
        for _ in range(max(len(names) for names in PAGE_READS.values()))
    ]
    try:
        with ThreadPoolExecutor(len(clients)) as pool:
            for page, names in PAGE_READS.items():
                reads = [known[name.strip()] for name in names if name.strip() in known]
                if len(reads) < len(names):
                    continue

                def one(pair: tuple[httpx.Client, Timing]) -> int:
                    response = pair[0].get(pair[1].path, params=pair[1].params)
                    response.raise_for_status()
                    return len(response.content)

                samples: list[float] = []
                size = 0
                for attempt in range(config.warmup + config.requests):
                    began = time.perf_counter()
                    size = sum(pool.map(one, zip(clients, reads, strict=False)))
                    if attempt >= config.warmup:
                        samples.append(time.perf_counter() - began)
                timing = Timing(
                    f"reads: {page}",
                    "admin",
                    " + ".join(r.path for r in reads),
                    {},
                    samples,
                    size,
                )
                out.append(timing)
                say(
                    f"  {timing.name:<45} p50 {timing.p50_s * 1000:8.1f} ms  "
                    f"p95 {timing.p95_s * 1000:8.1f} ms"
                )
    finally:
        for client in clients:
            client.close()
    return out


@dataclass(slots=True)
class PeerResult:
    window: str
    raw_samples_s: list[float]
    raw_bytes: int
    history_p50_s: float | None
    raw_rows_read: int

    @property
    def raw_p50_s(self) -> float:
        return statistics.median(self.raw_samples_s)

    @property
    def ratio(self) -> float | None:
        return None if not self.history_p50_s else self.raw_p50_s / self.history_p50_s


def measure_peer(
    server: ServerProcess, token: str, config: Config, timings: list[Timing], raw_rows: int
) -> list[PeerResult]:
    """The raw per-minute `usage` table over the windows it holds (1 h and `raw_hours`),
    `by=project` in the history's step, against the history store over the same window."""
    by_range = {t.params.get("range"): t for t in timings if t.role == "admin"}
    windows = sorted({h for h in (1, config.raw_hours) if 0 < h <= config.raw_hours})
    out = []
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=600
    ) as client:
        for hours in windows:
            label = next((r for r, h in RANGE_HOURS.items() if h == hours), f"{hours}h")
            match = by_range.get(label)
            step = _history_step(client, label) if match else None
            params: dict[str, str | int] = {
                "by": "project",
                "minutes": hours * 60,
                "bucket_s": max(60, min(86_400, step or 300)),
            }
            # A request over a day of raw rows takes seconds: only the small window warms up.
            warmup = min(1, config.warmup) if hours <= 1 else 0
            samples, response = timed_get(
                client, f"{API}/usage", params, warmup, config.raw_requests
            )
            rows_read = raw_rows * hours // max(1, config.raw_hours)
            result = PeerResult(
                label, samples, len(response.content), match.p50_s if match else None, rows_read
            )
            out.append(result)
            ratio = "" if result.ratio is None else f", {result.ratio:,.0f}x the history's p50"
            say(
                f"  raw usage {label:<4} (~{rows_read:,} rows) p50 "
                f"{result.raw_p50_s * 1000:,.0f} ms{ratio}"
            )
    return out


def _history_step(client: httpx.Client, label: str) -> int | None:
    response = client.get(f"{API}/history", params={"range": label})
    if response.status_code != 200:
        return None
    step = response.json().get("step_s")
    return int(step) if isinstance(step, int | float) else None


@dataclass(slots=True)
class BrowserResult:
    skipped: str | None = None
    """Why the pages were not timed."""
    loads_s: dict[str, list[float]] = field(default_factory=dict)
    """Per view: navigation start until `main[data-ready]` names it, per timed load."""
    first_load_s: dict[str, float] = field(default_factory=dict)
    """Per view: the first load after logging in (not in the median)."""
    scripts_s: dict[str, float] = field(default_factory=dict)
    """Per view, median: until DOMContentLoaded (the page and its modules loaded and run)."""
    api_s: dict[str, float] = field(default_factory=dict)
    """Per view, median: until the last /api/v1 answer before it was drawn."""
    calls: dict[str, list[tuple[str, float, float]]] = field(default_factory=dict)
    """Per view, in its median load: each /api/v1 call (path, sent, answered) before drawn."""

    def median(self, view: str) -> float | None:
        loads = self.loads_s.get(view)
        return statistics.median(loads) if loads else None


def browser_unavailable(server_url: str | None = None) -> str | None:
    """Why the pages cannot be timed here, or None."""
    if importlib.util.find_spec("playwright") is None:
        return "Playwright for Python is not installed (pip install playwright)"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    if server_url is not None:
        answer = httpx.get(server_url + "/", timeout=30)
        if answer.status_code != 200 or "html" not in answer.headers.get("content-type", ""):
            return f"the server does not serve the dashboard at / ({answer.status_code})"
    return None


VIEWS = {
    "overview 1h": ("overview", "#/overview"),
    "overview 30d": ("overview", "#/overview?range=30d"),
    "workloads": ("workloads", "#/workloads"),
}
"""Timed views: (what `main[data-ready]` says when it is drawn, the page's fragment). The
overview opens on its last hour; the 30-day chart is the widest it draws."""
_NOTE_READY = """
(() => {
  const seen = (window.__gpupoolReady = {});
  const note = () => {
    const main = document.querySelector("main");
    const view = main && main.dataset.ready;
    if (view && !(view in seen)) seen[view] = performance.now();
  };
  new MutationObserver(note).observe(document, {
    subtree: true, childList: true, attributes: true, attributeFilter: ["data-ready"],
  });
})();
"""
"""Runs in each new document before the page's own scripts: notes when `main[data-ready]`
first names each view, in milliseconds since the navigation started."""
_READY = "view => window.__gpupoolReady !== undefined && view in window.__gpupoolReady"
_READY_AT = """view => {
  const ready = window.__gpupoolReady[view];
  const nav = performance.getEntriesByType("navigation")[0];
  const api = performance.getEntriesByType("resource")
    .filter((e) => e.name.includes("/api/v1/") && e.responseEnd <= ready);
  return {
    ready,
    scripts: nav ? nav.domContentLoadedEventEnd : null,
    api: api.length ? Math.max(...api.map((e) => e.responseEnd)) : null,
    calls: api.map((e) => [
      e.name.slice(e.name.indexOf("/api/v1/") + 7), e.startTime, e.responseEnd,
    ]),
  };
}"""


def measure_browser(url: str, token: str, loads: int) -> BrowserResult:
    """Log in through the page (`#login=TOKEN`), then for each view: fresh page loads (from
    `about:blank`), each timed in the page from navigation start (`performance.now()`, noted
    by a mutation observer installed before the page's scripts) until `main`'s `data-ready`
    names the view."""
    reason = browser_unavailable(url)
    if reason is not None:
        return BrowserResult(skipped=reason)
    from playwright.sync_api import sync_playwright

    result = BrowserResult()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            context.add_init_script(_NOTE_READY)
            page = context.new_page()
            page.goto(f"{url}/#login={token}")
            page.wait_for_function(_READY, arg="overview", timeout=60_000)
            for view, (ready, fragment) in VIEWS.items():
                times: list[float] = []
                scripts: list[float] = []
                answers: list[float] = []
                calls: list[list[tuple[str, float, float]]] = []
                for _ in range(loads + 1):
                    page.goto("about:blank")
                    page.goto(f"{url}/{fragment}", wait_until="commit")
                    page.wait_for_function(_READY, arg=ready, timeout=60_000)
                    marks = page.evaluate(_READY_AT, ready)
                    times.append(float(marks["ready"]) / 1000)
                    if marks["scripts"] is not None:
                        scripts.append(float(marks["scripts"]) / 1000)
                    if marks["api"] is not None:
                        answers.append(float(marks["api"]) / 1000)
                    calls.append([(str(c[0]), c[1] / 1000, c[2] / 1000) for c in marks["calls"]])
                result.first_load_s[view] = times[0]
                ordered = sorted(range(1, len(times)), key=lambda i: times[i])
                result.calls[view] = calls[ordered[len(ordered) // 2]]
                result.loads_s[view] = times[1:]
                if scripts[1:]:
                    result.scripts_s[view] = statistics.median(scripts[1:])
                if answers[1:]:
                    result.api_s[view] = statistics.median(answers[1:])
                say(
                    f"  browser {view:<12} first load {times[0] * 1000:,.0f} ms, median of "
                    f"{loads} {statistics.median(times[1:]) * 1000:,.0f} ms (scripts run by "
                    f"{_ms(result.scripts_s.get(view))}, last API answer by "
                    f"{_ms(result.api_s.get(view))})"
                )
        finally:
            browser.close()
    return result


# -- the run -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Result:
    config: Config
    machine: str
    python: str
    date: str
    seed_s: float = 0.0
    seed_counts: SeedCounts = field(default_factory=SeedCounts)
    statuses: dict[str, int] = field(default_factory=dict)
    running_gpus: float = 0.0
    database_mib: float = 0.0
    server_start_s: float = 0.0
    settle: dict[str, float] = field(default_factory=dict)
    """What the scheduling loop did before the measurement: cycles, binds, evictions."""
    loop_during: dict[str, float] = field(default_factory=dict)
    """The loop while the API was measured: cycles, seconds in them, wall seconds."""
    researcher_projects: list[str] = field(default_factory=list)
    timings: list[Timing] = field(default_factory=list)
    pages: list[Timing] = field(default_factory=list)
    """Each page's reads issued together."""
    peer: list[PeerResult] = field(default_factory=list)
    browser: BrowserResult = field(default_factory=BrowserResult)
    notes: list[str] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    """The machine's 1-minute load average at the start and at the end (other work skews)."""

    def p50(self, name: str, role: str = "admin") -> float | None:
        found = [t.p50_s for t in self.timings if t.name == name and t.role == role]
        return found[0] if found else None

    @property
    def first_page(self) -> Timing | None:
        found = [t for t in self.timings if t.role == "admin" and t.name.startswith("workloads")]
        return found[0] if found else None


def _metrics(url: str, token: str) -> dict[str, float]:
    """The loop so far, from the server's /metrics: cycles, seconds in them, binds, evictions."""
    text = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {token}"}).text
    out = {"cycles": 0.0, "cycle_s": 0.0, "binds": 0.0, "evicts": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gpupool_cycle_duration_seconds_count":
                out["cycles"] = sample.value
            elif sample.name == "gpupool_cycle_duration_seconds_sum":
                out["cycle_s"] = sample.value
            elif sample.name == "gpupool_decisions_total":
                kind = sample.labels.get("kind")
                if kind in ("bind", "evict"):
                    out[f"{kind}s"] += sample.value
    return out


def _settle(server: ServerProcess, token: str, config: Config) -> dict[str, float]:
    """Wait until the loop has run two cycles after the server answered: its first adopts the
    seeded tasks and writes its own pending reasons."""
    deadline = time.monotonic() + 120
    seen = _metrics(server.url, token)
    while seen["cycles"] < 2 and time.monotonic() < deadline:
        time.sleep(max(0.1, config.cycle_interval_s / 4))
        seen = _metrics(server.url, token)
    return seen


def run(config: Config, keep: bool = False) -> Result:
    result = Result(
        config=config,
        machine=f"{platform.machine()}, {os.cpu_count()} cores, {_cpu_model()}",
        python=platform.python_version(),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    )
    result.load.append(_load())
    if result.load[0] > (os.cpu_count() or 1) / 2:
        say(f"note: the machine is busy (load average {result.load[0]:.1f}): timings will suffer")
    tmp = Path(tempfile.mkdtemp(prefix="gpupool-dashboard-bench-"))
    data_dir = tmp / "server"
    data_dir.mkdir()
    try:
        began = time.perf_counter()
        say(
            f"seeding {data_dir}: {config.workloads:,} workloads, {config.projects} projects, "
            f"{config.days} days, {config.nodes} nodes x {config.gpus_per_node} GPUs"
        )
        engine = make_engine(sqlite_url(data_dir))
        migrate.upgrade(engine)
        plan_ = plan(config)
        admin_token, researcher_token = seed_state(engine, data_dir, plan_)
        result.statuses = dict(Counter(w.status for w in plan_.workloads).most_common())
        running = [w for w in plan_.workloads if w.status == WorkloadStatus.RUNNING.value]
        result.running_gpus = sum(w.gpus for w in running)
        say(
            f"  state: {len(plan_.workloads):,} workloads ("
            + ", ".join(f"{n:,} {s}" for s, n in result.statuses.items())
            + f"), {result.running_gpus:,.0f} of {config.gpus} GPUs held, "
            f"{time.perf_counter() - began:.1f} s"
        )
        result.seed_counts = seed_history(engine, plan_)
        engine.dispose()
        result.seed_s = time.perf_counter() - began
        result.database_mib = sum(f.stat().st_size for f in data_dir.glob("gpupool.db*")) / 2**20
        say(f"  seeded in {result.seed_s:.1f} s, database {result.database_mib:,.0f} MiB")
        ranked = sorted(plan_.projects, key=lambda p: -p.quota_gpus)
        result.researcher_projects = sorted(
            {ranked[0].name, ranked[len(ranked) // 2].name, ranked[-1].name}
        )

        server = ServerProcess(
            data_dir,
            simulated_nodes=f"{config.nodes}x{config.gpus_per_node}",
            cycle_interval_s=config.cycle_interval_s,
        )
        say("starting gpupool server (simulated executor on the same nodes, loop running)")
        started = time.perf_counter()
        with server:
            result.server_start_s = time.perf_counter() - started
            result.settle = _settle(server, admin_token, config)
            say(
                f"  pid {server.pid} at {server.url}, answered in {result.server_start_s:.1f} s; "
                f"before measuring, the loop ran {result.settle['cycles']:.0f} cycles "
                f"({result.settle['binds']:.0f} binds, {result.settle['evicts']:.0f} evictions)"
            )
            say(f"API: {config.requests} timed requests each after {config.warmup} warm-up")
            tokens = {"admin": admin_token, "researcher": researcher_token}
            before, wall = _metrics(server.url, admin_token), time.perf_counter()
            result.timings = measure_api(server, tokens, config, ranked[0].name, result.notes)
            result.pages = measure_pages(server, admin_token, config, result.timings)
            after = _metrics(server.url, admin_token)
            result.loop_during = {
                "cycles": after["cycles"] - before["cycles"],
                "cycle_s": after["cycle_s"] - before["cycle_s"],
                "wall_s": time.perf_counter() - wall,
            }
            say(
                f"  meanwhile the loop ran {result.loop_during['cycles']:.0f} cycles, "
                f"{result.loop_during['cycle_s']:.1f} s of the "
                f"{result.loop_during['wall_s']:.1f} s"
            )
            if config.raw_hours > 0:
                say(f"peer: the raw per-minute usage table, {config.raw_requests} requests each")
                result.peer = measure_peer(
                    server, admin_token, config, result.timings, result.seed_counts.raw_usage_rows
                )
            if config.browser:
                say(f"browser: Chromium, {config.browser_loads} loads per view after one")
                result.browser = measure_browser(server.url, admin_token, config.browser_loads)
                if result.browser.skipped:
                    say(f"  browser rows skipped: {result.browser.skipped}")
            else:
                result.browser = BrowserResult(skipped="--no-browser")
    finally:
        result.load.append(_load())
        if keep:
            say(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return result


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return math.nan


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


# -- output --------------------------------------------------------------------------------------


def overview_api_s(result: Result) -> float | None:
    """The overview's reads at its default range (history 1h, top, the 5 oldest pending),
    issued together as the page does, p50: the server's part of drawing it."""
    found = [t.p50_s for t in result.pages if t.name == "reads: overview 1h"]
    return found[0] if found else None


RENDER_CHECKS = {
    "overview 1h": ("overview", TARGET_OVERVIEW_S),
    "overview 30d": ("overview_30d", TARGET_OVERVIEW_S),
    "workloads": ("workloads_render", TARGET_WORKLOADS_S),
}
"""Browser view -> (its check's key, target)."""


def verdicts(result: Result) -> dict[str, dict[str, Any]]:
    """Each target with what measured it: the browser's renders when it ran (the overview at
    its default hour and at 30 days, the workloads page), and the workload list's first page
    through the API; without a browser, the overview's API reads stand in for its render."""
    out: dict[str, dict[str, Any]] = {}
    for view, (key, target) in RENDER_CHECKS.items():
        seconds = result.browser.median(view)
        if seconds is not None:
            out[key] = {
                "seconds": seconds,
                "target_s": target,
                "measured_by": f"browser, {VIEWS[view][1]} until drawn, median",
                "met": seconds <= target,
            }
    if "overview" not in out:
        seconds = overview_api_s(result)
        out["overview"] = {
            "seconds": seconds,
            "target_s": TARGET_OVERVIEW_S,
            "measured_by": "API reads only (history 1h + top + 5 oldest pending, together)",
            "met": seconds is not None and seconds <= TARGET_OVERVIEW_S,
        }
    page = result.first_page
    out["workloads_first_page"] = {
        "seconds": page.p50_s if page else None,
        "target_s": TARGET_WORKLOADS_S,
        "measured_by": f"GET /api/v1/workloads, {PAGE} rows, admin, p50",
        "met": page is not None and page.p50_s <= TARGET_WORKLOADS_S,
    }
    return out


def _ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:,.0f}" if value >= 0.1 else f"{value * 1000:.1f}"


def render(result: Result, console: Console) -> None:
    config = result.config
    table = Table(
        title=(
            f"gpupool dashboard: {config.workloads:,} workloads, {config.projects} projects, "
            f"{config.days} days of history, {config.nodes} x {config.gpus_per_node} GPUs"
        ),
        caption=(
            f"ms. page: in Chromium, navigation until drawn, median of {config.browser_loads}. "
            f"GET /api/v1/...: {config.requests} requests after {config.warmup} warm-up, "
            f"keep-alive; the researcher is in {len(result.researcher_projects)} projects. reads: "
            "a page's API calls issued together, admin"
        ),
    )
    for column in ("what", "admin p50", "p95", "researcher p50", "p95", "KiB", "target", ""):
        table.add_column(column, justify="left" if column in ("what", "") else "right")
    checks = verdicts(result)

    def verdict(key: str) -> str:
        check = checks.get(key)
        if check is None or check["seconds"] is None:
            return ""
        return "[green]met[/green]" if check["met"] else "[red]missed[/red]"

    browser = result.browser
    if browser.skipped is None:
        for view, (key, target) in RENDER_CHECKS.items():
            table.add_row(
                f"[bold]page: {view}[/bold]",
                f"[bold]{_ms(browser.median(view))}[/bold]", "", "", "", "",
                f"<= {target * 1000:,.0f}", verdict(key),
            )  # fmt: skip
        table.add_section()
    researcher = {t.name: t for t in result.timings if t.role == "researcher"}
    first = result.first_page
    for timing in (t for t in result.timings if t.role == "admin"):
        other = researcher.get(timing.name)
        is_first = first is not None and timing is first
        table.add_row(
            timing.name,
            f"[bold]{_ms(timing.p50_s)}[/bold]" if is_first else _ms(timing.p50_s),
            _ms(timing.p95_s),
            _ms(other.p50_s if other else None),
            _ms(other.p95_s if other else None),
            f"{timing.bytes / 1024:,.0f}",
            f"<= {TARGET_WORKLOADS_S * 1000:,.0f}" if is_first else "",
            verdict("workloads_first_page") if is_first else "",
        )
    if result.pages:
        table.add_section()
    for timing in result.pages:
        stands_in = browser.skipped is not None and timing.name == "reads: overview 1h"
        table.add_row(
            timing.name, _ms(timing.p50_s), _ms(timing.p95_s), "", "",
            f"{timing.bytes / 1024:,.0f}",
            f"<= {TARGET_OVERVIEW_S * 1000:,.0f}" if stands_in else "",
            verdict("overview") if stands_in else "",
        )  # fmt: skip
    console.print(table)

    if result.peer:
        peer = Table(
            title="What the history store buys: the raw per-minute usage table, same window",
            caption=(
                f"GET /api/v1/usage?by=project (raw rows, {config.raw_requests} requests) vs "
                "GET /api/v1/history (downsampled), admin, p50 ms"
            ),
        )
        for column in ("window", "raw rows read", "raw usage", "history", "ratio"):
            peer.add_column(column, justify="left" if column == "window" else "right")
        for p in result.peer:
            peer.add_row(
                p.window,
                f"~{p.raw_rows_read:,}",
                _ms(p.raw_p50_s),
                _ms(p.history_p50_s),
                "—" if p.ratio is None else f"{p.ratio:,.0f}x",
            )
        month = result.p50("history 30d")
        if month is not None:
            peer.add_row("30d", "(cannot: 14-day cap)", "—", _ms(month), "")
        console.print(peer)

    counts = result.seed_counts
    console.print(
        f"[dim]Seeded in {result.seed_s:.1f} s: "
        + ", ".join(f"{n:,} {s}" for s, n in result.statuses.items())
        + f"; {result.running_gpus:,.0f} GPUs held; {counts.minute_rows:,} per-minute and "
        f"{counts.hour_rows:,} hourly history rows, {counts.raw_usage_rows:,} raw usage rows "
        f"({config.raw_hours} h); database {result.database_mib:,.0f} MiB. The loop ran "
        f"{result.settle.get('cycles', 0):.0f} cycles before measuring "
        f"({result.settle.get('binds', 0):.0f} binds, {result.settle.get('evicts', 0):.0f} "
        f"evictions) and {result.loop_during.get('cycles', 0):.0f} cycles taking "
        f"{result.loop_during.get('cycle_s', 0):.1f} s of the API measurement's "
        f"{result.loop_during.get('wall_s', 0):.1f} s. "
        f"{result.machine}, Python {result.python}, {result.date}; load average "
        + " -> ".join(f"{x:.1f}" for x in result.load)
        + ".[/dim]"
    )
    if browser.skipped is not None:
        console.print(f"Browser render rows skipped: {browser.skipped}.")
    for view in browser.loads_s:
        calls = ", ".join(
            f"{path.split('?')[0]} {_ms(sent)}-{_ms(answered)}"
            for path, sent, answered in browser.calls.get(view, [])
        )
        console.print(
            f"[dim]Page {view}: modules run by {_ms(browser.scripts_s.get(view))}, drawn by "
            f"{_ms(browser.median(view))} (medians); its median load's API calls: {calls} "
            "(ms from navigation start).[/dim]"
        )
    for note in result.notes:
        console.print(f"Note: {note}.")
    for key, check in checks.items():
        if check["seconds"] is None:
            continue
        state = "[green]met[/green]" if check["met"] else "[red]missed[/red]"
        console.print(
            f"{key.replace('_', ' ')} <= {check['target_s'] * 1000:,.0f} ms: {state} "
            f"({check['seconds'] * 1000:,.0f} ms, {check['measured_by']})"
        )


def payload(result: Result) -> dict[str, Any]:
    checks = verdicts(result)
    ranges = {f"history_{r}_s": result.p50(f"history {r}") for r in HISTORY_RANGES}
    widest = max(result.peer, key=lambda p: RANGE_HOURS.get(p.window, 0), default=None)
    first = result.first_page
    return {
        "config": asdict(result.config),
        "machine": result.machine,
        "python": result.python,
        "date": result.date,
        "overview_render_s": result.browser.median("overview 1h"),
        "overview_30d_render_s": result.browser.median("overview 30d"),
        "workloads_render_s": result.browser.median("workloads"),
        "overview_api_s": overview_api_s(result),
        "pages_api": {
            t.name.removeprefix("reads: "): {"p50_s": t.p50_s, "p95_s": t.p95_s, "bytes": t.bytes}
            for t in result.pages
        },
        "workloads_first_page_s": first.p50_s if first else None,
        **ranges,
        "top_s": result.p50("top"),
        "projects_s": result.p50("projects"),
        "raw_usage_s": widest.raw_p50_s if widest else None,
        "raw_usage_window": widest.window if widest else None,
        "ratio_raw_to_history": widest.ratio if widest else None,
        "targets": checks,
        "targets_met": all(c["met"] for c in checks.values() if c["seconds"] is not None),
        "api": [
            {
                "name": t.name.strip(" +"),
                "role": t.role,
                "path": t.path,
                "params": t.params,
                "p50_s": t.p50_s,
                "p95_s": t.p95_s,
                "bytes": t.bytes,
                "rows": t.rows,
                "samples_s": t.samples_s,
            }
            for t in result.timings
        ],
        "peer": [
            {
                "window": p.window,
                "raw_rows_read": p.raw_rows_read,
                "raw_p50_s": p.raw_p50_s,
                "raw_samples_s": p.raw_samples_s,
                "history_p50_s": p.history_p50_s,
                "ratio": p.ratio,
            }
            for p in result.peer
        ],
        "browser": {
            "skipped": result.browser.skipped,
            "loads_s": result.browser.loads_s,
            "first_load_s": result.browser.first_load_s,
            "scripts_s": result.browser.scripts_s,
            "last_api_answer_s": result.browser.api_s,
            "api_calls_of_median_load": {
                view: [{"path": p, "sent_s": a, "answered_s": b} for p, a, b in calls]
                for view, calls in result.browser.calls.items()
            },
        },
        "seed": {
            "seconds": result.seed_s,
            "statuses": result.statuses,
            "running_gpus": result.running_gpus,
            "database_mib": result.database_mib,
            **asdict(result.seed_counts),
        },
        "server": {
            "start_s": result.server_start_s,
            "before_measuring": result.settle,
            "loop_while_measuring": result.loop_during,
        },
        "researcher_projects": result.researcher_projects,
        "load_average": result.load,
        "notes": result.notes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    defaults = Config()
    parser.add_argument(
        "--workloads", type=int, default=defaults.workloads, help="workloads (10,000)"
    )
    parser.add_argument("--projects", type=int, default=defaults.projects, help="projects (50)")
    parser.add_argument("--days", type=int, default=defaults.days, help="days of history (30)")
    parser.add_argument("--nodes", type=int, default=defaults.nodes, help="simulated nodes (64)")
    parser.add_argument("--gpus-per-node", type=int, default=defaults.gpus_per_node)
    parser.add_argument(
        "--raw-hours",
        type=int,
        default=defaults.raw_hours,
        help="hours of the raw per-minute usage table to seed and read (0: no peer; at most "
        f"{RAW_RETENTION_H}, its retention)",
    )
    parser.add_argument("--requests", type=int, default=defaults.requests, help="per endpoint")
    parser.add_argument("--warmup", type=int, default=defaults.warmup)
    parser.add_argument(
        "--raw-requests", type=int, default=defaults.raw_requests, help="per peer window"
    )
    parser.add_argument("--browser-loads", type=int, default=defaults.browser_loads)
    parser.add_argument("--no-browser", action="store_true", help="skip the page renders")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    config = Config(
        workloads=args.workloads,
        projects=args.projects,
        days=args.days,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        raw_hours=min(args.raw_hours, args.days * 24),
        requests=args.requests,
        warmup=args.warmup,
        raw_requests=args.raw_requests,
        browser=not args.no_browser,
        browser_loads=args.browser_loads,
        seed=args.seed,
    )
    if min(config.workloads, config.projects, config.days, config.nodes, config.requests) < 1:
        parser.error("sizes and --requests must be positive")
    if not 1 <= config.gpus_per_node <= 64:
        parser.error("--gpus-per-node: 1 to 64")
    if not 0 <= config.raw_hours <= RAW_RETENTION_H:
        parser.error(f"--raw-hours: 0 to {RAW_RETENTION_H}")
    if config.browser_loads < 1 or config.raw_requests < 1 or config.warmup < 0:
        parser.error("--browser-loads and --raw-requests at least 1, --warmup at least 0")
    result = run(config, keep=args.keep)
    if args.json:
        print(json.dumps(payload(result), indent=2))
    else:
        render(result, Console(width=100))
    met = all(c["met"] for c in verdicts(result).values() if c["seconds"] is not None)
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
