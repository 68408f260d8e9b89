"""What Kubernetes tests do again and again: fake GPU nodes (KWOK), pods, waiting on state."""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
import testenv
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import NodeSpec, NodeStatus, Taint
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node, Pod

from gpupool.executors.kubernetes.client import warm_up_decoders
from gpupool.server.process import ServerProcess

warm_up_decoders()  # before any test thread decodes (see its docstring)

T = TypeVar("T")
_names = itertools.count()


def unique(prefix: str) -> str:
    """A name no other test of this run uses (tests share one API server)."""
    return f"{prefix}-{os.getpid() % 10000}-{next(_names)}"


def wait_for(
    what: str, probe: Callable[[], T | None], timeout_s: float = 30.0, every_s: float = 0.1
) -> T:
    """Poll `probe` until it returns something truthy; fail with `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})")


class Cluster:
    """A lightkube client on a control plane, and clean-up of what tests create through it."""

    def __init__(self, plane: testenv.ControlPlane) -> None:
        self.plane = plane
        self.client = Client(KubeConfig.from_file(plane.kubeconfig).get(), field_manager="tests")
        self._nodes: list[str] = []
        self._namespaces: list[str] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        for name in self._namespaces:
            with contextlib.suppress(ApiError):
                self.client.delete(Namespace, name)
        for name in self._nodes:
            with contextlib.suppress(ApiError):
                self.client.delete(Node, name)

    def add_gpu_node(
        self,
        name: str,
        gpus: int = 8,
        memory_mib: int = 81920,
        product: str = "NVIDIA-A100-SXM4-80GB",
        labels: Mapping[str, str] | None = None,
        taints: list[Taint] | None = None,
        cpu: str = "64",
        memory: str = "512Gi",
    ) -> str:
        """A KWOK node (fake kubelet) with `gpus` devices as NVIDIA's feature discovery labels
        them."""
        key, value = testenv.FAKE_NODE_ANNOTATION
        node = Node(
            metadata=ObjectMeta(
                name=name,
                annotations={key: value},
                labels={
                    "kubernetes.io/hostname": name,
                    "nvidia.com/gpu.product": product,
                    "nvidia.com/gpu.memory": str(memory_mib),
                    "nvidia.com/gpu.count": str(gpus),
                    **(labels or {}),
                },
            ),
            spec=NodeSpec(taints=taints),
            status=NodeStatus(
                allocatable={
                    "cpu": cpu,
                    "memory": memory,
                    "pods": "110",
                    "nvidia.com/gpu": str(gpus),
                },
                capacity={"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)},
            ),
        )
        self.client.create(node)
        self._nodes.append(name)
        return name

    def wait_node_ready(self, name: str, timeout_s: float = 60) -> None:
        def ready() -> bool:
            node = self.client.get(Node, name)
            conditions = (node.status.conditions if node.status else None) or []
            taints = (node.spec.taints if node.spec else None) or []
            return any(c.type == "Ready" and c.status == "True" for c in conditions) and not any(
                t.key == "node.kubernetes.io/not-ready" for t in taints
            )

        wait_for(f"node {name} ready", ready, timeout_s)

    def add_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> str:
        self.client.create(Namespace(metadata=ObjectMeta(name=name, labels=dict(labels or {}))))
        self._namespaces.append(name)
        return name

    def forget_namespace(self, name: str) -> None:
        """Delete `name` at clean-up (created by someone else, such as gpupool)."""
        self._namespaces.append(name)

    def namespace_labels_with_prefix(self, prefix: str) -> Iterator[str]:
        for namespace in self.client.list(Namespace):
            name = namespace.metadata.name if namespace.metadata else None
            if name and name.startswith(prefix + "-"):
                yield name

    def pods(self, namespace: str, labels: Mapping[str, Any] | None = None) -> Iterator[Pod]:
        return iter(self.client.list(Pod, namespace=namespace, labels=labels or {}))


class FakeDevicePlugin:
    """Plays the NVIDIA device plugin and the reservation container for KWOK nodes.

    KWOK runs no containers, so when gpupool binds a reservation pod this starts gpupool's real
    reservation program (`python -m gpupool.executors.kubernetes.reserve`) as a local process,
    with `NVIDIA_VISIBLE_DEVICES` set to a fake UUID for one of the node's devices (as the device
    plugin would), and lets it annotate its pod through the API server, as it does in a cluster.
    """

    def __init__(
        self,
        plane: testenv.ControlPlane,
        namespace: str = "gpupool-system",
        reserve_kubeconfig: Path | None = None,
    ) -> None:
        self.plane = plane
        self.reserve_kubeconfig = reserve_kubeconfig or plane.kubeconfig
        """The reservation program's credentials (a reservation pod's service account's)."""
        self.namespace = namespace
        self.client = Client(KubeConfig.from_file(plane.kubeconfig).get(), field_manager="tests")
        self.reported: dict[str, str] = {}
        """Reservation pod name -> UUID reported."""
        self._given: dict[str, set[int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        seen: set[str] = set()
        while not self._stop.is_set():
            try:
                pods = list(
                    self.client.list(
                        Pod, namespace=self.namespace, labels={"gpupool.dev/role": "reservation"}
                    )
                )
            except ApiError:
                pods = []
            except Exception:
                time.sleep(0.5)
                continue
            names = set()
            for pod in pods:
                assert pod.metadata is not None and pod.spec is not None
                name = pod.metadata.name or ""
                names.add(name)
                annotated = "gpupool.dev/gpu-uuid" in (pod.metadata.annotations or {})
                if name in seen or annotated or not pod.spec.nodeName:
                    continue
                seen.add(name)
                uuid = self._give(pod.spec.nodeName)
                self.reported[name] = uuid
                subprocess.Popen(
                    [sys.executable, "-m", "gpupool.executors.kubernetes.reserve"],
                    env={
                        **os.environ,
                        "POD_NAME": name,
                        "POD_NAMESPACE": self.namespace,
                        "NVIDIA_VISIBLE_DEVICES": uuid,
                        "KUBECONFIG": str(self.reserve_kubeconfig),
                        "GPUPOOL_RESERVE_ONCE": "1",
                    },
                    stdout=subprocess.DEVNULL,
                )
            seen &= names
            time.sleep(0.1)

    def _give(self, node: str) -> str:
        given = self._given.setdefault(node, set())
        index = len(given)
        given.add(index)
        return f"GPU-fake-{node}-{index}"


def service_account_kubeconfig(
    plane: testenv.ControlPlane, namespace: str, account: str, path: Path
) -> Path:
    """A kubeconfig that acts as `account` (a token from the TokenRequest API), to run what
    would run in the cluster with the permissions deploy/kubernetes gives it."""
    from lightkube.models.authentication_v1 import TokenRequestSpec
    from lightkube.resources.core_v1 import ServiceAccountToken

    client = Client(KubeConfig.from_file(plane.kubeconfig).get(), field_manager="tests")
    request = ServiceAccountToken(
        metadata=ObjectMeta(name=account, namespace=namespace),
        spec=TokenRequestSpec(audiences=[], expirationSeconds=3600),
    )
    answer = client.create(request, account, namespace=namespace)
    assert answer.status is not None
    path.write_text(
        testenv.kubeconfig_text(plane.server, plane.ca_path, answer.status.token, account)
    )
    return path


def install_gpupool_accounts(client: Client, namespace: str = "gpupool-system") -> None:
    """What deploy/kubernetes installs that gpupool itself does not create: its namespace and
    the reservation pods' service account."""
    from lightkube.resources.core_v1 import ServiceAccount

    with contextlib.suppress(ApiError):
        client.create(Namespace(metadata=ObjectMeta(name=namespace)))
    with contextlib.suppress(ApiError):
        client.create(
            ServiceAccount(metadata=ObjectMeta(name="gpupool-reservation", namespace=namespace))
        )


POOL_LABEL = "gpupool.test/pool"
LOG_TAIL_LINES = 80
"""How much of the server's log a failed test prints."""


class GpupoolOnKubernetes:
    """A real `gpupool server --kubernetes` on a control plane, with nodes and namespaces of its
    own: it manages only nodes labelled `gpupool.test/pool=<pool>`, and its projects' namespaces
    are `<pool>-<project>`, so tests on one shared API server stay apart."""

    def __init__(
        self,
        cluster: Cluster,
        data_dir: Path,
        *,
        database_url: str | None = None,
        extra_args: Sequence[str] = (),
        pool: str | None = None,
        token_from: GpupoolOnKubernetes | None = None,
        kubeconfig: Path | None = None,
    ) -> None:
        self.cluster = cluster
        self.token_from = token_from
        """Another replica on the same database: the first admin's token is in its data dir."""
        self.pool = pool or unique("pool")
        self.data_dir = data_dir
        args = [
            "--kubernetes",
            "--kubeconfig",
            str(kubeconfig or cluster.plane.kubeconfig),
            "--kube-node-selector",
            f"{POOL_LABEL}={self.pool}",
            "--namespace-template",
            f"{self.pool}-{{project}}",
            "--cycle-interval",
            "0.2",
            *extra_args,
        ]
        self.process = ServerProcess(
            data_dir, database_url=database_url, extra_args=tuple(args), cycle_interval_s=0.2
        )
        self.http: httpx.Client | None = None

    def __enter__(self) -> Self:
        install_gpupool_accounts(self.cluster.client)
        self.process.start(timeout_s=60)
        try:
            self.http = httpx.Client(
                base_url=self.process.url,
                headers={"Authorization": f"Bearer {self.admin_token}"},
                timeout=30,
            )
        except BaseException:
            self.process.stop()  # __exit__ does not run when __enter__ fails
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.http is not None:
            self.http.close()
        self.process.stop()
        if error is not None:
            # pytest shows a failed test's captured output: the server's side of the failure
            print(f"--- the last lines of the gpupool server's log ({self.process.log_path}):")
            print("\n".join(self.log().splitlines()[-LOG_TAIL_LINES:]))
        for namespace in list(self.cluster.namespace_labels_with_prefix(self.pool)):
            self.cluster.forget_namespace(namespace)

    @property
    def admin_token(self) -> str:
        source = self.token_from.process if self.token_from is not None else self.process
        return source.admin_token

    @property
    def api(self) -> httpx.Client:
        assert self.http is not None
        return self.http

    def namespace(self, project: str) -> str:
        return f"{self.pool}-{project}"

    def node(self, name: str, gpus: int = 8, **kwargs: Any) -> str:
        labels = {POOL_LABEL: self.pool, **kwargs.pop("labels", {})}
        return self.cluster.add_gpu_node(f"{self.pool}-{name}", gpus, labels=labels, **kwargs)

    def project(self, name: str, quota_gpu: float, **extra: Any) -> str:
        response = self.api.post(
            "/api/v1/projects", json={"name": name, "quota": {"gpu": quota_gpu}, **extra}
        )
        assert response.status_code == 201, response.text
        return name

    def submit(self, project: str, name: str, **fields: Any) -> dict[str, Any]:
        response = self.api.post(
            "/api/v1/workloads", json={"name": name, "project": project, **fields}
        )
        assert response.status_code == 201, response.text
        data: dict[str, Any] = response.json()
        return data

    def workload(self, project: str, name: str) -> dict[str, Any]:
        response = self.api.get(f"/api/v1/workloads/{project}/{name}")
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()
        return data

    def workloads(self, project: str) -> list[dict[str, Any]]:
        response = self.api.get("/api/v1/workloads", params={"project": project, "limit": 1000})
        assert response.status_code == 200, response.text
        items: list[dict[str, Any]] = response.json()["items"]
        return items

    def status(self, project: str, name: str) -> str:
        return str(self.workload(project, name)["status"])

    def wait_status(self, project: str, name: str, status: str, timeout_s: float = 30) -> None:
        wait_for(
            f"{project}/{name} {status}",
            lambda: self.status(project, name) == status or None,
            timeout_s,
        )

    def pods(self, project: str) -> list[Pod]:
        return list(self.cluster.pods(self.namespace(project)))

    def log(self) -> str:
        return self.process.log_path.read_text(errors="replace")
