"""`/ready`: may this server take traffic? `/health` says only that the process answers.

Ready means both: the database answers `SELECT 1` within `PROBE_TIMEOUT_S`, and the
scheduling loop (where this server runs it and leads) completed an iteration recently. The
answer says which part is not ready, with status 503, so that a load balancer or Kubernetes
readiness probe takes the replica out while its database is away and puts it back by itself.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import text

from gpupool.server.dbfaults import RETRY_AFTER_S
from gpupool.server.quarantine import describe
from gpupool.server.state import ServerState, State

PROBE_TIMEOUT_S = 2.0
"""The statement timeout of the probe's `SELECT 1` (PostgreSQL; connecting has the engine's
connect timeout)."""
STALE_AFTER_S = 30.0
"""A loop whose last iteration is older than this (or ten cycle intervals, if longer) is not
ready: it is stuck, or cannot reach the database."""


class ReadyPart(BaseModel):
    ready: bool
    detail: str


class ReadyOut(BaseModel):
    ready: bool
    database: ReadyPart
    scheduler: ReadyPart
    scheduler_thread_alive: bool | None
    """None where this server does not run the loop."""


router = APIRouter()


def database_part(state: ServerState) -> ReadyPart:
    try:
        with state.reader() as session, session.begin():
            if session.get_bind().dialect.name == "postgresql":
                timeout_ms = round(PROBE_TIMEOUT_S * 1000)
                session.execute(text(f"SET LOCAL statement_timeout = {timeout_ms}"))
            session.execute(text("SELECT 1")).scalar_one()
    except Exception as error:
        return ReadyPart(ready=False, detail=f"the database does not answer: {describe(error)}")
    return ReadyPart(ready=True, detail="answers")


def scheduler_part(state: ServerState) -> ReadyPart:
    loop = state.loop
    if not state.settings.run_scheduler:
        return ReadyPart(ready=True, detail="not run by this server (API only)")
    alive = loop.thread_alive
    if alive is None:
        return ReadyPart(ready=False, detail="not started yet")
    if not alive:
        return ReadyPart(ready=False, detail="the scheduling loop's thread has stopped")
    if loop.standing_by:
        return ReadyPart(ready=True, detail="standing by: another replica leads")
    error = f"; last error: {loop.last_error}" if loop.last_error else ""
    last = loop.last_iteration_s
    if last is None:
        return ReadyPart(ready=False, detail=f"no iteration has completed yet{error}")
    age = state.clock.now_s() - last
    limit = max(STALE_AFTER_S, 10 * state.settings.cycle_interval_s)
    if age > limit:
        return ReadyPart(
            ready=False,
            detail=f"the last iteration completed {age:.0f} s ago (limit {limit:.0f} s){error}",
        )
    failing = loop.recording_error
    recording = f"; not recorded, kept in memory meanwhile: {failing}" if failing else ""
    return ReadyPart(ready=True, detail=f"the last iteration completed {age:.1f} s ago{recording}")


@router.get(
    "/ready",
    tags=["health"],
    response_model=ReadyOut,
    responses={503: {"model": ReadyOut, "description": "Not ready: see which part"}},
)
def ready(state: State) -> JSONResponse:
    """Readiness (no token): the database answers and the scheduling loop runs. 200 or 503."""
    database = database_part(state)
    scheduler = scheduler_part(state)
    body = ReadyOut(
        ready=database.ready and scheduler.ready,
        database=database,
        scheduler=scheduler,
        scheduler_thread_alive=state.loop.thread_alive,
    )
    if body.ready:
        return JSONResponse(body.model_dump())
    return JSONResponse(
        body.model_dump(), status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)}
    )
