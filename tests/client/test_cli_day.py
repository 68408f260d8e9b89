"""A new user's day with the CLI: `submit` refuses nothing-to-run and takes a workload file,
CPU, memory, node selector, env file and working dir; `--version` and shell completion; `list`
shows exit codes, preemptions and `-o json|yaml|wide`; admins delete users and list and revoke
tokens. Offline checks use a closed port (a request would exit 6, not 2); the rest run against
one real `gpupool server` for the module."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import shellingham
import yaml
from click.testing import Result
from typer.testing import CliRunner

import gpupool
from gpupool.api.schemas import ProjectIn, WorkloadOut
from gpupool.cli.main import app
from gpupool.client.config import ClientConfig, write_config
from gpupool.client.http import ApiError, GpupoolClient
from gpupool.corebuild import core_build
from gpupool.demo.story import plan_demo
from gpupool.server.process import ServerProcess
from liveserver import LiveServer, unique, wait_for

Cli = Callable[..., Result]


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return tmp_path / "gpupool" / "config.json"


@pytest.fixture
def cli(config_file: Path) -> Cli:
    runner = CliRunner()
    env = {
        "GPUPOOL_CONFIG": str(config_file),
        "GPUPOOL_SERVER": None,
        "GPUPOOL_TOKEN": None,
        "GPUPOOL_PROJECT": None,
        "COLUMNS": "250",
    }

    def run(*args: str) -> Result:
        return runner.invoke(app, list(args), env=env)

    return run


@pytest.fixture
def offline(cli: Cli, config_file: Path) -> Cli:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    write_config(ClientConfig(server=url, token="gp_x", project="team-a"), config_file)
    return cli


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# -- offline ---------------------------------------------------------------------------------------


def test_version_and_completion(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    version = cli("--version")
    assert version.exit_code == 0
    assert version.stdout == f"gpupool {gpupool.__version__} (scheduling core: {core_build()})\n"
    # `--show-completion` prints the script for the shell it runs under, found among the
    # process's ancestors (shellingham); under a test runner started by no shell (an IDE, a
    # background job) there is none, so the shell is bash here.
    monkeypatch.setattr(shellingham, "detect_shell", lambda: ("bash", "/bin/bash"))
    shown = cli("--show-completion")
    assert shown.exit_code == 0, shown.output
    assert "complete" in shown.stdout and "_GPUPOOL_COMPLETE" in shown.stdout.upper()
    assert "--install-completion" in cli("--help").stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "nothing to run: give the command after `--`"),
        (["--cpu", "lots"], "--cpu takes CPU cores like 4, 0.5 or 250m (got 'lots')"),
        (["--cpu", "0.0001"], "--cpu must be more than 0 in whole millicores"),
        (["--memory", "16X"], "memory: memory unit 'X' is not known"),
        (["--node-selector", "zone"], "--node-selector takes KEY=VALUE (got 'zone')"),
        (["--node-selector", "zone=a b"], "node_selector.zone.0:"),
        (["--env-file", "missing.env"], "cannot read the env file missing.env"),
        (["--min-runtime", "soon"], "--min-runtime 'soon' is not a duration"),
        (["--min-runtime", "40d"], "min_runtime_s: Input should be less than or equal to"),
    ],
)
def test_submit_refuses_bad_input_saying_how_to_fix(
    offline: Cli, args: list[str], message: str
) -> None:
    command = [] if not args else ["--", "python", "train.py"]
    result = offline("submit", "job1", "--gpu", "1", *args, *command)
    assert result.exit_code == 2, result.output
    assert message in result.stderr


@pytest.mark.parametrize("enough", [["--duration", "60"], ["--image", "python:3.12-slim"]])
def test_a_duration_or_an_image_is_enough_to_run(offline: Cli, enough: list[str]) -> None:
    assert offline("submit", "job1", "--gpu", "1", *enough).exit_code == 6  # reached for it


def test_the_command_after_dashes_is_not_taken_for_the_name(offline: Cli, tmp_path: Path) -> None:
    file = write(tmp_path / "job.yaml", "gpu: 1\n")
    result = offline("submit", "-f", str(file), "--", "python", "train.py")
    assert result.exit_code == 2
    assert "no workload name: give it first" in result.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "name: j\ngpus: 2\n",
            "job.yaml:2: gpus: unknown key `gpus`; did you mean `gpu`? "
            "(allowed here: name, project",
        ),
        ("name: j\ngpu: 1\ncommand: python train.py\n", "job.yaml:3: command: must be a list"),
        ("- name: j\n", "job.yaml:1: must be one YAML mapping"),
        ("name: j\n---\nname: k\n", "job.yaml:2: YAML syntax error: expected a single document"),
        ("name: j\ngpu: 1\nenv: [A]\ncommand: [x]\n", "job.yaml:3: env: must be a mapping"),
        ("name: j\ngpu: 1\nname: k\n", "job.yaml:3: name: key `name` appears twice"),
        (
            "name: j\ngpu: 1.5\ncommand: [x]\n",
            "job.yaml:2: gpu: a fraction must be between 0 and 1",
        ),
        ("name: j\ngpu: 1\ntasks: 0\ncommand: [x]\n", "job.yaml:3: tasks: Input should be greater"),
    ],
)
def test_a_bad_workload_file_names_the_problem(
    offline: Cli, tmp_path: Path, text: str, message: str
) -> None:
    result = offline("submit", "-f", str(write(tmp_path / "job.yaml", text)))
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_a_bad_value_from_an_option_is_not_blamed_on_the_file(offline: Cli, tmp_path: Path) -> None:
    file = write(tmp_path / "job.yaml", "name: j\ngpu: 1\ntasks: 2\ncommand: [x]\n")
    result = offline("submit", "-f", str(file), "--tasks", "0")
    assert result.exit_code == 2, result.output
    assert "invalid request: tasks: Input should be greater" in result.stderr
    assert "job.yaml:" not in result.stderr


def test_json_and_another_output_format_conflict(offline: Cli) -> None:
    result = offline("list", "--json", "-o", "yaml")
    assert result.exit_code == 2
    assert "give --json or -o yaml, not both" in result.stderr


# -- against a real server -----------------------------------------------------------------------


@pytest.fixture
def admin(cli: Cli, server: LiveServer, config_file: Path) -> Cli:
    write_config(ClientConfig(server=server.url, token=server.admin_token), config_file)
    return cli


@pytest.fixture
def api(server: LiveServer) -> Iterator[GpupoolClient]:
    with GpupoolClient(server.url, server.admin_token) as client:
        yield client


def new_project(api: GpupoolClient) -> str:
    name = unique("p")
    api.create_project(ProjectIn.model_validate({"name": name, "quota": {"gpu": 2}}))
    return name


def json_out(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_submit_from_a_file_with_the_command_line_on_top(
    admin: Cli, api: GpupoolClient, tmp_path: Path
) -> None:
    project = new_project(api)
    write(tmp_path / "job.env", "# secrets\nexport SEED=1\nTOKEN='a b'\n\nLR=0.1\n")
    file = write(
        tmp_path / "job.yaml",
        f"name: {unique('job')}\nproject: {project}\ngpu: 0.5\ntasks: 1\n"
        "command: [python, train.py]\nenv: {SEED: 0, MODE: fast}\nenv-file: job.env\n"
        "node_selector: {gpu_model: [H100, A100]}\nworking_dir: data\nduration: 60\n"
        "min_runtime: 2h\n",
    )
    name = unique("job")
    result = admin(
        "submit", name, "-f", str(file), "--cpu", "0.5", "--memory", "16G",
        "--env", "LR=0.2", "--node-selector", "gpu_model=simulated", "--json", "--", "python",
        "eval.py",
    )  # fmt: skip
    out = WorkloadOut.model_validate(json_out(result))
    assert (out.name, out.project, out.gpu_amount) == (name, project, 500)
    assert out.command == ["python", "eval.py"]
    assert out.env == {"SEED": "0", "MODE": "fast", "TOKEN": "a b", "LR": "0.2"}  # env: > env_file
    assert (out.cpu_milli, out.memory_mib) == (500, 16384)
    assert out.working_dir == str(tmp_path / "data")
    assert out.min_runtime_s == 7200
    shown = admin("describe", name, "-p", project)
    assert "preemptible after 7200 s of running" in shown.stdout
    # node_selector is not in WorkloadOut; accepted shows the command line's replaced the
    # file's: no node has an H100 or A100, and a selector no node matches is refused
    admin("delete", name, "-p", project)


def test_working_dir_option_and_the_default(admin: Cli, api: GpupoolClient, tmp_path: Path) -> None:
    project = new_project(api)
    first, second = unique("job"), unique("job")
    given = admin("submit", first, "-p", project, "--gpu", "0.1", "--working-dir", str(tmp_path),
                  "--json", "--", "true")  # fmt: skip
    assert json_out(given)["working_dir"] == str(tmp_path)
    default = admin("submit", second, "-p", project, "--gpu", "0.1", "--json", "--", "true")
    assert Path(json_out(default)["working_dir"]).is_absolute()
    assert json_out(default)["min_runtime_s"] is None  # the project's


def test_min_runtime_option_takes_seconds_or_a_duration(admin: Cli, api: GpupoolClient) -> None:
    project = new_project(api)
    for given, seconds in [("600", 600), ("10m", 600), ("1.5h", 5400)]:
        name = unique("job")
        submitted = admin("submit", name, "-p", project, "--gpu", "0.1", "--min-runtime", given,
                          "--json", "--", "true")  # fmt: skip
        assert json_out(submitted)["min_runtime_s"] == seconds


def test_list_shows_exit_code_preemptions_and_formats(admin: Cli, api: GpupoolClient) -> None:
    project, name = new_project(api), unique("job")
    job = ["-p", project, "--gpu", "1", "--duration", "0.2"]
    assert admin("submit", name, *job).exit_code == 0
    wait_for(lambda: api.describe(project, name).status == "completed", 10, "it to complete")
    listed = admin("list", "-p", project)
    assert "EXIT" in listed.stdout and "PREEMPTED" in listed.stdout
    [row] = [line for line in listed.stdout.splitlines() if name in line]
    assert row.split()[:9] == [
        project,
        name,
        "train",
        "completed",
        "1",
        "0/1",
        "0",
        "0",
        row.split()[8],
    ]
    wide = admin("list", "-p", project, "-o", "wide")
    assert "NODES" in wide.stdout and "USER" in wide.stdout
    [wide_row] = [line for line in wide.stdout.splitlines() if name in line]
    assert "admin" in wide_row.split()
    as_yaml = yaml.safe_load(admin("list", "-p", project, "-o", "yaml").stdout)
    assert as_yaml["items"][0]["exit_code"] == 0
    assert json_out(admin("list", "-p", project, "-o", "json")) == json_out(
        admin("list", "-p", project, "--json")
    )
    described = yaml.safe_load(admin("describe", name, "-p", project, "-o", "yaml").stdout)
    assert described["name"] == name and described["preemptions"] == 0
    assert described["exit_code"] == 0  # describe says it too, not only list
    shown = admin("describe", name, "-p", project, "-o", "wide")
    assert re.search(r"^Exit code +0 *$", shown.stdout, re.MULTILINE), shown.stdout


def test_admin_deletes_users_and_lists_and_revokes_tokens(admin: Cli, server: LiveServer) -> None:
    user = unique("u")
    created = json_out(admin("user", "create", user, "--json"))
    token = created["token"]
    listed = admin("token", "list", user)
    assert listed.exit_code == 0, listed.output
    assert token["token"] not in listed.stdout
    [row] = [line for line in listed.stdout.splitlines() if user in line]
    assert row.split()[:3] == [str(token["id"]), user, "cli"]
    everyone = json_out(admin("token", "list", "--json"))
    assert {user, "admin"} <= {t["user"] for t in everyone}

    revoked = admin("token", "revoke", str(token["id"]))
    assert revoked.exit_code == 0, revoked.output
    assert revoked.stdout.strip() == f"Revoked token {token['id']}"
    with GpupoolClient(server.url, token["token"]) as theirs, pytest.raises(ApiError) as caught:
        theirs.whoami()
    assert caught.value.status == 401
    again = admin("token", "revoke", str(token["id"]))
    assert again.exit_code == 3
    assert "gpupool token list" in again.stderr

    deleted = admin("user", "delete", user)
    assert deleted.exit_code == 0, deleted.output
    assert admin("user", "delete", user).exit_code == 3
    assert admin("token", "list", user).exit_code == 3
    assert admin("user", "delete", "admin").exit_code == 5  # not yourself


def test_dry_run_says_where_or_why_and_submits_nothing(admin: Cli, api: GpupoolClient) -> None:
    project, name = new_project(api), unique("job")
    fits = admin("submit", name, "-p", project, "--gpu", "1", "--dry-run", "--", "true")
    assert fits.exit_code == 0, fits.output
    assert f"Dry run {project}/{name}: would start now on sim-" in fits.stdout
    assert "(nothing submitted)" in fits.stdout
    # what no node could run is refused as a submission would be (test_dry_run.py: would wait)
    never = admin("submit", name, "-p", project, "--gpu", "8", "--dry-run", "--", "true")
    assert never.exit_code == 2, never.output
    assert "error: gpu 8 asks for 8 GPUs per task on one node, but the largest node" in never.output
    assert api.list_workloads(project=project).items == []


def test_projects_warns_when_quotas_add_up_to_more_than_the_cluster(
    admin: Cli, api: GpupoolClient
) -> None:
    """2x4 simulated GPUs: a quota of 9 alone is more than the cluster."""
    name = unique("big")
    made = admin("project", "create", name, "--quota-gpu", "9", "--json")
    assert any("more than the 8 GPUs of the cluster" in w for w in json_out(made)["warnings"])
    listed = admin("projects")
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.count("more than the 8 GPUs of the cluster's ready nodes") == 1
    admin("project", "delete", name)


def test_the_demo_refuses_a_busy_cluster_saying_how_to_run_it_apart(
    admin: Cli, api: GpupoolClient
) -> None:
    project = new_project(api)
    assert admin("submit", unique("job"), "-p", project, "--gpu", "1", "--duration", "3600",
                 "--", "true").exit_code == 0  # fmt: skip
    before = len(api.list_workloads(limit=10_000).items)
    refused = admin("demo")
    assert refused.exit_code == 1, refused.output
    assert "the demo needs an idle cluster" in refused.stderr
    assert project in refused.stderr and "gpupool up --data-dir" in refused.stderr
    assert "Traceback" not in refused.output
    assert len(api.list_workloads(limit=10_000).items) == before  # nothing submitted


@pytest.mark.parametrize(("nodes", "plan"), [("1x4", (4, 2, 2)), ("1x3", (3, 1, 2)),
                                             ("1x1", (1, 0, 1))])  # fmt: skip
def test_the_demo_sizes_itself_to_an_idle_cluster(
    tmp_path: Path, nodes: str, plan: tuple[int, int, int]
) -> None:
    with (
        ServerProcess(tmp_path, simulated_nodes=nodes) as process,
        GpupoolClient(process.url, process.admin_token) as client,
    ):
        wait_for(lambda: len(client.nodes()) == 1, 15, "the node")
        made = plan_demo(client)
    assert (made.gpus, made.bob_quota, made.patty_quota) == plan
