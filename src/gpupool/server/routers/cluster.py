"""Nodes, the allocation view, metrics, health, users and tokens."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Header, Path, Query, Request, Response

import gpupool
from gpupool.api.schemas import (
    Health,
    NamesOut,
    NodeIn,
    NodeOut,
    ProjectsIn,
    TokenIn,
    TokenInfo,
    TokenOut,
    TopOut,
    UsageOut,
    UserIn,
    UserOut,
)
from gpupool.server import usage
from gpupool.server.errors import ERROR_RESPONSES
from gpupool.server.services import cluster, users
from gpupool.server.state import Caller, State, get_principal, task_isolation

router = APIRouter()
api = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES)


@router.get("/health", tags=["health"])
def health(state: State) -> Health:
    """Liveness; the only call without a token. Says whether local tasks are isolated (the CLI
    then gives no default working directory)."""
    isolation = task_isolation(state.executor)
    return Health(
        status="ok",
        version=gpupool.__version__,
        task_isolation=None if isolation is None else isolation.mode,
    )


@router.get("/metrics", tags=["metrics"], response_class=Response)
def metrics(
    request: Request, state: State, authorization: Annotated[str | None, Header()] = None
) -> Response:
    """Prometheus text. Needs a token unless the server runs with --metrics-public."""
    if not state.settings.metrics_public:
        get_principal(request, state, authorization)
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")


@api.get("/nodes", tags=["nodes"])
def list_nodes(state: State, caller: Caller) -> list[NodeOut]:
    """Nodes and their devices: who holds which part of each (a researcher sees other
    projects' shares without workload names) and recent utilization."""
    with state.read() as session:
        _, devices = usage.recent(session, state.clock.now_s())
        return cluster.nodes(session, recent_devices=devices, viewer=caller)


@api.get("/names", tags=["nodes", "projects"])
def list_names(state: State, caller: Caller) -> NamesOut:
    """Every project's and node's name, nothing else: for a page's filters and colours."""
    with state.read() as session:
        return cluster.names(session)


@api.get("/nodes/{name}", tags=["nodes"])
def get_node(name: str, state: State, caller: Caller) -> NodeOut:
    with state.read() as session:
        _, devices = usage.recent(session, state.clock.now_s())
        return cluster.nodes(session, name, recent_devices=devices, viewer=caller)[0]


@api.post("/nodes", tags=["nodes"])
def register_node(body: NodeIn, state: State, caller: Caller) -> NodeOut:
    """Register or update a node (executors and admins)."""
    caller.require_admin("register nodes")
    with state.write() as session:
        cluster.register_by(session, body, state.clock.now_s(), caller.name)
    with state.read() as session:
        return cluster.nodes(session, body.name, viewer=caller)[0]


@api.get("/top", tags=["nodes"])
def top(state: State, caller: Caller) -> TopOut:
    last = state.loop.last_cycle
    now = state.clock.now_s()
    with state.read() as session:
        utilized, devices = usage.recent(session, now)
        return cluster.top(
            session,
            now,
            state.loop.shares,
            last.at_s if last else None,
            last.duration_s * 1000 if last else None,
            utilized,
            devices,
            viewer=caller,
        )


@api.get("/usage", tags=["nodes"])
def usage_report(
    state: State,
    caller: Caller,
    by: Literal["device", "project", "workload"] = "project",
    minutes: Annotated[int, Query(ge=1, le=14 * 24 * 60)] = 60,
    bucket_s: Annotated[int, Query(ge=60, le=86_400)] = 300,
) -> UsageOut:
    """Allocated vs utilized GPU over time: per-minute samples averaged into buckets (per-hour
    ones for a range beyond the minutes' two days)."""
    now = state.clock.now_s()
    visible = None if caller.is_admin else list(caller.project_ids.values())
    with state.read() as session:
        return usage.report(session, by, now - minutes * 60, bucket_s, visible, now)


@api.get("/whoami", tags=["users"])
def whoami(state: State, caller: Caller) -> UserOut:
    with state.read() as session:
        return users.view(session, users.get_row(session, caller.name))


@api.get("/users", tags=["users"])
def list_users(state: State, caller: Caller) -> list[UserOut]:
    caller.require_admin("list users")
    with state.read() as session:
        return users.list_all(session)


@api.post("/users", tags=["users"], status_code=201)
def create_user(body: UserIn, state: State, caller: Caller) -> UserOut:
    caller.require_admin("create users")
    with state.write() as session:
        return users.create(session, body, state.clock.now_s(), caller.name)


@api.put("/users/{name}/projects", tags=["users"])
def set_user_projects(name: str, body: ProjectsIn, state: State, caller: Caller) -> UserOut:
    caller.require_admin("change memberships")
    with state.write() as session:
        out = users.set_projects(
            session, users.get_row(session, name), body.projects, state.clock.now_s(), caller.name
        )
    state.tokens.clear()
    return out


@api.post("/users/{name}/tokens", tags=["users"], status_code=201)
def create_token(name: str, body: TokenIn, state: State, caller: Caller) -> TokenOut:
    if name != caller.name:
        caller.require_admin("issue tokens for other users")
    with state.write() as session:
        return users.issue_token(
            session,
            users.get_row(session, name),
            body.label,
            state.clock.now_s(),
            caller.name,
            body.expires_in_s,
        )


@api.delete("/users/{name}", tags=["users"], status_code=204)
def delete_user(name: str, state: State, caller: Caller) -> Response:
    caller.require_admin("delete users")
    with state.write() as session:
        users.remove(session, users.get_row(session, name), caller.name, state.clock.now_s())
    state.tokens.clear()
    return Response(status_code=204)


@api.get("/tokens", tags=["users"])
def list_tokens(state: State, caller: Caller, user: str | None = None) -> list[TokenInfo]:
    """Every user's tokens (`user`: only theirs): id, user, label and when issued; never the
    token itself. Admins only."""
    caller.require_admin("list tokens")
    with state.read() as session:
        return users.list_tokens(session, None if user is None else users.get_row(session, user))


@api.delete("/tokens/{token_id}", tags=["users"], status_code=204)
def revoke_token(
    token_id: Annotated[int, Path(ge=1, le=2**63 - 1)], state: State, caller: Caller
) -> Response:
    """Revoke a token: requests with it answer 401 from now on. Admins only."""
    caller.require_admin("revoke tokens")
    with state.write() as session:
        users.revoke_token(session, token_id, state.clock.now_s(), caller.name)
    state.tokens.clear()
    return Response(status_code=204)
