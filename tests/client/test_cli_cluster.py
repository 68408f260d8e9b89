"""The server commands of `gpupool` (login, submit, list, ...), their config file and client.

The first tests need no server: the config file, and input that must fail before any request
(the configured server is a closed port, so a request would exit 6, not 2). The end-to-end
tests run the CLI in-process against one real `gpupool server` child process per module (the
same `ServerProcess` as the `live_server` fixture, started once: 2 s instead of 2 s a test).
"""

from __future__ import annotations

import functools
import itertools
import json
import socket
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import Result
from typer.testing import CliRunner

from gpupool.api.schemas import ErrorOut, ProjectIn, TopOut, WorkloadOut
from gpupool.cli.main import app
from gpupool.client.config import (
    ClientConfig,
    ConfigError,
    NotLoggedInError,
    effective_config,
    normalize_server,
    read_config,
    write_config,
)
from gpupool.client.http import ApiError, GpupoolClient
from liveserver import LiveServer, unique, wait_for

Cli = Callable[..., Result]


def closed_port_url() -> str:
    """A localhost URL where nothing listens (a port just freed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return tmp_path / "gpupool" / "config.json"


@pytest.fixture
def cli(config_file: Path) -> Cli:
    """Run `gpupool ARGS...` with its config in tmp_path and no GPUPOOL_* from outside."""
    runner = CliRunner()
    env = {
        "GPUPOOL_CONFIG": str(config_file),
        "GPUPOOL_SERVER": None,
        "GPUPOOL_TOKEN": None,
        "GPUPOOL_PROJECT": None,
        "COLUMNS": "200",
    }

    def run(*args: str, env_extra: dict[str, str] | None = None) -> Result:
        return runner.invoke(app, list(args), env={**env, **(env_extra or {})})

    return run


@pytest.fixture
def offline(config_file: Path) -> str:
    """A config that is logged in to a server that does not answer; returns its URL."""
    url = closed_port_url()
    write_config(ClientConfig(server=url, token="gp_x", project="team-a"), config_file)
    return url


# -- the config file -----------------------------------------------------------------------------


def test_config_file_round_trips_with_mode_0600(config_file: Path) -> None:
    config = ClientConfig(server="http://h:1", token="gp_secret", project="team-a")
    write_config(config, config_file)
    assert read_config(config_file) == config
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    assert json.loads(config_file.read_text()) == {
        "server": "http://h:1",
        "token": "gp_secret",
        "project": "team-a",
    }


def test_missing_config_is_empty_and_not_logged_in(config_file: Path) -> None:
    config = read_config(config_file)
    assert config == ClientConfig()
    with pytest.raises(NotLoggedInError, match="gpupool login --server URL --token TOKEN"):
        config.login()


def test_environment_overrides_the_file(config_file: Path) -> None:
    write_config(ClientConfig(server="http://h:1", token="gp_a", project="a"), config_file)
    env = {
        "GPUPOOL_CONFIG": str(config_file),
        "GPUPOOL_SERVER": "http://other:2/",
        "GPUPOOL_PROJECT": "b",
        "GPUPOOL_TOKEN": "",
    }
    assert effective_config(env) == ClientConfig(server="http://other:2", token="gp_a", project="b")


def test_malformed_config_file_says_where(config_file: Path) -> None:
    config_file.parent.mkdir(parents=True)
    config_file.write_text('{"server": ')
    with pytest.raises(ConfigError, match="not valid JSON"):
        read_config(config_file)


@pytest.mark.parametrize("url", ["localhost:8000", "ftp://h", "http://", ""])
def test_server_must_be_an_http_url(url: str) -> None:
    with pytest.raises(ConfigError, match="like http://"):
        normalize_server(url)


def test_config_set_and_show(cli: Cli, config_file: Path) -> None:
    assert cli("config", "set", "server", "http://127.0.0.1:9/").exit_code == 0
    assert cli("config", "set", "project", "team-a").exit_code == 0
    shown = cli("config", "show", "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout) == {
        "path": str(config_file),
        "server": "http://127.0.0.1:9",
        "token": None,
        "project": "team-a",
    }
    overridden = cli("config", "show", env_extra={"GPUPOOL_PROJECT": "team-b"})
    assert "project: team-b  (from GPUPOOL_PROJECT)" in overridden.stdout


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [("server", "localhost:8000", "like http://"), ("project", "Team A", "not a project name")],
)
def test_config_set_rejects_bad_values(cli: Cli, key: str, value: str, message: str) -> None:
    result = cli("config", "set", key, value)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert message in result.stderr


# -- failing before any request ----------------------------------------------------------------


def test_not_logged_in_exits_4(cli: Cli) -> None:
    result = cli("list")
    assert result.exit_code == 4
    assert "run `gpupool login --server URL --token TOKEN`" in result.stderr


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize(
    ("args", "messages"),
    [
        (["--gpu", "1.5"], ["gpu: a fraction must be between 0 and 1 (got 1.5)"]),
        (["--gpu", "1", "--gpu-memory", "8G"], ["give gpu or gpu_memory, not both"]),
        ([], ["give the GPU per task"]),
        (["--gpu", "0.5", "--gpu-limit", "0.4"], ["gpu_limit: gpu_limit (0.4) must be at least"]),
        (["--gpu", "1", "--tasks", "2", "--min-available", "3"], ["min_available: min_avail"]),
        (["--gpu", "1", "--tasks", "0"], ["tasks: Input should be greater than or equal to 1"]),
        (["--gpu", "1", "--env", "NOEQUALS"], ["--env takes KEY=VALUE"]),
        (["--gpu", "1", "--type", "batch"], ["Invalid value for '--type'"]),
        (["--gpu", "1"], ["nothing to run: give the command after `--`"]),
    ],
)
def test_submit_rejects_bad_input_before_any_request(
    cli: Cli, args: list[str], messages: list[str]
) -> None:
    result = cli("submit", "job1", *args)
    assert result.exit_code == 2, result.output
    for message in messages:
        assert message in result.stderr


def test_submit_field_errors_are_one_line_each(cli: Cli, offline: str) -> None:
    result = cli("submit", "Job_1", "--gpu", "1.5")
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("error: invalid request: name: String should match pattern")
    assert "; gpu: a fraction must be between 0 and 1 (got 1.5)" in line


def test_submit_without_any_project_is_a_clear_error(cli: Cli, config_file: Path) -> None:
    write_config(ClientConfig(server=closed_port_url(), token="gp_x"), config_file)
    result = cli("submit", "job1", "--gpu", "1")
    assert result.exit_code == 2
    assert "no project given: pass --project NAME" in result.stderr
    assert "gpupool config set project NAME" in result.stderr


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["project", "set", "team-a"], "nothing to change"),
        (["project", "set", "team-a", "--limit-gpu", "2", "--no-limit"], "not both"),
        (["project", "create", "team-b", "--quota-gpu", "-1"], "quota.gpu: gpu must be 0 or more"),
        (["list", "--project", "team-a", "--all"], "not both"),
        (["login", "--server", "http://h:1"], "give the token with --token"),
        (["user", "create", "bob", "--project", "Not A Name"], "projects.0: String should"),
    ],
)
def test_other_bad_input_exits_2(cli: Cli, args: list[str], message: str) -> None:
    result = cli(*args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr


# -- the server does not answer ------------------------------------------------------------------


def test_unreachable_server_exits_6_and_says_how_to_fix(cli: Cli, offline: str) -> None:
    result = cli("list")
    assert result.exit_code == 6
    assert result.stderr.count("\n") == 1
    assert f"cannot reach the gpupool server at {offline}" in result.stderr
    assert "is `gpupool server` running" in result.stderr
    assert "gpupool config show" in result.stderr


def test_submit_with_valid_input_reaches_for_the_server(cli: Cli, offline: str) -> None:
    result = cli("submit", "job1", "--gpu", "1", "--", "python", "train.py", "--lr", "0.1")
    assert result.exit_code == 6, result.output


def test_login_to_an_unreachable_server_saves_nothing(cli: Cli, config_file: Path) -> None:
    result = cli("login", "--server", closed_port_url(), "--token", "gp_x")
    assert result.exit_code == 6
    assert not config_file.exists()


def test_environment_server_wins_over_the_file(cli: Cli, offline: str) -> None:
    other = closed_port_url()
    result = cli("nodes", env_extra={"GPUPOOL_SERVER": other})
    assert result.exit_code == 6
    assert other in result.stderr


# -- end to end, against a real server ---------------------------------------------------------


@pytest.fixture
def admin(cli: Cli, server: LiveServer, config_file: Path) -> Cli:
    """`cli`, logged in as the server's first admin."""
    write_config(ClientConfig(server=server.url, token=server.admin_token), config_file)
    return cli


@pytest.fixture
def api(server: LiveServer) -> Iterator[GpupoolClient]:
    """The admin's client, to set up and to poll what the CLI did."""
    with GpupoolClient(server.url, server.admin_token) as client:
        yield client


def new_project(api: GpupoolClient, **fields: Any) -> str:
    name = unique("p")
    api.create_project(ProjectIn.model_validate({"name": name, "quota": {"gpu": 2}} | fields))
    return name


def json_out(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_login_checks_the_token_and_saves_it(
    cli: Cli, server: LiveServer, config_file: Path
) -> None:
    result = cli("login", "--server", server.url + "/", "--token", server.admin_token)
    assert result.exit_code == 0, result.output
    assert f"Logged in to {server.url} as admin (admin)" in result.stdout
    assert read_config(config_file) == ClientConfig(server=server.url, token=server.admin_token)
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    shown = cli("config", "show")
    assert server.admin_token not in shown.stdout  # masked
    assert json_out(cli("nodes", "--json"))[0]["gpu_count"] == 4


def test_login_with_a_token_file(cli: Cli, server: LiveServer) -> None:
    token_file = server.process.data_dir / "admin-token"
    result = cli("login", "--server", server.url, "--token-file", str(token_file), "--json")
    assert json_out(result)["name"] == "admin"


def test_login_with_a_wrong_token_exits_4_and_saves_nothing(
    cli: Cli, server: LiveServer, config_file: Path
) -> None:
    result = cli("login", "--server", server.url, "--token", "gp_wrong")
    assert result.exit_code == 4
    assert result.stderr.startswith("error: token not recognised")
    assert not config_file.exists()


def test_projects_create_change_conflict_and_delete(admin: Cli) -> None:
    name = unique("p")
    created = admin("project", "create", name, "--quota-gpu", "2.5", "--weight", "3",
                    "--limit-gpu", "4", "--priority", "1")  # fmt: skip
    assert created.exit_code == 0, created.output
    assert name in created.stdout
    again = admin("project", "create", name)
    assert again.exit_code == 5
    assert "already exists" in again.stderr
    [row] = [p for p in json_out(admin("projects", "--json")) if p["name"] == name]
    assert row["quota"]["gpu_milli"] == 2500
    assert row["limit"]["gpu_milli"] == 4000
    assert (row["over_quota_weight"], row["priority"]) == (3, 1)
    changed = json_out(admin("project", "set", name, "--quota-gpu", "1", "--no-limit", "--json"))
    assert changed["quota"]["gpu_milli"] == 1000
    assert changed["limit"] is None
    assert changed["over_quota_weight"] == 3  # left out, kept
    assert admin("project", "delete", name).exit_code == 0
    gone = admin("project", "delete", name)
    assert gone.exit_code == 3
    assert gone.stderr.startswith("error: ")


def test_department_holds_projects(admin: Cli) -> None:
    department, project = unique("d"), unique("p")
    assert admin("department", "create", department, "--quota-gpu", "4").exit_code == 0
    result = admin("project", "create", project, "--department", department, "--json")
    assert json_out(result)["department"] == department
    departments = json_out(admin("projects", "--departments", "--json"))
    assert department in [d["name"] for d in departments]


def test_submit_runs_and_describe_list_show_it(admin: Cli, api: GpupoolClient) -> None:
    project, name = new_project(api), unique("job")
    options = ["--project", project, "--gpu", "0.5", "--duration", "60", "--env", "SEED=1"]
    result = admin("submit", name, *options, "--json", "--", "python", "train.py", "--lr", "0.1")
    submitted = WorkloadOut.model_validate(json_out(result))
    assert submitted.command == ["python", "train.py", "--lr", "0.1"]
    assert (submitted.gpu_kind, submitted.gpu_amount, submitted.env) == (
        "fraction",
        500,
        {"SEED": "1"},
    )
    wait_for(lambda: api.describe(project, name).running_tasks == 1, 10, "the workload to run")
    shown = admin("describe", name, "--project", project)
    assert shown.exit_code == 0, shown.output
    assert "running" in shown.stdout
    assert "python train.py --lr 0.1" in shown.stdout
    assert "sim-" in shown.stdout  # the task's node
    detail = json_out(admin("describe", name, "--project", project, "--json"))
    assert detail["task_list"][0]["state"] == "running"
    assert detail["events"][0]["kind"] == "submitted"
    listed = admin("list", "--project", project)
    [row] = [line for line in listed.stdout.splitlines() if name in line]
    assert row.split()[:6] == [project, name, "train", "running", "0.5", "1/1"]
    page = json_out(admin("list", "--project", project, "--json"))
    assert [w["name"] for w in page["items"]] == [name]
    assert admin("delete", name, "--project", project).exit_code == 0


def test_pending_reason_is_shown(admin: Cli, api: GpupoolClient) -> None:
    project, name = new_project(api, quota={"gpu": 1}, limit={"gpu": 1}), unique("big")
    assert admin("submit", name, "-p", project, "--gpu", "2", "--", "sleep", "inf").exit_code == 0

    def reason() -> str:
        return api.describe(project, name).pending_reason or ""

    wait_for(lambda: "limit" in reason(), 10, "a pending reason from the scheduler")
    shown = admin("describe", name, "-p", project)
    assert "Pending reason" in shown.stdout
    assert f"project {project} is at its limit" in shown.stdout
    listed = admin("list", "-p", project)
    assert "pending" in listed.stdout
    assert f"project {project} is at its limit" in listed.stdout
    pending = json_out(admin("list", "-p", project, "--status", "pending", "--json"))
    assert [w["name"] for w in pending["items"]] == [name]
    assert json_out(admin("list", "-p", project, "--status", "running", "--json"))["items"] == []


def test_suspend_resume_delete(admin: Cli, api: GpupoolClient) -> None:
    project, name = new_project(api), unique("job")
    admin("config", "set", "project", project)  # the default project from here on
    assert admin("submit", name, "--gpu", "0.1", "--duration", "60").exit_code == 0
    wait_for(lambda: api.describe(project, name).running_tasks == 1, 10, "the workload to run")
    suspended = admin("suspend", name)
    assert suspended.exit_code == 0, suspended.output
    assert suspended.stdout.strip() == f"{project}/{name}: suspended"
    assert json_out(admin("describe", name, "--json"))["status"] == "suspended"
    resumed = json_out(admin("resume", name, "--json"))
    assert resumed["status"] in ("pending", "running")
    deleted = admin("delete", name)
    assert deleted.stdout.strip() == f"{project}/{name}: deleting"

    def gone() -> bool:
        return admin("describe", name).exit_code == 3

    wait_for(gone, 10, "the deleted workload to go away")
    assert admin("suspend", name).exit_code == 3


def test_logs_follow_until_the_task_ends(admin: Cli, api: GpupoolClient) -> None:
    project, name = new_project(api), unique("job")
    assert admin("submit", name, "-p", project, "--gpu", "0.1", "--duration", "0.5").exit_code == 0
    followed = admin("logs", name, "-p", project, "--follow")
    assert followed.exit_code == 0, followed.output
    assert f"simulated task {name}/0 started" in followed.stdout
    assert "finished: exit code 0" in followed.stdout
    assert admin("logs", name, "-p", project).stdout == followed.stdout
    missing = admin("logs", name, "-p", project, "--task", "5")
    assert missing.exit_code == 3


def test_server_errors_map_to_exit_codes(admin: Cli, api: GpupoolClient) -> None:
    project, name = new_project(api), unique("job")
    unknown = admin("submit", name, "-p", unique("nope"), "--gpu", "1", "--", "true")
    assert unknown.exit_code == 2  # 422
    assert "does not exist" in unknown.stderr
    forever = ["--gpu", "0.1", "--", "sleep", "inf"]  # simulated nodes run it until deleted
    assert admin("submit", name, "-p", project, *forever).exit_code == 0
    taken = admin("submit", name, "-p", project, *forever)
    assert taken.exit_code == 5  # 409
    assert "already has a workload named" in taken.stderr
    assert len(taken.stderr.splitlines()) == 1  # the field error repeats the detail: not shown
    assert admin("describe", unique("nope"), "-p", project).exit_code == 3  # 404
    assert admin("delete", name, "-p", project).exit_code == 0


def test_local_validation_says_what_the_server_says(
    admin: Cli, api: GpupoolClient, server: LiveServer
) -> None:
    project = new_project(api)
    body = {"name": "Bad Name", "project": project, "gpu": 1.5}
    with server.client() as http:
        answer = ErrorOut.model_validate(http.post("/api/v1/workloads", json=body).json())
    local = admin("submit", "Bad Name", "-p", project, "--gpu", "1.5", "--", "true")
    assert local.exit_code == 2
    assert local.stderr == f"error: {answer.detail}\n"


def test_researcher_sees_only_their_projects(
    admin: Cli, api: GpupoolClient, server: LiveServer, tmp_path: Path
) -> None:
    mine, theirs, name = new_project(api), new_project(api), unique("job")
    assert admin("submit", name, "-p", theirs, "--gpu", "0.1", "--", "true").exit_code == 0
    user = unique("u")
    created = json_out(admin("user", "create", user, "--project", mine, "--json"))
    assert created["user"] == {"name": user, "role": "researcher", "projects": [mine]}
    token = created["token"]["token"]
    own = {"GPUPOOL_CONFIG": str(tmp_path / "researcher.json")}
    login = admin("login", "--server", server.url, "--token", token, env_extra=own)
    assert login.exit_code == 0, login.output
    assert f"default project: {mine}" in login.stdout  # their only project
    as_researcher = functools.partial(admin, env_extra=own)
    assert as_researcher("describe", name, "-p", theirs).exit_code in (3, 4)
    assert as_researcher("logs", name, "-p", theirs).exit_code in (3, 4)
    job = [unique("job"), "-p", theirs, "--gpu", "1", "--", "true"]
    assert as_researcher("submit", *job).exit_code == 4
    assert as_researcher("project", "create", unique("p")).exit_code == 4
    listed = json_out(as_researcher("list", "--all", "--json"))
    assert all(w["project"] == mine for w in listed["items"])
    assert [p["name"] for p in json_out(as_researcher("projects", "--json"))] == [mine]
    new_token = json_out(admin("user", "token", user, "--json"))["token"]
    whoami = GpupoolClient(server.url, new_token)
    with whoami:
        assert whoami.whoami().name == user
    assert admin("delete", name, "-p", theirs).exit_code == 0


def test_nodes_and_top(admin: Cli) -> None:
    nodes = json_out(admin("nodes", "--json"))
    assert sorted((n["name"], n["gpu_count"]) for n in nodes) == [("sim-1", 4), ("sim-2", 4)]
    assert "sim-1" in admin("nodes").stdout
    top = TopOut.model_validate(json_out(admin("top", "--json")))
    assert top.capacity_gpu_milli == 8000
    shown = admin("top")
    assert "of 8 GPUs allocated" in shown.stdout
    assert "By project" in shown.stdout
    assert "By node" in shown.stdout


def test_client_methods_against_the_server(api: GpupoolClient) -> None:
    """The typed methods the CLI does not use, and `ApiError` from them."""
    assert api.health().status == "ok"
    assert "gpupool" in api.metrics_text()
    assert api.node("sim-1").gpu_count == 4
    project = new_project(api)
    assert api.project(project).quota.gpu_milli == 2000
    events = api.events(project=project)
    assert isinstance(events, list)
    with pytest.raises(ApiError) as raised:
        api.project(unique("nope"))
    assert raised.value.status == 404
    assert "not found" in raised.value.detail


def interrupt_on_second_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the second `time.sleep` in this test raise what Ctrl-C raises."""
    sleeps = itertools.count()

    def sleep(seconds: float) -> None:
        if next(sleeps):
            raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", sleep)


def test_ctrl_c_while_watching_top_exits_130_quietly(
    admin: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    interrupt_on_second_sleep(monkeypatch)
    result = admin("top", "--watch", "0.5")
    assert result.exit_code == 130
    assert "By node" in result.stdout
    assert result.stderr == ""


def test_ctrl_c_while_following_logs_exits_130_quietly(
    admin: Cli, api: GpupoolClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, name = new_project(api), unique("job")
    assert admin("submit", name, "-p", project, "--gpu", "0.1", "--duration", "60").exit_code == 0
    wait_for(lambda: api.describe(project, name).running_tasks == 1, 10, "the workload to run")
    interrupt_on_second_sleep(monkeypatch)
    result = admin("logs", name, "-p", project, "-f")
    assert result.exit_code == 130
    assert f"simulated task {name}/0 started" in result.stdout
    assert result.stderr == ""
    assert admin("delete", name, "-p", project).exit_code == 0


def test_the_cli_starts_without_loading_the_server_or_plotting() -> None:
    """Every `gpupool list` pays the import time: FastAPI, SQLAlchemy and matplotlib load only
    in the commands that need them."""
    import subprocess
    import sys

    code = (
        "import sys, gpupool.cli.main; "
        "print(sorted(m for m in ('fastapi', 'sqlalchemy', 'matplotlib', 'uvicorn') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_dashboard_prints_a_login_link_that_opens_a_session(
    cli: Cli, api_server: LiveServer
) -> None:
    """The link `gpupool dashboard` prints carries the token after '#': the page posts it to
    /api/v1/session. Here the same exchange is made by hand and the session works."""
    logged_in = cli("login", "--server", api_server.url, "--token", api_server.admin_token)
    assert logged_in.exit_code == 0, logged_in.output
    result = cli("dashboard")
    assert result.exit_code == 0, result.output
    link = result.stdout.split()[0]
    assert link == f"{api_server.url}/#login={api_server.admin_token}"
    token = link.split("#login=", 1)[1]
    with httpx.Client(base_url=api_server.url) as browser:
        assert browser.post("/api/v1/session", json={"token": token}).status_code == 201
        assert browser.get("/api/v1/session").json()["user"] == "admin"


def test_dashboard_needs_a_login(cli: Cli) -> None:
    result = cli("dashboard")
    assert result.exit_code == 4
    assert "gpupool login" in result.stderr
