"""The seeded cluster, planned before anything is written: projects, users, nodes and
workloads (running ones placed so that each project holds exactly its quota)."""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass, field

from gpupool.api.schemas import WorkloadStatus

from .common import Config

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
