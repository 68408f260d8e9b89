"""The Kubernetes API client: lightkube, chosen by measurement (benchmarks/kube_clients.py).

lightkube is typed (its resources are dataclasses, it ships `py.typed`), has a sync and an async
client over one HTTP library, and watches with resource versions; see benchmarks/RESULTS.md for
how it compared with the official client and kubernetes_asyncio.
"""

from __future__ import annotations

from lightkube import AsyncClient, Client, KubeConfig
from lightkube.config.kubeconfig import SingleConfig

from gpupool.executors.kubernetes.settings import KubeSettings

__all__ = ["async_client", "load_config", "sync_client"]


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

    return Client(load_config(settings), timeout=httpx2.Timeout(timeout_s), field_manager="gpupool")


def async_client(settings: KubeSettings, timeout_s: float = 10.0) -> AsyncClient:
    import httpx2

    return AsyncClient(
        load_config(settings), timeout=httpx2.Timeout(timeout_s), field_manager="gpupool"
    )
