"""What the Kubernetes executor knows and what it has to do next: pure, no API calls.

`ClusterState` is fed the watch events (nodes, pods, namespaces) and the scheduling loop's calls
(start, stop, acknowledge); `plan()` says which API calls to make now, and the executor reports
their outcomes back. Launches are recorded in the cluster itself (pod labels and annotations), so
a restarted or newly elected server rebuilds this state from its watches alone.

A launch goes: `new` -> (pod created) `created` -> (bound) `bound` -> ended. A launch of a pod
someone else created starts at `created`. Sharing launches wait in `created` until the
reservation pod of their device has reported the device's UUID.

Longer than 500 lines on purpose: one state machine whose indexes (the launches that need a
call, GPUs held per node, each shared device's users) every method keeps in step; split, each
part would have to know the others' invariants.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from lightkube.resources.core_v1 import Namespace, Node, Pod

from gpupool.core.model import MILLI_PER_GPU
from gpupool.executors.base import Exit, Launch, NodeInventory, Stop
from gpupool.executors.kubernetes import objects as o
from gpupool.executors.kubernetes.informer import DELETED
from gpupool.executors.kubernetes.settings import KubeSettings

PodKey = tuple[str, str]
NEW, CREATED, BOUND = "new", "created", "bound"
_NODE_GONE_GRACE_S = 20.0
_SERVICE_IDLE_S = 60.0


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


class ClusterState:
    """Not thread-safe: the executor holds its lock around every call."""

    def __init__(self, settings: KubeSettings) -> None:
        self.settings = settings
        self.nodes: dict[str, o.NodeView] = {}
        self._node_gone_at: dict[str, float] = {}
        self.namespace_labels: dict[str, dict[str, str]] = {}
        self.projects: frozenset[str] = frozenset()
        self._namespace_project: dict[str, str] = {}
        self.launches: dict[str, LaunchRecord] = {}
        self._by_pod: dict[PodKey, str] = {}
        self.pods_bound: dict[PodKey, tuple[str, int]] = {}
        self._held: dict[str, int] = defaultdict(int)
        """Whole devices held per node by `pods_bound` (kept in step with it)."""
        self._todo: set[str] = set()
        """Launches that may need an API call: `plan` looks at these only."""
        self._finished: set[str] = set()
        """Ended and acknowledged launches, for `forget_finished`."""
        self._sharers: dict[tuple[str, int], set[str]] = defaultdict(set)
        self._gangs: dict[tuple[str, str, str], set[str]] = defaultdict(set)
        self._waiting_reasons: dict[PodKey, str] = {}
        """Why pods of others wait, as the scheduling loop last said."""
        self._reasons_written: dict[PodKey, str] = {}
        """Every live pod on a node, any scheduler: (node, whole GPUs it holds)."""
        self.reservations: dict[tuple[str, int], Reservation] = {}
        self.external: dict[PodKey, o.ExternalPod] = {}
        self._external_pods: dict[PodKey, Pod] = {}
        """Every live pod of others for gpupool, in a project's namespace or not yet: a pod can
        arrive before the loop tells us of its project, and must not be lost until a resync."""
        self.services: dict[PodKey, float] = {}
        """Gang Services gpupool made -> when they were last seen in use."""
        self._wanted_namespaces: set[str] = set()
        self.version = 0
        """Bumped on every change the scheduling loop may care about (nodes, external pods)."""

    # --- watch events ---------------------------------------------------------------------

    def on_node(self, event: str, node: Node, now_s: float) -> None:
        name = node.metadata.name if node.metadata else None
        if name is None:
            return
        view = None if event == DELETED else o.node_view(node, self.settings.gpu_resource)
        if view is None:
            if self.nodes.pop(name, None) is not None:
                self.version += 1
            if event == DELETED:
                self._node_gone_at[name] = now_s
            return
        self._node_gone_at.pop(name, None)
        if self.nodes.get(name) != view:
            self.nodes[name] = view
            self.version += 1

    def on_namespace(self, event: str, namespace: Namespace) -> None:
        name = namespace.metadata.name if namespace.metadata else None
        if name is None:
            return
        if event == DELETED:
            self.namespace_labels.pop(name, None)
        else:
            self.namespace_labels[name] = dict(namespace.metadata.labels or {})  # type: ignore[union-attr]
        self._map_namespaces()

    def set_projects(self, projects: Iterable[str]) -> None:
        names = frozenset(projects)
        if names != self.projects:
            self.projects = names
            self._map_namespaces()

    def _map_namespaces(self) -> None:
        mapping = {o.namespace_for(p, self.settings): p for p in sorted(self.projects)}
        for namespace, labels in sorted(self.namespace_labels.items()):
            project = labels.get(o.PROJECT)
            if project in self.projects:
                mapping[namespace] = project
        if mapping != self._namespace_project:
            self._namespace_project = mapping
            self.version += 1
            for key, pod in list(self._external_pods.items()):
                self._on_external(key, pod, gone=False)

    def namespace_of(self, project: str) -> str:
        """The project's namespace: one labelled for it, else the template's."""
        for namespace, labels in sorted(self.namespace_labels.items()):
            if labels.get(o.PROJECT) == project:
                return namespace
        return o.namespace_for(project, self.settings)

    def on_pod(self, event: str, pod: Pod, now_s: float) -> None:
        meta, spec = pod.metadata, pod.spec
        if meta is None or spec is None or meta.name is None:
            return
        key: PodKey = (meta.namespace or "", meta.name)
        labels = meta.labels or {}
        annotations = meta.annotations or {}
        gone = event == DELETED
        terminal = o.pod_is_terminal(pod)
        if not gone and not terminal and spec.nodeName:
            self._set_bound(key, spec.nodeName, o.pod_gpu_count(pod, self.settings.gpu_resource))
        else:
            self._unset_bound(key)
        if spec.schedulerName != self.settings.scheduler_name:
            return
        if labels.get(o.ROLE) == o.ROLE_RESERVATION:
            self._on_reservation(key, pod, gone)
            return
        if labels.get(o.MANAGED) != "true":
            self._on_external(key, pod, gone)
        launch_id = labels.get(o.LAUNCH_ID) or annotations.get(o.LAUNCH_ID)
        if launch_id is None:
            return
        record = self.launches.get(launch_id)
        if record is None:
            if gone:
                return
            record = self._adopt(launch_id, key, pod, now_s)
        if labels.get(o.ROLE) == o.ROLE_TASK and record.launch is not None:
            self.services[(key[0], o.gang_service_name(record.launch.workload))] = now_s
        record.pod_exists = not gone
        if record.ended is not None:
            return
        if gone:
            self._end_gone(record, now_s)
        elif terminal:
            ending = o.pod_exit(pod)
            assert ending is not None
            code, reason = ending
            evicted_by_kubelet = (pod.status.reason if pod.status else None) == "Evicted"
            self._end(record, code, reason, now_s, stopped=evicted_by_kubelet or record.stop_sent)
        elif spec.nodeName:
            record.state = BOUND
            record.node = spec.nodeName
        elif record.state == NEW:
            record.state = CREATED
        self._touch(record)

    def _register(self, record: LaunchRecord) -> None:
        """Count a live launch as a user of its shared device and a member of its gang."""
        if record.shared and record.devices:
            self._sharers[(record.node, record.devices[0])].add(record.launch_id)
        launch = record.launch
        if launch is not None and launch.world_size > 1 and not record.external:
            self._gangs[(launch.workload, launch.project, record.namespace)].add(record.launch_id)

    def _adopt(self, launch_id: str, key: PodKey, pod: Pod, now_s: float) -> LaunchRecord:
        """A launch found in the cluster (a restart, or a failover to this replica)."""
        meta, spec = pod.metadata, pod.spec
        assert meta is not None and spec is not None
        labels = meta.labels or {}
        annotations = meta.annotations or {}
        gpus = o.pod_gpu_count(pod, self.settings.gpu_resource)
        record = LaunchRecord(
            launch_id=launch_id,
            namespace=key[0],
            pod_name=key[1],
            external=labels.get(o.MANAGED) != "true",
            node=spec.nodeName or "",
            devices=o.parse_devices(annotations.get(o.DEVICES, "")),
            shared=gpus == 0,
            gpus=gpus,
            launch=None,
            state=BOUND if spec.nodeName else CREATED,
            accepted_at_s=now_s,
            acknowledged=annotations.get(o.ACKNOWLEDGED) == "true",
        )
        record.ack_written = record.acknowledged
        record.pod_exists = True
        self.launches[launch_id] = record
        self._by_pod[key] = launch_id
        self._register(record)
        self._touch(record)
        return record

    def _on_reservation(self, key: PodKey, pod: Pod, gone: bool) -> None:
        meta = pod.metadata
        assert meta is not None
        node = (meta.annotations or {}).get(o.RESERVED_NODE, "")
        try:
            device = int((meta.labels or {}).get(o.RESERVED_DEVICE, ""))
        except ValueError:
            return
        slot = (node, device)
        if gone:
            self.reservations.pop(slot, None)
            return
        reservation = self.reservations.setdefault(slot, Reservation(node, device, key[1]))
        reservation.exists = True
        reservation.seen = True
        reservation.uuid = (meta.annotations or {}).get(o.GPU_UUID) or reservation.uuid
        if meta.deletionTimestamp is not None:
            reservation.deleting = True

    def _on_external(self, key: PodKey, pod: Pod, gone: bool) -> None:
        if gone:
            self._external_pods.pop(key, None)
        else:
            self._external_pods[key] = pod
        project = self._namespace_project.get(key[0])
        if gone or project is None:
            if self.external.pop(key, None) is not None:
                self.version += 1
            return
        view = o.external_pod(pod, project, self.settings.gpu_resource)
        if self.external.get(key) != view:
            self.external[key] = view
            self.version += 1

    def _end(
        self, record: LaunchRecord, code: int, reason: str, now_s: float, stopped: bool
    ) -> None:
        record.ended = Exit(record.launch_id, code, now_s, reason, stopped=stopped)
        record.finished_at_s = now_s
        self._unset_bound(record.key)
        if record.shared and record.devices:
            self._sharers[(record.node, record.devices[0])].discard(record.launch_id)
        launch = record.launch
        if launch is not None and launch.world_size > 1 and not record.external:
            self._gangs[(launch.workload, launch.project, record.namespace)].discard(
                record.launch_id
            )
        self._touch(record)

    def _end_gone(self, record: LaunchRecord, now_s: float) -> None:
        if record.stop is not None:
            self._end(record, 143, f"stopped: {record.stop.reason}", now_s, stopped=True)
        elif record.node and record.node not in self.nodes and record.node in self._node_gone_at:
            self._end(record, 137, f"its node {record.node} was removed", now_s, stopped=True)
        else:
            self._end(
                record,
                137,
                "its pod was deleted outside gpupool (by a user or a controller)",
                now_s,
                stopped=True,
            )

    # --- the scheduling loop's side ---------------------------------------------------------

    def add_launches(self, launches: Sequence[Launch], now_s: float) -> None:
        for launch in launches:
            if launch.launch_id in self.launches:
                continue
            shared = launch.gpu_milli < MILLI_PER_GPU
            if launch.external_ref is not None:
                namespace, _, pod_name = launch.external_ref.partition("/")
            else:
                namespace = self.namespace_of(launch.project)
                pod_name = o.task_pod_name(launch)
            record = LaunchRecord(
                pod_exists=launch.external_ref is not None,
                launch_id=launch.launch_id,
                namespace=namespace,
                pod_name=pod_name,
                external=launch.external_ref is not None,
                node=launch.node,
                devices=launch.devices,
                shared=shared,
                gpus=0 if shared else len(launch.devices),
                launch=launch,
                state=CREATED if launch.external_ref is not None else NEW,
                accepted_at_s=now_s,
            )
            self.launches[launch.launch_id] = record
            self._by_pod[record.key] = launch.launch_id
            self._register(record)
            self._touch(record)
            if record.external and record.key not in self.external:
                self._end(record, -1, "its pod no longer exists", now_s, stopped=True)

    def request_stops(self, stops: Sequence[Stop], now_s: float) -> None:
        for stop in stops:
            record = self.launches.get(stop.launch_id)
            if record is None or record.ended is not None or record.stop is not None:
                continue
            record.stop = stop
            self._touch(record)
            if record.state == NEW:
                self._end(record, 143, f"stopped before it started: {stop.reason}", now_s, True)

    def known(self, launch_ids: Iterable[str]) -> set[str]:
        return {launch_id for launch_id in launch_ids if launch_id in self.launches}

    def alive(self) -> set[str]:
        return {i for i, record in self.launches.items() if record.ended is None}

    def exits(self) -> list[Exit]:
        return [
            r.ended for r in self.launches.values() if r.ended is not None and not r.acknowledged
        ]

    def acknowledge(self, launch_ids: Iterable[str]) -> None:
        for launch_id in launch_ids:
            record = self.launches.get(launch_id)
            if record is not None and record.ended is not None:
                record.acknowledged = True
                self._touch(record)

    def inventory(self) -> tuple[NodeInventory, ...]:
        from dataclasses import replace

        return tuple(
            replace(view.inventory, state=view.state, taints=view.taints)
            for _, view in sorted(self.nodes.items())
        )

    def external_pods(self) -> tuple[o.ExternalPod, ...]:
        return tuple(
            pod for key, pod in sorted(self.external.items()) if key[0] in self._namespace_project
        )

    # --- outcomes reported by the executor ------------------------------------------------

    def created(self, launch_id: str) -> None:
        record = self.launches.get(launch_id)
        if record is not None and record.state == NEW and record.ended is None:
            record.state = CREATED
            record.pod_exists = True
            self._touch(record)

    def bound(self, launch_id: str, node: str) -> None:
        record = self.launches.get(launch_id)
        if record is None or record.ended is not None:
            return
        record.state = BOUND
        record.node = node
        self._set_bound(record.key, node, record.gpus)
        self._touch(record)

    def failed(self, launch_id: str, reason: str, now_s: float) -> None:
        """A launch that cannot start (its pod refused, its device never reported)."""
        record = self.launches.get(launch_id)
        if record is not None and record.ended is None:
            self._end(record, -1, reason, now_s, stopped=False)

    def stop_sent(self, launch_id: str) -> None:
        record = self.launches.get(launch_id)
        if record is not None:
            record.stop_sent = True
            self._touch(record)

    def pod_gone(self, launch_id: str, now_s: float) -> None:
        record = self.launches.get(launch_id)
        if record is not None and record.ended is None:
            self._end_gone(record, now_s)

    def reservation_created(self, node: str, device: int, now_s: float) -> None:
        reservation = self.reservations.setdefault(
            (node, device), Reservation(node, device, o.reservation_pod_name(node, device))
        )
        reservation.exists = True
        reservation.created_at_s = reservation.created_at_s or now_s

    def pod_deleted(self, key: PodKey) -> None:
        """We asked for `key` to go: a launch's pod stops, a reservation is on its way out."""
        launch_id = self._by_pod.get(key)
        if launch_id is not None and launch_id in self.launches:
            self.launches[launch_id].stop_sent = True
            self._touch(self.launches[launch_id])
        if key[0] == self.settings.system_namespace:
            for reservation in self.reservations.values():
                if reservation.pod_name == key[1]:
                    reservation.deleting = True

    def acknowledgement_written(self, key: PodKey) -> None:
        launch_id = self._by_pod.get(key)
        if launch_id is not None and launch_id in self.launches:
            self.launches[launch_id].ack_written = True
            self._touch(self.launches[launch_id])

    def set_waiting_reasons(self, reasons: dict[PodKey, str]) -> None:
        """Why each waiting pod of others waits (from the last cycle)."""
        self._waiting_reasons = reasons

    def reason_written(self, key: PodKey, reason: str) -> None:
        self._reasons_written[key] = reason

    def namespace_created(self, namespace: str) -> None:
        self.namespace_labels.setdefault(namespace, {})
        self._wanted_namespaces.discard(namespace)

    def service_created(self, namespace: str, name: str, now_s: float) -> None:
        self.services[(namespace, name)] = now_s

    def service_deleted(self, namespace: str, name: str) -> None:
        self.services.pop((namespace, name), None)

    # --- planning -------------------------------------------------------------------------

    def _set_bound(self, key: PodKey, node: str, gpus: int) -> None:
        self._unset_bound(key)
        self.pods_bound[key] = (node, gpus)
        self._held[node] += gpus

    def _unset_bound(self, key: PodKey) -> None:
        old = self.pods_bound.pop(key, None)
        if old is not None:
            self._held[old[0]] -= old[1]

    def _touch(self, record: LaunchRecord) -> None:
        """Note whether `record` may need an API call (`plan`) or may be forgotten."""
        launch_id = record.launch_id
        if record.ended is not None:
            waiting_ack = record.acknowledged and not record.ack_written and record.pod_exists
            (self._todo.add if waiting_ack else self._todo.discard)(launch_id)
            (self._finished.add if record.acknowledged else self._finished.discard)(launch_id)
        elif record.stop is not None:
            (self._todo.discard if record.stop_sent else self._todo.add)(launch_id)
        elif record.state == BOUND:
            self._todo.discard(launch_id)
        else:
            self._todo.add(launch_id)

    def held_gpus(self) -> dict[str, int]:
        """Whole devices held per node: by live pods of any scheduler, and by reservations
        created but not seen by the watch yet."""
        held: dict[str, int] = defaultdict(int, self._held)
        for (node, _), reservation in self.reservations.items():
            if reservation.exists and not reservation.seen:
                held[node] += 1
        return held

    def plan(self, now_s: float) -> Plan:
        plan = Plan()
        held = self.held_gpus()
        in_use = {slot for slot, users in self._sharers.items() if users}
        gangs = {gang for gang, members in self._gangs.items() if members}
        for launch_id in sorted(self._todo):
            record = self.launches.get(launch_id)
            if record is None:
                self._todo.discard(launch_id)
                continue
            if record.ended is not None:
                if record.acknowledged and not record.ack_written and record.pod_exists:
                    plan.acknowledgements.append(record.key)
                continue
            if record.stop is not None:
                if not record.stop_sent:
                    if record.state == BOUND:
                        plan.evictions.append((record, record.stop.grace_period_s))
                    else:
                        plan.deletes.append((record.namespace, record.pod_name, 0))
                continue
            if record.state == NEW:
                if record.namespace not in self.namespace_labels:
                    if self.settings.create_namespaces:
                        plan.namespaces.append(record.namespace)
                    continue
                plan.creates.append(record)
            elif record.state == CREATED:
                bind = self._bind_if_ready(record, held, plan, now_s)
                if bind is not None:
                    plan.binds.append(bind)
                    held[record.node] += record.gpus
        plan.namespaces = sorted(set(plan.namespaces))
        for workload, project, namespace in sorted(gangs):
            service = (namespace, o.gang_service_name(workload))
            if service not in self.services:
                plan.services.append((workload, project, namespace))
            else:
                self.services[service] = now_s
        for (namespace, name), last_used_s in list(self.services.items()):
            if now_s - last_used_s > _SERVICE_IDLE_S:
                plan.service_deletes.append((namespace, name))
        for slot, reservation in self.reservations.items():
            if slot not in in_use and reservation.exists and not reservation.deleting:
                plan.deletes.append((self.settings.system_namespace, reservation.pod_name, 0))
        if self._node_gone_at:
            plan.deletes += self._orphans_of_removed_nodes(now_s)
        for key, reason in self._waiting_reasons.items():
            pod = self.external.get(key)
            if pod is not None and pod.node is None and self._reasons_written.get(key) != reason:
                plan.unschedulable.append((key[0], key[1], reason))
        for key in [k for k in self._reasons_written if k not in self.external]:
            del self._reasons_written[key]
        for slot in [slot for slot, users in self._sharers.items() if not users]:
            del self._sharers[slot]
        for gang in [gang for gang, members in self._gangs.items() if not members]:
            del self._gangs[gang]
        return plan

    def _bind_if_ready(
        self, record: LaunchRecord, held: dict[str, int], plan: Plan, now_s: float
    ) -> Bind | None:
        view = self.nodes.get(record.node)
        if view is None:
            if record.node in self._node_gone_at:
                self.failed(record.launch_id, f"its node {record.node} was removed", now_s)
            return None
        annotations = [
            (o.LAUNCH_ID, record.launch_id),
            (o.DEVICES, o.format_devices(record.devices)),
        ]
        if record.shared:
            slot = (record.node, record.devices[0] if record.devices else 0)
            reservation = self.reservations.get(slot)
            if reservation is None or (reservation.deleting and not reservation.exists):
                if held.get(record.node, 0) + 1 <= view.inventory.gpu_count:
                    plan.reservations.append(slot)
                    held[record.node] += 1
                return None
            if reservation.uuid is None or reservation.deleting:
                waited_s = now_s - (reservation.created_at_s or record.accepted_at_s)
                if reservation.uuid is None and waited_s > self.settings.reservation_timeout_s:
                    self.failed(
                        record.launch_id,
                        f"the reservation pod {reservation.pod_name} of device {slot[1]} on "
                        f"{record.node} did not report its GPU within "
                        f"{self.settings.reservation_timeout_s:.0f} s: check that it runs "
                        "(image, NVIDIA device plugin, its service account)",
                        now_s,
                    )
                return None
            annotations.append((o.VISIBLE_DEVICES, reservation.uuid))
        elif held.get(record.node, 0) + record.gpus > view.inventory.gpu_count:
            return None  # pods still leaving hold the devices; the device plugin would refuse
        return Bind(
            record.launch_id, record.namespace, record.pod_name, record.node, tuple(annotations)
        )

    def _orphans_of_removed_nodes(self, now_s: float) -> list[tuple[str, str, int]]:
        """Pods still bound to a node removed a while ago: pod GC would delete them; we do it
        too, so that their tasks end and their workloads run again elsewhere."""
        orphans = []
        for key, (node, _) in self.pods_bound.items():
            gone_at = self._node_gone_at.get(node)
            if gone_at is not None and now_s - gone_at > _NODE_GONE_GRACE_S:
                launch_id = self._by_pod.get(key)
                if launch_id is not None:
                    orphans.append((key[0], key[1], 0))
        return orphans

    def forget_finished(self, now_s: float) -> list[PodKey]:
        """Forget acknowledged launches whose pods are gone or were kept long enough (for
        `gpupool logs`); returns gpupool's own finished pods to delete now (pods someone else
        created are theirs to delete)."""
        expired: list[PodKey] = []
        for launch_id in list(self._finished):
            record = self.launches.get(launch_id)
            if record is None or record.ended is None or not record.acknowledged:
                self._finished.discard(launch_id)
                continue
            if record.pod_exists:
                age_s = now_s - (record.finished_at_s or now_s)
                if age_s < self.settings.finished_pod_ttl_s:
                    continue
                if not record.external:
                    expired.append(record.key)
            del self.launches[launch_id]
            self._finished.discard(launch_id)
            self._todo.discard(launch_id)
            if self._by_pod.get(record.key) == launch_id:
                del self._by_pod[record.key]
        return expired
