"""Tokens and who may do what.

A token is 32 random bytes (`gp_...`); the database keeps only its SHA-256, which is enough for
a secret of that entropy (no salt or slow hash needed: nothing to brute-force). Admins manage
everything; a researcher sees and acts on the workloads of the projects they belong to.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

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
    project_ids: Mapping[str, int] = field(default_factory=dict)
    """Name -> id of the projects they belong to: what the event log is filtered by (an
    earlier project of the same name has another id)."""

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


def principal_of(session: Session, user: UserRow) -> Principal:
    """The principal of `user` with their projects as they are now."""
    projects = dict(
        session.execute(
            select(ProjectRow.name, ProjectRow.id)
            .join(MembershipRow, MembershipRow.project_id == ProjectRow.id)
            .where(MembershipRow.user_id == user.id)
        ).all()
    )
    return Principal(user.id, user.name, Role(user.role), frozenset(projects), projects)


def utc_text(at_s: float) -> str:
    """`2026-11-26 12:00 UTC`: how an expiry is written in messages."""
    return datetime.fromtimestamp(at_s, UTC).strftime("%Y-%m-%d %H:%M UTC")


def expired(token_id: int, expires_at: float) -> ApiError:
    return ApiError(
        401,
        f"token {token_id} expired at {utc_text(expires_at)}: ask an admin for a new one "
        "(gpupool user token NAME --expires-in 30d), then log in with it (gpupool login "
        "--server URL --token TOKEN)",
    )


@dataclass(frozen=True, slots=True)
class _Known:
    principal: Principal
    token_id: int
    expires_at: float | None


class TokenCache:
    """Token digest -> principal, so a burst of requests does not re-read users per call.

    Cleared whenever users, tokens or memberships change (one server process owns them). A
    cached token's expiry is checked on every request, against the server's clock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_digest: dict[str, _Known] = {}

    def clear(self) -> None:
        with self._lock:
            self._by_digest.clear()

    def authenticate(self, session: Session, token: str | None, now_s: float) -> Principal:
        return self.authenticate_until(session, token, now_s)[0]

    def authenticate_until(
        self, session: Session, token: str | None, now_s: float
    ) -> tuple[Principal, float | None]:
        """The caller and when their token expires (None: never); 401 if it has."""
        if not token:
            raise ApiError(
                401,
                "no token: send 'Authorization: Bearer <token>' "
                "(gpupool login --server URL --token TOKEN)",
            )
        digest = token_digest(token)
        with self._lock:
            known = self._by_digest.get(digest)
        if known is None:
            found = session.execute(
                select(UserRow, TokenRow.id, TokenRow.expires_at)
                .join(TokenRow, TokenRow.user_id == UserRow.id)
                .where(TokenRow.token_sha256 == digest)
            ).one_or_none()
            if found is None:
                raise ApiError(401, "token not recognised: log in again with a valid token")
            user, token_id, expires_at = found
            known = _Known(principal_of(session, user), token_id, expires_at)
            with self._lock:
                self._by_digest[digest] = known
        if known.expires_at is not None and now_s >= known.expires_at:
            raise expired(known.token_id, known.expires_at)
        return known.principal, known.expires_at
