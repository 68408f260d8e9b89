"""Timing the API over HTTP: each endpoint a page reads, each page's reads together, and the raw
`usage` table as the history store's peer."""

from __future__ import annotations

import math
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from gpupool.server.process import ServerProcess

from .common import API, PAGE, Config, say


@dataclass(slots=True)
class Timing:
    name: str
    role: str
    path: str
    params: dict[str, str | int]
    samples_s: list[float]
    bytes: int
    rows: int | None = None
    """Items in the answer where it is a list (`total` for the workload list)."""

    @property
    def p50_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def p95_s(self) -> float:
        ordered = sorted(self.samples_s)
        return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def timed_get(
    client: httpx.Client, path: str, params: dict[str, str | int], warmup: int, requests: int
) -> tuple[list[float], httpx.Response]:
    response = None
    for _ in range(warmup):
        response = client.get(path, params=params)
        response.raise_for_status()
    samples = []
    for _ in range(requests):
        began = time.perf_counter()
        response = client.get(path, params=params)
        samples.append(time.perf_counter() - began)
        response.raise_for_status()
    assert response is not None
    return samples, response


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    path: str
    params: dict[str, str | int]


def endpoints(openapi: dict[str, Any], project: str, notes: list[str]) -> list[Endpoint]:
    """What the dashboard reads, as far as this server offers it (from its OpenAPI)."""
    paths: dict[str, Any] = openapi.get("paths", {})
    out: list[Endpoint] = []
    if f"{API}/history" in paths:
        out += [Endpoint(f"history {r}", f"{API}/history", {"range": r}) for r in HISTORY_RANGES]
        history = paths[f"{API}/history"].get("get", {}).get("parameters", [])
        if any(p["name"] == "project_series" for p in history):
            # What the overview asks for: each project's allocation only.
            out += [
                Endpoint(
                    f"history {r}, {ALLOCATED_ONLY}",
                    f"{API}/history",
                    {"range": r, "project_series": "allocated"},
                )
                for r in OVERVIEW_RANGES
            ]
    else:
        notes.append("GET /api/v1/history is not served: its rows were skipped")
    out.append(Endpoint("top", f"{API}/top", {}))
    out.append(Endpoint("projects", f"{API}/projects", {}))
    out.append(Endpoint("nodes", f"{API}/nodes", {}))
    if f"{API}/names" in paths:
        out.append(Endpoint("names", f"{API}/names", {}))
    parameters = {
        p["name"]: p for p in paths.get(f"{API}/workloads", {}).get("get", {}).get("parameters", [])
    }
    page: dict[str, str | int] = {"limit": PAGE}
    if "submitted_at" in _enum_values(openapi, parameters.get("sort")) and "order" in parameters:
        page |= {"sort": "submitted_at", "order": "desc"}
        label = "workloads p1, newest first"
    else:
        notes.append("GET /api/v1/workloads has no sort=submitted_at&order=desc: default order")
        label = "workloads page 1"
    out.append(Endpoint(label, f"{API}/workloads", page))
    if "sort" in page:
        oldest: dict[str, str | int] = {
            "status": "pending",
            "sort": "submitted_at",
            "order": "asc",
            "limit": 5,
        }
        out.append(Endpoint(OLDEST_PENDING, f"{API}/workloads", oldest))
    out.append(Endpoint("  + project filter", f"{API}/workloads", page | {"project": project}))
    out.append(Endpoint("  + status=pending", f"{API}/workloads", page | {"status": "pending"}))
    if "q" in parameters:
        out.append(Endpoint("  + name search q=sweep", f"{API}/workloads", page | {"q": "sweep"}))
    else:
        notes.append("GET /api/v1/workloads has no q (name search): skipped")
    return out


def _enum_values(openapi: dict[str, Any], parameter: dict[str, Any] | None) -> set[str]:
    """The values a query parameter's schema allows, following `$ref`s and `anyOf`."""
    found: set[str] = set()
    todo = [parameter.get("schema", {})] if parameter else []
    while todo:
        schema = todo.pop()
        ref = schema.get("$ref")
        if isinstance(ref, str):
            node: Any = openapi
            for part in ref.removeprefix("#/").split("/"):
                node = node.get(part, {})
            todo.append(node)
        todo.extend(schema.get("anyOf", []) + schema.get("oneOf", []))
        found.update(str(value) for value in schema.get("enum", []))
    return found


HISTORY_RANGES = ("30d", "7d", "24h", "1h")
OVERVIEW_RANGES = ("30d", "1h")
ALLOCATED_ONLY = "allocated only"
OLDEST_PENDING = "  5 oldest pending"
PAGE_READS: dict[str, tuple[tuple[str, ...], ...]] = {
    "overview 1h": (("top",), (f"history 1h, {ALLOCATED_ONLY}", "history 1h"), (OLDEST_PENDING,)),
    "overview 30d": (
        ("top",),
        (f"history 30d, {ALLOCATED_ONLY}", "history 30d"),
        (OLDEST_PENDING,),
    ),
    "workloads": (("workloads p1, newest first",), ("projects",)),
}
"""The reads each page waits for before it is drawn, issued together (the first of each tuple
that the server offers). The overview opens on its last hour. The workloads page asks for the
node names (`names`) once its table is drawn."""
RANGE_HOURS = {"1h": 1, "24h": 24, "7d": 168, "30d": 720}


def _rows(body: Any) -> int | None:
    if isinstance(body, list):
        return len(body)
    if isinstance(body, dict):
        if "total" in body:
            return int(body["total"])
        if "times" in body:
            return len(body["times"])
        if "projects" in body:
            return len(body["projects"])
    return None


def measure_api(
    server: ServerProcess, tokens: dict[str, str], config: Config, project: str, notes: list[str]
) -> list[Timing]:
    with httpx.Client(base_url=server.url, timeout=300) as anonymous:
        openapi = anonymous.get("/openapi.json").json()
    timings: list[Timing] = []
    for role, token in tokens.items():
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=300
        ) as client:
            for endpoint in endpoints(openapi, project, notes if role == "admin" else []):
                samples, response = timed_get(
                    client, endpoint.path, endpoint.params, config.warmup, config.requests
                )
                timing = Timing(
                    endpoint.name,
                    role,
                    endpoint.path,
                    endpoint.params,
                    samples,
                    len(response.content),
                    _rows(response.json()),
                )
                timings.append(timing)
                say(
                    f"  {role:<10} {endpoint.name:<34} p50 {timing.p50_s * 1000:8.1f} ms  "
                    f"p95 {timing.p95_s * 1000:8.1f} ms  {timing.bytes / 1024:8.0f} KiB"
                )
    return timings


def measure_pages(
    server: ServerProcess, token: str, config: Config, timings: list[Timing]
) -> list[Timing]:
    """Each page's reads issued together as the page does (one connection each, as a browser
    opens several), timed until the last answer: the server's part of drawing the page."""
    known = {t.name.strip(): t for t in timings if t.role == "admin"}
    out = []
    clients = [
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=300)
        for _ in range(max(len(names) for names in PAGE_READS.values()))
    ]
    try:
        with ThreadPoolExecutor(len(clients)) as pool:
            for page, names in PAGE_READS.items():
                reads = [
                    next(known[name.strip()] for name in choices if name.strip() in known)
                    for choices in names
                    if any(name.strip() in known for name in choices)
                ]
                if len(reads) < len(names):
                    continue

                def one(pair: tuple[httpx.Client, Timing]) -> int:
                    response = pair[0].get(pair[1].path, params=pair[1].params)
                    response.raise_for_status()
                    return len(response.content)

                samples: list[float] = []
                size = 0
                for attempt in range(config.warmup + config.requests):
                    began = time.perf_counter()
                    size = sum(pool.map(one, zip(clients, reads, strict=False)))
                    if attempt >= config.warmup:
                        samples.append(time.perf_counter() - began)
                timing = Timing(
                    f"reads: {page}",
                    "admin",
                    " + ".join(r.path for r in reads),
                    {},
                    samples,
                    size,
                )
                out.append(timing)
                say(
                    f"  {timing.name:<45} p50 {timing.p50_s * 1000:8.1f} ms  "
                    f"p95 {timing.p95_s * 1000:8.1f} ms"
                )
    finally:
        for client in clients:
            client.close()
    return out


@dataclass(slots=True)
class PeerResult:
    window: str
    raw_samples_s: list[float]
    raw_bytes: int
    history_p50_s: float | None
    raw_rows_read: int

    @property
    def raw_p50_s(self) -> float:
        return statistics.median(self.raw_samples_s)

    @property
    def ratio(self) -> float | None:
        return None if not self.history_p50_s else self.raw_p50_s / self.history_p50_s


def measure_peer(
    server: ServerProcess, token: str, config: Config, timings: list[Timing], raw_rows: int
) -> list[PeerResult]:
    """The raw per-minute `usage` table over the windows it holds (1 h and `raw_hours`),
    `by=project` in the history's step, against the history store over the same window."""
    by_range = {
        t.params.get("range"): t
        for t in timings
        if t.role == "admin" and "project_series" not in t.params
    }
    windows = sorted({h for h in (1, config.raw_hours) if 0 < h <= config.raw_hours})
    out = []
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=600
    ) as client:
        for hours in windows:
            label = next((r for r, h in RANGE_HOURS.items() if h == hours), f"{hours}h")
            match = by_range.get(label)
            step = _history_step(client, label) if match else None
            params: dict[str, str | int] = {
                "by": "project",
                "minutes": hours * 60,
                "bucket_s": max(60, min(86_400, step or 300)),
            }
            # A request over a day of raw rows takes seconds: only the small window warms up.
            warmup = min(1, config.warmup) if hours <= 1 else 0
            samples, response = timed_get(
                client, f"{API}/usage", params, warmup, config.raw_requests
            )
            rows_read = raw_rows * hours // max(1, config.raw_hours)
            result = PeerResult(
                label, samples, len(response.content), match.p50_s if match else None, rows_read
            )
            out.append(result)
            ratio = "" if result.ratio is None else f", {result.ratio:,.0f}x the history's p50"
            say(
                f"  raw usage {label:<4} (~{rows_read:,} rows) p50 "
                f"{result.raw_p50_s * 1000:,.0f} ms{ratio}"
            )
    return out


def _history_step(client: httpx.Client, label: str) -> int | None:
    response = client.get(f"{API}/history", params={"range": label})
    if response.status_code != 200:
        return None
    step = response.json().get("step_s")
    return int(step) if isinstance(step, int | float) else None
