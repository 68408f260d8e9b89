"""What each client does, in the worker processes: one adapter per way of using a client.

Every adapter creates a pod, binds it, lists a namespace and watches it from a resourceVersion
(the sync ones directly, the async ones after `open`). The clients are imported inside the
adapters, never at module level: the parent process must not import them (the worker runs
isolated, `-I`, so that benchmarks/kubernetes.py cannot shadow the official package).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any


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
