"""The founding story, run for real against a server with the local executor.

Bob's four training jobs fill the four GPUs while Patty's project is idle (Bob is over quota,
which is allowed while GPUs are free). Patty submits two jobs: her quota is guaranteed, so two
of Bob's jobs are preempted; they checkpoint on SIGTERM and wait. Patty's jobs finish, Bob's two
resume by themselves from their checkpoints, and everything completes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpupool.api.schemas import ProjectIn, WorkloadIn, WorkloadOut
from gpupool.client.http import ApiError, GpupoolClient

Say = Callable[[str], None]


@dataclass
class StoryResult:
    bob: list[str]
    patty: list[str]
    preempted: list[str] = field(default_factory=list)
    resumed_from_checkpoint: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _ensure_project(client: GpupoolClient, name: str, quota_gpu: int) -> None:
    try:
        client.create_project(ProjectIn.model_validate({"name": name, "quota": {"gpu": quota_gpu}}))
    except ApiError as error:
        if error.status != 409:
            raise


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
    """Run the story; `run_id` keeps the names of repeated runs apart."""
    began = time.monotonic()
    _ensure_project(client, "bob", 2)
    _ensure_project(client, "patty", 2)
    train = [sys.executable, "-m", "gpupool.demo.train", "--step-s", str(step_s)]
    bob = [f"bob/train-{run_id}-{i}" for i in range(1, 5)]
    patty = [f"patty/train-{run_id}-{i}" for i in range(1, 3)]

    def submit(key: str, steps: int) -> None:
        project, name = key.split("/")
        command = [*train, "--steps", str(steps), "--checkpoint-every", "5"]
        body = {"name": name, "project": project, "gpu": 1, "command": command}
        client.submit(WorkloadIn.model_validate({**body, "grace_period_s": 10}))

    say("Bob submits four training jobs; Patty's project is idle, so Bob may use all 4 GPUs.")
    for key in bob:
        submit(key, bob_steps)
    _wait(client, lambda s: all(s[k].status == "running" for k in bob), "Bob's jobs", timeout_s)
    say("  all four of Bob's jobs run (Bob holds 4 GPUs on a quota of 2).")
    time.sleep(min(2.0, bob_steps * step_s / 3))

    say("Patty submits two jobs: her quota of 2 GPUs is guaranteed.")
    for key in patty:
        submit(key, patty_steps)
    state = _wait(
        client,
        lambda s: all(s[k].status in ("running", "completed") for k in patty),
        "Patty's jobs to start",
        timeout_s,
    )
    preempted = [k for k in bob if state[k].preemptions > 0]
    say(f"  two of Bob's jobs were preempted and checkpointed: {', '.join(preempted)}")
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
