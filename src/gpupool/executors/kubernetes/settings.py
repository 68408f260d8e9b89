"""How a server runs against a Kubernetes cluster."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "gpupool.dev"
"""Labels and annotations gpupool reads and writes are under this prefix."""


def default_identity() -> str:
    """This replica's name in leader election: the pod name in a cluster, else host and pid."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration, as Kubernetes spells it (`operator` Exists or Equal)."""

    key: str | None = None
    operator: str = "Exists"
    value: str | None = None
    effect: str | None = None


@dataclass(frozen=True, slots=True)
class KubeSettings:
    kubeconfig: Path | None = None
    """A kubeconfig file; None: in-cluster config when run as a pod, else $KUBECONFIG or
    ~/.kube/config."""
    context: str | None = None
    namespace_template: str = "gpupool-{project}"
    """Where a project's pods live. An existing namespace joins a project instead when it
    carries the label `gpupool.dev/project=<project>`."""
    create_namespaces: bool = True
    """Create a project's namespace (from the template) when it submits its first workload."""
    system_namespace: str = "gpupool-system"
    """Where the reservation pods and the leader-election lease live."""
    scheduler_name: str = "gpupool"
    """Pods with this `schedulerName` are gpupool's to place."""
    default_image: str = "python:3.12-slim"
    """Image of a workload submitted without `--image`."""
    reservation_image: str = "gpupool/gpupool:latest"
    """Image of the reservation pods: it runs `python -m gpupool.executors.kubernetes.reserve`."""
    gpu_resource: str = "nvidia.com/gpu"
    default_tolerations: tuple[Toleration, ...] = (Toleration(key="nvidia.com/gpu"),)
    """Given to the pods gpupool creates (GPU nodes are often tainted nvidia.com/gpu)."""
    master_port: int = 29500
    """MASTER_PORT of distributed (gang) workloads."""
    prometheus_url: str | None = None
    """Prometheus with NVIDIA's DCGM exporter metrics; None: utilization is unknown."""
    leader_election: bool = False
    lease_name: str = "gpupool-scheduler"
    identity: str = field(default_factory=default_identity)
    lease_duration_s: float = 10.0
    renew_deadline_s: float = 7.0
    retry_period_s: float = 2.0
    reservation_timeout_s: float = 120.0
    """How long a sharing task waits for its reservation pod to report its device."""
    finished_pod_ttl_s: float = 3600.0
    """Pods of finished tasks are kept this long (for `gpupool logs`), then deleted."""
    node_selector: tuple[tuple[str, str], ...] = ()
    """Only nodes with these labels are gpupool's (default: every node with GPUs)."""
    api_concurrency: int = 32
    """Requests in flight at once (pod creations, bindings, evictions)."""
