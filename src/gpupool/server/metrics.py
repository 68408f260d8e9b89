"""Prometheus metrics of one server: a registry per instance, not the library's global one."""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gpupool.core.decisions import CycleResult


def pending_category(reason: str) -> str:
    """A short label for a pending reason (the reasons themselves are sentences)."""
    text = reason.lower()
    for needle, category in (
        ("limit", "limit"),
        ("within quota", "quota"),
        ("quota", "quota"),
        ("fair share", "fair_share"),
        ("selector", "node_selector"),
        ("evicted", "preempted"),
        ("preempt", "preempted"),
        ("needs", "capacity"),
        ("free", "capacity"),
        ("waiting", "next_cycle"),
    ):
        if needle in text:
            return category
    return "other"


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.allocated = Gauge(
            "gpupool_project_allocated_gpu",
            "GPUs held by the project's running work",
            ["project"],
            registry=self.registry,
        )
        self.requested = Gauge(
            "gpupool_project_requested_gpu",
            "GPUs the project's running and pending work asks for",
            ["project"],
            registry=self.registry,
        )
        self.fair_share = Gauge(
            "gpupool_project_fair_share_gpu",
            "The project's fair share of GPUs in the last cycle",
            ["project"],
            registry=self.registry,
        )
        self.quota = Gauge(
            "gpupool_project_quota_gpu",
            "The project's guaranteed quota of GPUs",
            ["project"],
            registry=self.registry,
        )
        self.pending = Gauge(
            "gpupool_pending_workloads",
            "Workloads waiting, by kind of reason",
            ["reason"],
            registry=self.registry,
        )
        self.cycle_seconds = Histogram(
            "gpupool_cycle_duration_seconds",
            "Time of one scheduling cycle (snapshot, core, persist)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.decisions = Counter(
            "gpupool_decisions",
            "Decisions carried out, by kind",
            ["kind"],
            registry=self.registry,
        )
        for kind in ("bind", "evict", "move"):
            self.decisions.labels(kind=kind)
        self.capacity = Gauge("gpupool_capacity_gpu", "GPUs on ready nodes", registry=self.registry)

    def observe_cycle(self, result: CycleResult, duration_s: float, capacity_gpu: float) -> None:
        self.cycle_seconds.observe(duration_s)
        self.capacity.set(capacity_gpu)
        for share in result.projects:
            self.allocated.labels(project=share.name).set(share.holding.gpu_milli / 1000)
            self.requested.labels(project=share.name).set(share.demand.gpu_milli / 1000)
            self.fair_share.labels(project=share.name).set(share.fair_share.gpu_milli / 1000)
            self.quota.labels(project=share.name).set(share.quota.gpu_milli / 1000)
        categories = Tally(pending_category(r) for r in result.pending_reasons.values())
        self.pending.clear()
        for category, count in categories.items():
            self.pending.labels(reason=category).set(count)

    def count_decisions(self, kind: str, count: int) -> None:
        if count:
            self.decisions.labels(kind=kind).inc(count)

    def render(self) -> bytes:
        return generate_latest(self.registry)
