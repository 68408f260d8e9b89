"""What the Kubernetes executor's state records: each launch, each reservation pod, and the plan
of API calls to make next."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupool.executors.base import Exit, Launch, Stop

__all__ = [
    "BOUND",
    "CREATED",
    "NEW",
    "Bind",
    "LaunchRecord",
    "Plan",
    "PodKey",
    "Reservation",
]

PodKey = tuple[str, str]
NEW, CREATED, BOUND = "new", "created", "bound"


@dataclass(slots=True)
class LaunchRecord:
    launch_id: str
    namespace: str
    pod_name: str
    external: bool
    node: str
    devices: tuple[int, ...]
    shared: bool
    gpus: int
    """Whole devices the pod asks the device plugin for (0 for a sharing pod)."""
    launch: Launch | None
    """None for a launch adopted from the cluster after a restart."""
    state: str = NEW
    accepted_at_s: float = 0.0
    ended: Exit | None = None
    acknowledged: bool = False
    ack_written: bool = False
    stop: Stop | None = None
    stop_sent: bool = False
    finished_at_s: float | None = None
    pod_exists: bool = False
    """Seen in the cluster and not deleted since (or created by us and not yet seen)."""

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.pod_name)


@dataclass(slots=True)
class Reservation:
    node: str
    device: int
    pod_name: str
    uuid: str | None = None
    exists: bool = False
    """Seen in the cluster (or created by us and not yet seen)."""
    deleting: bool = False
    seen: bool = False
    """Seen by the watch (from then on its GPU is counted with the node's pods)."""
    created_at_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Bind:
    launch_id: str
    namespace: str
    pod_name: str
    node: str
    annotations: tuple[tuple[str, str], ...]


@dataclass(slots=True)
class Plan:
    """API calls to make now. Each is idempotent; outcomes are reported back to the state."""

    namespaces: list[str] = field(default_factory=list)
    creates: list[LaunchRecord] = field(default_factory=list)
    services: list[tuple[str, str, str]] = field(default_factory=list)
    """(workload, project, namespace) of gangs that need their headless Service."""
    reservations: list[tuple[str, int]] = field(default_factory=list)
    binds: list[Bind] = field(default_factory=list)
    evictions: list[tuple[LaunchRecord, int]] = field(default_factory=list)
    deletes: list[tuple[str, str, int]] = field(default_factory=list)
    """(namespace, pod, grace seconds)."""
    acknowledgements: list[PodKey] = field(default_factory=list)
    service_deletes: list[tuple[str, str]] = field(default_factory=list)
    unschedulable: list[tuple[str, str, str]] = field(default_factory=list)
    """(namespace, pod, why): pods of others that wait, for their PodScheduled condition."""

    def __bool__(self) -> bool:
        return any(
            (
                self.namespaces,
                self.creates,
                self.services,
                self.reservations,
                self.binds,
                self.evictions,
                self.deletes,
                self.acknowledgements,
                self.service_deletes,
                self.unschedulable,
            )
        )
