"""Which Python Kubernetes client for gpupool: the four ways of using the three, measured.

    .venv/bin/python benchmarks/kube_clients.py [--pods 1000] [--watch 200] [--json]

Starts its own control plane (tools/kubetest) and measures, one client after the other on the
same API server: the official `kubernetes` (sync, a thread pool), `kubernetes_asyncio`, and
`lightkube` (sync with a thread pool, and async).

- import: seconds and RSS added by importing the client (API class, Pod, Binding, watch and
  config), in a fresh interpreter, median of `--import-runs`;
- create: `--pods` pods (schedulerName "nobody": no scheduler touches them) in a namespace of the
  client's own, `--concurrency` in flight (threads or tasks, as many pooled connections): per
  second, and the client process's CPU per request;
- bind: each of them through `pods/binding` to a node without KWOK's annotation (no kubelet),
  the same way. The API server answers a Binding with a Status, which none of the three can
  decode as the Binding they expect: the official ones are asked not to decode it
  (`_preload_content=False`), lightkube's msgspec.ValidationError after a 2xx is taken as bound;
- list: all of them, in a fresh process: seconds and peak RSS added while holding the list;
- watch: from the list's resourceVersion; `--watch` pods created one at a time, each waiting
  for its ADDED event: ms from the create's answer to the event out of the client (and from
  sending the create, in the JSON and the ratios);
- typing: `py.typed`, the `mypy --strict` errors in a short correct use of the client (create,
  list with its resourceVersion, watch from it), and whether mypy flags reading
  `pod.metadata.name` as a `str` without a None check (`*` in the table where it does not).

Each client's phases run in worker processes (this file with `--worker`), so one client's
imports and garbage do not weigh on the next; the namespace and node go afterwards. On a
2-core machine that also runs the API server, compare the clients, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import gc
import json
import os
import platform
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
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


# --- what each client does, in the worker processes ------------------------------------


def pod_spec() -> dict[str, Any]:
    return {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]}


class OfficialSync:
    """The official client: urllib3 and pydantic models; a Binding's answer (a Status) cannot
    be read as the Binding the generated method expects, so its body is not decoded."""

    def __init__(self, kubeconfig: str, namespace: str, node: str, pool: int) -> None:
        from kubernetes import client, config, watch

        configuration = client.Configuration()
        config.load_kube_config(kubeconfig, client_configuration=configuration)
        configuration.connection_pool_maxsize = pool
        self.m, self.watch_module = client, watch
        self.api = client.CoreV1Api(client.ApiClient(configuration))
        self.namespace, self.node = namespace, node

    def create(self, name: str) -> None:
        m = self.m
        spec = m.V1PodSpec(
            scheduler_name="nobody", containers=[m.V1Container(name="c", image="busybox")]
        )
        pod = m.V1Pod(metadata=m.V1ObjectMeta(name=name), spec=spec)
        self.api.create_namespaced_pod(self.namespace, pod)

    def bind(self, name: str) -> None:
        m = self.m
        binding = m.V1Binding(
            metadata=m.V1ObjectMeta(name=name),
            target=m.V1ObjectReference(api_version="v1", kind="Node", name=self.node),
        )
        answer = self.api.create_namespaced_pod_binding(
            name, self.namespace, binding, _preload_content=False
        )
        body = answer.data
        answer.release_conn()
        if answer.status >= 300:
            raise RuntimeError(f"binding {name}: {answer.status} {body[:200]!r}")

    def list(self, namespace: str) -> tuple[list[Any], str]:
        listed = self.api.list_namespaced_pod(namespace)
        return listed.items, listed.metadata.resource_version

    def name_node(self, pod: Any) -> tuple[str, str | None]:
        return pod.metadata.name, pod.spec.node_name

    def watch(self, version: str, added: Callable[[str], bool]) -> None:
        stream = self.watch_module.Watch()
        for event in stream.stream(
            self.api.list_namespaced_pod,
            self.namespace,
            resource_version=version,
            timeout_seconds=300,
        ):
            if event["type"] == "ADDED" and added(event["object"].metadata.name):
                stream.stop()
                return


def lightkube_pod(name: str, namespace: str) -> Any:
    from lightkube.models.core_v1 import Container, PodSpec
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Pod

    spec = PodSpec(schedulerName="nobody", containers=[Container(name="c", image="busybox")])
    return Pod(metadata=ObjectMeta(name=name, namespace=namespace), spec=spec)


def lightkube_binding(name: str, namespace: str, node: str) -> Any:
    from lightkube.models.core_v1 import ObjectReference
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import PodBinding

    return PodBinding(
        metadata=ObjectMeta(name=name, namespace=namespace),
        target=ObjectReference(apiVersion="v1", kind="Node", name=node),
    )


class LightkubeSync:
    """lightkube's Client: httpx2 and msgspec structs. A Binding's answer is a Status, which
    lightkube reads as a Binding and fails: msgspec.ValidationError after a 2xx means bound."""

    def __init__(self, kubeconfig: str, namespace: str, node: str, pool: int) -> None:
        import httpx2
        from lightkube import Client, KubeConfig
        from lightkube.config.client_adapter import verify_cluster
        from lightkube.config.models import User

        config = KubeConfig.from_file(kubeconfig).get()
        transport = httpx2.HTTPTransport(
            verify=verify_cluster(config.cluster, config.user or User(), config.abs_file),
            limits=httpx2.Limits(max_connections=pool, max_keepalive_connections=pool),
        )
        self.client = Client(config, transport=transport)
        self.namespace, self.node = namespace, node

    def create(self, name: str) -> None:
        self.client.create(lightkube_pod(name, self.namespace))

    def bind(self, name: str) -> None:
        import msgspec

        with contextlib.suppress(msgspec.ValidationError):
            self.client.create(lightkube_binding(name, self.namespace, self.node), name)

    def list(self, namespace: str) -> tuple[list[Any], str]:
        from lightkube.resources.core_v1 import Pod

        listed = self.client.list(Pod, namespace=namespace)
        items = list(listed)
        return items, listed.resourceVersion

    def name_node(self, pod: Any) -> tuple[str, str | None]:
        return pod.metadata.name, pod.spec.nodeName

    def watch(self, version: str, added: Callable[[str], bool]) -> None:
        from lightkube.resources.core_v1 import Pod

        events = self.client.watch(
            Pod, namespace=self.namespace, resource_version=version, server_timeout=300
        )
        for kind, pod in events:
            if kind == "ADDED" and added(pod.metadata.name):
                return


class AsyncioOfficial:
    """kubernetes_asyncio: aiohttp and the older generated models (same Binding workaround)."""

    def __init__(self, kubeconfig: str, namespace: str, node: str, pool: int) -> None:
        self.kubeconfig, self.pool = kubeconfig, pool
        self.namespace, self.node = namespace, node

    async def open(self) -> None:
        from kubernetes_asyncio import client, config, watch

        configuration = client.Configuration()
        await config.load_kube_config(self.kubeconfig, client_configuration=configuration)
        configuration.connection_pool_maxsize = self.pool
        self.m, self.watch_module = client, watch
        self.api_client = client.ApiClient(configuration)
        self.api = client.CoreV1Api(self.api_client)

    async def close(self) -> None:
        await self.api_client.close()

    async def create(self, name: str) -> None:
        m = self.m
        spec = m.V1PodSpec(
            scheduler_name="nobody", containers=[m.V1Container(name="c", image="busybox")]
        )
        pod = m.V1Pod(metadata=m.V1ObjectMeta(name=name), spec=spec)
        await self.api.create_namespaced_pod(self.namespace, pod)

    async def bind(self, name: str) -> None:
        m = self.m
        binding = m.V1Binding(
            metadata=m.V1ObjectMeta(name=name),
            target=m.V1ObjectReference(api_version="v1", kind="Node", name=self.node),
        )
        answer = await self.api.create_namespaced_pod_binding(
            name, self.namespace, binding, _preload_content=False
        )
        body = await answer.read()
        answer.release()
        if answer.status >= 300:
            raise RuntimeError(f"binding {name}: {answer.status} {body[:200]!r}")

    async def list(self, namespace: str) -> tuple[list[Any], str]:
        listed = await self.api.list_namespaced_pod(namespace)
        return listed.items, listed.metadata.resource_version

    def name_node(self, pod: Any) -> tuple[str, str | None]:
        return pod.metadata.name, pod.spec.node_name

    async def watch(self, version: str, added: Callable[[str], bool]) -> None:
        stream = self.watch_module.Watch()
        async with stream.stream(
            self.api.list_namespaced_pod,
            self.namespace,
            resource_version=version,
            timeout_seconds=300,
        ) as events:
            async for event in events:
                if event["type"] == "ADDED" and added(event["object"].metadata.name):
                    return


class LightkubeAsync:
    """lightkube's AsyncClient (same models, same Binding workaround)."""

    def __init__(self, kubeconfig: str, namespace: str, node: str, pool: int) -> None:
        self.kubeconfig, self.pool = kubeconfig, pool
        self.namespace, self.node = namespace, node

    async def open(self) -> None:
        import httpx2
        from lightkube import AsyncClient, KubeConfig
        from lightkube.config.client_adapter import verify_cluster
        from lightkube.config.models import User

        config = KubeConfig.from_file(self.kubeconfig).get()
        transport = httpx2.AsyncHTTPTransport(
            verify=verify_cluster(config.cluster, config.user or User(), config.abs_file),
            limits=httpx2.Limits(max_connections=self.pool, max_keepalive_connections=self.pool),
        )
        self.aclient = AsyncClient(config, transport=transport)

    async def close(self) -> None:
        await self.aclient.close()

    async def create(self, name: str) -> None:
        await self.aclient.create(lightkube_pod(name, self.namespace))

    async def bind(self, name: str) -> None:
        import msgspec

        with contextlib.suppress(msgspec.ValidationError):
            await self.aclient.create(lightkube_binding(name, self.namespace, self.node), name)

    async def list(self, namespace: str) -> tuple[list[Any], str]:
        from lightkube.resources.core_v1 import Pod

        listed = self.aclient.list(Pod, namespace=namespace)
        items = [pod async for pod in listed]
        return items, listed.resourceVersion

    def name_node(self, pod: Any) -> tuple[str, str | None]:
        return pod.metadata.name, pod.spec.nodeName

    async def watch(self, version: str, added: Callable[[str], bool]) -> None:
        from lightkube.resources.core_v1 import Pod

        events = self.aclient.watch(
            Pod, namespace=self.namespace, resource_version=version, server_timeout=300
        )
        async for kind, pod in events:
            if kind == "ADDED" and added(pod.metadata.name):
                return


ADAPTERS: dict[str, Any] = {
    "kubernetes": OfficialSync,
    "kubernetes_asyncio": AsyncioOfficial,
    "lightkube": LightkubeSync,
    "lightkube-async": LightkubeAsync,
}


class Progress:
    """Says on stderr when a quarter of a phase is done."""

    def __init__(self, what: str, total: int) -> None:
        self.what, self.total, self.done, self.next = what, total, 0, total / 4
        self.lock = threading.Lock()

    def tick(self) -> None:
        with self.lock:
            self.done += 1
            if self.done >= self.next:
                self.next += self.total / 4
                say(f"  {self.what}: {self.done}/{self.total}")


def timed_sync(
    call: Callable[[str], None], names: list[str], what: str, width: int
) -> tuple[float, float]:
    """Calls per second of `call` over `names`, `width` threads; this process's CPU ms a call."""
    progress = Progress(what, len(names))

    def one(name: str) -> None:
        call(name)
        progress.tick()

    started, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(width) as pool:
        list(pool.map(one, names))
    cpu_ms = 1000 * (time.process_time() - cpu) / len(names)
    return len(names) / (time.perf_counter() - started), cpu_ms


async def timed_async(
    call: Callable[[str], Awaitable[None]], names: list[str], what: str, width: int
) -> tuple[float, float]:
    """Calls per second of `call` over `names`, `width` tasks; this process's CPU ms a call."""
    progress = Progress(what, len(names))
    pending = iter(names)

    async def worker() -> None:
        for name in pending:
            await call(name)
            progress.tick()

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(width)))
    cpu_ms = 1000 * (time.process_time() - cpu) / len(names)
    return len(names) / (time.perf_counter() - started), cpu_ms


class Arrivals:
    """When each watched pod's ADDED event came out of the client (perf_counter)."""

    def __init__(self, expected: Iterable[str], make_event: Callable[[], Any]) -> None:
        self.expected = set(expected)
        self.at: dict[str, float] = {}
        self.events = {name: make_event() for name in self.expected}

    def added(self, name: str) -> bool:
        """Record `name`; True once every expected pod has been seen (the watch may stop)."""
        if name in self.expected and name not in self.at:
            self.at[name] = time.perf_counter()
            self.events[name].set()
        return len(self.at) == len(self.expected)


def watch_names(count: int) -> list[str]:
    return ["w-sentinel", *(f"w-{i}" for i in range(count))]


def load_phase(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """Create and bind `args.pods` pods (after one of each on one thread, to warm up)."""
    names = [f"p-{i}" for i in range(args.pods)]
    row: dict[str, Any] = {}
    client = ADAPTERS[kind](args.kubeconfig, args.namespace, args.node, args.concurrency)
    if kind in ("kubernetes", "lightkube"):
        client.create(WARM_POD)
        client.bind(WARM_POD)
        row["create_per_s"], row["create_cpu_ms"] = timed_sync(
            client.create, names, "created", args.concurrency
        )
        row["bind_per_s"], row["bind_cpu_ms"] = timed_sync(
            client.bind, names, "bound", args.concurrency
        )
    else:

        async def run() -> None:
            await client.open()
            await client.create(WARM_POD)
            await client.bind(WARM_POD)
            row["create_per_s"], row["create_cpu_ms"] = await timed_async(
                client.create, names, "created", args.concurrency
            )
            row["bind_per_s"], row["bind_cpu_ms"] = await timed_async(
                client.bind, names, "bound", args.concurrency
            )
            await client.close()

        asyncio.run(run())
    row["load_peak_mib"] = memory_kib("VmHWM") / 1024
    row["cpu_ms"] = (row["create_cpu_ms"] + row["bind_cpu_ms"]) / 2
    return row


def check_listed(client: Any, items: list[Any], args: argparse.Namespace) -> None:
    nodes = dict(client.name_node(pod) for pod in items)
    if len(nodes) != args.pods or set(nodes.values()) != {args.node}:
        raise RuntimeError(f"listed {len(nodes)} pods on {set(nodes.values())}")


def read_phase(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """List the pods in a fresh process (after a list of `default` to warm up), then watch."""
    client = ADAPTERS[kind](args.kubeconfig, args.namespace, args.node, args.concurrency)
    names = watch_names(args.watch)
    if kind in ("kubernetes", "lightkube"):
        client.list("default")
        gc.collect()
        before = memory_kib("VmRSS")
        reset_peak()
        started = time.perf_counter()
        items, version = client.list(args.namespace)
        row = {"list_s": time.perf_counter() - started}
        row["list_peak_mib"] = (memory_kib("VmHWM") - before) / 1024
        row["list_held_mib"] = (memory_kib("VmRSS") - before) / 1024
        check_listed(client, items, args)
        del items
        arrivals = Arrivals(names, threading.Event)
        watcher = threading.Thread(target=client.watch, args=(version, arrivals.added), daemon=True)
        watcher.start()
        latencies = []
        for name in names:
            sent = time.perf_counter()
            client.create(name)
            responded = time.perf_counter()
            if not arrivals.events[name].wait(30):
                raise RuntimeError(f"no ADDED event for {name} in 30 s")
            latencies.append((arrivals.at[name] - responded, arrivals.at[name] - sent))
        watcher.join(30)
    else:

        async def run() -> tuple[dict[str, Any], list[tuple[float, float]]]:
            await client.open()
            await client.list("default")
            gc.collect()
            before = memory_kib("VmRSS")
            reset_peak()
            started = time.perf_counter()
            items, version = await client.list(args.namespace)
            row = {"list_s": time.perf_counter() - started}
            row["list_peak_mib"] = (memory_kib("VmHWM") - before) / 1024
            row["list_held_mib"] = (memory_kib("VmRSS") - before) / 1024
            check_listed(client, items, args)
            del items
            arrivals = Arrivals(names, asyncio.Event)
            watcher = asyncio.create_task(client.watch(version, arrivals.added))
            latencies = []
            for name in names:
                sent = time.perf_counter()
                await client.create(name)
                responded = time.perf_counter()
                await asyncio.wait_for(arrivals.events[name].wait(), 30)
                latencies.append((arrivals.at[name] - responded, arrivals.at[name] - sent))
            await asyncio.wait_for(watcher, 30)
            await client.close()
            return row, latencies

        row, latencies = asyncio.run(run())
    say(f"  watched {len(names)} pods created one at a time")
    # Not the sentinel's: the watch may still have been connecting. An event can come out of
    # the client before the create's answer does ("early", a negative latency).
    after_answer = [answer for answer, _ in latencies[1:]]
    after_send = [send for _, send in latencies[1:]]
    row["watch_p50_ms"] = 1000 * statistics.median(after_answer)
    row["watch_p95_ms"] = 1000 * p95(after_answer)
    row["watch_early"] = sum(1 for latency in after_answer if latency < 0)
    row["watch_from_send_p50_ms"] = 1000 * statistics.median(after_send)
    row["watch_from_send_p95_ms"] = 1000 * p95(after_send)
    return row


def worker(args: argparse.Namespace) -> int:
    phase = load_phase if args.phase == "load" else read_phase
    print(json.dumps(phase(args.worker, args)))
    return 0


# --- in the parent: import cost, typing, the control plane --------------------------------

IMPORT_PROBE = """
import time
def rss_kib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
before = rss_kib()
started = time.perf_counter()
{statement}
print(time.perf_counter() - started, rss_kib() - before)
"""


def import_cost(kind: str, runs: int) -> dict[str, float]:
    """Median seconds and RSS MiB added by importing the client, each in a fresh interpreter
    (-I: isolated, so benchmarks/kubernetes.py cannot shadow the package)."""
    seconds, mib = [], []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-I", "-c", IMPORT_PROBE.format(statement=IMPORTS[kind])],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        seconds.append(float(out[0]))
        mib.append(int(out[1]) / 1024)
    return {"import_s": statistics.median(seconds), "import_mib": statistics.median(mib)}


SNIPPETS = {
    "kubernetes": """
from kubernetes import client, config, watch


def pods(kubeconfig: str, namespace: str) -> tuple[list[str], str]:
    config.load_kube_config(kubeconfig)
    api = client.CoreV1Api()
    spec = client.V1PodSpec(containers=[client.V1Container(name="c", image="i")])
    api.create_namespaced_pod(
        namespace, client.V1Pod(metadata=client.V1ObjectMeta(name="p"), spec=spec)
    )
    listed = api.list_namespaced_pod(namespace)
    names = [p.metadata.name for p in listed.items if p.metadata and p.metadata.name]
    version = listed.metadata.resource_version if listed.metadata else None
    return names, version or ""


def added(namespace: str, version: str) -> list[str]:
    api = client.CoreV1Api()
    seen: list[str] = []
    for event in watch.Watch().stream(
        api.list_namespaced_pod, namespace, resource_version=version, timeout_seconds=5
    ):
        pod: client.V1Pod = event["object"]
        kind: str = event["type"]
        if kind == "ADDED" and pod.metadata and pod.metadata.name:
            seen.append(pod.metadata.name)
    return seen
""",
    "kubernetes_asyncio": """
from kubernetes_asyncio import client, config, watch


async def pods(kubeconfig: str, namespace: str) -> tuple[list[str], str]:
    await config.load_kube_config(kubeconfig)
    async with client.ApiClient() as api_client:
        api = client.CoreV1Api(api_client)
        spec = client.V1PodSpec(containers=[client.V1Container(name="c", image="i")])
        await api.create_namespaced_pod(
            namespace, client.V1Pod(metadata=client.V1ObjectMeta(name="p"), spec=spec)
        )
        listed = await api.list_namespaced_pod(namespace)
    names = [p.metadata.name for p in listed.items if p.metadata and p.metadata.name]
    version = listed.metadata.resource_version if listed.metadata else None
    return names, version or ""


async def added(namespace: str, version: str) -> list[str]:
    seen: list[str] = []
    async with client.ApiClient() as api_client:
        api = client.CoreV1Api(api_client)
        async for event in watch.Watch().stream(
            api.list_namespaced_pod, namespace, resource_version=version, timeout_seconds=5
        ):
            pod: client.V1Pod = event["object"]
            kind: str = event["type"]
            if kind == "ADDED" and pod.metadata and pod.metadata.name:
                seen.append(pod.metadata.name)
    return seen
""",
    "lightkube": """
from lightkube import Client, KubeConfig
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod


def pods(kubeconfig: str, namespace: str) -> tuple[list[str], str]:
    api = Client(KubeConfig.from_file(kubeconfig))
    spec = PodSpec(containers=[Container(name="c", image="i")])
    api.create(Pod(metadata=ObjectMeta(name="p"), spec=spec), namespace=namespace)
    listed = api.list(Pod, namespace=namespace)
    names = [p.metadata.name for p in listed if p.metadata and p.metadata.name]
    return names, listed.resourceVersion


def added(kubeconfig: str, namespace: str, version: str) -> list[str]:
    api = Client(KubeConfig.from_file(kubeconfig))
    seen: list[str] = []
    for kind, pod in api.watch(
        Pod, namespace=namespace, resource_version=version, server_timeout=5
    ):
        if kind == "ADDED" and pod.metadata and pod.metadata.name:
            seen.append(pod.metadata.name)
    return seen
""",
    "lightkube-async": """
from lightkube import AsyncClient, KubeConfig
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod


async def pods(kubeconfig: str, namespace: str) -> tuple[list[str], str]:
    api = AsyncClient(KubeConfig.from_file(kubeconfig))
    spec = PodSpec(containers=[Container(name="c", image="i")])
    await api.create(Pod(metadata=ObjectMeta(name="p"), spec=spec), namespace=namespace)
    listed = api.list(Pod, namespace=namespace)
    names = [p.metadata.name async for p in listed if p.metadata and p.metadata.name]
    return names, listed.resourceVersion


async def added(kubeconfig: str, namespace: str, version: str) -> list[str]:
    api = AsyncClient(KubeConfig.from_file(kubeconfig))
    seen: list[str] = []
    async for kind, pod in api.watch(
        Pod, namespace=namespace, resource_version=version, server_timeout=5
    ):
        if kind == "ADDED" and pod.metadata and pod.metadata.name:
            seen.append(pod.metadata.name)
    await api.close()
    return seen
""",
}
CARELESS = {
    "kubernetes": "from kubernetes.client import V1Pod\n\n\n"
    "def name(pod: V1Pod) -> str:\n    return pod.metadata.name\n",
    "kubernetes_asyncio": "from kubernetes_asyncio.client import V1Pod\n\n\n"
    "def name(pod: V1Pod) -> str:\n    return pod.metadata.name\n",
    "lightkube": "from lightkube.resources.core_v1 import Pod\n\n\n"
    "def name(pod: Pod) -> str:\n    return pod.metadata.name\n",
}
CARELESS["lightkube-async"] = CARELESS["lightkube"]


def typing_report(kind: str) -> dict[str, Any]:
    """py.typed (from the distribution's file list: benchmarks/kubernetes.py would shadow the
    package here), and `mypy --strict` on the snippets (in a temporary directory: no config)."""
    package = PACKAGE[kind]
    py_typed = any(str(f) == f"{package}/py.typed" for f in metadata.files(package) or [])
    mypy = Path(sys.executable).parent / "mypy"
    with tempfile.TemporaryDirectory(prefix="kube-clients-mypy-") as directory:
        Path(directory, "use.py").write_text(SNIPPETS[kind].lstrip())
        Path(directory, "careless.py").write_text(CARELESS[kind])
        done = subprocess.run(
            [str(mypy), "--strict", "--no-incremental", "--cache-dir", os.devnull,
             "--no-error-summary", "use.py", "careless.py"],
            capture_output=True, text=True, check=False, cwd=directory,
        )  # fmt: skip
    if done.returncode not in (0, 1):
        raise RuntimeError(f"mypy failed on {kind}: {done.stdout}{done.stderr}")
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    return {
        "py_typed": py_typed,
        "mypy_errors": sum(line.startswith("use.py") for line in errors),
        "mypy_messages": [line for line in errors if line.startswith("use.py")],
        "none_caught": any(line.startswith("careless.py") for line in errors),
    }


class Admin:
    """The parent's own calls to the API server (urllib: no client library in this process)."""

    def __init__(self, server: str, token: str, ca_path: Path) -> None:
        self.server, self.token = server, token
        self.tls = ssl.create_default_context(cafile=str(ca_path))

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            self.server + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, context=self.tls, timeout=60) as answer:
            return json.load(answer)

    def exists(self, path: str) -> bool:
        try:
            self.call("GET", path)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return False
            raise
        return True

    def wait(self, what: str, condition: Callable[[], bool], timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.2)

    def prepare(self, namespace: str, node: str) -> None:
        """A namespace (with its default service account) and a node no kubelet serves."""
        self.call("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        self.call("POST", "/api/v1/nodes", {"metadata": {"name": node}})
        self.wait(
            "the default service account",
            lambda: self.exists(f"/api/v1/namespaces/{namespace}/serviceaccounts/default"),
        )

    def delete_pod(self, namespace: str, name: str) -> None:
        self.call(
            "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", {"gracePeriodSeconds": 0}
        )

    def remove(self, namespace: str, node: str) -> None:
        """Pods at once (no kubelet would ever confirm their end), the namespace, the node."""
        with contextlib.suppress(urllib.error.HTTPError):
            self.call("DELETE", f"/api/v1/namespaces/{namespace}/pods", {"gracePeriodSeconds": 0})
        with contextlib.suppress(urllib.error.HTTPError):
            self.call("DELETE", f"/api/v1/namespaces/{namespace}")
        path = f"/api/v1/namespaces/{namespace}"
        self.wait(f"namespace {namespace} to go", lambda: not self.exists(path))
        with contextlib.suppress(urllib.error.HTTPError):
            self.call("DELETE", f"/api/v1/nodes/{node}")


def run_worker(kind: str, phase: str, args: argparse.Namespace, **where: str) -> dict[str, Any]:
    command = [
        sys.executable, "-I", str(Path(__file__).resolve()), "--worker", kind, "--phase", phase,
        "--pods", str(args.pods), "--watch", str(args.watch),
        "--concurrency", str(args.concurrency),
        *(item for key, value in where.items() for item in (f"--{key}", value)),
    ]  # fmt: skip
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} {phase} worker exited {done.returncode}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(kind: str, admin: Admin, kubeconfig: Path, args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {"client": kind}
    say(f"{kind}: import cost ({args.import_runs} fresh interpreters), mypy --strict")
    row.update(import_cost(kind, args.import_runs))
    row.update(typing_report(kind))
    slug = kind.replace("_", "-")
    namespace, node = f"bench-{slug}", f"bench-node-{slug}"
    admin.prepare(namespace, node)
    where = {"kubeconfig": str(kubeconfig), "namespace": namespace, "node": node}
    try:
        say(f"{kind}: creating and binding {args.pods} pods, {args.concurrency} in flight")
        row.update(run_worker(kind, "load", args, **where))
        admin.delete_pod(namespace, WARM_POD)
        say(f"{kind}: listing {args.pods} pods, then the watch")
        row.update(run_worker(kind, "read", args, **where))
    finally:
        say(f"{kind}: deleting namespace {namespace}")
        admin.remove(namespace, node)
    return row


# --- the report ---------------------------------------------------------------------------

COLUMNS = (  # header, key, width, format
    ("client", "client", 18, "{}"),
    ("imp s", "import_s", 5, "{:.2f}"),
    ("imp MiB", "import_mib", 7, "{:.0f}"),
    ("create/s", "create_per_s", 8, "{:.0f}"),
    ("bind/s", "bind_per_s", 6, "{:.0f}"),
    ("CPU ms", "cpu", 7, "{}"),
    ("list s", "list_s", 6, "{:.2f}"),
    ("list MiB", "list_peak_mib", 8, "{:.0f}"),
    ("peak MiB", "load_peak_mib", 8, "{:.0f}"),
    ("watch", "watch", 7, "{}"),
    ("typed", "py_typed", 5, "{}"),
    ("mypy", "mypy", 4, "{}"),
)
LEGEND = [
    "imp: importing the client in a fresh interpreter (median). CPU ms: the client process's",
    "CPU per create / per bind. list MiB: peak RSS added by the list. peak MiB: peak RSS of the",
    "process that created and bound. watch: ms from a create's answer to its ADDED event,",
    "p50/p95 (< 0: the event came first). typed: ships py.typed. mypy: --strict errors in correct",
    "code; *: no error for an unchecked pod.metadata.name read as str (None not caught).",
]
RATIOS = (  # header, key, higher is better
    ("import s", "import_s", False),
    ("imp MiB", "import_mib", False),
    ("create/s", "create_per_s", True),
    ("bind/s", "bind_per_s", True),
    ("CPU/req", "cpu_ms", False),
    ("list s", "list_s", False),
    ("list MiB", "list_peak_mib", False),
    ("to ADDED", "watch_from_send_p50_ms", False),
)


def cells(row: dict[str, Any]) -> list[str]:
    if "error" in row:
        return [LABELS[row["client"]], f"failed: {row['error']}"[:70]]
    shown = {
        **row,
        "client": LABELS[row["client"]],
        "cpu": f"{row['create_cpu_ms']:.1f}/{row['bind_cpu_ms']:.1f}",
        "watch": f"{row['watch_p50_ms']:.1f}/{row['watch_p95_ms']:.1f}",
        "py_typed": "yes" if row["py_typed"] else "no",
        "mypy": f"{row['mypy_errors']}{'' if row['none_caught'] else '*'}",
    }
    return [fmt.format(shown[key]) for _, key, _, fmt in COLUMNS]


def render(rows: list[dict[str, Any]], ratios: dict[str, dict[str, float]]) -> str:
    """The table (one row per client) and the ratios to the first client measured."""

    def line(values: list[str], widths: list[int]) -> str:
        parts = [
            value.ljust(width) if i == 0 else value.rjust(width)
            for i, (value, width) in enumerate(zip(values, widths, strict=False))
        ]
        return " ".join(parts).rstrip()

    widths = [width for _, _, width, _ in COLUMNS]
    lines = [
        line([header for header, *_ in COLUMNS], widths),
        line(["-" * w for w in widths], widths),
    ]
    lines += [line(cells(row), widths) for row in rows]
    lines += ["", *LEGEND]
    base = LABELS[next(iter(ratios))]
    lines += ["", f"Ratios to {base} (>1: better by that factor; times and sizes inverted):"]
    widths = [18, *(9 for _ in RATIOS)]
    lines.append(line(["client", *(header for header, *_ in RATIOS)], widths))
    for client, values in ratios.items():
        numbers = [f"{values[key]:.2f}" if key in values else "" for _, key, _ in RATIOS]
        lines.append(line([LABELS[client], *numbers], widths))
    lines.append("CPU/req: client CPU per create and bind; to ADDED: p50 from sending a create.")
    assert all(len(text) <= 100 for text in lines), "the table must fit 100 columns"
    return "\n".join(lines)


def compute_ratios(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each client against the first: throughput divided, times and sizes inverted."""
    base = rows[0]
    ratios: dict[str, dict[str, float]] = {}
    for row in rows:
        values = {}
        for _, key, higher in RATIOS:
            if key in row and key in base and row[key] > 0 and base[key] > 0:
                values[key] = row[key] / base[key] if higher else base[key] / row[key]
        ratios[row["client"]] = values
    return ratios


def machine() -> dict[str, Any]:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor(),
    )  # fmt: skip
    return {"cpus": os.cpu_count(), "cpu": cpu, "python": platform.python_version()}


def versions() -> dict[str, str]:
    found = {}
    for name in DISTRIBUTIONS:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000, help="pods to create, bind and list")
    parser.add_argument("--watch", type=int, default=200, help="pods created under a watch")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    parser.add_argument("--import-runs", type=int, default=5)
    parser.add_argument("--clients", default=",".join(CLIENTS), help="which, in this order")
    parser.add_argument(
        "--json", action="store_true", help="print a JSON object (and the table on stderr)"
    )
    parser.add_argument("--worker", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=("load", "read"), help=argparse.SUPPRESS)
    for hidden in ("kubeconfig", "namespace", "node"):
        parser.add_argument(f"--{hidden}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    chosen = [c for c in args.clients.split(",") if c]
    if unknown := set(chosen) - set(CLIENTS):
        parser.error(f"unknown clients {sorted(unknown)}; choose from {', '.join(CLIENTS)}")

    sys.path.insert(0, str(ROOT / "tools" / "kubetest"))
    import testenv

    started = datetime.datetime.now(datetime.UTC)
    rows: list[dict[str, Any]] = []
    with testenv.running() as plane:
        admin = Admin(plane.server, plane.admin_token, plane.ca_path)
        for kind in chosen:
            try:
                rows.append(measure(kind, admin, plane.kubeconfig, args))
            except Exception as error:  # one client failing must not hide the others
                say(f"{kind}: failed: {error}")
                rows.append({"client": kind, "error": str(error)})
    measured = [row for row in rows if "error" not in row]
    ratios = compute_ratios(measured) if measured else {}
    heading = (
        f"{args.pods} pods, {args.concurrency} in flight, {args.watch} watched; "
        f"{machine()['cpus']} CPUs; {started:%Y-%m-%d %H:%M} UTC"
    )
    table = render(rows, ratios) if measured else "no client measured"
    if args.json:
        report = {
            "started": started.isoformat(timespec="seconds"),
            "machine": machine(),
            "versions": versions(),
            "pods": args.pods,
            "watch": args.watch,
            "concurrency": args.concurrency,
            "clients": rows,
            "ratios_to_first": ratios,
        }
        print(f"{heading}\n{table}", file=sys.stderr)
        print(json.dumps(report, indent=2))
    else:
        print(f"{heading}\n{table}")
    return 0 if len(measured) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
