"""Refuse request bodies above a size with 413 and the API's JSON error, before they are parsed.

Checked twice: on the Content-Length header before the route runs (nothing is read), and on the
bytes as they arrive, for a body sent in chunks or with a Content-Length that lies.
"""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpupool.api.schemas import ErrorOut


class BodyTooLargeError(HTTPException):
    """Raised while the body streams in; answered 413 by the app's handler or the middleware."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, too_large(max_bytes))


def too_large(max_bytes: int) -> str:
    return (
        f"the request body is larger than {max_bytes} bytes, the server's limit: send less "
        "(a shorter command, fewer or smaller env values; docs/security.md#limits lists "
        "every limit)"
    )


class BodyLimit:
    """Pure ASGI middleware (no buffering): HTTP requests only; others pass untouched."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send)
            return
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLargeError(self.max_bytes)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLargeError:
            if started:
                raise
            await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(ErrorOut(detail=too_large(self.max_bytes)).model_dump()).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
