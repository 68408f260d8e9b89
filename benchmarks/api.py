"""The control plane under a burst: submit through the HTTP API and time until the work runs.

    .venv/bin/python benchmarks/api.py                 # 500 nodes x 8, 4,000 then 2,000
    .venv/bin/python benchmarks/api.py --quick         # 50 nodes x 8, 400 then 200
    .venv/bin/python benchmarks/api.py --database-url postgresql://user@host/empty_db
    .venv/bin/python benchmarks/api.py --json --check

A fresh `gpupool server` starts in a temp directory (SQLite in WAL mode, or `--database-url`,
which must name an empty database) with `--simulated-nodes NODESxGPUS`. Not timed: project
`team-a` (quota 0: it runs over quota on idle GPUs) and `team-b` (quota half the cluster's GPUs).

1. Phase "burst": `--workloads` one-GPU `train` workloads (no duration: they run until stopped)
   are POSTed to team-a over `--concurrency` keep-alive connections (a minimal asyncio HTTP
   client: httpx would cost the client ~6 ms of CPU per request, more than the server spends,
   on a 2-core machine). Timed from the first POST:
   *acknowledged* (every POST answered 201), *bound* (the list endpoint counts them all
   `running`) and *running* (every one of them has its task running on the executor).
2. Phase "reclaim": `--reclaim` one-GPU `train` workloads are POSTed to team-b. Timed from the
   first POST until team-b *holds its quota*: all its workloads running, holding quota GPUs,
   which needs the scheduler to reclaim that many GPUs from team-a.

While a phase runs, a watcher polls every `--poll` seconds (default 0.1) a one-row page of the
list endpoint (its `total`) and `/metrics` (the cycle histogram, decision counters and pending
gauges), which gives a per-cycle timeline; once the count is reached, the full list is read to
check the tasks. Afterwards (not part of the HTTP timing) the server loop's own cost is measured
in-process on a fresh SQLite database: one cycle at `--workloads` pending split into snapshot
read, core and persist, the dispatch after it, and the cycles and time the reclaim takes
without HTTP traffic (`--no-loop` skips this).

Targets (the issue): the burst all running in at most 10 s; team-b holding its quota in at most
20 s. Exit status: 0; 1 when a phase did not complete (errors, timeout); with `--check`, also 1
when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from gpupool.api.schemas import ProjectIn, Role, WorkloadIn, WorkloadStatus
from gpupool.cli import server_cmd
from gpupool.clock import SystemClock
from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import Bind, Evict
from gpupool.core.model import MILLI_PER_GPU, SchedulerSettings
from gpupool.executors.simulated import SimulatedExecutor, parse_simulated_nodes
from gpupool.server import migrate
from gpupool.server.auth import Principal
from gpupool.server.db import WorkloadRow, make_engine, make_sessionmakers
from gpupool.server.metrics import ServerMetrics
from gpupool.server.process import ServerProcess
from gpupool.server.scheduler import SchedulingLoop
from gpupool.server.services import projects as project_service
from gpupool.server.services import workloads as workload_service
from gpupool.server.snapshot import build_snapshot

TARGET_BURST_S = 10.0
TARGET_RECLAIM_S = 20.0
FULL = {"nodes": 500, "gpus_per_node": 8, "workloads": 4000, "reclaim": 2000}
QUICK = {"nodes": 50, "gpus_per_node": 8, "workloads": 400, "reclaim": 200}
PROJECT_A = "team-a"
PROJECT_B = "team-b"
API = "/api/v1"


@dataclass(frozen=True, slots=True)
class Config:
    nodes: int
    gpus_per_node: int
    workloads: int
    reclaim: int
    concurrency: int = 64
    database_url: str | None = None
    cycle_interval_s: float = 1.0
    max_reclaims_per_cycle: int | None = None
    """None: the server's default."""
    poll_s: float = 0.1
    timeout_s: float = 180.0
    """Per phase: give up waiting after this long."""
    loop: bool = True
    """Also measure the scheduling loop in-process."""

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def quota_b_gpus(self) -> int:
        return self.gpus // 2


@dataclass(slots=True)
class MetricsSample:
    """What `/metrics` says at one moment (counters since the server started)."""

    at_s: float
    cycles: int
    cycle_sum_s: float
    binds: int
    evicts: int
    pending: int
    """Workloads left pending by the last cycle (sum of `gpupool_pending_workloads`)."""


@dataclass(slots=True)
class CycleSpan:
    """Cycles that ended between two polls of `/metrics`."""

    at_s: float
    """Seconds since the phase's first POST, when the poll saw them."""
    cycles: int
    mean_cycle_s: float
    binds: int
    evicts: int
    pending_after: int


@dataclass(slots=True)
class PhaseResult:
    name: str
    project: str
    count: int
    target_s: float
    ack_s: float | None = None
    """Until every POST was answered 201."""
    bound_s: float | None = None
    """Until the list endpoint counted them all running (tasks starting or running)."""
    done_s: float | None = None
    """Until every task ran (and, for reclaim, the quota was held)."""
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    retried: int = 0
    """POSTs sent again on a new connection after theirs failed."""
    wall_s: float | None = None
    """The phase's length as measured (until done, or given up)."""
    server_cpu_s: float | None = None
    """CPU seconds the server process used meanwhile (Linux only)."""
    client_cpu_s: float | None = None
    """CPU seconds this benchmark process used meanwhile."""
    latency_ms: dict[str, float] = field(default_factory=dict)
    """POST latency: p50, p90, p99, max."""
    held_gpus: float | None = None
    """GPUs the project's running tasks hold at the end (from the list endpoint)."""
    cycles: int = 0
    cycle_sum_s: float = 0.0
    longest_cycle_s: float | None = None
    """Longest span in which exactly one cycle ended between two polls: one cycle's time."""
    binds: int = 0
    evicts: int = 0
    timeline: list[CycleSpan] = field(default_factory=list)

    @property
    def completed(self) -> bool:
        return self.done_s is not None and self.errors == 0

    @property
    def met(self) -> bool:
        return self.done_s is not None and self.done_s <= self.target_s

    @property
    def ack_rate(self) -> float | None:
        return self.count / self.ack_s if self.ack_s else None


@dataclass(slots=True)
class LoopCycle:
    """One iteration of the scheduling loop, in-process, ms."""

    pending: int
    """Workloads pending in the database when the iteration began."""
    snapshot_ms: float | None
    """Reading the snapshot from the database (measured on a separate call)."""
    core_ms: float | None
    """`run_cycle` on that snapshot (measured on a separate call)."""
    cycle_ms: float
    """`SchedulingLoop.cycle()`: snapshot + core + persisting the decisions."""
    dispatch_ms: float
    """`SchedulingLoop.dispatch()`: stop the evicted, start the bound."""
    binds: int
    evicts: int

    @property
    def persist_ms(self) -> float | None:
        if self.snapshot_ms is None or self.core_ms is None:
            return None
        return max(0.0, self.cycle_ms - self.snapshot_ms - self.core_ms)


@dataclass(slots=True)
class LoopResult:
    setup_s: float
    burst: LoopCycle
    reclaim: list[LoopCycle]
    reclaim_total_s: float
    reclaim_done: bool


@dataclass(slots=True)
class BenchResult:
    config: Config
    server_pid: int | None
    started_s: float
    phases: list[PhaseResult]
    final: dict[str, dict[str, int]]
    """Per project at the end, from `/top`: allocated_gpu_milli, running, pending."""
    loop: LoopResult | None = None

    @property
    def completed(self) -> bool:
        return len(self.phases) == 2 and all(p.completed for p in self.phases)

    @property
    def met(self) -> bool:
        return self.completed and all(p.met for p in self.phases)


@dataclass(frozen=True, slots=True)
class ServerTarget:
    url: str
    token: str
    pid: int | None


# -- the HTTP benchmark --------------------------------------------------------------------------


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


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of a process so far (Linux `/proc`; None elsewhere)."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def own_cpu_s() -> float:
    return time.process_time()


def _spans(samples: Sequence[MetricsSample], started: float) -> list[CycleSpan]:
    spans = []
    for before, after in itertools.pairwise(samples):
        cycles = after.cycles - before.cycles
        if cycles <= 0:
            continue
        spans.append(
            CycleSpan(
                at_s=after.at_s - started,
                cycles=cycles,
                mean_cycle_s=(after.cycle_sum_s - before.cycle_sum_s) / cycles,
                binds=after.binds - before.binds,
                evicts=after.evicts - before.evicts,
                pending_after=after.pending,
            )
        )
    return spans


async def run_phase(
    client: httpx.AsyncClient,
    server: ServerTarget,
    config: Config,
    name: str,
    project: str,
    count: int,
    target_s: float,
    quota_gpus: float | None,
) -> PhaseResult:
    """Submit `count` workloads to `project` and watch until all run (and, when `quota_gpus`
    is given, the project holds that many GPUs)."""
    result = PhaseResult(name=name, project=project, count=count, target_s=target_s)
    samples = [await read_metrics(client)]
    server_cpu = process_cpu_s(server.pid)
    client_cpu = own_cpu_s()
    started = time.perf_counter()
    submitting = asyncio.create_task(
        submit_all(server.url, server.token, project, project, count, config.concurrency)
    )

    def elapsed() -> float:
        return time.perf_counter() - started

    while elapsed() < config.timeout_s:
        tick = time.perf_counter()
        if submitting.done() and result.ack_s is None:
            _acknowledged(result, submitting.result(), started)
            if result.errors:
                break
        total = await running_total(client, project)
        samples.append(await read_metrics(client))
        if total >= count and result.bound_s is None:
            result.bound_s = elapsed()
        if result.bound_s is not None:
            all_running, held = await held_by_running_tasks(client, project, count)
            result.held_gpus = held
            if all_running and (quota_gpus is None or held >= quota_gpus):
                result.done_s = elapsed()
                break
        await asyncio.sleep(max(0.0, config.poll_s - (time.perf_counter() - tick)))
    if result.ack_s is None:
        _acknowledged(result, await submitting, started)
    result.wall_s = elapsed()
    server_cpu_after = process_cpu_s(server.pid)
    if server_cpu is not None and server_cpu_after is not None:
        result.server_cpu_s = server_cpu_after - server_cpu
    result.client_cpu_s = own_cpu_s() - client_cpu
    samples.append(await read_metrics(client))
    result.timeline = _spans(samples, started)
    result.cycles = samples[-1].cycles - samples[0].cycles
    result.cycle_sum_s = samples[-1].cycle_sum_s - samples[0].cycle_sum_s
    result.binds = samples[-1].binds - samples[0].binds
    result.evicts = samples[-1].evicts - samples[0].evicts
    singles = [s.mean_cycle_s for s in result.timeline if s.cycles == 1]
    result.longest_cycle_s = max(singles) if singles else None
    return result


def _acknowledged(result: PhaseResult, submitted: Submitted, started: float) -> None:
    result.ack_s = submitted.finished_at - started
    result.errors = len(submitted.errors)
    result.error_samples = submitted.errors[:5]
    result.retried = submitted.retried
    result.latency_ms = _percentiles(submitted.latencies_s)


def _percentiles(latencies: list[float]) -> dict[str, float]:
    if not latencies:
        return {}
    ms = sorted(x * 1000 for x in latencies)
    cuts = statistics.quantiles(ms, n=100) if len(ms) > 1 else [ms[0]] * 99
    return {"p50": cuts[49], "p90": cuts[89], "p99": cuts[98], "max": ms[-1]}


async def _setup(client: httpx.AsyncClient, config: Config) -> None:
    for body in (
        {"name": PROJECT_A, "quota": {"gpu": 0}},
        {"name": PROJECT_B, "quota": {"gpu": config.quota_b_gpus}},
    ):
        response = await client.post(f"{API}/projects", json=body)
        if response.status_code != 201:
            raise RuntimeError(
                f"creating project {body['name']} failed: {response.status_code} "
                f"{response.text[:300]} (does --database-url name an empty database?)"
            )


async def _final_state(client: httpx.AsyncClient) -> dict[str, dict[str, int]]:
    response = await client.get(f"{API}/top")
    response.raise_for_status()
    return {
        p["name"]: {
            "allocated_gpu_milli": p["allocated_gpu_milli"],
            "running": p["running"],
            "pending": p["pending"],
        }
        for p in response.json()["projects"]
    }


async def _run_http(
    server: ServerTarget, config: Config
) -> tuple[list[PhaseResult], dict[str, dict[str, int]]]:
    """Set up, run the two phases (the second only if the first completed), read `/top`."""
    async with httpx.AsyncClient(
        base_url=server.url,
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=httpx.Timeout(120.0),
    ) as client:
        await _setup(client, config)
        burst = await run_phase(
            client, server, config, "burst", PROJECT_A, config.workloads, TARGET_BURST_S, None
        )
        phases = [burst]
        if burst.completed:
            await asyncio.sleep(max(1.0, config.cycle_interval_s))  # let the loop settle
            phases.append(
                await run_phase(
                    client,
                    server,
                    config,
                    "reclaim",
                    PROJECT_B,
                    config.reclaim,
                    TARGET_RECLAIM_S,
                    float(config.quota_b_gpus),
                )
            )
        return phases, await _final_state(client)


def run_benchmark(
    config: Config, on_server: Callable[[ServerProcess], None] | None = None
) -> BenchResult:
    """Start a server, run both phases against it, stop it; then (unless `config.loop` is
    false) measure the loop in-process."""
    extra: tuple[str, ...] = ()
    if config.max_reclaims_per_cycle is not None:
        extra = ("--max-reclaims-per-cycle", str(config.max_reclaims_per_cycle))
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="gpupool-api-bench-") as tmp:
        server = ServerProcess(
            Path(tmp) / "server",
            database_url=config.database_url,
            simulated_nodes=f"{config.nodes}x{config.gpus_per_node}",
            cycle_interval_s=config.cycle_interval_s,
            extra_args=extra,
        )
        with server:
            if on_server is not None:
                on_server(server)
            target = ServerTarget(server.url, server.admin_token, server.pid)
            phases, final = asyncio.run(_run_http(target, config))
    result = BenchResult(config, target.pid, started, phases, final)
    if config.loop:
        result.loop = measure_loop(config)
    return result


# -- the scheduling loop in-process --------------------------------------------------------------


def _loop_cycle(
    loop: SchedulingLoop, writer: sessionmaker[Session], settings: SchedulerSettings, split: bool
) -> LoopCycle:
    """One loop iteration, timed. With `split`, the snapshot read and the core are first timed
    on their own (on the same database state; they change nothing)."""
    with writer() as session:
        pending = session.scalar(
            select(func.count())
            .select_from(WorkloadRow)
            .where(WorkloadRow.status == WorkloadStatus.PENDING.value)
        )
    snapshot_ms = core_ms = None
    if split:
        t0 = time.perf_counter()
        with writer() as session, session.begin():
            built = build_snapshot(session, SystemClock().now_s(), settings)
        t1 = time.perf_counter()
        run_cycle(built.snapshot)
        t2 = time.perf_counter()
        snapshot_ms, core_ms = (t1 - t0) * 1000, (t2 - t1) * 1000
    loop.collect_exits()
    loop.remove_deleted()
    t3 = time.perf_counter()
    result = loop.cycle()
    t4 = time.perf_counter()
    loop.dispatch()
    loop.collect_exits()
    t5 = time.perf_counter()
    binds = sum(1 for d in result.decisions if isinstance(d, Bind))
    return LoopCycle(
        pending=pending or 0,
        snapshot_ms=snapshot_ms,
        core_ms=core_ms,
        cycle_ms=(t4 - t3) * 1000,
        dispatch_ms=(t5 - t4) * 1000,
        binds=binds,
        evicts=sum(1 for d in result.decisions if isinstance(d, Evict)),
    )


def measure_loop(config: Config) -> LoopResult:
    """The scheduling loop's own cost, without HTTP: a fresh SQLite database with the burst's
    workloads pending, one cycle that binds them, then the reclaim workloads and cycles until
    team-b holds its quota. Settings as the server's CLI defaults them."""
    settings = SchedulerSettings(
        max_reclaim_attempts_per_cycle=config.max_reclaims_per_cycle or _server_reclaim_default()
    )
    clock = SystemClock()
    with tempfile.TemporaryDirectory(prefix="gpupool-loop-bench-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'gpupool.db'}"
        engine = make_engine(url)
        migrate.upgrade(engine)
        writer, _ = make_sessionmakers(engine)
        executor = SimulatedExecutor(
            parse_simulated_nodes(f"{config.nodes}x{config.gpus_per_node}"),
            clock,
            journal_path=Path(tmp) / "simulated.jsonl",
        )
        loop = SchedulingLoop(writer, executor, clock, settings, ServerMetrics())
        loop.register_nodes(executor.inventory())
        admin = Principal(0, "admin", Role.ADMIN, frozenset())
        t0 = time.perf_counter()
        with writer.begin() as session:
            now = clock.now_s()
            project_service.create(session, ProjectIn(name=PROJECT_A), now, {}, "admin")
            project_service.create(
                session,
                ProjectIn.model_validate(
                    {"name": PROJECT_B, "quota": {"gpu": config.quota_b_gpus}}
                ),
                now,
                {},
                "admin",
            )
            _submit_in_process(session, PROJECT_A, config.workloads, admin, now)
        setup_s = time.perf_counter() - t0
        burst = _loop_cycle(loop, writer, settings, split=True)

        with writer.begin() as session:
            _submit_in_process(session, PROJECT_B, config.reclaim, admin, clock.now_s())
        reclaim: list[LoopCycle] = []
        bound_b = 0
        began = time.perf_counter()
        while bound_b < config.reclaim and len(reclaim) < 200:
            cycle = _loop_cycle(loop, writer, settings, split=not reclaim)
            reclaim.append(cycle)
            bound_b += cycle.binds
            if cycle.binds == 0 and cycle.evicts == 0 and len(reclaim) > 3:
                break
        total_s = time.perf_counter() - began
        executor.close()
        engine.dispose()
    return LoopResult(setup_s, burst, reclaim, total_s, bound_b >= config.reclaim)


def _submit_in_process(
    session: Session, project: str, count: int, who: Principal, now: float
) -> None:
    for i in range(count):
        body = WorkloadIn(name=f"{project}-{i:05d}", project=project, gpu=1)
        workload_service.submit(session, body, who, now)


def _server_reclaim_default() -> int:
    """`gpupool server --max-reclaims-per-cycle`'s default (the core's, if that is gone)."""
    parameter = inspect.signature(server_cmd.server).parameters.get("max_reclaims_per_cycle")
    if parameter is None or not isinstance(parameter.default, int):
        return SchedulerSettings().max_reclaim_attempts_per_cycle
    return parameter.default


# -- output ----------------------------------------------------------------------------------


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _database(config: Config) -> str:
    if config.database_url is None:
        return "SQLite (WAL)"
    return config.database_url.split(":", 1)[0].split("+", 1)[0]


def _verdict(phase: PhaseResult) -> str:
    if not phase.completed:
        return "[red]incomplete[/red]"
    return "[green]met[/green]" if phase.met else "[red]missed[/red]"


def render(result: BenchResult, console: Console, timeline: bool) -> None:
    config = result.config
    table = Table(
        title=(
            f"gpupool API: {config.nodes:,} nodes x {config.gpus_per_node} GPUs, "
            f"{_database(config)}, {config.concurrency} concurrent POSTs"
        ),
        caption="seconds from the phase's first POST",
    )
    for column in (
        "phase",
        "workloads",
        "acknowledged",
        "POST/s",
        "p50 / p99 ms",
        "bound",
        "running / holding",
        "target",
        "verdict",
    ):
        table.add_column(column, justify="left" if column in ("phase", "verdict") else "right")
    for phase in result.phases:
        latency = (
            f"{phase.latency_ms['p50']:,.0f} / {phase.latency_ms['p99']:,.0f}"
            if phase.latency_ms
            else "—"
        )
        rate = phase.ack_rate
        table.add_row(
            f"{phase.name} ({phase.project})",
            f"{phase.count:,}",
            _s(phase.ack_s),
            "—" if rate is None else f"{rate:,.0f}",
            latency,
            _s(phase.bound_s),
            f"[bold]{_s(phase.done_s)}[/bold]",
            f"<= {phase.target_s:.0f}",
            _verdict(phase),
        )
    console.print(table)

    server = Table(
        title="The server meanwhile",
        caption="CPU from /proc; cycles, binds and evictions from the server's /metrics",
    )
    for column in (
        "phase",
        "wall s",
        "server CPU s",
        "client CPU s",
        "cycles",
        "in cycles s",
        "mean cycle ms",
        "longest ms",
        "binds",
        "evicts",
    ):
        server.add_column(column, justify="left" if column == "phase" else "right")
    for phase in result.phases:
        server.add_row(
            phase.name,
            _s(phase.wall_s),
            _s(phase.server_cpu_s),
            _s(phase.client_cpu_s),
            f"{phase.cycles:,}",
            _s(phase.cycle_sum_s),
            _ms(phase.cycle_sum_s / phase.cycles * 1000 if phase.cycles else None),
            _ms(None if phase.longest_cycle_s is None else phase.longest_cycle_s * 1000),
            f"{phase.binds:,}",
            f"{phase.evicts:,}",
        )
    console.print(server)

    if timeline:
        for phase in result.phases:
            spans = Table(title=f"{phase.name}: cycles seen by each poll of /metrics")
            for column in ("t s", "cycles", "mean cycle ms", "binds", "evicts", "pending after"):
                spans.add_column(column, justify="right")
            for span in phase.timeline:
                spans.add_row(
                    f"{span.at_s:.2f}",
                    str(span.cycles),
                    _ms(span.mean_cycle_s * 1000),
                    f"{span.binds:,}",
                    f"{span.evicts:,}",
                    f"{span.pending_after:,}",
                )
            console.print(spans)

    if result.loop is not None:
        _render_loop(result.loop, console)

    for phase in result.phases:
        label = (
            f"{phase.count:,} workloads all running"
            if phase.name == "burst"
            else f"{phase.project} holds its quota ({config.quota_b_gpus:,} GPUs)"
        )
        if not phase.completed:
            why = (
                f"{phase.errors} POST errors, e.g. {phase.error_samples[:1]}"
                if phase.errors
                else f"not done in {config.timeout_s:.0f} s (holding {phase.held_gpus} GPUs)"
            )
            console.print(f"{label} in <= {phase.target_s:.0f} s: [red]incomplete[/red] ({why})")
            continue
        console.print(
            f"{label} in <= {phase.target_s:.0f} s: {_verdict(phase)} ({phase.done_s:.2f} s)"
        )
    if len(result.phases) < 2:
        console.print("The reclaim phase did not run: the burst did not complete.")
    retried = sum(p.retried for p in result.phases)
    if retried:
        console.print(f"[dim]{retried} POSTs were sent again after their connection failed.[/dim]")
    console.print(
        "[dim]At the end (/top): "
        + "; ".join(
            f"{name} {v['allocated_gpu_milli'] / MILLI_PER_GPU:,.0f} GPUs, "
            f"{v['running']:,} running, {v['pending']:,} pending"
            for name, v in result.final.items()
        )
        + f". Server pid {result.server_pid}.[/dim]"
    )


def _render_loop(loop: LoopResult, console: Console) -> None:
    table = Table(
        title="The scheduling loop in-process (no HTTP), fresh SQLite database",
        caption=(
            "cycle = snapshot + core + persist (SchedulingLoop.cycle); dispatch starts and stops "
            "tasks on the simulated executor; ms"
        ),
    )
    for column in (
        "iteration",
        "pending",
        "snapshot",
        "core",
        "persist",
        "cycle",
        "dispatch",
        "binds",
        "evicts",
    ):
        table.add_column(column, justify="left" if column == "iteration" else "right")

    def row(label: str, c: LoopCycle) -> None:
        table.add_row(
            label,
            f"{c.pending:,}",
            _ms(c.snapshot_ms),
            _ms(c.core_ms),
            _ms(c.persist_ms),
            _ms(c.cycle_ms),
            _ms(c.dispatch_ms),
            f"{c.binds:,}",
            f"{c.evicts:,}",
        )

    row("burst: first cycle", loop.burst)
    if loop.reclaim:
        row("reclaim: first cycle", loop.reclaim[0])
        table.add_section()
        table.add_row(
            f"reclaim: {len(loop.reclaim)} cycles",
            "",
            "",
            "",
            "",
            _ms(sum(c.cycle_ms for c in loop.reclaim)),
            _ms(sum(c.dispatch_ms for c in loop.reclaim)),
            f"{sum(c.binds for c in loop.reclaim):,}",
            f"{sum(c.evicts for c in loop.reclaim):,}",
        )
    console.print(table)
    done = "holds its quota" if loop.reclaim_done else "[red]did not get its quota[/red]"
    console.print(
        f"[dim]In-process: {PROJECT_B} {done} after {len(loop.reclaim)} loop iterations, "
        f"{loop.reclaim_total_s:.2f} s of loop time (split timings add one snapshot + core "
        f"to the first); database set up in {loop.setup_s:.2f} s.[/dim]"
    )


def _payload(result: BenchResult) -> dict[str, Any]:
    return {
        "config": asdict(result.config),
        "python": sys.version.split()[0],
        "server_pid": result.server_pid,
        "completed": result.completed,
        "targets_met": result.met,
        "phases": [
            {
                **asdict(p),
                "completed": p.completed,
                "met": p.met,
                "ack_rate_per_s": p.ack_rate,
            }
            for p in result.phases
        ],
        "final": result.final,
        "loop": None if result.loop is None else asdict(result.loop),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, help=f"simulated nodes (default {FULL['nodes']})")
    parser.add_argument(
        "--gpus-per-node", type=int, help=f"GPUs per node (default {FULL['gpus_per_node']})"
    )
    parser.add_argument(
        "--workloads", type=int, help=f"burst of one-GPU workloads (default {FULL['workloads']})"
    )
    parser.add_argument(
        "--reclaim", type=int, help=f"team-b's one-GPU workloads (default {FULL['reclaim']})"
    )
    parser.add_argument("--concurrency", type=int, default=64, help="concurrent POSTs")
    parser.add_argument(
        "--database-url",
        help="SQLAlchemy URL of an empty database (default: SQLite in a temp directory)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK['nodes']} nodes x {QUICK['gpus_per_node']}, {QUICK['workloads']} + "
        f"{QUICK['reclaim']} workloads (explicit sizes still win)",
    )
    parser.add_argument(
        "--cycle-interval", type=float, default=1.0, help="server's --cycle-interval (s)"
    )
    parser.add_argument(
        "--max-reclaims-per-cycle",
        type=int,
        help="server's --max-reclaims-per-cycle (default: the server's)",
    )
    parser.add_argument("--poll", type=float, default=0.1, help="watcher's poll interval (s)")
    parser.add_argument("--timeout", type=float, default=180.0, help="per phase (s)")
    parser.add_argument(
        "--no-loop", action="store_true", help="skip the in-process measurement of the loop"
    )
    parser.add_argument("--timeline", action="store_true", help="print the per-poll cycle spans")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)

    sizes = QUICK if args.quick else FULL
    config = Config(
        nodes=args.nodes or sizes["nodes"],
        gpus_per_node=args.gpus_per_node or sizes["gpus_per_node"],
        workloads=args.workloads or sizes["workloads"],
        reclaim=args.reclaim or sizes["reclaim"],
        concurrency=args.concurrency,
        database_url=args.database_url,
        cycle_interval_s=args.cycle_interval,
        max_reclaims_per_cycle=args.max_reclaims_per_cycle,
        poll_s=args.poll,
        timeout_s=args.timeout,
        loop=not args.no_loop,
    )
    if min(config.nodes, config.gpus_per_node, config.workloads, config.reclaim) < 1:
        parser.error("sizes must be positive")
    if config.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    if config.workloads > config.gpus:
        parser.error(f"--workloads ({config.workloads}) must fit the {config.gpus} GPUs")
    if config.reclaim > config.quota_b_gpus:
        parser.error(f"--reclaim must be at most team-b's quota ({config.quota_b_gpus} GPUs)")

    # Rich wraps at 80 columns when the output is not a terminal: too narrow for the tables.
    console = Console(stderr=True) if args.json else Console(width=None if _tty() else 120)

    def announce(server: ServerProcess) -> None:
        console.print(f"[dim]server pid {server.pid} at {server.url}[/dim]")

    with console.status("running the benchmark..."):
        result = run_benchmark(config, announce)
    if args.json:
        print(json.dumps(_payload(result), indent=2))
    else:
        render(result, console, args.timeline)
    if not result.completed:
        return 1
    return 1 if args.check and not result.met else 0


def _tty() -> bool:
    return sys.stdout.isatty()


if __name__ == "__main__":
    sys.exit(main())
