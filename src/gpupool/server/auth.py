"""Tokens and who may do what.

A token is 32 random bytes (`gp_...`); the database keeps only its SHA-256, which is enough for
a secret of that entropy (no salt or slow hash needed: nothing to brute-force). Admins manage
everything; a researcher sees and acts on the workloads of the projects they belong to.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.api.schemas import Role
from gpupool.server.db import MembershipRow, ProjectRow, TokenRow, UserRow
from gpupool.server.errors import ApiError, forbidden

TOKEN_PREFIX = "gp_"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of one request."""

    user_id: int
    name: str
    role: Role
    project_names: frozenset[str]

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    def may_use(self, project: str) -> bool:
        return self.is_admin or project in self.project_names

    def require_admin(self, action: str) -> None:
        if not self.is_admin:
            raise forbidden(f"only an admin may {action}; you are {self.name} (researcher)")

    def require_project(self, project: str) -> None:
        if not self.may_use(project):
            raise forbidden(
                f"you ({self.name}) are not a member of a project named {project!r}: check the "
                "name (gpupool projects lists yours), or ask an admin to add you"
            )


class TokenCache:
    """Token digest -> principal, so a burst of requests does not re-read users per call.

    Cleared whenever users, tokens or memberships change (one server process owns them).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_digest: dict[str, Principal] = {}

    def clear(self) -> None:
        with self._lock:
            self._by_digest.clear()

    def cached(self, token: str | None) -> Principal | None:
        """The principal of a token seen before, without touching the database."""
        if not token:
            return None
        with self._lock:
            return self._by_digest.get(token_digest(token))

    def authenticate(self, session: Session, token: str | None) -> Principal:
        if not token:
            raise ApiError(
                401,
                "no token: send 'Authorization: Bearer <token>' "
                "(gpupool login --server URL --token TOKEN)",
            )
        digest = token_digest(token)
        with self._lock:
            known = self._by_digest.get(digest)
        if known is not None:
            return known
        user = session.execute(
            select(UserRow)
            .join(TokenRow, TokenRow.user_id == UserRow.id)
            .where(TokenRow.token_sha256 == digest)
        ).scalar_one_or_none()
        if user is None:
            raise ApiError(401, "token not recognised: log in again with a valid token")
        projects = session.scalars(
            select(ProjectRow.name)
            .join(MembershipRow, MembershipRow.project_id == ProjectRow.id)
            .where(MembershipRow.user_id == user.id)
        ).all()
        principal = Principal(user.id, user.name, Role(user.role), frozenset(projects))
        with self._lock:
            self._by_digest[digest] = principal
        return principal
