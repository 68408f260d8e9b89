"""gpupool as a Kubernetes scheduler against kube-scheduler, on one real API server.

    .venv/bin/python benchmarks/kubernetes.py            # 500 KWOK nodes x 8 GPUs, 4,000 + 2,000
    .venv/bin/python benchmarks/kubernetes.py --quick    # 50 nodes x 8, 400 + 200
    .venv/bin/python benchmarks/kubernetes.py --json

One control plane (tools/kubetest: etcd, kube-apiserver, controller manager, KWOK's fake
kubelets) runs on this machine; `--nodes` KWOK nodes with `--gpus` `nvidia.com/gpu` each are
created first (not timed). Then, in the same run:

1. **fill** (`fill_s`): a real `gpupool server --kubernetes` (SQLite) runs with two projects,
   `fill` (quota 0: everything it runs is over quota) and `owner` (quota half the cluster). A
   client (32 threads) creates `--pods` one-GPU pods with `schedulerName: gpupool` in fill's
   namespace, as kubectl or a Job would. Timed from the first create until a watch has seen
   every one bound to a node.
2. **reclaim** (`reclaim_s`): the client creates `--reclaim` pods in owner's namespace. gpupool
   evicts as many of fill's pods (Eviction API) and binds owner's. Timed from the first create
   until the watch has seen all of owner's pods bound. The pods have
   `terminationGracePeriodSeconds: 0`: how long a pod takes to stop is its own, not the
   scheduler's.
3. **kube-scheduler** (`kube_scheduler_fill_s`): gpupool stops, the pods go, kube-scheduler
   (the same Kubernetes version, client limits raised to 5,000 QPS so that they are not what it
   measures) starts, and the same client creates the same `--pods` pods (default scheduler, no
   quotas). Timed the same way.

`ratio` is gpupool's bind rate over kube-scheduler's (pods/s over pods/s) in this run. Targets
(issue 11): fill <= 30 s, reclaim <= 30 s, ratio >= 0.7 (goal >= 1). Exit 1 if a phase does not
finish within `--timeout`; with `--check` also when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import (
    Container,
    NodeSpec,
    NodeStatus,
    PodSpec,
    ResourceRequirements,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node, Pod
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "kubetest"))

import testenv  # noqa: E402

from gpupool.executors.kubernetes.client import warm_up_decoders  # noqa: E402
from gpupool.server.process import ServerProcess  # noqa: E402

POOL = ("gpupool.bench/pool", "kubernetes")
FULL = {"nodes": 500, "gpus": 8, "pods": 4000, "reclaim": 2000}
QUICK = {"nodes": 50, "gpus": 8, "pods": 400, "reclaim": 200}
TARGETS = {"fill_s": 30.0, "reclaim_s": 30.0, "ratio": 0.7}


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Result:
    nodes: int
    gpus_per_node: int
    pods: int
    reclaim_pods: int
    fill_s: float | None = None
    reclaim_s: float | None = None
    evicted: int | None = None
    kube_scheduler_fill_s: float | None = None
    gpupool_pods_per_s: float | None = None
    kube_scheduler_pods_per_s: float | None = None
    ratio: float | None = None
    kubernetes: str = ""
    machine: str = ""
    date: str = ""


def client_for(plane: testenv.ControlPlane) -> Client:
    warm_up_decoders()  # the client is used from many threads: see its docstring
    return Client(KubeConfig.from_file(plane.kubeconfig).get(), field_manager="bench")


def make_nodes(client: Client, count: int, gpus: int) -> None:
    key, value = testenv.FAKE_NODE_ANNOTATION

    def one(index: int) -> None:
        name = f"bench-{index:05d}"
        allocatable = {"cpu": "128", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(gpus)}
        client.create(
            Node(
                metadata=ObjectMeta(
                    name=name,
                    annotations={key: value},
                    labels={
                        POOL[0]: POOL[1],
                        "kubernetes.io/hostname": name,
                        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                        "nvidia.com/gpu.memory": "81920",
                    },
                ),
                spec=NodeSpec(),
                status=NodeStatus(allocatable=allocatable, capacity=allocatable),
            )
        )

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(count)))


def wait_nodes_ready(client: Client, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready = 0
        for node in client.list(Node, labels={POOL[0]: POOL[1]}):
            conditions = (node.status.conditions if node.status else None) or []
            taints = (node.spec.taints if node.spec else None) or []
            if any(c.type == "Ready" and c.status == "True" for c in conditions) and not any(
                t.key == "node.kubernetes.io/not-ready" for t in taints
            ):
                ready += 1
        if ready >= count:
            return
        say(f"  {ready}/{count} nodes ready")
        time.sleep(2)
    raise TimeoutError(f"nodes not ready within {timeout_s:.0f} s")


class BoundCounter:
    """Watches a namespace and notes when `target` distinct pods have been seen bound."""

    def __init__(self, client: Client, namespace: str, target: int) -> None:
        self.client = client
        self.namespace = namespace
        self.target = target
        self.bound: set[str] = set()
        self.done = threading.Event()
        self.done_at: float | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop and not self.done.is_set():
            try:
                for _, pod in self.client.watch(Pod, namespace=self.namespace, server_timeout=30):
                    if pod.spec is not None and pod.spec.nodeName and pod.metadata:
                        self.bound.add(pod.metadata.name or "")
                        if len(self.bound) >= self.target and not self.done.is_set():
                            self.done_at = time.monotonic()
                            self.done.set()
                            return
                    if self._stop:
                        return
            except Exception:
                time.sleep(0.2)

    def wait(self, started: float, timeout_s: float, what: str) -> float | None:
        deadline = started + timeout_s
        while not self.done.wait(timeout=5):
            say(f"  {what}: {len(self.bound)}/{self.target} bound")
            if time.monotonic() > deadline:
                self._stop = True
                return None
        assert self.done_at is not None
        return self.done_at - started


def create_pods(
    client: Client, namespace: str, prefix: str, count: int, scheduler: str | None
) -> None:
    def one(index: int) -> None:
        pod = Pod(
            metadata=ObjectMeta(name=f"{prefix}-{index:05d}", namespace=namespace),
            spec=PodSpec(
                schedulerName=scheduler,
                terminationGracePeriodSeconds=0,
                automountServiceAccountToken=False,
                containers=[
                    Container(
                        name="main",
                        image="busybox",
                        resources=ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
                    )
                ],
            ),
        )
        for attempt in range(20):
            try:
                client.create(pod)
                return
            except ApiError as error:
                if error.status.code == 409:
                    return
                if attempt == 19:
                    raise
                time.sleep(0.2)

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(one, range(count)))


def ensure_namespace(client: Client, name: str, labels: dict[str, str] | None = None) -> None:
    try:
        client.create(Namespace(metadata=ObjectMeta(name=name, labels=labels)))
    except ApiError as error:
        if error.status.code != 409:
            raise


def timed_fill(
    client: Client,
    namespace: str,
    prefix: str,
    count: int,
    scheduler: str | None,
    timeout_s: float,
    what: str,
) -> float | None:
    counter = BoundCounter(client, namespace, count)
    time.sleep(0.5)  # the watch is open before the first create
    started = time.monotonic()
    creator = threading.Thread(
        target=create_pods, args=(client, namespace, prefix, count, scheduler), daemon=True
    )
    creator.start()
    seconds = counter.wait(started, timeout_s, what)
    creator.join(timeout=60)
    return seconds


def delete_pods(client: Client, namespace: str) -> None:
    client.deletecollection(Pod, namespace=namespace, grace_period=0)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and list(client.list(Pod, namespace=namespace)):
        time.sleep(1)


def run(sizes: dict[str, int], timeout_s: float) -> Result:
    result = Result(sizes["nodes"], sizes["gpus"], sizes["pods"], sizes["reclaim"])
    result.machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    result.date = time.strftime("%Y-%m-%d")
    result.kubernetes = testenv.Versions.read().kubernetes
    testenv.build()
    with testenv.running() as plane:
        client = client_for(plane)
        say(f"creating {sizes['nodes']} KWOK nodes x {sizes['gpus']} GPUs")
        make_nodes(client, sizes["nodes"], sizes["gpus"])
        wait_nodes_ready(client, sizes["nodes"], timeout_s)
        data_dir = Path(tempfile.mkdtemp(prefix="gpupool-bench-kube-"))
        server = ServerProcess(
            data_dir,
            extra_args=(
                "--kubernetes",
                "--kubeconfig",
                str(plane.kubeconfig),
                "--kube-node-selector",
                f"{POOL[0]}={POOL[1]}",
                "--cycle-interval",
                "0.2",
                "--max-reclaims-per-cycle",
                "4096",
            ),
        )
        with server:
            token = server.admin_token
            with httpx.Client(
                base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
            ) as http:
                capacity = sizes["nodes"] * sizes["gpus"]
                for name, quota in (("fill", 0), ("owner", capacity // 2)):
                    answer = http.post(
                        "/api/v1/projects", json={"name": name, "quota": {"gpu": quota}}
                    )
                    answer.raise_for_status()
            for name in ("fill", "owner"):
                ensure_namespace(client, f"gpupool-{name}")
            say(f"gpupool: {sizes['pods']} one-GPU pods into a cluster of {capacity} GPUs")
            result.fill_s = timed_fill(
                client, "gpupool-fill", "fill", sizes["pods"], "gpupool", timeout_s, "fill"
            )
            say(f"  fill: {result.fill_s} s")
            say(f"gpupool: owner (quota {capacity // 2}) creates {sizes['reclaim']} pods")
            result.reclaim_s = timed_fill(
                client, "gpupool-owner", "owner", sizes["reclaim"], "gpupool", timeout_s, "reclaim"
            )
            say(f"  reclaim: {result.reclaim_s} s")
            remaining = sum(1 for _ in client.list(Pod, namespace="gpupool-fill"))
            result.evicted = sizes["pods"] - remaining
        for namespace in ("gpupool-fill", "gpupool-owner"):
            delete_pods(client, namespace)
        say("kube-scheduler: the same pods, default scheduler")
        plane.start_scheduler()
        ensure_namespace(client, "kube-fill")
        time.sleep(2)
        result.kube_scheduler_fill_s = timed_fill(
            client, "kube-fill", "fill", sizes["pods"], None, timeout_s, "kube-scheduler fill"
        )
        say(f"  kube-scheduler fill: {result.kube_scheduler_fill_s} s")
    if result.fill_s and result.kube_scheduler_fill_s:
        result.gpupool_pods_per_s = sizes["pods"] / result.fill_s
        result.kube_scheduler_pods_per_s = sizes["pods"] / result.kube_scheduler_fill_s
        result.ratio = result.gpupool_pods_per_s / result.kube_scheduler_pods_per_s
    return result


def table(result: Result) -> Table:
    def seconds(value: float | None) -> str:
        return "did not finish" if value is None else f"{value:.1f}"

    def rate(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    out = Table(
        title=f"{result.nodes} KWOK nodes x {result.gpus_per_node} GPUs, Kubernetes "
        f"{result.kubernetes}"
    )
    for column in ("phase", "pods", "seconds", "pods/s", "target"):
        out.add_column(column, justify="left" if column == "phase" else "right")
    out.add_row("gpupool fill", str(result.pods), seconds(result.fill_s),
                rate(result.gpupool_pods_per_s), "<= 30 s")  # fmt: skip
    reclaim_rate = result.reclaim_pods / result.reclaim_s if result.reclaim_s else None
    out.add_row("gpupool reclaim", str(result.reclaim_pods), seconds(result.reclaim_s),
                rate(reclaim_rate), "<= 30 s")  # fmt: skip
    out.add_row("kube-scheduler fill", str(result.pods), seconds(result.kube_scheduler_fill_s),
                rate(result.kube_scheduler_pods_per_s), "")  # fmt: skip
    ratio = "-" if result.ratio is None else f"{result.ratio:.2f}"
    out.add_row("ratio (gpupool / kube)", "", "", ratio, ">= 0.7 (goal 1)")
    return out


def missed(result: Result) -> list[str]:
    misses = []
    for key, target in TARGETS.items():
        value = getattr(result, key)
        if value is None:
            misses.append(f"{key}: did not finish")
        elif (key == "ratio" and value < target) or (key != "ratio" and value > target):
            misses.append(f"{key}: {value:.2f} (target {target})")
    return misses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 nodes, 400 + 200 pods")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--gpus", type=int)
    parser.add_argument("--pods", type=int)
    parser.add_argument("--reclaim", type=int)
    parser.add_argument("--timeout", type=float, default=300.0, help="per phase (s)")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    sizes = dict(QUICK if args.quick else FULL)
    for key in sizes:
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    result = run(sizes, args.timeout)
    if args.json:
        print(json.dumps(asdict(result), indent=2))
    else:
        Console(width=100).print(table(result))
    unfinished = result.fill_s is None or result.reclaim_s is None
    if unfinished or result.kube_scheduler_fill_s is None:
        return 1
    return 1 if args.check and missed(result) else 0


if __name__ == "__main__":
    sys.exit(main())
