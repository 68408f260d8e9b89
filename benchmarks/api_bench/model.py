"""What the API benchmark is asked (sizes, targets, `Config`) and what it measures (the
result dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass, field

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
