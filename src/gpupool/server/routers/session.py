"""Browser sessions: log in with a token (an HttpOnly cookie comes back), who am I, log out."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from gpupool.api.schemas import LoginIn, SessionOut
from gpupool.server.db import WebSessionRow
from gpupool.server.errors import ERROR_RESPONSES
from gpupool.server.services import web_sessions
from gpupool.server.state import Caller, State

router = APIRouter(prefix="/api/v1", tags=["session"], responses=ERROR_RESPONSES)


@router.post("/session", status_code=201)
def login(body: LoginIn, request: Request, response: Response, state: State) -> SessionOut:
    """Exchange a token for a session cookie (HttpOnly, SameSite=Strict; Secure over HTTPS)."""
    now = state.clock.now_s()
    with state.read() as session:
        principal, token_expires_at = state.tokens.authenticate_until(
            session, body.token.strip(), now
        )
    with state.writer.begin() as session:
        cookie, row = web_sessions.create(session, principal, now, token_expires_at)
    response.set_cookie(
        web_sessions.COOKIE_NAME,
        cookie,
        max_age=max(1, round(row.expires_at - now)),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return web_sessions.view(principal, row)


@router.get("/session")
def current(request: Request, caller: Caller) -> SessionOut:
    row: WebSessionRow | None = getattr(request.state, "web_session", None)
    return web_sessions.view(caller, row)


@router.delete("/session", status_code=204)
def logout(request: Request, state: State, caller: Caller) -> Response:
    """End the browser's session (needs the CSRF header, like every change)."""
    cookie = request.cookies.get(web_sessions.COOKIE_NAME)
    if cookie:
        with state.writer.begin() as session:
            web_sessions.end(session, cookie)
    response = Response(status_code=204)
    response.delete_cookie(web_sessions.COOKIE_NAME, path="/")
    return response
