"""What the Kubernetes executor knows and what it has to do next: pure, no API calls.

`ClusterState` is fed the watch events (nodes, pods, namespaces) and the scheduling loop's calls
(start, stop, acknowledge); `plan()` says which API calls to make now, and the executor reports
their outcomes back. Launches are recorded in the cluster itself (pod labels and annotations), so
a restarted or newly elected server rebuilds this state from its watches alone.

A launch goes: `new` -> (pod created) `created` -> (bound) `bound` -> ended. A launch of a pod
someone else created starts at `created`. Sharing launches wait in `created` until the
reservation pod of their device has reported the device's UUID.

The watch events and the indexes every change keeps in step are in `watched.WatchedCluster`,
which `ClusterState` extends with the scheduling loop's calls, the outcomes the executor
reports and the plan; the records it keeps are in `records`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from gpupool.core.model import MILLI_PER_GPU
from gpupool.executors.base import Exit, Launch, NodeInventory, Stop
from gpupool.executors.kubernetes import objects as o
from gpupool.executors.kubernetes.records import (
    BOUND,
    CREATED,
    NEW,
    Bind,
    LaunchRecord,
    Plan,
    PodKey,
    Reservation,
)
from gpupool.executors.kubernetes.watched import WatchedCluster

__all__ = ["ClusterState"]

_NODE_GONE_GRACE_S = 20.0
_SERVICE_IDLE_S = 60.0


class ClusterState(WatchedCluster):
    """Not thread-safe: the executor holds its lock around every call."""

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
                # Not the workload's failure: it runs again elsewhere, as when the node goes
                # under a bound pod (`_end_gone`).
                reason = f"its node {record.node} was removed before its pod was bound"
                self._end(record, 137, reason, now_s, stopped=True)
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
