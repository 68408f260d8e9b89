"""`KubernetesExecutor`: the cluster's nodes are gpupool's nodes, its pods gpupool's tasks.

All API traffic runs on one asyncio event loop in a thread of its own: three informers (nodes,
pods, namespaces) keep `ClusterState` current, and a reconciler turns `ClusterState.plan()` into
API calls, many in flight at once (`api_concurrency`), each retried with back-off when the API
server is away. The scheduling loop's calls (`start`, `stop`, `exits`, ...) only touch the state
under a lock and wake the reconciler; none of them waits for the API server.

Only an active executor (the leader, with leader election) makes changes; a passive one keeps
its caches warm so that it can take over at once.

Longer than 500 lines because each API call's handling of the API server's answers (conflict,
gone, refused, retry) sits beside the call; the decisions about what to call are in `state`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import msgspec
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import DeleteOptions, ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node, Pod, PodEviction, PodStatus, Service
from lightkube.types import PatchType

from gpupool.clock import Clock
from gpupool.executors.base import Exit, Launch, NodeInventory, Stop, UsageSample
from gpupool.executors.kubernetes import manifests as m
from gpupool.executors.kubernetes import objects as o
from gpupool.executors.kubernetes.client import (
    load_config,
    pooled_async_client,
    tls_context,
    warm_up_decoders,
)
from gpupool.executors.kubernetes.dcgm import UtilizationSource
from gpupool.executors.kubernetes.fastpost import FastPoster
from gpupool.executors.kubernetes.informer import Informer
from gpupool.executors.kubernetes.settings import KubeSettings
from gpupool.executors.kubernetes.state import Bind, ClusterState, LaunchRecord

__all__ = ["KubernetesExecutor", "KubernetesUnavailableError"]

T = TypeVar("T")
_MAX_LOG_BYTES = 16 * 1024 * 1024
_BACKOFF_MAX_S = 10.0


class RefusedError(Exception):
    """The API server answered a write with an error status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class KubernetesUnavailableError(RuntimeError):
    """The API server cannot be reached or refuses gpupool; the message says which and why."""


def _stderr(message: str) -> None:
    print(f"gpupool kubernetes: {message}", file=sys.stderr, flush=True)


class KubernetesExecutor:
    name = "kubernetes"

    def __init__(
        self,
        settings: KubeSettings,
        clock: Clock,
        *,
        utilization: UtilizationSource | None = None,
        report: Callable[[str], None] = _stderr,
        sync_timeout_s: float = 30.0,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._report = report
        self._utilization = utilization
        self._state = ClusterState(settings)
        self._lock = threading.Lock()
        self._leads: Callable[[], bool] = lambda: True
        self._config = load_config(settings)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._closing: asyncio.Event | None = None
        self._kick: asyncio.Event | None = None
        self._client: AsyncClient | None = None
        self._poster: FastPoster | None = None
        self._informers: list[Informer[Any]] = []
        self._inflight: set[str] = set()
        self._retry_at: dict[str, tuple[float, float]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._forgot_at_s = 0.0
        self._thread = threading.Thread(target=self._run, name="gpupool-kubernetes", daemon=True)
        self._thread.start()
        try:
            self._call(self._wait_synced(), timeout_s=sync_timeout_s)
        except Exception as error:
            self.close()
            raise KubernetesUnavailableError(
                f"cannot read nodes and pods from the Kubernetes API server at "
                f"{self._config.cluster.server} within {sync_timeout_s:.0f} s ({error}): check "
                "the kubeconfig or --kube-context, that the server is up, and gpupool's RBAC "
                "(deploy/kubernetes)"
            ) from None

    # --- the Executor protocol ------------------------------------------------------------

    def inventory(self) -> Sequence[NodeInventory]:
        with self._lock:
            return self._state.inventory()

    def start(self, launches: Sequence[Launch]) -> None:
        with self._lock:
            self._state.add_launches(launches, self._clock.now_s())
        self._wake()

    def stop(self, stops: Sequence[Stop]) -> None:
        with self._lock:
            self._state.request_stops(stops, self._clock.now_s())
        self._wake()

    def alive(self) -> set[str]:
        with self._lock:
            return self._state.alive()

    def known(self, launch_ids: Sequence[str]) -> set[str]:
        with self._lock:
            return self._state.known(launch_ids)

    def exits(self) -> Sequence[Exit]:
        with self._lock:
            return self._state.exits()

    def acknowledge(self, launch_ids: Sequence[str]) -> None:
        with self._lock:
            self._state.acknowledge(launch_ids)
        self._wake()

    def read_log(self, launch_id: str, offset: int, limit: int) -> tuple[bytes, bool]:
        with self._lock:
            record = self._state.launches.get(launch_id)
            if record is None:
                return b"", False
            key, ended = record.key, record.ended is not None
        try:
            data = self._call(self._fetch_log(*key), timeout_s=20)
        except ApiError as error:
            if offset > 0:
                return b"", ended
            note = f"[gpupool] the log of pod {key[0]}/{key[1]} is not available: {error}\n"
            return note.encode()[:limit], ended
        except Exception as error:
            if offset > 0:
                return b"", False
            message = f"[gpupool] cannot reach the Kubernetes API server for the log: {error}\n"
            return message.encode()[:limit], False
        return data[offset : offset + limit], ended

    def log_size(self, launch_id: str) -> tuple[int, bool]:
        """The API server gives a pod's log whole (no length alone): this fetches it once more.
        The kubelet keeps only the current file of a rotated container log
        (`containerLogMaxSize`, 10 MiB by default), so a longer log starts later."""
        with self._lock:
            record = self._state.launches.get(launch_id)
            ended = record is not None and record.ended is not None
        data, _ = self.read_log(launch_id, 0, 1 << 62)
        return len(data), ended

    def usage_samples(self) -> Sequence[UsageSample]:
        if self._utilization is None:
            return ()
        with self._lock:
            pods: dict[tuple[str, str], tuple[str, tuple[int, ...]]] = {
                record.key: (record.node, record.devices)
                for record in self._state.launches.values()
                if record.ended is None and record.state == "bound" and record.devices
            }
            for (node, device), reservation in self._state.reservations.items():
                pods[(self.settings.system_namespace, reservation.pod_name)] = (node, (device,))
        return self._utilization.samples(self._clock.now_s(), pods)

    def stop_all(self, timeout_s: float) -> None:
        with self._lock:
            alive = self._state.alive()
        self.stop([Stop(launch_id, 30, "the server is shutting down") for launch_id in alive])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.alive():
            time.sleep(0.2)

    def close(self) -> None:
        if self._loop.is_running() and self._closing is not None:
            self._loop.call_soon_threadsafe(self._closing.set)
        self._thread.join(timeout=15)

    # --- for the server: external workloads, projects, leadership -------------------------

    def external_pods(self) -> tuple[o.ExternalPod, ...]:
        with self._lock:
            return self._state.external_pods()

    def set_projects(self, projects: Sequence[str]) -> None:
        with self._lock:
            self._state.set_projects(projects)

    @property
    def version(self) -> int:
        """Changes when nodes or external pods change (the loop re-reads them then)."""
        with self._lock:
            return self._state.version

    def set_leader_check(self, leads: Callable[[], bool]) -> None:
        """With leader election: make changes in the cluster only while `leads()` (asked
        before every round of API calls); a follower keeps its watches warm."""
        self._leads = leads
        self._wake()

    @property
    def resyncs(self) -> int:
        """Full re-lists done by the watches after a gap (API server restarts included)."""
        return sum(max(0, informer.relists - 1) for informer in self._informers)

    # --- the event loop -------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    def _call(self, coroutine: Coroutine[Any, Any, T], timeout_s: float) -> T:
        if not self._ready.wait(timeout=timeout_s):
            coroutine.close()
            raise TimeoutError("the Kubernetes event loop did not start")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=timeout_s)

    def _wake(self) -> None:
        kick = self._kick
        if kick is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(kick.set)

    async def _main(self) -> None:

        self._closing = asyncio.Event()
        self._kick = asyncio.Event()
        warm_up_decoders()
        # Room for every request in flight, the three watches and a log read.
        self._client = pooled_async_client(self._config, self.settings.api_concurrency + 8)
        self._poster = FastPoster.for_config(
            self._config, tls_context(self._config), self.settings.api_concurrency
        )
        semaphore = asyncio.Semaphore(self.settings.api_concurrency)
        self._semaphore = semaphore
        self._informers = [
            Informer(self._client, Node, self._handler(self._state.on_node), name="nodes",
                     labels=dict(self.settings.node_selector) or None, report=self._report),
            Informer(self._client, Namespace, self._namespace_handler, name="namespaces",
                     report=self._report),
            Informer(self._client, Pod, self._handler(self._state.on_pod), name="pods",
                     report=self._report),
        ]  # fmt: skip
        runners = [asyncio.create_task(informer.run()) for informer in self._informers]
        reconciler = asyncio.create_task(self._reconcile_forever())
        self._ready.set()
        try:
            await self._closing.wait()
        finally:
            for task in [*runners, reconciler, *self._tasks]:
                task.cancel()
            await asyncio.gather(*runners, reconciler, *self._tasks, return_exceptions=True)
            await self._client.close()
            if self._poster is not None:
                await self._poster.close()

    async def _wait_synced(self) -> None:
        while not all(informer.synced.is_set() for informer in self._informers):
            await asyncio.sleep(0.05)

    def _handler(self, method: Callable[[str, Any, float], None]) -> Callable[[str, Any], None]:
        def handle(event: str, obj: Any) -> None:
            with self._lock:
                method(event, obj, self._clock.now_s())
            if self._kick is not None:
                self._kick.set()

        return handle

    def _namespace_handler(self, event: str, namespace: Namespace) -> None:
        with self._lock:
            self._state.on_namespace(event, namespace)
        if self._kick is not None:
            self._kick.set()

    async def _reconcile_forever(self) -> None:
        assert self._kick is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), timeout=1.0)
            self._kick.clear()
            if not self._leads():
                continue
            try:
                self._reconcile_once()
            except Exception as error:  # a bug here must not stop the executor
                self._report(f"reconcile failed: {type(error).__name__}: {error}")
            await asyncio.sleep(0.02)  # let a burst of events and calls gather

    def _reconcile_once(self) -> None:
        now = self._clock.now_s()
        with self._lock:
            plan = self._state.plan(now)
            expired: list[tuple[str, str]] = []
            if now - self._forgot_at_s >= 5.0:
                expired = self._state.forget_finished(now)
                self._forgot_at_s = now
        for namespace in plan.namespaces:
            self._spawn(f"ns:{namespace}", self._create_namespace(namespace))
        for record in plan.creates:
            self._spawn(f"create:{record.launch_id}", self._create_pod(record))
        for workload, project, namespace in plan.services:
            self._spawn(
                f"svc:{namespace}/{workload}", self._create_service(workload, project, namespace)
            )
        for node, device in plan.reservations:
            self._spawn(f"res:{node}/{device}", self._create_reservation(node, device))
        for bind in plan.binds:
            self._spawn(f"bind:{bind.launch_id}", self._bind(bind))
        for record, grace_s in plan.evictions:
            self._spawn(f"evict:{record.launch_id}", self._evict(record, grace_s))
        for namespace, name, grace_s in plan.deletes:
            self._spawn(f"delete:{namespace}/{name}", self._delete_pod(namespace, name, grace_s))
        for namespace, name in expired:
            self._spawn(f"delete:{namespace}/{name}", self._delete_pod(namespace, name, 30))
        for namespace, name in plan.acknowledgements:
            self._spawn(f"ack:{namespace}/{name}", self._acknowledge(namespace, name))
        for namespace, name in plan.service_deletes:
            self._spawn(f"delsvc:{namespace}/{name}", self._delete_service(namespace, name))
        for namespace, name, reason in plan.unschedulable:
            self._spawn(f"why:{namespace}/{name}", self._unschedulable(namespace, name, reason))

    def _spawn(self, key: str, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run one API call unless the same one is in flight or backing off after a failure."""
        retry = self._retry_at.get(key)
        if key in self._inflight or (retry is not None and time.monotonic() < retry[0]):
            coroutine.close()
            return
        self._inflight.add(key)

        async def run() -> None:
            try:
                async with self._semaphore:
                    await coroutine
                self._retry_at.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                delay_s = min(_BACKOFF_MAX_S, (retry[1] * 2) if retry else 0.5)
                self._retry_at[key] = (time.monotonic() + delay_s, delay_s)
                if delay_s >= _BACKOFF_MAX_S / 2 or not isinstance(
                    error, OSError | ApiError | RefusedError
                ):
                    self._report(f"{key}: {type(error).__name__}: {error} (retrying)")
            finally:
                self._inflight.discard(key)
                if self._kick is not None:
                    self._kick.set()

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- API calls ------------------------------------------------------------------------

    @property
    def _api(self) -> AsyncClient:
        assert self._client is not None
        return self._client

    async def _create_namespace(self, namespace: str) -> None:
        with self._lock:
            project = next(
                (p for p in self._state.projects
                 if o.namespace_for(p, self.settings) == namespace), None,
            )  # fmt: skip
        # Not the attach label (gpupool.dev/project): that one is the admin's way to give a
        # project an existing namespace, and must not follow a namespace made from a template.
        labels = {"app.kubernetes.io/managed-by": "gpupool"}
        if project is not None:
            labels[o.CREATED_FOR] = o.dns_label(project)
        try:
            await self._api.create(Namespace(metadata=ObjectMeta(name=namespace, labels=labels)))
        except ApiError as error:
            if error.status.code != 409:
                raise
        with self._lock:
            self._state.namespace_created(namespace)

    async def _create_pod(self, record: LaunchRecord) -> None:
        assert record.launch is not None
        pod = m.task_pod(record.launch, record.namespace, self.settings)
        try:
            await self._post(f"/api/v1/namespaces/{record.namespace}/pods", pod, None, None)
        except RefusedError as error:
            code = error.code
            if code == 404:  # the namespace went away: make it again, then the pod
                with self._lock:
                    self._state.namespace_labels.pop(record.namespace, None)
                raise
            if code != 409:
                if code in (400, 403, 422):
                    with self._lock:
                        self._state.failed(
                            record.launch_id,
                            f"Kubernetes refused its pod ({code}): {error.message}",
                            self._clock.now_s(),
                        )
                    return
                raise
        with self._lock:
            self._state.created(record.launch_id)

    async def _create_service(self, workload: str, project: str, namespace: str) -> None:
        service = m.gang_service(workload, project, namespace, self.settings.master_port)
        try:
            await self._api.create(service)
        except ApiError as error:
            if error.status.code != 409:
                raise
        with self._lock:
            self._state.service_created(
                namespace, o.gang_service_name(workload), self._clock.now_s()
            )

    async def _create_reservation(self, node: str, device: int) -> None:
        pod = m.reservation_pod(node, device, self.settings)
        try:
            await self._api.create(pod)
        except ApiError as error:
            if error.status.code == 404:
                await self._ensure_system_namespace()
                raise
            if error.status.code != 409:
                raise
        with self._lock:
            self._state.reservation_created(node, device, self._clock.now_s())

    async def _ensure_system_namespace(self) -> None:
        name = self.settings.system_namespace
        try:
            await self._api.create(
                Namespace(
                    metadata=ObjectMeta(
                        name=name, labels={"app.kubernetes.io/managed-by": "gpupool"}
                    )
                )
            )
        except ApiError as error:
            if error.status.code != 409:
                raise

    async def _post(self, path: str, obj: Any, name: str | None, namespace: str | None) -> None:
        """POST `obj` to `path` (the fast path when the credentials allow it, else lightkube);
        `RefusedError` with the API server's code and message when it says no."""
        if self._poster is not None:
            result = await self._poster.post(path, obj.to_dict())
            if result.status >= 300:
                raise RefusedError(result.status, result.message)
            return
        try:
            if name is None:
                await self._api.create(obj)
            else:
                await self._api.create(obj, name, namespace=namespace)
        except msgspec.ValidationError:
            # A Binding or an Eviction is answered with a Status, which lightkube tries to
            # read as what it sent; its error comes only after a 2xx answer (errors raise
            # ApiError first), so here it means success.
            pass
        except ApiError as error:
            raise RefusedError(
                error.status.code or 500, error.status.message or str(error)
            ) from None

    async def _bind(self, bind: Bind) -> None:
        path = f"/api/v1/namespaces/{bind.namespace}/pods/{bind.pod_name}/binding"
        binding = m.binding(bind.pod_name, bind.namespace, bind.node, dict(bind.annotations))
        try:
            await self._post(path, binding, bind.pod_name, bind.namespace)
        except RefusedError as error:
            code = error.code
            if code == 404:
                with self._lock:
                    self._state.pod_gone(bind.launch_id, self._clock.now_s())
                return
            if code != 409:
                raise
            current = await self._api.get(Pod, bind.pod_name, namespace=bind.namespace)
            node = current.spec.nodeName if current.spec else None
            if node != bind.node:
                with self._lock:
                    self._state.failed(
                        bind.launch_id,
                        f"its pod was bound to {node} by someone else",
                        self._clock.now_s(),
                    )
                return
        with self._lock:
            self._state.bound(bind.launch_id, bind.node)

    async def _evict(self, record: LaunchRecord, grace_s: int) -> None:
        eviction = PodEviction(
            metadata=ObjectMeta(name=record.pod_name, namespace=record.namespace),
            deleteOptions=DeleteOptions(gracePeriodSeconds=grace_s),
        )
        path = f"/api/v1/namespaces/{record.namespace}/pods/{record.pod_name}/eviction"
        try:
            await self._post(path, eviction, record.pod_name, record.namespace)
        except RefusedError as error:
            if error.code == 404:
                with self._lock:
                    self._state.stop_sent(record.launch_id)
                    self._state.pod_gone(record.launch_id, self._clock.now_s())
                return
            raise  # 429: a PodDisruptionBudget says not now; retried with back-off
        with self._lock:
            self._state.stop_sent(record.launch_id)

    async def _delete_pod(self, namespace: str, name: str, grace_s: int) -> None:
        try:
            await self._api.delete(Pod, name, namespace=namespace, grace_period=grace_s)
        except ApiError as error:
            if error.status.code != 404:
                raise
        with self._lock:
            self._state.pod_deleted((namespace, name))

    async def _acknowledge(self, namespace: str, name: str) -> None:
        try:
            await self._api.patch(
                Pod,
                name,
                {"metadata": {"annotations": {o.ACKNOWLEDGED: "true"}}},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
        except ApiError as error:
            if error.status.code != 404:
                raise
        with self._lock:
            self._state.acknowledgement_written((namespace, name))

    async def _unschedulable(self, namespace: str, name: str, reason: str) -> None:
        """Say why a pod waits where `kubectl describe pod` shows it, as kube-scheduler does:
        the PodScheduled condition, False, reason Unschedulable."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._clock.now_s()))
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": f"gpupool: {reason}"[:1024],
            "lastTransitionTime": now,
        }
        try:
            await self._api.patch(
                PodStatus,
                name,
                {"status": {"conditions": [condition]}},
                namespace=namespace,
                patch_type=PatchType.STRATEGIC,
            )
        except ApiError as error:
            if error.status.code != 404:
                raise
        with self._lock:
            self._state.reason_written((namespace, name), reason)

    def set_waiting_reasons(self, reasons: dict[tuple[str, str], str]) -> None:
        """Why pods of others wait (the loop's pending reasons), for their PodScheduled
        condition."""
        with self._lock:
            self._state.set_waiting_reasons(reasons)
        self._wake()

    async def _delete_service(self, namespace: str, name: str) -> None:
        try:
            await self._api.delete(Service, name, namespace=namespace)
        except ApiError as error:
            if error.status.code != 404:
                raise
        with self._lock:
            self._state.service_deleted(namespace, name)

    async def _fetch_log(self, namespace: str, name: str) -> bytes:
        chunks: list[bytes] = []
        size = 0
        async for line in self._api.log(name, namespace=namespace):
            data = line.encode()
            chunks.append(data)
            size += len(data)
            if size > _MAX_LOG_BYTES:
                break
        return b"".join(chunks)
