"""What the Kubernetes watches say (nodes, namespaces, pods, reservation pods), applied to the
executor's state, and the indexes that every change keeps in step.

`WatchedCluster` is the part of `state.ClusterState` that the watch events drive; it also holds
every field and index of the state, so that the indexes (the launches that need a call, GPUs
held per node, each shared device's users, each gang's members) are kept by the methods here
(`_register`, `_set_bound`, `_unset_bound`, `_touch`, `_end`), whichever side calls them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from lightkube.resources.core_v1 import Namespace, Node, Pod

from gpupool.executors.base import Exit
from gpupool.executors.kubernetes import objects as o
from gpupool.executors.kubernetes.informer import DELETED
from gpupool.executors.kubernetes.records import (
    BOUND,
    CREATED,
    NEW,
    LaunchRecord,
    PodKey,
    Reservation,
)
from gpupool.executors.kubernetes.settings import KubeSettings

__all__ = ["WatchedCluster"]


class WatchedCluster:
    """The watch side of `ClusterState`, and every field of it. Not thread-safe: the executor
    holds its lock around every call."""

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

    # --- the indexes ---------------------------------------------------------------------

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
