"""`gpupool login` and `gpupool config`: the server, token and default project the other
commands use, in the config file (`gpupool.client.config`)."""

from __future__ import annotations

import enum
import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gpupool.cli.common import JsonOption, fail, handled, show, stdout

__all__ = ["config_app", "login"]


def login(
    server: Annotated[
        str | None,
        typer.Option(metavar="URL", help="Server URL, like http://127.0.0.1:8000."),
    ] = None,
    token: Annotated[str | None, typer.Option(metavar="TOKEN", help="Your API token.")] = None,
    token_file: Annotated[
        Path | None, typer.Option(metavar="PATH", help="Read the token from this file.")
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Check a server URL and token with the server and save them in the config file."""
    from gpupool.api.schemas import Role
    from gpupool.client.config import (
        ENV_OVERRIDES,
        ClientConfig,
        config_path,
        normalize_server,
        read_config,
        write_config,
    )
    from gpupool.client.http import GpupoolClient

    with handled():
        if (token is None) == (token_file is None):
            fail("give the token with --token TOKEN or --token-file PATH (one of them)")
        if token_file is not None:
            try:
                token = token_file.read_text(encoding="utf-8").strip()
            except OSError as error:
                fail(f"cannot read the token file {token_file}: {error.strerror}")
        if not token:
            fail("the token is empty")
        path = config_path()
        saved = read_config(path)
        chosen = server or os.environ.get(ENV_OVERRIDES["server"]) or saved.server
        if not chosen:
            fail("give the server with --server URL, like http://127.0.0.1:8000")
        url = normalize_server(chosen)
        with GpupoolClient(url, token) as client:
            me = client.whoami()
        project = saved.project
        if me.role != Role.ADMIN and project not in me.projects:
            project = me.projects[0] if len(me.projects) == 1 else None
        write_config(ClientConfig(server=url, token=token, project=project), path)
    projects = ", ".join(me.projects) or "none"
    show(
        me,
        json_output,
        lambda: (
            f"Logged in to {url} as {me.name} ({me.role}); projects: {projects}; "
            f"default project: {project or 'none'}. Saved in {path}."
        ),
    )


class ConfigKey(enum.StrEnum):
    SERVER = "server"
    PROJECT = "project"


config_app = typer.Typer(help="Show or change the CLI's config file.", no_args_is_help=True)


@config_app.command("set")
def config_set(
    key: Annotated[ConfigKey, typer.Argument(help="What to set.")],
    value: Annotated[str, typer.Argument(help="The new value.")],
) -> None:
    """Set the server URL or the default project in the config file."""
    from gpupool.client.config import (
        ClientConfig,
        check_project_name,
        config_path,
        normalize_server,
        read_config,
        write_config,
    )

    with handled():
        path = config_path()
        saved = read_config(path)
        if key == ConfigKey.SERVER:
            saved = ClientConfig(normalize_server(value), saved.token, saved.project)
        else:
            saved = ClientConfig(saved.server, saved.token, check_project_name(value))
        write_config(saved, path)
    stdout().print(f"{key} = {escape(value)} (in {path})")


@config_app.command("show")
def config_show(json_output: JsonOption = False) -> None:
    """Show the config in effect: the file's values, with the GPUPOOL_* variables on top."""
    from gpupool.client.config import ENV_OVERRIDES, config_path, effective_config

    with handled():
        config = effective_config()
    token = config.token and f"{config.token[:6]}… ({len(config.token)} characters)"
    values = {"server": config.server, "token": token, "project": config.project}
    if json_output:
        typer.echo(json.dumps({"path": str(config_path()), **values}, indent=2))
        return
    console = stdout()
    console.print(f"config file: {config_path()}")
    for key, value in values.items():
        source = f"  (from {ENV_OVERRIDES[key]})" if os.environ.get(ENV_OVERRIDES[key]) else ""
        console.print(f"{key}: {escape(value or '-')}{source}")
