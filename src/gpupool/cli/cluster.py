"""The `gpupool` commands that talk to a gpupool server: `register(app)` adds them, in the order
`gpupool --help` lists them, each group from its own module.

What they share (exit codes, errors, output formats) is in `gpupool.cli.common`; the groups:
`login` (login, config), `submit`, `workloads` (list, describe, logs, suspend, resume, delete),
`projects` (projects, project, department), `nodes` (nodes, top), `usage`, `events`, `users`
(user, token).
"""

from __future__ import annotations

import typer

from gpupool.cli.events import events
from gpupool.cli.login import config_app, login
from gpupool.cli.nodes import nodes, top
from gpupool.cli.projects import department_app, project_app, projects
from gpupool.cli.submit import SubmitCommand, submit
from gpupool.cli.usage import usage
from gpupool.cli.users import token_app, user_app
from gpupool.cli.workloads import action_commands, describe, list_workloads, logs

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add the server commands to the `gpupool` app."""
    panel = "Cluster"
    app.command("login", rich_help_panel=panel)(login)
    app.add_typer(config_app, name="config", rich_help_panel=panel)
    app.command("submit", cls=SubmitCommand, rich_help_panel=panel)(submit)
    app.command("list", rich_help_panel=panel)(list_workloads)
    app.command("describe", rich_help_panel=panel)(describe)
    app.command("logs", rich_help_panel=panel)(logs)
    for verb, command in action_commands():
        app.command(verb, rich_help_panel=panel)(command)
    app.command("projects", rich_help_panel=panel)(projects)
    app.command("nodes", rich_help_panel=panel)(nodes)
    app.command("top", rich_help_panel=panel)(top)
    app.command("usage", rich_help_panel=panel)(usage)
    app.command("events", rich_help_panel=panel)(events)
    admin = "Cluster admin"
    app.add_typer(project_app, name="project", rich_help_panel=admin)
    app.add_typer(department_app, name="department", rich_help_panel=admin)
    app.add_typer(user_app, name="user", rich_help_panel=admin)
    app.add_typer(token_app, name="token", rich_help_panel=admin)
