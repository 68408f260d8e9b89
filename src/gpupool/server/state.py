"""What one running server holds: database, executor, scheduling loop, caches. Built by
`gpupool.server.app.create_app` and reached by the routers through FastAPI dependencies."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from gpupool.clock import Clock
from gpupool.executors.base import Executor
from gpupool.executors.isolation import Isolation
from gpupool.executors.local import LocalExecutor
from gpupool.server.auth import Principal, TokenCache
from gpupool.server.batcher import SubmitBatcher
from gpupool.server.errors import ApiError
from gpupool.server.metrics import ServerMetrics
from gpupool.server.scheduler import SchedulingLoop
from gpupool.server.services import web_sessions
from gpupool.server.settings import ServerSettings


@dataclass(slots=True)
class ServerState:
    settings: ServerSettings
    engine: Engine
    writer: sessionmaker[Session]
    reader: sessionmaker[Session]
    executor: Executor
    clock: Clock
    metrics: ServerMetrics
    loop: SchedulingLoop
    tokens: TokenCache
    submitter: SubmitBatcher

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A write transaction; commits on success. The loop is woken afterwards."""
        with self.writer.begin() as session:
            yield session
        self.loop.wake()

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self.reader() as session, session.begin():
            yield session


def task_isolation(executor: Executor) -> Isolation | None:
    """How the local executor isolates tasks; None for other executors."""
    return executor.isolation if isinstance(executor, LocalExecutor) else None


def check_working_dir(executor: Executor, working_dir: str | None) -> None:
    """422 when an isolating local executor would refuse `working_dir` at launch."""
    isolation = task_isolation(executor)
    problem = None if isolation is None else isolation.working_dir_problem(working_dir)
    if problem is not None:
        raise ApiError(422, problem, field="working_dir")


async def get_state(request: Request) -> ServerState:
    state: ServerState = request.app.state.gpupool
    return state


State = Annotated[ServerState, Depends(get_state)]


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def get_principal(
    request: Request, state: State, authorization: Annotated[str | None, Header()] = None
) -> Principal:
    """The caller: a bearer token (CLI, scripts) or, without one, the browser's session cookie.
    A change made with the cookie must carry the session's CSRF token in a header, which a page
    of another origin cannot send."""
    token = None
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer":
            token = value.strip()
    cookie = request.cookies.get(web_sessions.COOKIE_NAME)
    if token is None and cookie:
        with state.read() as session:
            principal, row = web_sessions.authenticate(
                session,
                cookie,
                state.clock.now_s(),
                request.headers.get(web_sessions.CSRF_HEADER),
                changes=request.method not in SAFE_METHODS,
            )
        request.state.web_session = row
        return principal
    with state.read() as session:
        return state.tokens.authenticate(session, token, state.clock.now_s())


Caller = Annotated[Principal, Depends(get_principal)]
