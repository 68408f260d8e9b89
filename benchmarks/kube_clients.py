"""Which Python Kubernetes client: the official one, kubernetes_asyncio or lightkube, measured.

    .venv/bin/python benchmarks/kube_clients.py [--pods 500] [--json]

Starts its own control plane (tools/kubetest) and measures each client in turn, in the same
run, on the same API server: import time (fresh interpreter, median of 3) and memory; creating
`--pods` pods at 32 in flight (threads for the sync clients, tasks for the async ones); listing
them; and watch latency (a watch open on the namespace; `--watch` pods created one at a time;
time from sending each create to its ADDED event). Whether the package is typed (ships
`py.typed`) is read from its files. The official client and kubernetes_asyncio are not
gpupool's dependencies: install them to compare (`pip install kubernetes kubernetes_asyncio`);
a client that is missing is reported as such. Absolute numbers on a 2-core machine that also
runs the API server are noise; compare the clients with each other.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/kubernetes.py would shadow the official client's package `kubernetes`.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT / "tools" / "kubetest"))

import testenv  # noqa: E402

CLIENTS = ("kubernetes", "kubernetes_asyncio", "lightkube", "lightkube-async")
IMPORT = {
    "kubernetes": "import kubernetes.client, kubernetes.config, kubernetes.watch",
    "kubernetes_asyncio": "import kubernetes_asyncio.client, kubernetes_asyncio.config",
    "lightkube": "import lightkube, lightkube.resources.core_v1",
    "lightkube-async": "import lightkube, lightkube.resources.core_v1",
}
PACKAGE = {
    "kubernetes": "kubernetes",
    "kubernetes_asyncio": "kubernetes_asyncio",
    "lightkube": "lightkube",
    "lightkube-async": "lightkube",
}


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def pod_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "nobody",
            "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }


def import_cost(client: str) -> tuple[float, float]:
    """(median seconds, RSS MiB after) of importing the client in a fresh interpreter."""
    code = (
        "import time, resource; t = time.perf_counter(); " + IMPORT[client] + "; "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    runs = []
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        seconds, rss_kib = out.stdout.split()
        runs.append((float(seconds), float(rss_kib) / 1024))
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


SNIPPETS = {
    "kubernetes": """
from kubernetes import client, config
config.load_kube_config()
pods = client.CoreV1Api().list_namespaced_pod("default")
names: list[str] = [p.metadata.name for p in pods.items]
""",
    "kubernetes_asyncio": """
from kubernetes_asyncio import client, config
async def names() -> list[str]:
    await config.load_kube_config()
    pods = await client.CoreV1Api().list_namespaced_pod("default")
    return [p.metadata.name for p in pods.items]
""",
    "lightkube": """
from lightkube import Client
from lightkube.resources.core_v1 import Pod
names: list[str] = [
    p.metadata.name
    for p in Client().list(Pod, namespace="default")
    if p.metadata and p.metadata.name
]
""",
    "lightkube-async": """
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
async def names() -> list[str]:
    client = AsyncClient()
    return [p.metadata.name async for p in client.list(Pod, namespace="default")
            if p.metadata and p.metadata.name]
""",
}


def typed(client: str) -> str:
    """Whether it ships py.typed, and how many errors `mypy --strict` finds in a few lines
    that use it (a name read from a listed pod: precise models say it may be None)."""
    import tempfile

    spec = importlib.util.find_spec(PACKAGE[client])
    marker = (
        spec is not None
        and spec.origin is not None
        and (Path(spec.origin).parent / "py.typed").exists()
    )
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "use.py"
        path.write_text(SNIPPETS[client])
        out = subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(path)],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
    return f"{out.count(': error:')}{'' if marker else ' (no py.typed)'}"


# --- one adapter per client: create many, list, watch --------------------------------------


class Official:
    def __init__(self, kubeconfig: Path) -> None:
        import kubernetes.client
        import kubernetes.config
        import kubernetes.watch

        import kubernetes

        kubernetes.config.load_kube_config(str(kubeconfig))
        configuration = kubernetes.client.Configuration.get_default_copy()
        configuration.connection_pool_maxsize = 40
        self.api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))
        self.kubernetes = kubernetes

    def create_many(self, namespace: str, names: list[str]) -> None:
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda n: self.api.create_namespaced_pod(namespace, pod_body(n)), names))

    def count(self, namespace: str) -> int:
        return len(self.api.list_namespaced_pod(namespace).items)

    def watch_latency(self, namespace: str, names: list[str]) -> list[float]:
        seen: dict[str, float] = {}
        ready = threading.Event()

        def watch() -> None:
            stream = self.kubernetes.watch.Watch()
            ready.set()
            for event in stream.stream(self.api.list_namespaced_pod, namespace, timeout_seconds=60):
                seen.setdefault(event["object"].metadata.name, time.perf_counter())
                if all(n in seen for n in names):
                    stream.stop()

        return _latencies(
            watch,
            ready,
            seen,
            names,
            lambda n: self.api.create_namespaced_pod(namespace, pod_body(n)),
        )


class LightkubeSync:
    def __init__(self, kubeconfig: Path) -> None:
        from lightkube import Client, KubeConfig

        from gpupool.executors.kubernetes.client import warm_up_decoders

        warm_up_decoders()
        self.client = Client(KubeConfig.from_file(kubeconfig).get())

    def _pod(self, name: str, namespace: str) -> Any:
        from lightkube.resources.core_v1 import Pod

        body = pod_body(name)
        body["metadata"]["namespace"] = namespace
        return Pod.from_dict(body)

    def create_many(self, namespace: str, names: list[str]) -> None:
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda n: self.client.create(self._pod(n, namespace)), names))

    def count(self, namespace: str) -> int:
        from lightkube.resources.core_v1 import Pod

        return len(list(self.client.list(Pod, namespace=namespace)))

    def watch_latency(self, namespace: str, names: list[str]) -> list[float]:
        from lightkube.resources.core_v1 import Pod

        seen: dict[str, float] = {}
        ready = threading.Event()

        def watch() -> None:
            ready.set()
            for _, pod in self.client.watch(Pod, namespace=namespace, server_timeout=60):
                seen.setdefault(pod.metadata.name, time.perf_counter())
                if all(n in seen for n in names):
                    return

        return _latencies(
            watch, ready, seen, names, lambda n: self.client.create(self._pod(n, namespace))
        )


class AsyncAdapter:
    """kubernetes_asyncio or lightkube's AsyncClient, on an event loop of its own."""

    def __init__(self, kubeconfig: Path, kind: str) -> None:
        self.kubeconfig = kubeconfig
        self.kind = kind

    def create_many(self, namespace: str, names: list[str]) -> None:
        asyncio.run(self._create_many(namespace, names))

    async def _client(self) -> Any:
        if self.kind == "lightkube-async":
            from lightkube import AsyncClient, KubeConfig

            from gpupool.executors.kubernetes.client import warm_up_decoders

            warm_up_decoders()
            return AsyncClient(KubeConfig.from_file(self.kubeconfig).get())
        import kubernetes_asyncio
        import kubernetes_asyncio.client
        import kubernetes_asyncio.config
        import kubernetes_asyncio.watch

        await kubernetes_asyncio.config.load_kube_config(str(self.kubeconfig))
        configuration = kubernetes_asyncio.client.Configuration.get_default_copy()
        configuration.connection_pool_maxsize = 40
        return kubernetes_asyncio.client.ApiClient(configuration)

    async def _create(self, client: Any, namespace: str, name: str) -> None:
        if self.kind == "lightkube-async":
            from lightkube.resources.core_v1 import Pod

            body = pod_body(name)
            body["metadata"]["namespace"] = namespace
            await client.create(Pod.from_dict(body))
        else:
            import kubernetes_asyncio

            await kubernetes_asyncio.client.CoreV1Api(client).create_namespaced_pod(
                namespace, pod_body(name)
            )

    async def _create_many(self, namespace: str, names: list[str]) -> None:
        client = await self._client()
        gate = asyncio.Semaphore(32)

        async def one(name: str) -> None:
            async with gate:
                await self._create(client, namespace, name)

        await asyncio.gather(*(one(n) for n in names))
        await client.close()

    def count(self, namespace: str) -> int:
        async def run() -> int:
            client = await self._client()
            if self.kind == "lightkube-async":
                from lightkube.resources.core_v1 import Pod

                items = [p async for p in client.list(Pod, namespace=namespace)]
            else:
                import kubernetes_asyncio

                items = (
                    await kubernetes_asyncio.client.CoreV1Api(client).list_namespaced_pod(namespace)
                ).items
            await client.close()
            return len(items)

        return asyncio.run(run())

    def watch_latency(self, namespace: str, names: list[str]) -> list[float]:
        async def run() -> list[float]:
            client = await self._client()
            seen: dict[str, float] = {}
            sent: dict[str, float] = {}

            async def watch() -> None:
                if self.kind == "lightkube-async":
                    from lightkube.resources.core_v1 import Pod

                    async for _, pod in client.watch(Pod, namespace=namespace, server_timeout=60):
                        seen.setdefault(pod.metadata.name, time.perf_counter())
                        if all(n in seen for n in names):
                            return
                else:
                    import kubernetes_asyncio

                    api = kubernetes_asyncio.client.CoreV1Api(client)
                    stream = kubernetes_asyncio.watch.Watch()
                    async for event in stream.stream(
                        api.list_namespaced_pod, namespace, timeout_seconds=60
                    ):
                        seen.setdefault(event["object"].metadata.name, time.perf_counter())
                        if all(n in seen for n in names):
                            return

            watcher = asyncio.create_task(watch())
            await asyncio.sleep(0.5)
            for name in names:
                sent[name] = time.perf_counter()
                await self._create(client, namespace, name)
                await asyncio.sleep(0.01)
            await asyncio.wait_for(watcher, timeout=60)
            await client.close()
            return [seen[n] - sent[n] for n in names]

        return asyncio.run(run())


def _latencies(
    watch: Callable[[], None],
    ready: threading.Event,
    seen: dict[str, float],
    names: list[str],
    create: Callable[[str], Any],
) -> list[float]:
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    ready.wait()
    time.sleep(0.5)
    sent = {}
    for name in names:
        sent[name] = time.perf_counter()
        create(name)
        time.sleep(0.01)
    thread.join(timeout=60)
    return [max(0.0, seen[n] - sent[n]) for n in names if n in seen]


def adapter(client: str, kubeconfig: Path) -> Any:
    if client == "kubernetes":
        return Official(kubeconfig)
    if client == "lightkube":
        return LightkubeSync(kubeconfig)
    return AsyncAdapter(kubeconfig, client)


def measure(client: str, plane: testenv.ControlPlane, pods: int, watched: int) -> dict[str, Any]:
    if importlib.util.find_spec(PACKAGE[client]) is None:
        return {"client": client, "missing": True}
    import_s, rss_mib = import_cost(client)
    row: dict[str, Any] = {"client": client, "import_s": import_s, "rss_mib": rss_mib}
    row["typed"] = typed(client)
    from lightkube import Client, KubeConfig
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace

    admin = Client(KubeConfig.from_file(plane.kubeconfig).get())
    namespace = f"bench-{client.replace('_', '-')}"
    admin.create(Namespace(metadata=ObjectMeta(name=namespace)))
    chosen = adapter(client, plane.kubeconfig)
    say(f"{client}: creating {pods} pods")
    started = time.perf_counter()
    chosen.create_many(namespace, [f"p-{i}" for i in range(pods)])
    row["create_per_s"] = pods / (time.perf_counter() - started)
    started = time.perf_counter()
    assert chosen.count(namespace) == pods
    row["list_s"] = time.perf_counter() - started
    latencies = chosen.watch_latency(namespace, [f"w-{i}" for i in range(watched)])
    row["watch_median_ms"] = 1000 * statistics.median(latencies)
    row["watch_p95_ms"] = 1000 * statistics.quantiles(latencies, n=20)[-1]
    admin.delete(Namespace, namespace)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--watch", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with testenv.running() as plane:
        rows = [measure(client, plane, args.pods, args.watch) for client in CLIENTS]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title=f"Python Kubernetes clients, {args.pods} pods, one API server")
    for column in (
        "client",
        "mypy errors",
        "import s",
        "RSS MiB",
        "create/s",
        "list s",
        "watch ms p50/p95",
    ):
        table.add_column(column, justify="left" if column == "client" else "right")
    for row in rows:
        if row.get("missing"):
            table.add_row(row["client"], "not installed", "", "", "", "", "")
            continue
        table.add_row(
            row["client"],
            row["typed"],
            f"{row['import_s']:.2f}",
            f"{row['rss_mib']:.0f}",
            f"{row['create_per_s']:.0f}",
            f"{row['list_s']:.2f}",
            f"{row['watch_median_ms']:.0f}/{row['watch_p95_ms']:.0f}",
        )
    Console(width=100).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
