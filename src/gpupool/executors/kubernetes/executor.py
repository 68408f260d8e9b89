"""`KubernetesExecutor`: the cluster's nodes are gpupool's nodes, its pods gpupool's tasks.

All API traffic runs on one asyncio event loop in a thread of its own: three informers (nodes,
pods, namespaces) keep `ClusterState` current, and a reconciler turns `ClusterState.plan()` into
API calls, many in flight at once (`api_concurrency`), each retried with back-off when the API
server is away. The scheduling loop's calls (`start`, `stop`, `exits`, ...) only touch the state
under a lock and wake the reconciler; none of them waits for the API server.

Only an active executor (the leader, with leader election) makes changes; a passive one keeps
its caches warm so that it can take over at once.

The decisions about what to call are in `state`, the calls themselves (each beside its
handling of the API server's answers) in `calls`; here, when to make them and how to retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Namespace, Node, Pod

from gpupool.clock import Clock
from gpupool.executors.base import Exit, Launch, NodeInventory, Stop, UsageSample
from gpupool.executors.kubernetes import objects as o
from gpupool.executors.kubernetes.calls import ApiCalls, RefusedError
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
from gpupool.executors.kubernetes.state import ClusterState

__all__ = ["KubernetesExecutor", "KubernetesUnavailableError"]

T = TypeVar("T")
_BACKOFF_MAX_S = 10.0


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
        self._calls = ApiCalls(settings, clock, self._lock, self._state)
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
            data = self._call(self._calls.fetch_log(*key), timeout_s=20)
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
        client = pooled_async_client(self._config, self.settings.api_concurrency + 8)
        self._calls.client = client
        self._calls.poster = FastPoster.for_config(
            self._config, tls_context(self._config), self.settings.api_concurrency
        )
        semaphore = asyncio.Semaphore(self.settings.api_concurrency)
        self._semaphore = semaphore
        self._informers = [
            Informer(client, Node, self._handler(self._state.on_node), name="nodes",
                     labels=dict(self.settings.node_selector) or None, report=self._report),
            Informer(client, Namespace, self._namespace_handler, name="namespaces",
                     report=self._report),
            Informer(client, Pod, self._handler(self._state.on_pod), name="pods",
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
            await client.close()
            if self._calls.poster is not None:
                await self._calls.poster.close()

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
            self._spawn(f"ns:{namespace}", self._calls.create_namespace(namespace))
        for record in plan.creates:
            self._spawn(f"create:{record.launch_id}", self._calls.create_pod(record))
        for workload, project, namespace in plan.services:
            self._spawn(
                f"svc:{namespace}/{workload}",
                self._calls.create_service(workload, project, namespace),
            )
        for node, device in plan.reservations:
            self._spawn(f"res:{node}/{device}", self._calls.create_reservation(node, device))
        for bind in plan.binds:
            self._spawn(f"bind:{bind.launch_id}", self._calls.bind(bind))
        for record, grace_s in plan.evictions:
            self._spawn(f"evict:{record.launch_id}", self._calls.evict(record, grace_s))
        for namespace, name, grace_s in plan.deletes:
            self._spawn(
                f"delete:{namespace}/{name}", self._calls.delete_pod(namespace, name, grace_s)
            )
        for namespace, name in expired:
            self._spawn(f"delete:{namespace}/{name}", self._calls.delete_pod(namespace, name, 30))
        for namespace, name in plan.acknowledgements:
            self._spawn(f"ack:{namespace}/{name}", self._calls.acknowledge(namespace, name))
        for namespace, name in plan.service_deletes:
            self._spawn(f"delsvc:{namespace}/{name}", self._calls.delete_service(namespace, name))
        for namespace, name, reason in plan.unschedulable:
            self._spawn(
                f"why:{namespace}/{name}", self._calls.unschedulable(namespace, name, reason)
            )

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

    def set_waiting_reasons(self, reasons: dict[tuple[str, str], str]) -> None:
        """Why pods of others wait (the loop's pending reasons), for their PodScheduled
        condition."""
        with self._lock:
            self._state.set_waiting_reasons(reasons)
        self._wake()
