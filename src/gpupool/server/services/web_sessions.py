"""Browser logins: a token is exchanged once for an HttpOnly session cookie.

The cookie is 32 random bytes; the database keeps its SHA-256 (like tokens) and a CSRF token
that the page sends back in `X-CSRF-Token` with every change. A session lasts `SESSION_TTL_S`
and ends at logout, when its user is deleted, or when it expires.
"""

from __future__ import annotations

import hmac
import secrets

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gpupool.api.schemas import SessionOut
from gpupool.server.auth import Principal, principal_of, token_digest
from gpupool.server.db import UserRow, WebSessionRow
from gpupool.server.errors import ApiError

COOKIE_NAME = "gpupool_session"
CSRF_HEADER = "X-CSRF-Token"
SESSION_TTL_S = 7 * 24 * 3600
MAX_SESSIONS_PER_USER = 50
"""Older sessions of a user beyond this are ended (a script logging in in a loop)."""


def create(
    session: Session, principal: Principal, now_s: float, token_expires_at: float | None = None
) -> tuple[str, WebSessionRow]:
    """A new session for `principal`: (cookie value, row). It ends no later than the token it
    was made with (`token_expires_at`). Drops expired sessions on the way."""
    cookie = secrets.token_urlsafe(32)
    row = WebSessionRow(
        session_sha256=token_digest(cookie),
        user_id=principal.user_id,
        csrf_token=secrets.token_urlsafe(32),
        created_at=now_s,
        expires_at=min(now_s + SESSION_TTL_S, token_expires_at or now_s + SESSION_TTL_S),
    )
    session.execute(delete(WebSessionRow).where(WebSessionRow.expires_at < now_s))
    older = session.scalars(
        select(WebSessionRow.id)
        .where(WebSessionRow.user_id == principal.user_id)
        .order_by(WebSessionRow.created_at.desc())
        .offset(MAX_SESSIONS_PER_USER - 1)
    ).all()
    if older:
        session.execute(delete(WebSessionRow).where(WebSessionRow.id.in_(older)))
    session.add(row)
    session.flush()
    return cookie, row


def authenticate(
    session: Session, cookie: str, now_s: float, csrf: str | None, changes: bool
) -> tuple[Principal, WebSessionRow]:
    """The principal of a session cookie; a change (`changes`) also needs the CSRF token."""
    row = session.scalars(
        select(WebSessionRow).where(WebSessionRow.session_sha256 == token_digest(cookie))
    ).one_or_none()
    if row is None or row.expires_at <= now_s:
        raise ApiError(401, "your session has ended: log in again with your token")
    if changes and (csrf is None or not hmac.compare_digest(csrf, row.csrf_token)):
        raise ApiError(
            403,
            f"a change made with the session cookie needs the {CSRF_HEADER} header "
            "(the page sends it; scripts should use 'Authorization: Bearer <token>' instead)",
        )
    user = session.get(UserRow, row.user_id)
    if user is None:
        raise ApiError(401, "your session has ended: log in again with your token")
    return principal_of(session, user), row


def end(session: Session, cookie: str) -> None:
    session.execute(
        delete(WebSessionRow).where(WebSessionRow.session_sha256 == token_digest(cookie))
    )


def view(principal: Principal, row: WebSessionRow | None) -> SessionOut:
    return SessionOut(
        user=principal.name,
        role=principal.role,
        projects=sorted(principal.project_names),
        csrf_token=row.csrf_token if row is not None else None,
        expires_at=row.expires_at if row is not None else None,
    )
