"""What every part of the dashboard benchmark shares: the targets, the run's size, progress."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from gpupool.server import history, usage

API = "/api/v1"
TARGET_OVERVIEW_S = 1.0
TARGET_WORKLOADS_S = 0.3
MINUTE_DAYS = history.MINUTE_RETENTION_S // 86_400
"""Per-minute history rows are kept this long (7 days)."""
RAW_RETENTION_H = int(usage.RETENTION_S // 3600)
"""The raw `usage` table's retention (14 days), also the most its endpoint reads."""
SAMPLES_PER_MINUTE = round(history.MINUTE_S / history.STEP_S)
"""History steps folded into a per-minute row (12: the recorder takes one every 5 s); an hourly
row holds 60 times as many."""
RAW_SAMPLES_PER_MINUTE = 6
"""Device samples folded into a raw `usage` row (one every 10 s)."""
PAGE = 50

RESEARCHER = "bench-researcher"


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class Config:
    workloads: int = 10_000
    projects: int = 50
    days: int = 30
    nodes: int = 64
    gpus_per_node: int = 8
    raw_hours: int = 24
    """Hours of the raw per-minute `usage` table to seed (the peer's window)."""
    requests: int = 20
    warmup: int = 3
    raw_requests: int = 3
    """Timed requests of the raw `usage` peer (each reads every row of its window)."""
    browser: bool = True
    browser_loads: int = 5
    seed: int = 0
    cycle_interval_s: float = 1.0
    """The server's --cycle-interval (its default)."""

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def minute_days(self) -> int:
        return min(MINUTE_DAYS, self.days)


def ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:,.0f}" if value >= 0.1 else f"{value * 1000:.1f}"
