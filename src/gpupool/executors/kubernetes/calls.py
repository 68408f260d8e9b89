"""The Kubernetes executor's API calls, each beside its handling of the API server's answers
(conflict, gone, refused): outcomes go back to `ClusterState`; what to call is its `plan()`."""

from __future__ import annotations

import threading
import time
from typing import Any

import msgspec
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import DeleteOptions, ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod, PodEviction, PodStatus, Service
from lightkube.types import PatchType

from gpupool.clock import Clock
from gpupool.executors.kubernetes import manifests as m
from gpupool.executors.kubernetes import objects as o
from gpupool.executors.kubernetes.fastpost import FastPoster
from gpupool.executors.kubernetes.records import Bind, LaunchRecord
from gpupool.executors.kubernetes.settings import KubeSettings
from gpupool.executors.kubernetes.state import ClusterState

__all__ = ["ApiCalls", "RefusedError"]

_MAX_LOG_BYTES = 16 * 1024 * 1024


class RefusedError(Exception):
    """The API server answered a write with an error status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ApiCalls:
    """One coroutine per API call; each reports its outcome to `state` under `lock`. A call
    that fails for a reason worth retrying raises (the executor retries it with back-off)."""

    def __init__(
        self, settings: KubeSettings, clock: Clock, lock: threading.Lock, state: ClusterState
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.lock = lock
        self.state = state
        self.client: AsyncClient | None = None
        """Set by the executor's event loop, which owns (and closes) it."""
        self.poster: FastPoster | None = None
        """The fast path for POSTs, where the credentials allow it (set with `client`)."""

    @property
    def api(self) -> AsyncClient:
        assert self.client is not None
        return self.client

    async def create_namespace(self, namespace: str) -> None:
        with self.lock:
            project = next(
                (p for p in self.state.projects
                 if o.namespace_for(p, self.settings) == namespace), None,
            )  # fmt: skip
        # Not the attach label (gpupool.dev/project): that one is the admin's way to give a
        # project an existing namespace, and must not follow a namespace made from a template.
        labels = {"app.kubernetes.io/managed-by": "gpupool"}
        if project is not None:
            labels[o.CREATED_FOR] = o.dns_label(project)
        try:
            await self.api.create(Namespace(metadata=ObjectMeta(name=namespace, labels=labels)))
        except ApiError as error:
            if error.status.code != 409:
                raise
        with self.lock:
            self.state.namespace_created(namespace)

    async def create_pod(self, record: LaunchRecord) -> None:
        assert record.launch is not None
        pod = m.task_pod(record.launch, record.namespace, self.settings)
        try:
            await self.post(f"/api/v1/namespaces/{record.namespace}/pods", pod, None, None)
        except RefusedError as error:
            code = error.code
            if code == 404:  # the namespace went away: make it again, then the pod
                with self.lock:
                    self.state.namespace_labels.pop(record.namespace, None)
                raise
            if code != 409:
                if code in (400, 403, 422):
                    with self.lock:
                        self.state.failed(
                            record.launch_id,
                            f"Kubernetes refused its pod ({code}): {error.message}",
                            self.clock.now_s(),
                        )
                    return
                raise
        with self.lock:
            self.state.created(record.launch_id)

    async def create_service(self, workload: str, project: str, namespace: str) -> None:
        service = m.gang_service(workload, project, namespace, self.settings.master_port)
        try:
            await self.api.create(service)
        except ApiError as error:
            if error.status.code != 409:
                raise
        with self.lock:
            self.state.service_created(namespace, o.gang_service_name(workload), self.clock.now_s())

    async def create_reservation(self, node: str, device: int) -> None:
        pod = m.reservation_pod(node, device, self.settings)
        try:
            await self.api.create(pod)
        except ApiError as error:
            if error.status.code == 404:
                await self.ensure_system_namespace()
                raise
            if error.status.code != 409:
                raise
        with self.lock:
            self.state.reservation_created(node, device, self.clock.now_s())

    async def ensure_system_namespace(self) -> None:
        name = self.settings.system_namespace
        try:
            await self.api.create(
                Namespace(
                    metadata=ObjectMeta(
                        name=name, labels={"app.kubernetes.io/managed-by": "gpupool"}
                    )
                )
            )
        except ApiError as error:
            if error.status.code != 409:
                raise

    async def post(self, path: str, obj: Any, name: str | None, namespace: str | None) -> None:
        """POST `obj` to `path` (the fast path when the credentials allow it, else lightkube);
        `RefusedError` with the API server's code and message when it says no."""
        if self.poster is not None:
            result = await self.poster.post(path, obj.to_dict())
            if result.status >= 300:
                raise RefusedError(result.status, result.message)
            return
        try:
            if name is None:
                await self.api.create(obj)
            else:
                await self.api.create(obj, name, namespace=namespace)
        except msgspec.ValidationError:
            # A Binding or an Eviction is answered with a Status, which lightkube tries to
            # read as what it sent; its error comes only after a 2xx answer (errors raise
            # ApiError first), so here it means success.
            pass
        except ApiError as error:
            raise RefusedError(
                error.status.code or 500, error.status.message or str(error)
            ) from None

    async def bind(self, bind: Bind) -> None:
        path = f"/api/v1/namespaces/{bind.namespace}/pods/{bind.pod_name}/binding"
        binding = m.binding(bind.pod_name, bind.namespace, bind.node, dict(bind.annotations))
        try:
            await self.post(path, binding, bind.pod_name, bind.namespace)
        except RefusedError as error:
            code = error.code
            if code == 404:
                with self.lock:
                    self.state.pod_gone(bind.launch_id, self.clock.now_s())
                return
            if code != 409:
                raise
            current = await self.api.get(Pod, bind.pod_name, namespace=bind.namespace)
            node = current.spec.nodeName if current.spec else None
            if node != bind.node:
                with self.lock:
                    self.state.failed(
                        bind.launch_id,
                        f"its pod was bound to {node} by someone else",
                        self.clock.now_s(),
                    )
                return
        with self.lock:
            self.state.bound(bind.launch_id, bind.node)

    async def evict(self, record: LaunchRecord, grace_s: int) -> None:
        eviction = PodEviction(
            metadata=ObjectMeta(name=record.pod_name, namespace=record.namespace),
            deleteOptions=DeleteOptions(gracePeriodSeconds=grace_s),
        )
        path = f"/api/v1/namespaces/{record.namespace}/pods/{record.pod_name}/eviction"
        try:
            await self.post(path, eviction, record.pod_name, record.namespace)
        except RefusedError as error:
            if error.code == 404:
                with self.lock:
                    self.state.stop_sent(record.launch_id)
                    self.state.pod_gone(record.launch_id, self.clock.now_s())
                return
            raise  # 429: a PodDisruptionBudget says not now; retried with back-off
        with self.lock:
            self.state.stop_sent(record.launch_id)

    async def delete_pod(self, namespace: str, name: str, grace_s: int) -> None:
        try:
            await self.api.delete(Pod, name, namespace=namespace, grace_period=grace_s)
        except ApiError as error:
            if error.status.code != 404:
                raise
        with self.lock:
            self.state.pod_deleted((namespace, name))

    async def acknowledge(self, namespace: str, name: str) -> None:
        try:
            await self.api.patch(
                Pod,
                name,
                {"metadata": {"annotations": {o.ACKNOWLEDGED: "true"}}},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
        except ApiError as error:
            if error.status.code != 404:
                raise
        with self.lock:
            self.state.acknowledgement_written((namespace, name))

    async def unschedulable(self, namespace: str, name: str, reason: str) -> None:
        """Say why a pod waits where `kubectl describe pod` shows it, as kube-scheduler does:
        the PodScheduled condition, False, reason Unschedulable."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock.now_s()))
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": f"gpupool: {reason}"[:1024],
            "lastTransitionTime": now,
        }
        try:
            await self.api.patch(
                PodStatus,
                name,
                {"status": {"conditions": [condition]}},
                namespace=namespace,
                patch_type=PatchType.STRATEGIC,
            )
        except ApiError as error:
            if error.status.code != 404:
                raise
        with self.lock:
            self.state.reason_written((namespace, name), reason)

    async def delete_service(self, namespace: str, name: str) -> None:
        try:
            await self.api.delete(Service, name, namespace=namespace)
        except ApiError as error:
            if error.status.code != 404:
                raise
        with self.lock:
            self.state.service_deleted(namespace, name)

    async def fetch_log(self, namespace: str, name: str) -> bytes:
        chunks: list[bytes] = []
        size = 0
        async for line in self.api.log(name, namespace=namespace):
            data = line.encode()
            chunks.append(data)
            size += len(data)
            if size > _MAX_LOG_BYTES:
                break
        return b"".join(chunks)
