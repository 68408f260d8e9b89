"""What the Kubernetes clients benchmark compares, and the small helpers every part uses.

The four ways of using the three clients (`CLIENTS`), their labels, packages and the import
each one's cost is measured on; `say` (progress on stderr), this process's memory from /proc,
and the 95th percentile.
"""

from __future__ import annotations

import statistics
import sys
import time

CLIENTS = ("kubernetes", "kubernetes_asyncio", "lightkube", "lightkube-async")
LABELS = {
    "kubernetes": "kubernetes (sync)",
    "kubernetes_asyncio": "kubernetes_asyncio",
    "lightkube": "lightkube (sync)",
    "lightkube-async": "lightkube (async)",
}
PACKAGE = {c: c.removesuffix("-async") for c in CLIENTS}
DISTRIBUTIONS = (
    "kubernetes", "kubernetes_asyncio", "lightkube", "lightkube-models",
    "urllib3", "aiohttp", "httpx2", "msgspec", "pydantic",
)  # fmt: skip
IMPORTS = {
    "kubernetes": "from kubernetes import client, config, watch\n"
    "client.CoreV1Api, client.V1Pod, client.V1Binding, client.V1PodList",
    "kubernetes_asyncio": "from kubernetes_asyncio import client, config, watch\n"
    "client.CoreV1Api, client.V1Pod, client.V1Binding, client.V1PodList",
    "lightkube": "import lightkube\nfrom lightkube.resources.core_v1 import Pod, PodBinding",
}
IMPORTS["lightkube-async"] = IMPORTS["lightkube"]
WARM_POD = "warm"


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def memory_kib(field: str) -> int:
    """VmRSS (now) or VmHWM (peak since the last `reset_peak`) of this process, in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak() -> None:
    """Start VmHWM again from the current RSS (Linux: 5 to /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]
