"""The Kubernetes executor's bookkeeping (`ClusterState`): events in, API calls out, no server."""

from __future__ import annotations

from typing import Any

from lightkube.models.core_v1 import (
    Container,
    NodeCondition,
    NodeSpec,
    NodeStatus,
    PodSpec,
    PodStatus,
    ResourceRequirements,
)
from lightkube.models.meta_v1 import ObjectMeta, Time
from lightkube.resources.core_v1 import Namespace, Node, Pod

from gpupool.executors.base import Launch, Stop
from gpupool.executors.kubernetes import manifests as m
from gpupool.executors.kubernetes import objects as o
from gpupool.executors.kubernetes.informer import ADDED, DELETED, MODIFIED
from gpupool.executors.kubernetes.records import BOUND, CREATED
from gpupool.executors.kubernetes.settings import KubeSettings
from gpupool.executors.kubernetes.state import ClusterState

SETTINGS = KubeSettings(reservation_timeout_s=60, finished_pod_ttl_s=100)


def gpu_node(name: str = "n1", gpus: int = 4) -> Node:
    return Node(
        metadata=ObjectMeta(name=name),
        spec=NodeSpec(),
        status=NodeStatus(
            allocatable={"nvidia.com/gpu": str(gpus)},
            conditions=[NodeCondition(type="Ready", status="True")],
        ),
    )


def namespace(name: str, labels: dict[str, str] | None = None) -> Namespace:
    return Namespace(metadata=ObjectMeta(name=name, labels=labels))


def state_with_node(gpus: int = 4) -> ClusterState:
    state = ClusterState(SETTINGS)
    state.on_node(ADDED, gpu_node(gpus=gpus), 0)
    state.on_namespace(ADDED, namespace("gpupool-team"))
    state.set_projects(["team"])
    return state


def launch(launch_id: str = "a" * 16, **fields: Any) -> Launch:
    base: dict[str, Any] = {
        "launch_id": launch_id,
        "project": "team",
        "workload": "job",
        "task_index": 0,
        "node": "n1",
        "devices": (0,),
        "gpu_milli": 1000,
        "gpu_memory_mib": 81920,
    }
    return Launch(**(base | fields))


def pod_of(
    record_launch: Launch, node: str | None = None, phase: str = "Pending", **meta: Any
) -> Pod:
    manifest = m.task_pod(record_launch, "gpupool-team", SETTINGS)
    assert manifest.spec is not None and manifest.metadata is not None
    manifest.spec.nodeName = node
    for key, value in meta.items():
        setattr(manifest.metadata, key, value)
    manifest.status = PodStatus(phase=phase)
    return manifest


def foreign_pod(name: str, node: str, gpus: int) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace="other"),
        spec=PodSpec(
            nodeName=node,
            containers=[
                Container(
                    name="c", resources=ResourceRequirements(limits={"nvidia.com/gpu": str(gpus)})
                )
            ],
        ),
        status=PodStatus(phase="Running"),
    )


def test_a_launch_is_created_then_bound() -> None:
    state = state_with_node()
    job = launch()
    state.add_launches([job], 0)
    plan = state.plan(0)
    assert [r.launch_id for r in plan.creates] == [job.launch_id] and not plan.binds
    state.created(job.launch_id)
    (bind,) = state.plan(0).binds
    assert (bind.node, bind.pod_name, dict(bind.annotations)) == (
        "n1",
        o.task_pod_name(job),
        {o.LAUNCH_ID: job.launch_id, o.DEVICES: "0"},
    )
    state.bound(job.launch_id, "n1")
    assert not state.plan(0)
    assert state.alive() == {job.launch_id} and state.known([job.launch_id, "x"]) == {job.launch_id}


def test_a_missing_namespace_is_made_first() -> None:
    state = ClusterState(SETTINGS)
    state.on_node(ADDED, gpu_node(), 0)
    state.set_projects(["team"])
    state.add_launches([launch()], 0)
    plan = state.plan(0)
    assert plan.namespaces == ["gpupool-team"] and not plan.creates
    state.namespace_created("gpupool-team")
    assert state.plan(0).creates


def test_a_labelled_namespace_joins_its_project() -> None:
    state = ClusterState(SETTINGS)
    state.on_namespace(ADDED, namespace("ml-research", {o.PROJECT: "team"}))
    state.set_projects(["team"])
    assert state.namespace_of("team") == "ml-research"
    state.add_launches([launch()], 0)
    assert state.plan(0).creates[0].namespace == "ml-research"


def test_bind_waits_while_other_pods_hold_the_devices() -> None:
    """The device plugin would refuse a pod on a node whose GPUs are all held (pods of other
    schedulers, or gpupool's own still leaving)."""
    state = state_with_node(gpus=2)
    state.on_pod(ADDED, foreign_pod("theirs", "n1", 1), 0)
    job = launch(devices=(0, 1))
    state.add_launches([job], 0)
    state.created(job.launch_id)
    assert not state.plan(0).binds
    state.on_pod(DELETED, foreign_pod("theirs", "n1", 1), 1)
    assert state.plan(1).binds


def test_a_fraction_waits_for_its_reservation_to_report() -> None:
    state = state_with_node()
    share = launch(gpu_milli=500, devices=(2,))
    state.add_launches([share], 0)
    state.created(share.launch_id)
    plan = state.plan(0)
    assert plan.reservations == [("n1", 2)] and not plan.binds
    state.reservation_created("n1", 2, 0)
    assert not state.plan(1).reservations and not state.plan(1).binds
    reservation = m.reservation_pod("n1", 2, SETTINGS)
    assert reservation.metadata is not None
    reservation.metadata.annotations = {
        **(reservation.metadata.annotations or {}),
        o.GPU_UUID: "GPU-x",
    }
    state.on_pod(ADDED, reservation, 2)
    (bind,) = state.plan(2).binds
    assert dict(bind.annotations)[o.VISIBLE_DEVICES] == "GPU-x"
    # When the last sharer ends, the reservation goes.
    state.bound(share.launch_id, "n1")
    state.on_pod(DELETED, pod_of(share, "n1"), 3)
    plan = state.plan(3)
    assert plan.deletes == [(SETTINGS.system_namespace, o.reservation_pod_name("n1", 2), 0)]


def test_a_reservation_that_never_reports_fails_its_sharers() -> None:
    state = state_with_node()
    share = launch(gpu_milli=500)
    state.add_launches([share], 0)
    state.created(share.launch_id)
    state.plan(0)
    state.reservation_created("n1", 0, 0)
    state.plan(SETTINGS.reservation_timeout_s + 1)
    (ended,) = state.exits()
    assert not ended.stopped and ended.exit_code == -1 and "did not report its GPU" in ended.reason


def test_stops_evict_bound_pods_and_end_unstarted_ones() -> None:
    state = state_with_node()
    bound, unborn = launch("b" * 16), launch("c" * 16, devices=(1,))
    state.add_launches([bound, unborn], 0)
    state.created(bound.launch_id)
    state.bound(bound.launch_id, "n1")
    state.request_stops(
        [Stop(bound.launch_id, 45, "reclaimed"), Stop(unborn.launch_id, 45, "x")], 1
    )
    plan = state.plan(1)
    assert [(r.launch_id, grace) for r, grace in plan.evictions] == [(bound.launch_id, 45)]
    (unborn_exit,) = state.exits()
    assert unborn_exit.launch_id == unborn.launch_id and unborn_exit.stopped
    state.stop_sent(bound.launch_id)
    assert not state.plan(1).evictions
    state.on_pod(DELETED, pod_of(bound, "n1"), 5)
    ended = {e.launch_id: e for e in state.exits()}[bound.launch_id]
    assert ended.stopped and ended.reason == "stopped: reclaimed"


def test_finished_pods_report_exits_until_acknowledged_then_go_after_their_ttl() -> None:
    state = state_with_node()
    job = launch()
    state.add_launches([job], 0)
    state.on_pod(ADDED, pod_of(job, "n1", "Running"), 1)
    assert state.launches[job.launch_id].state == BOUND
    state.on_pod(MODIFIED, pod_of(job, "n1", "Succeeded"), 2)
    (ended,) = state.exits()
    assert (ended.exit_code, ended.stopped) == (0, False)
    state.acknowledge([job.launch_id])
    assert state.exits() == []
    assert state.plan(3).acknowledgements == [("gpupool-team", o.task_pod_name(job))]
    state.acknowledgement_written(("gpupool-team", o.task_pod_name(job)))
    assert state.forget_finished(50) == []
    assert state.forget_finished(200) == [("gpupool-team", o.task_pod_name(job))]
    assert state.known([job.launch_id]) == set()


def test_a_restarted_server_adopts_its_pods_from_the_cluster() -> None:
    state = state_with_node()
    job = launch()
    state.on_pod(ADDED, pod_of(job, "n1", "Running"), 0)
    done = launch("d" * 16, devices=(1,))
    state.on_pod(
        ADDED,
        pod_of(done, "n1", "Succeeded", annotations={o.ACKNOWLEDGED: "true"}),
        0,
    )
    assert state.known([job.launch_id, done.launch_id]) == {job.launch_id, done.launch_id}
    assert state.alive() == {job.launch_id}
    assert state.exits() == []  # acknowledged before the restart: not reported again
    assert state.held_gpus() == {"n1": 1}


def test_a_new_leader_keeps_the_reservations_its_adopted_sharers_use() -> None:
    state = state_with_node()
    share = launch(gpu_milli=500, devices=(3,))
    pod = pod_of(share, "n1", "Running", annotations={o.DEVICES: "3", o.VISIBLE_DEVICES: "GPU-a"})
    state.on_pod(ADDED, pod, 0)
    reservation = m.reservation_pod("n1", 3, SETTINGS)
    state.on_pod(ADDED, reservation, 0)
    assert state.launches[share.launch_id].devices == (3,)
    assert not state.plan(1).deletes  # still in use: not deleted under the running sharer
    state.on_pod(DELETED, pod, 2)
    assert state.plan(2).deletes == [
        (SETTINGS.system_namespace, o.reservation_pod_name("n1", 3), 0)
    ]


def test_pods_of_others_in_project_namespaces_are_external_workloads() -> None:
    state = state_with_node()
    theirs = Pod(
        metadata=ObjectMeta(name="by-hand", namespace="gpupool-team", uid="u1"),
        spec=PodSpec(
            schedulerName="gpupool",
            containers=[
                Container(name="c", resources=ResourceRequirements(limits={"nvidia.com/gpu": "1"}))
            ],
        ),
        status=PodStatus(phase="Pending"),
    )
    state.on_pod(ADDED, theirs, 0)
    (external,) = state.external_pods()
    assert (external.name, external.project, external.node) == ("by-hand", "team", None)
    elsewhere = replace_namespace(theirs, "default")
    state.on_pod(ADDED, elsewhere, 0)
    assert len(state.external_pods()) == 1  # not a project's namespace: not gpupool's
    # Bound by gpupool (annotation through the Binding) it becomes a launch the executor knows.
    state.add_launches([launch("e" * 16, external_ref="gpupool-team/by-hand")], 1)
    assert state.launches["e" * 16].state == CREATED
    state.on_pod(DELETED, theirs, 2)
    assert state.external_pods() == ()


def test_a_pod_that_arrives_before_its_project_is_kept_until_the_project_comes() -> None:
    """The pod's watch event may come before the loop says its project exists (a project made
    and a pod created at once): it must not wait for a resync to be seen."""
    state = ClusterState(KubeSettings())
    state.on_node(ADDED, gpu_node(), 0)
    early = Pod(
        metadata=ObjectMeta(name="early", namespace="gpupool-late", uid="u3"),
        spec=PodSpec(schedulerName="gpupool", containers=[Container(name="c")]),
        status=PodStatus(phase="Pending"),
    )
    state.on_pod(ADDED, early, 0)
    assert state.external_pods() == ()
    state.set_projects({"late"})
    (external,) = state.external_pods()
    assert (external.name, external.project) == ("early", "late")
    # A namespace labelled for another project moves the pod to that project.
    state.set_projects({"late", "other"})
    state.on_namespace(ADDED, namespace("gpupool-late", {o.PROJECT: "other"}))
    (moved,) = state.external_pods()
    assert moved.project == "other"
    state.on_pod(DELETED, early, 1)
    state.set_projects({"late"})
    assert state.external_pods() == ()


def replace_namespace(pod: Pod, namespace_name: str) -> Pod:
    assert pod.metadata is not None
    meta = ObjectMeta(name=pod.metadata.name, namespace=namespace_name, uid="u2")
    return Pod(metadata=meta, spec=pod.spec, status=pod.status)


def test_work_on_a_removed_node_ends_and_its_pods_are_cleaned_up() -> None:
    state = state_with_node()
    job = launch()
    state.add_launches([job], 0)
    state.on_pod(ADDED, pod_of(job, "n1", "Running"), 0)
    state.on_node(DELETED, gpu_node(), 10)
    assert state.inventory() == ()
    assert not state.plan(15).deletes  # pod GC gets a moment to do it
    assert state.plan(40).deletes == [("gpupool-team", o.task_pod_name(job), 0)]
    state.on_pod(DELETED, pod_of(job, "n1", "Running", deletionTimestamp=Time.now()), 41)
    (ended,) = state.exits()
    assert ended.stopped and "removed" in ended.reason


def test_a_node_removed_before_the_bind_requeues_its_work_rather_than_failing_it() -> None:
    """The node goes between the scheduler's decision and the pod's bind: the launch ends as
    stopped (the workload runs again elsewhere), not as a failure of the workload."""
    state = state_with_node()
    job = launch()
    state.add_launches([job], 0)
    state.created(job.launch_id)
    state.on_node(DELETED, gpu_node(), 1)
    assert not state.plan(2).binds
    (ended,) = state.exits()
    assert ended.stopped and ended.exit_code == 137
    assert ended.reason == "its node n1 was removed before its pod was bound"


def test_cordoned_node_reports_its_state_and_taint() -> None:
    state = state_with_node()
    cordoned = gpu_node()
    assert cordoned.spec is not None
    cordoned.spec.unschedulable = True
    version = state.version
    state.on_node(MODIFIED, cordoned, 1)
    (inventory,) = state.inventory()
    assert inventory.state == "cordoned"
    assert (o.NODE_UNSCHEDULABLE, "", "NoSchedule") in inventory.taints
    assert state.version > version
