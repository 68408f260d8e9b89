"""Prometheus metrics of one server: a registry per instance, not the library's global one."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from gpupool.core.decisions import CycleResult, EvictionCause

if TYPE_CHECKING:
    from gpupool.server.history import RecentUse

MIB = 1024 * 1024


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


_USE = (
    ("gpupool_allocated_gpu", "GPUs held by running work, all projects (departments not counted "
     "twice)", ()),
    ("gpupool_utilized_gpu", "GPUs running work kept busy, average over the last minute "
     "(absent when unknown)", ()),
    ("gpupool_project_utilized_gpu", "GPUs the project's work kept busy, average over the last "
     "minute (absent when utilization is unknown)", ("project",)),
    ("gpupool_device_allocated_gpu", "Part of the device charged to running work (0 to 1)",
     ("node", "device")),
    ("gpupool_device_utilization_percent", "How busy the device is, last sample (absent when "
     "unknown)", ("node", "device")),
    ("gpupool_device_memory_used_bytes", "Device memory in use, last sample (absent when "
     "unknown)", ("node", "device")),
)  # fmt: skip


class UseCollector:
    """The history recorder's last steps as gauges, built when scraped: a step costs nothing
    however many devices there are, and what is unknown is left out (a plain gauge without
    labels cannot be absent)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.recent: RecentUse | None = None
        registry.register(self)

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(name, doc, labels=labels) for name, doc, labels in _USE]

    def collect(self) -> Iterable[Metric]:
        recent = self.recent
        if recent is None:
            return []
        allocated, utilized, projects, device_allocated, device_utilization, memory = (
            GaugeMetricFamily(name, doc, labels=labels) for name, doc, labels in _USE
        )
        allocated.add_metric([], recent.allocated_milli / 1000)
        if recent.utilized_milli is not None:
            utilized.add_metric([], recent.utilized_milli / 1000)
        for project, milli in sorted(recent.projects.items()):
            projects.add_metric([project], milli / 1000)
        for device in recent.devices:
            labels = [device.node, str(device.device_index)]
            device_allocated.add_metric(labels, device.allocated_milli / 1000)
            if device.utilized_milli is not None:
                device_utilization.add_metric(labels, device.utilized_milli / 10)
                memory.add_metric(labels, device.memory_used_mib * MIB)
        return [allocated, utilized, projects, device_allocated, device_utilization, memory]


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
        self.evictions = Counter(
            "gpupool_evictions",
            "Workloads (or tasks) stopped for others, by cause: reclaim (another project takes "
            "back its share) or preempt (higher-priority work of the same project)",
            ["cause"],
            registry=self.registry,
        )
        for cause in EvictionCause:
            self.evictions.labels(cause=cause.value)
        self.capacity = Gauge("gpupool_capacity_gpu", "GPUs on ready nodes", registry=self.registry)
        self.use = UseCollector(self.registry)

    def observe_cycle(self, result: CycleResult, duration_s: float, capacity_gpu: float) -> None:
        self.cycle_seconds.observe(duration_s)
        self.capacity.set(capacity_gpu)
        for share in result.projects:
            self.allocated.labels(project=share.name).set(share.holding.gpu_milli / 1000)
            self.requested.labels(project=share.name).set(share.demand.gpu_milli / 1000)
            self.fair_share.labels(project=share.name).set(share.fair_share.gpu_milli / 1000)
            self.quota.labels(project=share.name).set(share.quota.gpu_milli / 1000)
        # By distinct text first: a long queue's reasons are a few shared strings.
        categories: Tally[str] = Tally()
        for reason, count in Tally(result.pending_reasons.values()).items():
            categories[pending_category(reason)] += count
        self.pending.clear()
        for category, count in categories.items():
            self.pending.labels(reason=category).set(count)

    def count_decisions(self, kind: str, count: int) -> None:
        if count:
            self.decisions.labels(kind=kind).inc(count)

    def count_evictions(self, cause: str, count: int) -> None:
        if count:
            self.evictions.labels(cause=cause).inc(count)

    def observe_use(self, recent: RecentUse) -> None:
        """Utilization from the history recorder's last steps (see `UseCollector`)."""
        self.use.recent = recent

    def render(self) -> bytes:
        return generate_latest(self.registry)
