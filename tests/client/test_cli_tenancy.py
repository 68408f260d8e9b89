"""What a researcher reads with the CLI (`top`, `nodes`, `events`, `list`): other projects'
work as usage only, never its names; `gpupool events` and tokens that expire (`--expires-in`,
EXPIRES in `token list`). Against one real `gpupool server` child process for the module."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import Result
from typer.testing import CliRunner

from gpupool.api.schemas import ProjectIn, WorkloadIn
from gpupool.cli.main import app
from gpupool.client.config import ClientConfig, write_config
from gpupool.client.http import GpupoolClient
from liveserver import LiveServer, unique, wait_for

Cli = Callable[..., Result]


def login(server: LiveServer, token: str, tmp_path: Path) -> Cli:
    """`gpupool ARGS...` with its own config file, logged in with `token`."""
    config = tmp_path / unique("config") / "config.json"
    write_config(ClientConfig(server=server.url, token=token), config)
    runner = CliRunner()
    env = {"GPUPOOL_CONFIG": str(config), "GPUPOOL_SERVER": None, "GPUPOOL_TOKEN": None}
    env |= {"GPUPOOL_PROJECT": None, "COLUMNS": "200"}

    def run(*args: str) -> Result:
        return runner.invoke(app, list(args), env=env)

    return run


def json_out(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_researcher_sees_other_projects_as_usage_only(server: LiveServer, tmp_path: Path) -> None:
    mine, theirs, user = unique("mine"), unique("theirs"), unique("rita")
    with GpupoolClient(server.url, server.admin_token) as api:
        for name in (mine, theirs):
            api.create_project(ProjectIn.model_validate({"name": name, "quota": {"gpu": 2}}))
        secret = {"name": "secret-job", "project": theirs, "gpu": 1, "duration_s": 3600}
        api.submit(WorkloadIn.model_validate(secret | {"command": ["python", "secret.py"]}))
        wait_for(lambda: api.describe(theirs, "secret-job").status == "running")
    admin = login(server, server.admin_token, tmp_path)
    made = json_out(admin("user", "create", user, "--project", mine, "--json"))
    researcher = login(server, made["token"]["token"], tmp_path)

    top = researcher("top")
    assert top.exit_code == 0, top.output
    (row,) = [line.split() for line in top.stdout.splitlines() if line.split()[:1] == [theirs]]
    assert row[3] == "1"  # ALLOCATED: their usage, by project
    outputs = {
        "top": top,
        "top --json": researcher("top", "--json"),
        "nodes --json": researcher("nodes", "--json"),
        "events": researcher("events"),
        "list --all --json": researcher("list", "--all", "--json"),
    }
    for what, result in outputs.items():
        assert result.exit_code == 0, (what, result.output)
        assert "secret" not in result.stdout, what
    shares = [
        (share["project"], share["workload"])
        for node in json.loads(outputs["nodes --json"].stdout)
        for device in node["devices"]
        for share in device["shares"]
    ]
    assert shares == [(theirs, None)]
    events = outputs["events"].stdout
    assert re.search(rf"member-added +{mine} +- +admin +{user} added by admin", events), events
    assert theirs not in events
    assert "secret-job" in admin("nodes", "--json").stdout  # admins see everything


def test_tokens_that_expire_and_the_audit_log(server: LiveServer, tmp_path: Path) -> None:
    admin = login(server, server.admin_token, tmp_path)
    user = unique("u")
    assert admin("user", "create", user).exit_code == 0
    issued = admin("user", "token", user, "--label", "ci", "--expires-in", "30d")
    assert issued.exit_code == 0, issued.output
    assert re.match(rf"token \d+ for {user}, expires \d{{4}}-\d\d-\d\d ", issued.stdout)
    tokens = json_out(admin("token", "list", user, "--json"))
    assert [t["expires_at"] is None for t in tokens] == [True, False]
    assert tokens[1]["expires_at"] - tokens[1]["created_at"] == 30 * 86400
    listed = admin("token", "list", user)
    assert "EXPIRES" in listed.stdout
    assert re.search(r"\bnever\b", listed.stdout) and re.search(
        r"ci .* \d\d:\d\d:\d\d *$", listed.stdout, re.MULTILINE
    )

    too_long = admin("user", "token", user, "--expires-in", "400d")
    assert too_long.exit_code == 2
    assert "--expires-in 400d is 34560000 s: a token may live from 60 s to 365 days" in (
        too_long.stderr
    )
    nonsense = admin("user", "token", user, "--expires-in", "soon")
    assert nonsense.exit_code == 2 and "is not a duration" in nonsense.stderr

    log = admin("events", "--limit", "10000")
    assert log.exit_code == 0, log.output
    created = [line for line in log.stdout.splitlines() if "token-created" in line and user in line]
    assert len(created) == 2 and all(" admin " in line for line in created)
    assert any("user-created" in line and user in line for line in log.stdout.splitlines())
