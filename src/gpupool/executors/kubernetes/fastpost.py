"""POSTs to the API server on the scheduler's hot path, without a general HTTP client's cost.

Filling a cluster means one Binding per pod, and reclaiming it one Eviction per victim: thousands
of small POSTs in a burst. Through lightkube and httpx each costs about 2-3 ms of CPU (request
building, the connection pool's bookkeeping, anyio streams), which on a busy 2-core machine is
what limits gpupool's bind rate (benchmarks/kubernetes.py). `FastPoster` writes these requests
itself over a few keep-alive HTTP/1.1 connections (asyncio streams with the kubeconfig's TLS
context and credentials) and reads the answer's status and body. Everything else (watches, gets,
patches, logs) goes through lightkube.

Only bearer tokens (inline or in a file, as in-cluster service accounts have) and client
certificates are supported; `for_config` returns None for other credentials (exec plugins), and
the caller keeps to lightkube.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lightkube.config.kubeconfig import SingleConfig

__all__ = ["FastPoster", "PostResult"]

_MAX_BODY = 4 * 1024 * 1024
_TOKEN_REREAD_S = 60.0


@dataclass(frozen=True, slots=True)
class PostResult:
    status: int
    body: bytes

    @property
    def message(self) -> str:
        """The API server's `Status.message`, or the start of the body."""
        try:
            data = json.loads(self.body)
        except ValueError:
            return self.body[:300].decode(errors="replace")
        if isinstance(data, dict) and isinstance(data.get("message"), str):
            return str(data["message"])
        return self.body[:300].decode(errors="replace")


class _Token:
    def __init__(self, token: str | None, token_file: str | None) -> None:
        self._token = token
        self._file = token_file
        self._read_at = 0.0

    def header(self) -> bytes:
        if self._file is not None and time.monotonic() - self._read_at > _TOKEN_REREAD_S:
            self._token = Path(self._file).read_text().strip()
            self._read_at = time.monotonic()
        return f"Authorization: Bearer {self._token}\r\n".encode() if self._token else b""


class FastPoster:
    """POST JSON over up to `connections` keep-alive connections. Use on one event loop."""

    def __init__(
        self, host: str, port: int, context: ssl.SSLContext | None, token: _Token, connections: int
    ) -> None:
        self._host = host
        self._port = port
        self._context = context
        self._token = token
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._slots = asyncio.Semaphore(connections)

    @staticmethod
    def for_config(
        config: SingleConfig, context: ssl.SSLContext, connections: int
    ) -> FastPoster | None:
        user = config.user
        if user is None or user.exec is not None or user.auth_provider is not None:
            return None
        if user.username is not None:
            return None
        url = urlsplit(config.cluster.server)
        if url.scheme not in ("https", "http") or url.hostname is None:
            return None
        if url.path not in ("", "/"):
            return None  # an API server behind a path prefix: keep to lightkube
        token_file = str(config.abs_file(user.token_file)) if user.token_file else None
        port = url.port or (443 if url.scheme == "https" else 80)
        return FastPoster(
            url.hostname,
            port,
            context if url.scheme == "https" else None,
            _Token(user.token, token_file),
            connections,
        )

    async def post(self, path: str, body: Any) -> PostResult:
        """POST `body` (JSON-encoded here) to `path`; one retry on a connection that broke."""
        payload = json.dumps(body, separators=(",", ":")).encode()
        async with self._slots:
            for attempt in (0, 1):
                reader, writer = await self._connection()
                try:
                    result, reusable = await self._exchange(reader, writer, path, payload)
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    writer.close()
                    if attempt == 1:
                        raise
                    continue
                if reusable:
                    self._idle.append((reader, writer))
                else:
                    writer.close()
                return result
        raise AssertionError("unreachable")

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for _, writer in idle:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        while self._idle:
            reader, writer = self._idle.pop()
            if not writer.is_closing() and not reader.at_eof():
                return reader, writer
            writer.close()
        return await asyncio.open_connection(
            self._host,
            self._port,
            ssl=self._context,
            server_hostname=self._host if self._context is not None else None,
        )

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, payload: bytes
    ) -> tuple[PostResult, bool]:
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {self._host}:{self._port}\r\n".encode()
            + self._token.header()
            + b"Content-Type: application/json\r\nAccept: application/json\r\n"
            + f"User-Agent: gpupool\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        await writer.drain()
        status_line = await reader.readline()
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ValueError(f"not an HTTP answer: {status_line[:80]!r}")
        status = int(parts[1])
        length: int | None = None
        chunked = False
        closing = False
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value.strip())
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"connection" and b"close" in value.lower():
                closing = True
        if chunked:
            body = await self._chunks(reader)
        elif length is not None:
            if length > _MAX_BODY:
                raise ValueError("answer too large")
            body = await reader.readexactly(length)
        else:
            body = await reader.read(_MAX_BODY)
            closing = True
        return PostResult(status, body), not closing

    @staticmethod
    async def _chunks(reader: asyncio.StreamReader) -> bytes:
        body = bytearray()
        while True:
            size = int((await reader.readline()).split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readline()
                return bytes(body)
            body += await reader.readexactly(size)
            await reader.readexactly(2)
            if len(body) > _MAX_BODY:
                raise ValueError("answer too large")
