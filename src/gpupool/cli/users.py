"""`gpupool user ...` and `gpupool token ...`: users, their projects and their tokens (admin)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpupool.api.enums import Role
from gpupool.cli.common import (
    JsonOption,
    age,
    clock,
    connect,
    fail,
    handled,
    show,
    stdout,
    table,
)

if TYPE_CHECKING:
    from gpupool.api.schemas import TokenInfo, UserOut

__all__ = ["token_app", "user_app"]

user_app = typer.Typer(
    help="Create and delete users, issue their tokens, set their projects (admin).",
    no_args_is_help=True,
)
token_app = typer.Typer(help="List and revoke API tokens (admin).", no_args_is_help=True)

UserName = Annotated[str, typer.Argument(help="User name.")]
ExpiresIn = Annotated[
    str | None,
    typer.Option(
        "--expires-in",
        metavar="DURATION",
        help="The token stops working after this long: 12h, 30d, 1w (at most 365d; "
        "default: never).",
    ),
]


def expires_in_s(text: str | None) -> int | None:
    """`30d` -> seconds, checked against the server's limits before anything is sent."""
    if text is None:
        return None
    from gpupool.api.limits import token_lifetime_s
    from gpupool.cli.usage import parse_duration_s

    try:
        return token_lifetime_s(round(parse_duration_s(text, "--expires-in")))
    except ValueError as error:
        message = str(error)
        fail(message if message.startswith("--expires-in") else f"--expires-in {text} {message}")


UserProjects = Annotated[
    list[str] | None, typer.Option("--project", "-p", metavar="NAME", help="Repeatable.")
]


def _user_table(users: Sequence[UserOut]) -> Table:
    rows = table("USER", "ROLE", "PROJECTS")
    for u in users:
        rows.add_row(u.name, u.role, ", ".join(u.projects) or "-")
    return rows


@user_app.command("create")
def user_create(
    name: UserName,
    role: Annotated[Role, typer.Option(help="researcher or admin.")] = Role.RESEARCHER,
    project: UserProjects = None,
    expires_in: ExpiresIn = None,
    json_output: JsonOption = False,
) -> None:
    """Create a user and print a new token for them (shown once)."""
    from gpupool.api import schemas

    lifetime_s = expires_in_s(expires_in)
    with handled():
        spec = schemas.UserIn(name=name, role=schemas.Role(role), projects=project or [])
    with connect() as client:
        user = client.create_user(spec)
        token = client.create_token(user.name, expires_in_s=lifetime_s)
        server = client.base_url
    if json_output:
        body = {"user": user.model_dump(mode="json"), "token": token.model_dump(mode="json")}
        typer.echo(json.dumps(body, indent=2))
        return
    stdout().print(_user_table([user]))
    typer.echo(f"token (shown once): {token.token}")
    typer.echo(f"log in with: gpupool login --server {server} --token {token.token}")


@user_app.command("delete")
def user_delete(name: UserName) -> None:
    """Delete a user and their tokens (not yourself, not the last admin)."""
    with connect() as client:
        client.delete_user(name)
    stdout().print(f"Deleted user {escape(name)} and their tokens")


@user_app.command("token")
def user_token(
    name: UserName,
    label: Annotated[str, typer.Option(help="What the token is for.")] = "cli",
    expires_in: ExpiresIn = None,
    json_output: JsonOption = False,
) -> None:
    """Issue a new token for a user (shown once; `gpupool token revoke ID` withdraws it)."""
    lifetime_s = expires_in_s(expires_in)
    with connect() as client:
        token = client.create_token(name, label, expires_in_s=lifetime_s)
    until = "" if token.expires_at is None else f", expires {clock(token.expires_at)}"
    show(
        token,
        json_output,
        lambda: f"token {token.id} for {token.user}{until} (shown once): {token.token}",
    )


@user_app.command("projects")
def user_set_projects(
    name: UserName, project: UserProjects = None, json_output: JsonOption = False
) -> None:
    """Replace the projects a researcher may use."""
    with connect() as client:
        user = client.set_user_projects(name, project or [])
    show(user, json_output, lambda: _user_table([user]))


def _token_table(tokens: Sequence[TokenInfo]) -> Table:
    rows = table("ID>", "USER", "LABEL", "ISSUED", "AGE>", "EXPIRES")
    for t in tokens:
        expires = "never" if t.expires_at is None else clock(t.expires_at)
        rows.add_row(
            str(t.id), t.user, escape(t.label), clock(t.created_at), age(t.created_at), expires
        )
    return rows


@token_app.command("list")
def token_list(
    user: Annotated[
        str | None, typer.Argument(help="Only this user's tokens (default: everyone's).")
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """List API tokens: id, user, label, when issued and when they expire (never the token
    itself)."""
    with connect() as client:
        tokens = client.tokens(user)
    show(tokens, json_output, lambda: _token_table(tokens))


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[
        int, typer.Argument(metavar="ID", min=1, help="The token's id (`gpupool token list`).")
    ],
) -> None:
    """Revoke a token: requests with it are refused from now on (not the last admin token)."""
    with connect() as client:
        client.revoke_token(token_id)
    stdout().print(f"Revoked token {token_id}")
