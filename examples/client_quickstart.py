"""The gpupool Python client in one script: submit a half-GPU workload, wait for it, show its
state and the end of its log, list the project's workloads, and clean up.

Run it where the CLI is logged in (`gpupool up` starts a server on this machine and logs in):

    python examples/client_quickstart.py [--project P] [--timeout SECONDS] [--python PATH]

The server and token come from the CLI's config file ($GPUPOOL_CONFIG, else
~/.config/gpupool/config.json) with GPUPOOL_SERVER, GPUPOOL_TOKEN and GPUPOOL_PROJECT on top.
The project is --project, else the configured default, else the first one you may use; an admin
with no project at all gets a temporary one, deleted at the end. Exit status: 0 when the
workload completed, 1 when it failed or did not finish in time, 4 when not logged in, 6 when
the server cannot be reached, 2 for another error of the API. See docs/python-client.md.
"""

from __future__ import annotations

import argparse
import secrets
import sys

from gpupool.client import (
    AmountsIn,
    ApiError,
    ClientError,
    GpupoolClient,
    NotLoggedInError,
    ProjectIn,
    Role,
    ServerUnreachable,
    WaitTimeout,
    WorkloadIn,
    WorkloadStatus,
    effective_config,
)

CODE = (
    "import os, time\n"
    "for step in range(3):\n"
    "    print(f'step {step}', flush=True)\n"
    "    time.sleep(0.2)\n"
    "print('hello from', os.environ.get('CUDA_VISIBLE_DEVICES', 'no device'), flush=True)\n"
)
"""What the workload runs: a few lines of output, then the device it was given."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Submit, wait, show the log, clean up.")
    parser.add_argument("--project", help="default: the configured one, else the first yours")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for it")
    parser.add_argument("--python", default="python3", help="the interpreter on the server side")
    args = parser.parse_args(argv)
    try:
        with GpupoolClient.from_config() as client:
            return run(client, args.project or effective_config().project, args)
    except NotLoggedInError as error:
        print(f"error: {error}", file=sys.stderr)
        return 4
    except ServerUnreachable as error:
        print(f"error: {error}", file=sys.stderr)
        return 6
    except ApiError as error:  # str(error): the server's sentence and each field's problem
        print(f"error: HTTP {error.status}: {error}", file=sys.stderr)
        return 2


def run(client: GpupoolClient, project: str | None, args: argparse.Namespace) -> int:
    me = client.whoami()
    print(f"connected to {client.base_url} as {me.name} ({me.role})")
    project, temporary = choose_project(client, project, me.role)
    name = f"quickstart-{secrets.token_hex(3)}"
    workload = WorkloadIn(
        name=name,
        project=project,
        gpu=0.5,  # half of one device; `gpu_memory="8G"` asks by memory instead
        command=[args.python, "-c", CODE],
        duration_s=3,  # a simulated server "runs" it this long; real executors ignore it
    )
    submitted = client.submit(workload)
    print(f"submitted {project}/{name}: {submitted.status}")
    try:
        try:
            detail = client.wait(project, name, timeout_s=args.timeout, poll_interval_s=0.5)
        except WaitTimeout as error:
            print(f"gave up waiting: {error}")
            detail = client.describe(project, name)
        print(f"{project}/{name}: {detail.status}")
        if detail.status == WorkloadStatus.PENDING:
            print(f"  why pending: {detail.pending_reason}")
        for task in detail.task_list:  # every run of every task, first run first
            where = f"{task.node} device(s) {task.devices}"
            print(f"  task {task.task_index} on {where}: {task.state}, exit code {task.exit_code}")
        # The log of task 0, every page of it; `follow` reads on until the executor has it all.
        finished = detail.status in (WorkloadStatus.COMPLETED, WorkloadStatus.FAILED)
        text = "".join(client.iter_log(project, name, follow=finished, poll_interval_s=0.2))
        lines = text.splitlines()[-5:]
        print("last lines of its log:" if lines else "its log is empty")
        for line in lines:
            print(f"  | {line}")
        print(f"workloads of project {project}, newest first:")
        page = client.list_workloads(project, sort="submitted_at", order="desc", limit=10)
        for item in page.items:
            print(f"  {item.name:<24} {item.status:<10} {item.type}")
        print(f"  ({page.total} in all)")
        return 0 if detail.status == WorkloadStatus.COMPLETED else 1
    finally:
        clean_up(client, project, name, temporary)


def choose_project(client: GpupoolClient, project: str | None, role: Role) -> tuple[str, bool]:
    """The project to submit to, and whether this script created it (and deletes it)."""
    if project:
        return project, False
    mine = [p.name for p in client.projects() if p.kind == "project"]
    if mine:
        return mine[0], False
    if role != Role.ADMIN:
        raise SystemExit("error: you are a member of no project: ask an admin to add you to one")
    name = f"quickstart-{secrets.token_hex(3)}"
    client.create_project(ProjectIn(name=name, quota=AmountsIn(gpu=1)))
    print(f"created the temporary project {name} (quota 1 GPU)")
    return name, True


def clean_up(client: GpupoolClient, project: str, name: str, temporary: bool) -> None:
    """Delete the workload, wait until it is gone, then delete a temporary project."""
    try:
        client.delete(project, name)
        client.wait(project, name, until=(), timeout_s=60, poll_interval_s=0.2)
    except ApiError as error:
        if error.status != 404:  # 404: gone, which is what we waited for
            raise
    except ClientError as error:
        print(f"could not clean up {project}/{name}: {error}", file=sys.stderr)
        return
    print(f"deleted {project}/{name}")
    if temporary:
        client.delete_project(project)
        print(f"deleted the temporary project {project}")


if __name__ == "__main__":
    sys.exit(main())
