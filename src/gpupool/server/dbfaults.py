"""The database going away: which errors mean that, how the loop waits, what the API answers.

An outage (the server stopped or unreachable, a connect or statement timeout, SQLite locked past
its busy timeout) is not a bad row: the scheduling loop backs off and tries again, and the API
answers 503 with `Retry-After`, so that a client retries what was never acknowledged. Nothing
acknowledged is lost: a submission is answered 201 only once its transaction committed.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy import exc

from gpupool.api.schemas import ErrorOut

RETRY_AFTER_S = 5
"""What a 503 tells the client to wait before it tries again."""


def is_outage(error: BaseException) -> bool:
    """Does `error` say the database cannot be reached now (rather than a bad row or a bug)?"""
    if isinstance(error, exc.OperationalError | exc.InterfaceError | exc.TimeoutError):
        return True
    if isinstance(error, exc.DBAPIError) and error.connection_invalidated:
        return True
    return isinstance(error, TimeoutError | ConnectionError)


@dataclass(slots=True)
class Backoff:
    """Capped exponential waits: `first_s`, twice that, ... up to `cap_s`; `reset` after a
    success. The loop waits `next_s()` after each iteration that met an outage."""

    first_s: float = 0.5
    cap_s: float = 30.0
    failures: int = 0

    def next_s(self) -> float:
        wait = min(self.cap_s, self.first_s * float(2 ** min(self.failures, 30)))
        self.failures += 1
        return wait

    def reset(self) -> None:
        self.failures = 0


def unavailable_response() -> JSONResponse:
    body = ErrorOut(
        detail="the database is unavailable or too slow to answer; nothing was changed by "
        f"this request: try again in {RETRY_AFTER_S} s"
    )
    return JSONResponse(
        body.model_dump(), status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)}
    )


def install_handlers(app: FastAPI) -> None:
    """JSON 503 with `Retry-After` for every database outage a route meets. Integrity errors
    keep their own handler (409): Starlette picks the most specific class."""

    async def _outage(request: Request, error: Exception) -> JSONResponse:
        return unavailable_response()

    for kind in (exc.OperationalError, exc.InterfaceError, exc.TimeoutError):
        app.add_exception_handler(kind, _outage)

    async def _dbapi(request: Request, error: Exception) -> JSONResponse:
        if is_outage(error):
            return unavailable_response()
        raise error

    app.add_exception_handler(exc.DBAPIError, _dbapi)
