"""One run: seed a fresh data directory, start a real server on it, measure."""

from __future__ import annotations

import math
import os
import platform
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gpupool.api.schemas import WorkloadStatus
from gpupool.server import migrate
from gpupool.server.db import (
    make_engine,
    sqlite_url,
)
from gpupool.server.process import ServerProcess

from .browser import BrowserResult, measure_browser
from .common import Config, say
from .history_seed import SeedCounts, seed_history
from .measure import PeerResult, Timing, measure_api, measure_pages, measure_peer
from .plan import plan
from .seed import seed_state


@dataclass(slots=True)
class Result:
    config: Config
    machine: str
    python: str
    date: str
    seed_s: float = 0.0
    seed_counts: SeedCounts = field(default_factory=SeedCounts)
    statuses: dict[str, int] = field(default_factory=dict)
    running_gpus: float = 0.0
    database_mib: float = 0.0
    server_start_s: float = 0.0
    settle: dict[str, float] = field(default_factory=dict)
    """What the scheduling loop did before the measurement: cycles, binds, evictions."""
    loop_during: dict[str, float] = field(default_factory=dict)
    """The loop while the API was measured: cycles, seconds in them, wall seconds."""
    researcher_projects: list[str] = field(default_factory=list)
    timings: list[Timing] = field(default_factory=list)
    pages: list[Timing] = field(default_factory=list)
    """Each page's reads issued together."""
    peer: list[PeerResult] = field(default_factory=list)
    browser: BrowserResult = field(default_factory=BrowserResult)
    notes: list[str] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    """The machine's 1-minute load average at the start and at the end (other work skews)."""

    def p50(self, name: str, role: str = "admin") -> float | None:
        found = [t.p50_s for t in self.timings if t.name == name and t.role == role]
        return found[0] if found else None

    @property
    def first_page(self) -> Timing | None:
        found = [t for t in self.timings if t.role == "admin" and t.name.startswith("workloads")]
        return found[0] if found else None


def _metrics(url: str, token: str) -> dict[str, float]:
    """The loop so far, from the server's /metrics: cycles, seconds in them, binds, evictions."""
    text = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {token}"}).text
    out = {"cycles": 0.0, "cycle_s": 0.0, "binds": 0.0, "evicts": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gpupool_cycle_duration_seconds_count":
                out["cycles"] = sample.value
            elif sample.name == "gpupool_cycle_duration_seconds_sum":
                out["cycle_s"] = sample.value
            elif sample.name == "gpupool_decisions_total":
                kind = sample.labels.get("kind")
                if kind in ("bind", "evict"):
                    out[f"{kind}s"] += sample.value
    return out


def _settle(server: ServerProcess, token: str, config: Config) -> dict[str, float]:
    """Wait until the loop has run two cycles after the server answered: its first adopts the
    seeded tasks and writes its own pending reasons."""
    deadline = time.monotonic() + 120
    seen = _metrics(server.url, token)
    while seen["cycles"] < 2 and time.monotonic() < deadline:
        time.sleep(max(0.1, config.cycle_interval_s / 4))
        seen = _metrics(server.url, token)
    return seen


def run(config: Config, keep: bool = False) -> Result:
    result = Result(
        config=config,
        machine=f"{platform.machine()}, {os.cpu_count()} cores, {_cpu_model()}",
        python=platform.python_version(),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    )
    result.load.append(_load())
    if result.load[0] > (os.cpu_count() or 1) / 2:
        say(f"note: the machine is busy (load average {result.load[0]:.1f}): timings will suffer")
    tmp = Path(tempfile.mkdtemp(prefix="gpupool-dashboard-bench-"))
    data_dir = tmp / "server"
    data_dir.mkdir()
    try:
        began = time.perf_counter()
        say(
            f"seeding {data_dir}: {config.workloads:,} workloads, {config.projects} projects, "
            f"{config.days} days, {config.nodes} nodes x {config.gpus_per_node} GPUs"
        )
        engine = make_engine(sqlite_url(data_dir))
        migrate.upgrade(engine)
        plan_ = plan(config)
        admin_token, researcher_token = seed_state(engine, data_dir, plan_)
        result.statuses = dict(Counter(w.status for w in plan_.workloads).most_common())
        running = [w for w in plan_.workloads if w.status == WorkloadStatus.RUNNING.value]
        result.running_gpus = sum(w.gpus for w in running)
        say(
            f"  state: {len(plan_.workloads):,} workloads ("
            + ", ".join(f"{n:,} {s}" for s, n in result.statuses.items())
            + f"), {result.running_gpus:,.0f} of {config.gpus} GPUs held, "
            f"{time.perf_counter() - began:.1f} s"
        )
        result.seed_counts = seed_history(engine, plan_)
        engine.dispose()
        result.seed_s = time.perf_counter() - began
        result.database_mib = sum(f.stat().st_size for f in data_dir.glob("gpupool.db*")) / 2**20
        say(f"  seeded in {result.seed_s:.1f} s, database {result.database_mib:,.0f} MiB")
        ranked = sorted(plan_.projects, key=lambda p: -p.quota_gpus)
        result.researcher_projects = sorted(
            {ranked[0].name, ranked[len(ranked) // 2].name, ranked[-1].name}
        )

        server = ServerProcess(
            data_dir,
            simulated_nodes=f"{config.nodes}x{config.gpus_per_node}",
            cycle_interval_s=config.cycle_interval_s,
        )
        say("starting gpupool server (simulated executor on the same nodes, loop running)")
        started = time.perf_counter()
        with server:
            result.server_start_s = time.perf_counter() - started
            result.settle = _settle(server, admin_token, config)
            say(
                f"  pid {server.pid} at {server.url}, answered in {result.server_start_s:.1f} s; "
                f"before measuring, the loop ran {result.settle['cycles']:.0f} cycles "
                f"({result.settle['binds']:.0f} binds, {result.settle['evicts']:.0f} evictions)"
            )
            say(f"API: {config.requests} timed requests each after {config.warmup} warm-up")
            tokens = {"admin": admin_token, "researcher": researcher_token}
            before, wall = _metrics(server.url, admin_token), time.perf_counter()
            result.timings = measure_api(server, tokens, config, ranked[0].name, result.notes)
            result.pages = measure_pages(server, admin_token, config, result.timings)
            after = _metrics(server.url, admin_token)
            result.loop_during = {
                "cycles": after["cycles"] - before["cycles"],
                "cycle_s": after["cycle_s"] - before["cycle_s"],
                "wall_s": time.perf_counter() - wall,
            }
            say(
                f"  meanwhile the loop ran {result.loop_during['cycles']:.0f} cycles, "
                f"{result.loop_during['cycle_s']:.1f} s of the "
                f"{result.loop_during['wall_s']:.1f} s"
            )
            if config.raw_hours > 0:
                say(f"peer: the raw per-minute usage table, {config.raw_requests} requests each")
                result.peer = measure_peer(
                    server, admin_token, config, result.timings, result.seed_counts.raw_usage_rows
                )
            if config.browser:
                say(f"browser: Chromium, {config.browser_loads} loads per view after one")
                result.browser = measure_browser(server.url, admin_token, config.browser_loads)
                if result.browser.skipped:
                    say(f"  browser rows skipped: {result.browser.skipped}")
            else:
                result.browser = BrowserResult(skipped="--no-browser")
    finally:
        result.load.append(_load())
        if keep:
            say(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return result


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return math.nan


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"
