"""The founding story, run for real against a server with the local executor.

Bob's four training jobs fill the four GPUs while Patty's project is idle (Bob is over quota,
which is allowed while GPUs are free). Patty submits two jobs: her quota is guaranteed, so two
of Bob's jobs are preempted; they checkpoint on SIGTERM and wait. Patty's jobs finish, Bob's two
resume by themselves from their checkpoints, and everything completes.

On a cluster of N GPUs the story is the same with N of Bob's jobs, quotas N // 2 (Bob) and the
rest (Patty), and as many of Patty's jobs as her quota. It only tells its story on an idle
cluster: with other work pending or running it would preempt that work or wait behind it, so
`plan_demo` refuses, says why and how to run it on a gpupool of its own.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpupool.api.schemas import ProjectIn, ProjectPatch, WorkloadIn, WorkloadOut
from gpupool.client.http import ApiError, GpupoolClient

Say = Callable[[str], None]

LIVE = frozenset({"pending", "running", "completing", "deleting"})
"""Statuses of work that holds or wants GPUs (suspended work wants none until resumed)."""


class DemoRefusedError(Exception):
    """The demo would not tell its story on this cluster; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class DemoPlan:
    gpus: int
    """Whole GPUs on ready nodes: Bob submits this many one-GPU jobs."""
    bob_quota: int
    patty_quota: int
    """Also how many jobs Patty submits: as many of Bob's are preempted."""


def plan_demo(client: GpupoolClient) -> DemoPlan:
    """The demo's size on this cluster, or `DemoRefusedError` when it is not idle."""
    gpus = sum(node.gpu_count for node in client.nodes() if node.state == "ready")
    if gpus == 0:
        raise DemoRefusedError(
            "the demo needs at least one GPU on a ready node and this cluster has none: see "
            "`gpupool nodes`"
        )
    live = [w for w in client.list_workloads(limit=10_000).items if w.status in LIVE]
    if live:
        projects = sorted({w.project for w in live})
        shown = ", ".join(projects[:5]) + (", ..." if len(projects) > 5 else "")
        raise DemoRefusedError(
            f"the demo needs an idle cluster, and {len(live)} workload(s) of project(s) "
            f"{shown} are pending or running here: the demo would preempt them or wait behind "
            "them. Run it on a gpupool of its own, which leaves this one and your login alone: "
            "GPUPOOL_CONFIG=/tmp/gpupool-demo.json gpupool up --data-dir /tmp/gpupool-demo "
            "--port 8001 --fake-gpus 4x80G --demo (and later the same GPUPOOL_CONFIG with "
            "gpupool down --data-dir /tmp/gpupool-demo); or wait until this cluster is idle"
        )
    bob = gpus // 2
    return DemoPlan(gpus, bob, gpus - bob)


@dataclass
class StoryResult:
    bob: list[str]
    patty: list[str]
    preempted: list[str] = field(default_factory=list)
    resumed_from_checkpoint: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _ensure_project(client: GpupoolClient, name: str, quota_gpu: int) -> None:
    """The demo's project with the quota the story needs (set again if it exists)."""
    try:
        client.create_project(ProjectIn.model_validate({"name": name, "quota": {"gpu": quota_gpu}}))
    except ApiError as error:
        if error.status != 409:
            raise
        patch = ProjectPatch.model_validate({"quota": {"gpu": quota_gpu}})
        client.update_project(name, patch)


def _wait(
    client: GpupoolClient,
    check: Callable[[dict[str, WorkloadOut]], bool],
    what: str,
    timeout_s: float,
) -> dict[str, WorkloadOut]:
    deadline = time.monotonic() + timeout_s
    while True:
        state = {
            f"{w.project}/{w.name}": w
            for project in ("bob", "patty")
            for w in client.list_workloads(project=project, limit=10_000).items
        }
        if check(state):
            return state
        if time.monotonic() > deadline:
            raise TimeoutError(f"the demo waited {timeout_s:.0f} s for {what}")
        time.sleep(0.25)


def run_story(
    client: GpupoolClient,
    say: Say,
    run_id: str,
    bob_steps: int = 60,
    patty_steps: int = 20,
    step_s: float = 0.1,
    timeout_s: float = 120.0,
) -> StoryResult:
    """Run the story; `run_id` keeps the names of repeated runs apart. `DemoRefusedError` when the
    cluster is not idle (before anything is created or submitted)."""
    began = time.monotonic()
    plan = plan_demo(client)
    _ensure_project(client, "bob", plan.bob_quota)
    _ensure_project(client, "patty", plan.patty_quota)
    train = [sys.executable, "-m", "gpupool.demo.train", "--step-s", str(step_s)]
    bob = [f"bob/train-{run_id}-{i}" for i in range(1, plan.gpus + 1)]
    patty = [f"patty/train-{run_id}-{i}" for i in range(1, plan.patty_quota + 1)]

    def submit(key: str, steps: int) -> None:
        project, name = key.split("/")
        command = [*train, "--steps", str(steps), "--checkpoint-every", "5"]
        body = {"name": name, "project": project, "gpu": 1, "command": command}
        client.submit(WorkloadIn.model_validate({**body, "grace_period_s": 10}))

    say(
        f"Bob submits {len(bob)} training jobs; Patty's project is idle, so Bob may use all "
        f"{plan.gpus} GPUs."
    )
    for key in bob:
        submit(key, bob_steps)
    _wait(client, lambda s: all(s[k].status == "running" for k in bob), "Bob's jobs", timeout_s)
    say(f"  all of Bob's jobs run (Bob holds {plan.gpus} GPUs on a quota of {plan.bob_quota}).")
    time.sleep(min(2.0, bob_steps * step_s / 3))

    say(f"Patty submits {len(patty)} job(s): her quota of {plan.patty_quota} GPUs is guaranteed.")
    for key in patty:
        submit(key, patty_steps)
    state = _wait(
        client,
        lambda s: all(s[k].status in ("running", "completed") for k in patty),
        "Patty's jobs to start",
        timeout_s,
    )
    preempted = [k for k in bob if state[k].preemptions > 0]
    say(f"  {len(preempted)} of Bob's jobs were preempted and checkpointed: {', '.join(preempted)}")
    _wait(
        client,
        lambda s: all(s[k].status == "completed" for k in patty),
        "Patty's jobs to finish",
        timeout_s,
    )
    say("  Patty's jobs finished; Bob's preempted jobs resume by themselves.")
    _wait(
        client,
        lambda s: all(s[k].status == "completed" for k in bob),
        "Bob's jobs to finish",
        timeout_s,
    )
    resumed = []
    for key in preempted:
        project, name = key.split("/")
        text = client.logs(project, name, 0, 0).text
        if "resumed from checkpoint at step" in text:
            resumed.append(key)
    say(f"  every job completed; resumed from their checkpoints: {', '.join(resumed) or 'none'}")
    return StoryResult(bob, patty, preempted, resumed, time.monotonic() - began)
