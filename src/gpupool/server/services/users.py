"""Users, their tokens and project memberships; the first admin."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from gpupool.api.schemas import Role, TokenInfo, TokenOut, UserIn, UserOut
from gpupool.private import create_private, private_dir
from gpupool.server import eventlog
from gpupool.server.auth import new_token, token_digest, utc_text
from gpupool.server.db import MembershipRow, ProjectRow, TokenRow, UserRow
from gpupool.server.errors import conflict, invalid, not_found

FIRST_ADMIN = "admin"


def get_row(session: Session, name: str) -> UserRow:
    row = session.execute(select(UserRow).where(UserRow.name == name)).scalar_one_or_none()
    if row is None:
        raise not_found("user", name, "list users with GET /api/v1/users")
    return row


def view(session: Session, row: UserRow) -> UserOut:
    projects = session.scalars(
        select(ProjectRow.name)
        .join(MembershipRow, MembershipRow.project_id == ProjectRow.id)
        .where(MembershipRow.user_id == row.id)
        .order_by(ProjectRow.name)
    ).all()
    return UserOut(name=row.name, role=Role(row.role), projects=list(projects))


def list_all(session: Session) -> list[UserOut]:
    return [view(session, row) for row in session.scalars(select(UserRow).order_by(UserRow.name))]


def create(session: Session, body: UserIn, now_s: float, actor: str | None) -> UserOut:
    if session.execute(select(UserRow.id).where(UserRow.name == body.name)).first():
        raise conflict(f"a user named {body.name!r} already exists: pick another name", "name")
    row = UserRow(name=body.name, role=body.role.value, created_at=now_s)
    session.add(row)
    session.flush()
    eventlog.add(session, now_s, "user-created", f"{row.name} ({row.role}) by {actor}", actor=actor)
    set_projects(session, row, body.projects, now_s, actor)
    return view(session, row)


def _memberships(session: Session, user_id: int) -> dict[int, str]:
    return dict(
        session.execute(
            select(ProjectRow.id, ProjectRow.name)
            .join(MembershipRow, MembershipRow.project_id == ProjectRow.id)
            .where(MembershipRow.user_id == user_id)
        ).all()
    )


def _member_events(
    session: Session,
    user: str,
    before: dict[int, str],
    after: dict[int, str],
    now_s: float,
    actor: str | None,
) -> None:
    """One event per project a user joined or left, seen by that project's members too."""
    rows = [
        eventlog.event_row(
            now_s,
            kind,
            f"{user} {verb} by {actor}",
            project=names[project_id],
            project_id=project_id,
            actor=actor,
        )
        for kind, verb, ids, names in (
            ("member-added", "added", sorted(set(after) - set(before)), after),
            ("member-removed", "removed", sorted(set(before) - set(after)), before),
        )
        for project_id in ids
    ]
    if rows:
        session.execute(eventlog.INSERT, rows)


def remove(session: Session, row: UserRow, caller: str, now_s: float) -> None:
    """Delete a user; never yourself or the last admin (nobody could administer the server)."""
    if row.name == caller:
        raise conflict("you cannot delete yourself: ask another admin")
    if row.role == Role.ADMIN.value:
        admins = session.scalar(
            select(func.count()).select_from(UserRow).where(UserRow.role == Role.ADMIN.value)
        )
        if (admins or 0) <= 1:
            raise conflict(f"{row.name!r} is the last admin: create another admin first")
    _member_events(session, row.name, _memberships(session, row.id), {}, now_s, caller)
    eventlog.add(
        session, now_s, "user-deleted", f"{row.name} ({row.role}) by {caller}", actor=caller
    )
    session.delete(row)


def set_projects(
    session: Session, row: UserRow, names: list[str], now_s: float, actor: str | None
) -> UserOut:
    found = dict(
        session.execute(
            select(ProjectRow.name, ProjectRow.id).where(
                ProjectRow.name.in_(names), ProjectRow.is_department.is_(False)
            )
        ).all()
    )
    missing = sorted(set(names) - set(found))
    if missing:
        raise invalid(
            f"no such project(s): {', '.join(missing)}; create them first or check the names",
            "projects",
        )
    before = _memberships(session, row.id)
    session.execute(delete(MembershipRow).where(MembershipRow.user_id == row.id))
    for project_id in sorted(set(found.values())):
        session.add(MembershipRow(user_id=row.id, project_id=project_id))
    session.flush()
    after = {project_id: name for name, project_id in found.items()}
    _member_events(session, row.name, before, after, now_s, actor)
    return view(session, row)


def issue_token(
    session: Session,
    row: UserRow,
    label: str,
    now_s: float,
    actor: str | None,
    expires_in_s: int | None = None,
) -> TokenOut:
    """A new token for `row` (shown once: the database keeps its hash), expiring after
    `expires_in_s` (None: never)."""
    token = new_token()
    expires_at = None if expires_in_s is None else now_s + expires_in_s
    added = TokenRow(
        user_id=row.id,
        token_sha256=token_digest(token),
        label=label,
        created_at=now_s,
        expires_at=expires_at,
    )
    session.add(added)
    session.flush()
    until = "never expires" if expires_at is None else f"expires {utc_text(expires_at)}"
    eventlog.add(
        session,
        now_s,
        "token-created",
        f"token {added.id} ({label}) for {row.name} by {actor}; {until}",
        actor=actor,
    )
    return TokenOut(
        token=token, user=row.name, role=Role(row.role), id=added.id, expires_at=expires_at
    )


def list_tokens(session: Session, user: UserRow | None) -> list[TokenInfo]:
    """Every token (of `user` only, when given), oldest first; never the token itself."""
    query = select(TokenRow, UserRow.name).join(UserRow, UserRow.id == TokenRow.user_id)
    if user is not None:
        query = query.where(TokenRow.user_id == user.id)
    return [
        TokenInfo(
            id=token.id,
            user=name,
            label=token.label,
            created_at=token.created_at,
            expires_at=token.expires_at,
        )
        for token, name in session.execute(query.order_by(TokenRow.id)).all()
    ]


def revoke_token(session: Session, token_id: int, now_s: float, actor: str) -> None:
    """Delete a token; never the last one of every admin (nobody could administer the server)."""
    row = session.get(TokenRow, token_id)
    if row is None:
        raise not_found("token", str(token_id), "list tokens with `gpupool token list`")
    owner = session.get(UserRow, row.user_id)
    if owner is not None and owner.role == Role.ADMIN.value:
        others = session.scalar(
            select(func.count())
            .select_from(TokenRow)
            .join(UserRow, UserRow.id == TokenRow.user_id)
            .where(UserRow.role == Role.ADMIN.value, TokenRow.id != token_id)
        )
        if not others:
            raise conflict(
                f"token {token_id} is the last admin token: issue another first "
                f"(gpupool user token {owner.name})"
            )
    user = owner.name if owner is not None else "a deleted user"
    eventlog.add(
        session,
        now_s,
        "token-revoked",
        f"token {token_id} ({row.label}) of {user} by {actor}",
        actor=actor,
    )
    session.delete(row)


def bootstrap_admin(session: Session, data_dir: Path, now_s: float) -> Path | None:
    """On a database without users: create `admin`, write its token to a 0600 file, and
    return that file's path (None when users exist already)."""
    if session.scalar(select(func.count()).select_from(UserRow)):
        return None
    row = UserRow(name=FIRST_ADMIN, role=Role.ADMIN.value, created_at=now_s)
    session.add(row)
    session.flush()
    eventlog.add(session, now_s, "user-created", f"{FIRST_ADMIN} (admin) at first start")
    token = issue_token(session, row, "first start", now_s, None).token
    path = data_dir / "admin-token"
    private_dir(data_dir)
    path.unlink(missing_ok=True)
    create_private(path, token + "\n")  # 0600 from its creation: no moment others may read it
    return path
