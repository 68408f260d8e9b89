"""In the parent, no control plane needed: each client's import cost and its typing.

`import_cost` imports the client in fresh interpreters; `typing_report` runs `mypy --strict`
on a short correct use of the client (`SNIPPETS`) and on a careless one (`CARELESS`).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from kube_clients_bench.common import IMPORTS, PACKAGE

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
