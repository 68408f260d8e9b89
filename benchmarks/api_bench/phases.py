"""The HTTP benchmark: start a server, run the burst and reclaim phases against it, time them."""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from api_bench.client import (
    Submitted,
    held_by_running_tasks,
    read_metrics,
    running_total,
    submit_all,
)
from api_bench.loop import measure_loop
from api_bench.model import (
    API,
    PROJECT_A,
    PROJECT_B,
    TARGET_BURST_S,
    TARGET_RECLAIM_S,
    BenchResult,
    Config,
    CycleSpan,
    MetricsSample,
    PhaseResult,
    ServerTarget,
)
from gpupool.server.process import ServerProcess


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
