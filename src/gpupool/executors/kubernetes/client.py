"""The Kubernetes API client: lightkube, chosen by measurement (benchmarks/kube_clients.py).

lightkube is typed (its resources are dataclasses, it ships `py.typed`), has a sync and an async
client over one HTTP library, and watches with resource versions; see benchmarks/RESULTS.md for
how it compared with the official client and kubernetes_asyncio.
"""

from __future__ import annotations

import contextlib
import ssl
import threading

import msgspec
from lightkube import AsyncClient, Client, KubeConfig
from lightkube.config.kubeconfig import SingleConfig
from lightkube.core import decoders
from lightkube.models.meta_v1 import Status
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import (
    Namespace,
    Node,
    Pod,
    PodBinding,
    PodEviction,
    Service,
    ServiceAccount,
)

from gpupool.executors.kubernetes.settings import KubeSettings

__all__ = ["async_client", "load_config", "sync_client", "warm_up_decoders"]

_warmed = threading.Lock()
_warm = False


def warm_up_decoders() -> None:
    """Decode one object and one list of every kind gpupool reads, on this thread, once.

    msgspec (lightkube's decoder) builds each type's decoding tables on first use, and two
    threads doing that at once for the same type can crash the interpreter (seen with msgspec
    0.20 to 0.22: a segmentation fault in about one run in three when 8 threads decode their
    first Pods together; none in 40 runs after one decode on one thread). Every client gpupool
    makes calls this first.
    """
    global _warm
    with _warmed:
        if _warm:
            return
        for kind in (Pod, Node, Namespace, Service, ServiceAccount, Lease):
            decoders.decode_object(b'{"metadata": {"name": "x"}}', kind)
            decoders.decode_list(b'{"metadata": {}, "items": []}', kind)
        decoders.decode_object(b'{"status": "Success"}', Status)
        for subresource in (PodBinding, PodEviction):
            with contextlib.suppress(msgspec.ValidationError):  # their answers are Statuses
                decoders.decode_object(b'{"status": "Success"}', subresource)
        decoders.decode_watch_event(b'{"type": "ADDED", "object": {}}')
        _warm = True


def load_config(settings: KubeSettings) -> SingleConfig:
    """The cluster and credentials: the kubeconfig named, else in-cluster, else $KUBECONFIG or
    ~/.kube/config. `ValueError` says what was missing."""
    try:
        if settings.kubeconfig is not None:
            config = KubeConfig.from_file(settings.kubeconfig)
        else:
            config = KubeConfig.from_env()
    except Exception as error:  # lightkube raises ConfigError, OSError or YAML errors
        where = settings.kubeconfig or "$KUBECONFIG, ~/.kube/config or the in-cluster account"
        raise ValueError(
            f"cannot read the Kubernetes configuration from {where}: {error}"
        ) from None
    single = config.get(context_name=settings.context)
    if single is None:
        raise ValueError(
            f"the kubeconfig has no context {settings.context!r}"
            if settings.context
            else "the kubeconfig names no current context: pass --kube-context"
        )
    return single


def sync_client(settings: KubeSettings, timeout_s: float = 10.0) -> Client:
    import httpx2

    warm_up_decoders()
    return Client(load_config(settings), timeout=httpx2.Timeout(timeout_s), field_manager="gpupool")


def async_client(settings: KubeSettings, timeout_s: float = 10.0) -> AsyncClient:
    import httpx2

    warm_up_decoders()
    return AsyncClient(
        load_config(settings), timeout=httpx2.Timeout(timeout_s), field_manager="gpupool"
    )


def pooled_async_client(
    config: SingleConfig, connections: int, timeout_s: float = 15.0
) -> AsyncClient:
    """An async client that keeps `connections` HTTP/1.1 connections open.

    httpx keeps 20 idle connections by default; with more requests in flight than that, a burst
    of bindings closes and reopens connections (a TLS handshake each) for as long as it lasts.
    HTTP/2 would multiplex everything on one connection, but its streams stalled watch events
    in our tests (httpx2 with h2), so gpupool keeps to HTTP/1.1 with a larger pool.
    """
    import httpx2

    warm_up_decoders()
    transport = httpx2.AsyncHTTPTransport(
        verify=tls_context(config),
        limits=httpx2.Limits(max_connections=connections, max_keepalive_connections=connections),
    )
    return AsyncClient(
        config, timeout=httpx2.Timeout(timeout_s), field_manager="gpupool", transport=transport
    )


def tls_context(config: SingleConfig) -> ssl.SSLContext:
    """The kubeconfig's TLS settings: the cluster's CA and the user's client certificate."""
    from lightkube.config.client_adapter import verify_cluster
    from lightkube.config.models import User

    return verify_cluster(config.cluster, config.user or User(), config.abs_file)
