"""API bodies of users, their tokens and their browser sessions."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, WithJsonSchema

from gpupool.api import limits
from gpupool.api.enums import Role
from gpupool.api.fields import Name, TokenLabel, _In, _NoControl, _Out


class UserIn(_In):
    name: Name
    role: Role = Role.RESEARCHER
    projects: list[Name] = Field(default=[], max_length=limits.NAME_LIST_MAX)


class UserOut(_Out):
    name: str
    role: Role
    projects: list[str]


TokenLifetime = Annotated[
    int,
    AfterValidator(limits.token_lifetime_s),
    WithJsonSchema(
        {
            "type": "integer",
            "minimum": limits.TOKEN_LIFETIME_MIN_S,
            "maximum": limits.TOKEN_LIFETIME_MAX_S,
        }
    ),
]


class TokenIn(_In):
    label: TokenLabel = "cli"
    expires_in_s: TokenLifetime | None = None
    """Seconds from now until the token stops working; None: it never expires."""


class TokenOut(_Out):
    token: str
    """Shown once; the server keeps only its hash."""
    user: str
    role: Role
    id: int | None = None
    """What `DELETE /api/v1/tokens/{id}` revokes it by."""
    expires_at: float | None = None
    """When it stops working (epoch seconds); None: never."""


class TokenInfo(_Out):
    """A token as `GET /api/v1/tokens` lists it: never the token itself (the server keeps only
    its hash)."""

    id: int
    user: str
    label: str
    created_at: float
    expires_at: float | None = None
    """When it stops working (epoch seconds); None: never."""


class ProjectsIn(_In):
    projects: list[Name] = Field(max_length=limits.NAME_LIST_MAX)


class LoginIn(_In):
    token: Annotated[
        str,
        Field(min_length=1, max_length=limits.TOKEN_MAX),
        _NoControl,
    ]


class SessionOut(_Out):
    """Who is logged in. `csrf_token` goes back in the X-CSRF-Token header of every change
    made with the session cookie."""

    user: str
    role: Role
    projects: list[str]
    csrf_token: str | None
    """null when the caller used a bearer token (no cookie, so no CSRF to guard against)."""
    expires_at: float | None
