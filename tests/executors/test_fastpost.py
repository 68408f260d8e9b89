"""The hot-path POST client against a loopback HTTP server that answers in each of HTTP/1.1's
ways: a length, chunks, a closed connection, and a connection dropped between requests."""

from __future__ import annotations

import asyncio
import json

from lightkube.config.kubeconfig import KubeConfig

from gpupool.executors.kubernetes.fastpost import FastPoster, _Token

ANSWERS = {
    "/length": b'HTTP/1.1 201 Created\r\nContent-Length: 17\r\n\r\n{"status":"ok!!"}',
    "/chunked": (
        b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'5\r\n{"mes\r\n19\r\nsage":"already assigned"}\r\n0\r\n\r\n'
    ),
    "/close": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nbye",
}


async def serve(seen: list[tuple[str, bytes, dict[str, str]]], drop_after: int) -> asyncio.Server:
    handled = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal handled
        while True:
            line = await reader.readline()
            if not line:
                break
            _, path, _ = line.decode().split(" ")
            headers = {}
            while (header := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = header.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers["content-length"]))
            seen.append((path, body, headers))
            handled += 1
            writer.write(ANSWERS[path])
            await writer.drain()
            if path == "/close" or handled == drop_after:
                break
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_posts_read_every_kind_of_answer_and_reuse_connections() -> None:
    async def run() -> None:
        seen: list[tuple[str, bytes, dict[str, str]]] = []
        server = await serve(seen, drop_after=2)
        port = server.sockets[0].getsockname()[1]
        poster = FastPoster("127.0.0.1", port, None, _Token("sekret", None), connections=2)
        first = await poster.post("/length", {"a": 1})
        assert (first.status, first.message) == (201, '{"status":"ok!!"}')
        conflict = await poster.post("/chunked", {"b": [1, 2]})
        assert (conflict.status, conflict.message) == (409, "already assigned")
        # The server dropped that connection after two answers: the next post retries once.
        again = await poster.post("/length", {})
        assert again.status == 201
        closing = await poster.post("/close", {})
        assert (closing.status, closing.body) == (200, b"bye")
        results = await asyncio.gather(*(poster.post("/length", {"i": i}) for i in range(10)))
        assert {r.status for r in results} == {201}
        assert json.loads(seen[0][1]) == {"a": 1}
        assert all(h["authorization"] == "Bearer sekret" for _, _, h in seen)
        await poster.close()
        server.close()
        await server.wait_closed()

    asyncio.run(run())


def test_only_simple_credentials_take_the_fast_path() -> None:
    def config(user: dict[str, object], server: str = "https://127.0.0.1:6443") -> object:
        return KubeConfig.from_dict(
            {
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        ).get()

    import ssl

    context = ssl.create_default_context()
    assert FastPoster.for_config(config({"token": "t"}), context, 4) is not None  # type: ignore[arg-type]
    exec_plugin = {"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}}
    assert FastPoster.for_config(config(exec_plugin), context, 4) is None  # type: ignore[arg-type]
    behind_a_path = config({"token": "t"}, "https://proxy.example/k8s")
    assert FastPoster.for_config(behind_a_path, context, 4) is None  # type: ignore[arg-type]
