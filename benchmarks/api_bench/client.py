"""The benchmark's HTTP side: reading `/metrics` and the list endpoint, and the burst of POSTs on
raw keep-alive connections (`submit_all`)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from api_bench.model import API, MetricsSample
from gpupool.core.model import MILLI_PER_GPU


def parse_metrics(text: str, at_s: float) -> MetricsSample:
    cycles, cycle_sum, binds, evicts, pending = 0, 0.0, 0, 0, 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gpupool_cycle_duration_seconds_count":
                cycles = int(sample.value)
            elif sample.name == "gpupool_cycle_duration_seconds_sum":
                cycle_sum = float(sample.value)
            elif sample.name == "gpupool_decisions_total":
                if sample.labels.get("kind") == "bind":
                    binds = int(sample.value)
                elif sample.labels.get("kind") == "evict":
                    evicts = int(sample.value)
            elif sample.name == "gpupool_pending_workloads":
                pending += int(sample.value)
    return MetricsSample(at_s, cycles, cycle_sum, binds, evicts, pending)


async def read_metrics(client: httpx.AsyncClient) -> MetricsSample:
    response = await client.get("/metrics")
    response.raise_for_status()
    return parse_metrics(response.text, time.perf_counter())


async def running_total(client: httpx.AsyncClient, project: str) -> int:
    """Workloads of the project with status running: the one-row page's `total`."""
    response = await client.get(
        f"{API}/workloads", params={"project": project, "status": "running", "limit": 1}
    )
    response.raise_for_status()
    return int(response.json()["total"])


async def held_by_running_tasks(
    client: httpx.AsyncClient, project: str, count: int
) -> tuple[bool, float]:
    """Whether every one of the project's `count` workloads runs all its tasks, and the GPUs
    their running tasks hold."""
    response = await client.get(
        f"{API}/workloads", params={"project": project, "status": "running", "limit": 10_000}
    )
    response.raise_for_status()
    items: list[dict[str, Any]] = response.json()["items"]
    all_running = len(items) >= count and all(i["running_tasks"] == i["tasks"] for i in items)
    held_milli = sum((i["gpu_milli_per_task"] or 0) * i["running_tasks"] for i in items)
    return all_running, held_milli / MILLI_PER_GPU


class RawConnection:
    """One keep-alive HTTP/1.1 connection on asyncio streams, for the burst of POSTs.

    httpx's AsyncClient spends about 6 ms of client CPU per request here (its connection pool's
    bookkeeping with 64 connections), so on a 2-core machine the client, not the server, would
    set the pace; this costs about 0.25 ms. Enough HTTP for uvicorn: Content-Length bodies.
    """

    def __init__(self, host: str, port: int, token: str) -> None:
        self._host = host
        self._port = port
        self._token = token
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post_json(self, path: str, body: dict[str, object]) -> tuple[int, bytes]:
        """(status, body). Raises `ConnectionError` (or `OSError`) when the connection fails;
        the next call opens a new one."""
        data = json.dumps(body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self._host}:{self._port}\r\n"
            f"Authorization: Bearer {self._token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        ).encode()
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self._host, self._port)
        assert self._reader is not None
        try:
            self._writer.write(head + data)
            status_line = await self._reader.readuntil(b"\r\n")
            headers = await self._reader.readuntil(b"\r\n\r\n")
            length, close = 0, False
            for line in headers.split(b"\r\n"):
                key, _, value = line.partition(b":")
                key = key.strip().lower()
                if key == b"content-length":
                    length = int(value)
                elif key == b"connection" and value.strip().lower() == b"close":
                    close = True
            payload = await self._reader.readexactly(length)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError) as error:
            self.close()
            raise ConnectionError(f"connection closed mid-response: {error}") from error
        except OSError:
            self.close()
            raise
        if close:
            self.close()
        return int(status_line.split()[1]), payload

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


@dataclass(slots=True)
class Submitted:
    latencies_s: list[float]
    errors: list[str]
    retried: int
    """POSTs sent again after their connection failed (a 409 then means the first one landed)."""
    finished_at: float
    """`time.perf_counter()` when the last answer came."""


async def submit_all(
    url: str, token: str, project: str, prefix: str, count: int, concurrency: int
) -> Submitted:
    """POST `count` one-GPU train workloads to `project` over `concurrency` connections."""
    parsed = httpx.URL(url)
    host, port = parsed.host, parsed.port or 80
    latencies: list[float] = []
    errors: list[str] = []
    retried = 0
    indices = iter(range(count))

    async def worker() -> None:
        nonlocal retried
        connection = RawConnection(host, port, token)
        try:
            for i in indices:
                body: dict[str, object] = {
                    "name": f"{prefix}-{i:05d}",
                    "project": project,
                    "type": "train",
                    "gpu": 1,
                }
                began = time.perf_counter()
                status, text = 0, b""
                for attempt in range(2):
                    try:
                        status, text = await connection.post_json(f"{API}/workloads", body)
                        break
                    except OSError as error:  # ConnectionError included
                        if attempt:
                            status, text = -1, f"{type(error).__name__}: {error}".encode()
                        else:
                            retried += 1
                latencies.append(time.perf_counter() - began)
                landed = status == 201 or (status == 409 and b"already has" in text)
                if not landed:
                    errors.append(f"{body['name']}: {status} {text[:200].decode(errors='replace')}")
        finally:
            connection.close()

    await asyncio.gather(*(worker() for _ in range(min(concurrency, count))))
    return Submitted(latencies, errors, retried, time.perf_counter())
