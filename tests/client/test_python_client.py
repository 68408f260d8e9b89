"""The Python client (docs/python-client.md) against one real `gpupool server` for the module:
the local executor on two declared 80 GB devices, so a half-GPU workload runs a real Python
process and writes a real log. Each main call, the errors it raises (status and the server's
message), the admin calls, and examples/client_quickstart.py run as a user would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.api.schemas import NamesOut, UsageOut
from gpupool.client import (
    FINISHED,
    AmountsIn,
    ApiError,
    ClientConfig,
    ClientError,
    DepartmentIn,
    GpupoolClient,
    LogChunk,
    NotLoggedInError,
    ProjectIn,
    ProjectPatch,
    Role,
    ServerUnreachable,
    UserIn,
    WaitTimeout,
    WorkloadDetail,
    WorkloadIn,
    WorkloadOut,
    WorkloadPage,
    WorkloadStatus,
    WorkloadType,
)
from gpupool.client.config import write_config
from gpupool.server.process import ServerProcess, free_port
from liveserver import LiveServer, unique, wait_for

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "client_quickstart.py"
POLL_S = 0.05
FOREVER = "import time; print('up', flush=True); time.sleep(300)"
"""A task that runs until it is stopped (the server stops it at the latest on exit)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    process = ServerProcess(
        tmp_path_factory.mktemp("server"),
        cycle_interval_s=0.1,
        extra_args=("--executor", "local", "--fake-gpus", "2x80G", "--stop-tasks-on-exit"),
    )
    process.simulated_nodes = "0x0"
    with process:
        yield LiveServer(process)


@pytest.fixture
def admin(server: LiveServer) -> Iterator[GpupoolClient]:
    with GpupoolClient(server.url, server.admin_token) as client:
        yield client


@pytest.fixture
def project(admin: GpupoolClient) -> str:
    """A project of its own for each test, with a guaranteed GPU."""
    return admin.create_project(ProjectIn(name=unique("p"), quota=AmountsIn(gpu=1))).name


def python(name: str, project: str, code: str, **fields: object) -> WorkloadIn:
    """A half-GPU workload that runs `code` with this interpreter."""
    command = [sys.executable, "-c", code]
    return WorkloadIn.model_validate(
        {"name": name, "project": project, "gpu": 0.5, "command": command, **fields}
    )


def names(page: WorkloadPage) -> list[str]:
    return [w.name for w in page.items]


def gone(client: GpupoolClient, project: str, name: str) -> bool:
    try:
        client.describe(project, name)
    except ApiError as error:
        assert error.status == 404, error
        return True
    return False


def test_from_config_reads_the_cli_config_file_and_its_environment(
    server: LiveServer, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    write_config(ClientConfig(server=server.url, token=server.admin_token), config)
    with GpupoolClient.from_config({"GPUPOOL_CONFIG": str(config)}) as client:
        assert client.base_url == server.url
        assert client.whoami().role == Role.ADMIN
    environ = {  # the variables win over the file
        "GPUPOOL_CONFIG": str(tmp_path / "missing.json"),
        "GPUPOOL_SERVER": server.url + "/",
        "GPUPOOL_TOKEN": server.admin_token,
    }
    with GpupoolClient.from_config(environ) as client:
        assert client.whoami().name == "admin"
    with pytest.raises(NotLoggedInError, match="gpupool login"):
        GpupoolClient.from_config({"GPUPOOL_CONFIG": str(tmp_path / "missing.json")})


def test_submit_wait_describe_and_page_through_the_log(admin: GpupoolClient, project: str) -> None:
    code = "for i in range(5): print(f'line {i}', flush=True)"
    plan = admin.dry_run(python("hello", project, code))
    assert plan.would_start and [p.task_index for p in plan.placements] == [0]
    assert admin.list_workloads(project).total == 0  # a dry run stores nothing
    submitted = admin.submit(python("hello", project, code))
    assert isinstance(submitted, WorkloadOut)
    assert (submitted.project, submitted.name, submitted.submitted_by) == (
        project,
        "hello",
        "admin",
    )
    assert submitted.status == WorkloadStatus.PENDING
    assert (submitted.gpu_kind, submitted.gpu_milli_per_task) == ("fraction", 500)

    detail = admin.wait(project, "hello", timeout_s=60, poll_interval_s=POLL_S)
    assert isinstance(detail, WorkloadDetail)
    assert detail.status == WorkloadStatus.COMPLETED
    assert [(t.task_index, t.exit_code) for t in detail.task_list] == [(0, 0)]
    assert {e.kind for e in detail.events} >= {"submitted"}

    first = admin.logs(project, "hello")
    assert isinstance(first, LogChunk)
    wait_for(lambda: admin.logs(project, "hello").complete, what="the whole log")
    whole = admin.logs(project, "hello")
    assert [f"line {i}" for i in range(5)] == whole.text.splitlines()[:5]
    rest = admin.logs(project, "hello", offset=whole.next_offset)  # paging on from next_offset
    assert (rest.text, rest.next_offset, rest.complete) == ("", whole.next_offset, True)
    assert "".join(admin.iter_log(project, "hello")) == whole.text
    assert admin.logs(project, "hello", tail=1).text.count("\n") == 1
    assert admin.logs(project, "hello", run=1).text == whole.text
    listed = admin.list_workloads(project).items
    assert [(w.name, w.exit_code) for w in listed] == [("hello", 0)]


def test_list_workloads_with_filters_and_pages(admin: GpupoolClient, project: str) -> None:
    admin.submit(python("done-a", project, "print('a')"))
    admin.submit(python("done-b", project, "print('b')", type="inference"))
    admin.submit(python("held", project, FOREVER, type="interactive"))
    wait_for(
        lambda: (
            admin.list_workloads(project, WorkloadStatus.COMPLETED).total == 2
            and admin.describe(project, "held").status == WorkloadStatus.RUNNING
        ),
        timeout_s=60,
        what="two completed and one running",
    )
    assert names(admin.list_workloads(project)) == ["done-a", "done-b", "held"]
    assert names(admin.list_workloads(project, status="running")) == ["held"]
    assert names(admin.list_workloads(project, type=WorkloadType.INFERENCE)) == ["done-b"]
    assert names(admin.list_workloads(project, q="DONE")) == ["done-a", "done-b"]
    assert names(admin.list_workloads(project, user="admin", sort="name", order="desc")) == [
        "held",
        "done-b",
        "done-a",
    ]
    assert admin.list_workloads(project, user="nobody").total == 0
    node = admin.describe(project, "held").task_list[0].node
    assert names(admin.list_workloads(project, node=node)) == ["held"]
    page = admin.list_workloads(project, limit=1, offset=1)
    assert (names(page), page.total) == (["done-b"], 3)
    assert [w.name for w in admin.iter_workloads(project, page_size=1)] == names(
        admin.list_workloads(project)
    )
    admin.delete(project, "held")


def test_suspend_resume_and_delete(admin: GpupoolClient, project: str) -> None:
    admin.submit(python("long", project, FOREVER))
    running = {WorkloadStatus.RUNNING}
    admin.wait(project, "long", running, timeout_s=60, poll_interval_s=POLL_S)
    wait_for(lambda: "up" in admin.logs(project, "long").text)  # its process has started

    suspended = admin.suspend(project, "long")
    assert suspended.status == WorkloadStatus.SUSPENDED
    with pytest.raises(ApiError) as again:
        admin.suspend(project, "long")
    assert again.value.status == 409
    assert "only a pending or running workload can be suspended" in again.value.detail

    assert admin.resume(project, "long").status == WorkloadStatus.PENDING
    detail = admin.wait(project, "long", running, timeout_s=60, poll_interval_s=POLL_S)
    assert len(detail.task_list) == 2  # the first run stopped, the second runs
    wait_for(lambda: admin.logs(project, "long").text.splitlines().count("up") == 2)
    log = admin.logs(project, "long").text.splitlines()
    assert log[1:3] == [
        "gpupool: task ended: stopped (exit code 143): suspended by admin",
        "--- gpupool: task 0 started again (run 2) ---",
    ]

    assert admin.delete(project, "long").status == WorkloadStatus.DELETING
    wait_for(lambda: gone(admin, project, "long"), timeout_s=60, what="the workload to go")


def test_wait_gives_up_after_its_timeout(admin: GpupoolClient, project: str) -> None:
    admin.submit(python("slow", project, FOREVER))
    with pytest.raises(WaitTimeout) as caught:
        admin.wait(project, "slow", FINISHED, timeout_s=0.2, poll_interval_s=POLL_S)
    assert isinstance(caught.value, TimeoutError) and isinstance(caught.value, ClientError)
    assert caught.value.status in (WorkloadStatus.PENDING, WorkloadStatus.RUNNING)
    assert f"workload {project}/slow is still" in str(caught.value)
    admin.delete(project, "slow")


def test_errors_carry_the_status_and_the_servers_message(
    server: LiveServer, admin: GpupoolClient, project: str
) -> None:
    with pytest.raises(ApiError) as missing:
        admin.describe(project, "no-such-workload")
    assert missing.value.status == 404
    assert f"workload '{project}/no-such-workload' not found" in missing.value.detail
    assert str(missing.value) == missing.value.detail

    bad = WorkloadIn.model_construct(name="Bad_Name", project=project, gpu=0.5, command=["x"])
    with pytest.raises(ApiError) as invalid:
        admin.submit(bad)  # model_construct skips the client-side check the server makes
    assert invalid.value.status == 422
    assert [e.field for e in invalid.value.errors] == ["name"]
    assert "name:" in str(invalid.value)
    with pytest.raises(ApiError) as out_of_range:
        admin.list_workloads(project, limit=0)
    assert out_of_range.value.status == 422

    admin.submit(python("twice", project, "print(1)"))
    with pytest.raises(ApiError) as taken:
        admin.submit(python("twice", project, "print(1)"))
    assert taken.value.status == 409
    with pytest.raises(ApiError) as no_task:
        admin.logs(project, "twice", task=3)
    assert no_task.value.status == 404
    assert "the workload has tasks 0..0" in no_task.value.detail

    user = admin.create_user(UserIn(name=unique("r"), projects=[project]))
    token = admin.create_token(user.name).token
    with GpupoolClient(server.url, token) as researcher:
        with pytest.raises(ApiError) as forbidden:
            researcher.create_project(ProjectIn(name=unique("p")))
        assert forbidden.value.status == 403
        assert "create projects" in forbidden.value.detail
        assert researcher.describe(project, "twice").name == "twice"  # a member's own project
    with GpupoolClient(server.url, "gp_not-a-token") as stranger, pytest.raises(ApiError) as who:
        stranger.whoami()
    assert who.value.status == 401
    nowhere = GpupoolClient(f"http://127.0.0.1:{free_port()}", token)
    with nowhere, pytest.raises(ServerUnreachable) as unreachable:
        nowhere.health()
    assert isinstance(unreachable.value, ClientError)
    assert not isinstance(unreachable.value, ApiError)
    admin.delete_user(user.name)


def test_admin_calls(server: LiveServer, admin: GpupoolClient) -> None:
    department = admin.create_department(DepartmentIn(name=unique("d"), quota=AmountsIn(gpu=2)))
    assert (department.kind, department.quota.gpu_milli) == ("department", 2000)
    spec = ProjectIn(name=unique("p"), department=department.name, quota=AmountsIn(gpu=0.5))
    created = admin.create_project(spec)
    assert (created.department, created.quota.gpu_milli) == (department.name, 500)
    patch = ProjectPatch(quota=AmountsIn(gpu=1, memory="64G"), priority=5)
    changed = admin.update_project(created.name, patch)
    assert (changed.quota.gpu_milli, changed.quota.memory_mib, changed.priority) == (1000, 65536, 5)
    assert admin.project(created.name).priority == 5
    assert created.name in [p.name for p in admin.projects()]
    assert department.name in [d.name for d in admin.departments()]
    assert admin.department(department.name).quota.gpu_milli == 2000

    user = admin.create_user(UserIn(name=unique("u")))
    assert (user.role, user.projects) == (Role.RESEARCHER, [])
    assert admin.set_user_projects(user.name, [created.name]).projects == [created.name]
    token = admin.create_token(user.name, label="notebook")
    assert token.user == user.name and token.id is not None
    with GpupoolClient(server.url, token.token) as theirs:
        assert [p.name for p in theirs.projects()] == [created.name]
    listed = admin.tokens(user.name)
    assert [(t.id, t.label) for t in listed] == [(token.id, "notebook")]
    admin.revoke_token(token.id)
    with GpupoolClient(server.url, token.token) as revoked, pytest.raises(ApiError) as caught:
        revoked.whoami()
    assert caught.value.status == 401
    assert user.name in [u.name for u in admin.users()]
    admin.delete_user(user.name)
    assert user.name not in [u.name for u in admin.users()]

    admin.delete_project(created.name)
    admin.delete_department(department.name)
    with pytest.raises(ApiError) as missing:
        admin.project(created.name)
    assert missing.value.status == 404


def test_cluster_usage_and_history_calls(admin: GpupoolClient, project: str) -> None:
    assert admin.health().status == "ok"
    nodes = admin.nodes()
    assert [n.gpu_count for n in nodes] == [2]
    assert admin.node(nodes[0].name).devices[1].memory_mib == 80 * 1024
    known = admin.names()
    assert isinstance(known, NamesOut) and project in known.projects
    assert known.nodes == [nodes[0].name]
    assert admin.top().capacity_gpu_milli == 2000
    usage = admin.usage(by="project", minutes=10, bucket_s=60)
    assert isinstance(usage, UsageOut) and usage.by == "project"
    history = admin.history("1h", project_series=["allocated"])
    assert all(s.utilized_gpu is None and s.allocated_gpu is not None for s in history.projects)
    assert len(history.times) == len(history.capacity_gpu)
    assert admin.device_history("1h").resolution_s in (60, 3600)
    admin.submit(python("seen", project, "print(1)"))
    events = admin.events(project=project, workload="seen")
    assert events and events[0].kind == "submitted"
    assert "gpupool_" in admin.metrics_text()


def test_the_quickstart_example_runs(server: LiveServer, project: str, tmp_path: Path) -> None:
    env = dict(
        os.environ,
        GPUPOOL_CONFIG=str(tmp_path / "no-config.json"),
        GPUPOOL_SERVER=server.url,
        GPUPOOL_TOKEN=server.admin_token,
        GPUPOOL_PROJECT=project,
    )
    args = [sys.executable, str(EXAMPLE), "--python", sys.executable, "--timeout", "90"]
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    name = out.split(f"submitted {project}/", 1)[1].split(":", 1)[0]
    expected = [
        f"connected to {server.url} as admin (admin)\n",
        f"{project}/{name}: completed\n",
        ": done, exit code 0\n",
        "  | step 2\n",
        f"  {name} ",
        f"deleted {project}/{name}\n",
    ]
    assert [line for line in expected if line not in out] == [], out
    assert re.search(r"^  \| hello from [01]$", out, re.M), out  # the device it was given
    with GpupoolClient(server.url, server.admin_token) as client:
        assert gone(client, project, name)


def test_the_quickstart_example_says_how_to_log_in(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_")}
    env["GPUPOOL_CONFIG"] = str(tmp_path / "no-config.json")
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 4
    assert "not logged in" in result.stderr and "gpupool login" in result.stderr
