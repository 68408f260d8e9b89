"""Kubernetes objects read into gpupool's terms and written from them: table tests, no server."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube.models.core_v1 import (
    Affinity,
    Container,
    ContainerState,
    ContainerStateTerminated,
    ContainerStatus,
    NodeAffinity,
    NodeCondition,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    NodeSpec,
    NodeStatus,
    PodSpec,
    PodStatus,
    ResourceRequirements,
    Taint,
)
from lightkube.models.core_v1 import Toleration as KubeToleration
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod

from gpupool.executors.base import Launch
from gpupool.executors.kubernetes import manifests as m
from gpupool.executors.kubernetes import objects as o
from gpupool.executors.kubernetes.settings import KubeSettings, Toleration

SETTINGS = KubeSettings()


def node(
    name: str = "gpu-1",
    gpus: str | None = "8",
    labels: dict[str, str] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    taints: list[Taint] | None = None,
) -> Node:
    allocatable = {"cpu": "32", "memory": "256Gi"}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = gpus
    return Node(
        metadata=ObjectMeta(name=name, labels=labels or {}),
        spec=NodeSpec(unschedulable=unschedulable, taints=taints),
        status=NodeStatus(
            allocatable=allocatable,
            conditions=[NodeCondition(type="Ready", status="True" if ready else "False")],
        ),
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("team-a", "team-a"),
        ("Team_A", "team-a-"),
        ("a.b", "a-b-"),
        ("x" * 70, "x" * 56 + "-"),
    ],
)
def test_dns_label(text: str, expected: str) -> None:
    label = o.dns_label(text)
    assert label.startswith(expected) and len(label) <= 63
    assert o.dns_label(text) == label  # stable
    if text != expected:
        assert o.dns_label(text) != o.dns_label(text + "!")  # a hash keeps names apart


def test_node_view_reads_gpus_model_memory_and_resources() -> None:
    view = o.node_view(
        node(labels={"nvidia.com/gpu.product": "H100", "nvidia.com/gpu.memory": "81559"})
    )
    assert view is not None and view.state == "ready" and view.taints == ()
    inventory = view.inventory
    assert inventory.gpu_count == 8 and inventory.gpu_model == "H100"
    assert inventory.gpu_memory_mib == 81559
    assert inventory.cpu_milli == 32_000 and inventory.memory_mib == 256 * 1024


@pytest.mark.parametrize(
    ("kwargs", "state", "taint_keys"),
    [
        ({"unschedulable": True}, "cordoned", {o.NODE_UNSCHEDULABLE}),
        ({"ready": False}, "notready", {o.NODE_NOT_READY}),
        (
            {"taints": [Taint(key="nvidia.com/gpu", effect="NoSchedule", value="present")]},
            "ready",
            {"nvidia.com/gpu"},
        ),
        ({"taints": [Taint(key="dedicated", effect="PreferNoSchedule")]}, "ready", {"dedicated"}),
    ],
)
def test_node_view_taints(kwargs: dict[str, Any], state: str, taint_keys: set[str]) -> None:
    view = o.node_view(node(**kwargs))
    assert view is not None
    assert view.state == state
    assert {key for key, _, _ in view.taints} == taint_keys


@pytest.mark.parametrize("gpus", [None, "0"])
def test_nodes_without_gpus_are_not_gpupools(gpus: str | None) -> None:
    assert o.node_view(node(gpus=gpus)) is None


def test_default_gpu_memory_without_feature_discovery() -> None:
    view = o.node_view(node(labels={"nvidia.com/gpu.memory": "lots"}))
    assert view is not None and view.inventory.gpu_memory_mib == o.DEFAULT_GPU_MEMORY_MIB


def pod(
    name: str = "p",
    annotations: dict[str, str] | None = None,
    gpus: str | None = "1",
    requests: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
    status: PodStatus | None = None,
) -> Pod:
    limits = {"nvidia.com/gpu": gpus} if gpus else None
    return Pod(
        metadata=ObjectMeta(
            name=name, namespace="gpupool-team", uid=f"uid-{name}", annotations=annotations
        ),
        spec=PodSpec(
            schedulerName="gpupool",
            containers=[
                Container(
                    name="main",
                    image="train:1",
                    command=["python"],
                    args=["train.py"],
                    resources=ResourceRequirements(limits=limits, requests=requests),
                )
            ],
            **(spec or {}),
        ),
        status=status,
    )


def test_external_pod_whole_gpus_and_resources() -> None:
    view = o.external_pod(pod(gpus="2", requests={"cpu": "1500m", "memory": "8Gi"}), "team")
    assert (view.gpu_kind, view.gpu_amount, view.problem) == ("whole", 2, None)
    assert (view.cpu_milli, view.memory_mib) == (1500, 8192)
    assert view.command == ("python", "train.py") and view.image == "train:1"
    assert view.workload_key == "gpupool-team/p" and view.workload_type == "train"


@pytest.mark.parametrize(
    ("annotations", "gpus", "kind", "amount", "limit", "problem"),
    [
        ({o.GPU_FRACTION: "0.5"}, None, "fraction", 500, None, None),
        ({o.GPU_FRACTION: "0.25", o.GPU_FRACTION_LIMIT: "0.8"}, None, "fraction", 250, 800, None),
        ({o.GPU_MEMORY: "8G"}, None, "memory", 8192, None, None),
        ({o.GPU_FRACTION: "0.5"}, "1", "fraction", 500, None, "must not request"),
        ({o.GPU_FRACTION: "0.5", o.GPU_MEMORY: "8G"}, None, "fraction", 500, None, "not both"),
        ({o.GPU_FRACTION: "lots"}, None, "whole", 1, None, "gpu"),
        ({o.GPU_FRACTION: "2"}, None, "fraction", 2000, None, "not below 1"),
        ({o.GPU_FRACTION_LIMIT: "0.8"}, "1", "whole", 1, None, "needs"),
        ({}, None, "whole", 1, None, "requests no GPU"),
        ({o.WORKLOAD_TYPE: "batch"}, "1", "whole", 1, None, "workload-type"),
        ({o.PRIORITY: "high"}, "1", "whole", 1, None, "whole number"),
        ({o.MIN_AVAILABLE: "0"}, "1", "whole", 1, None, "between 1"),
        ({o.PREEMPTIBLE: "maybe"}, "1", "whole", 1, None, "true or false"),
    ],
)
def test_external_pod_annotations(
    annotations: dict[str, str],
    gpus: str | None,
    kind: str,
    amount: int,
    limit: int | None,
    problem: str | None,
) -> None:
    view = o.external_pod(pod(annotations=annotations, gpus=gpus), "team")
    assert (view.gpu_kind, view.gpu_amount, view.gpu_limit_milli) == (kind, amount, limit)
    if problem is None:
        assert view.problem is None
    else:
        assert view.problem is not None and problem in view.problem


def test_external_pod_group_type_priority_selector_and_tolerations() -> None:
    affinity = Affinity(
        nodeAffinity=NodeAffinity(
            requiredDuringSchedulingIgnoredDuringExecution=NodeSelector(
                nodeSelectorTerms=[
                    NodeSelectorTerm(
                        matchExpressions=[
                            NodeSelectorRequirement(
                                key="nvidia.com/gpu.product", operator="In", values=["A100", "H100"]
                            )
                        ]
                    )
                ]
            )
        )
    )
    view = o.external_pod(
        pod(
            annotations={
                o.POD_GROUP: "ddp",
                o.MIN_AVAILABLE: "4",
                o.WORKLOAD_TYPE: "interactive",
                o.PRIORITY: "7",
                o.PREEMPTIBLE: "false",
            },
            spec={
                "nodeSelector": {"zone": "a"},
                "affinity": affinity,
                "tolerations": [KubeToleration(key="gpu", operator="Exists", effect="NoSchedule")],
                "terminationGracePeriodSeconds": 90,
            },
        ),
        "team",
    )
    assert view.problem is None
    assert (view.group, view.min_available, view.workload_key) == (
        "ddp",
        4,
        "gpupool-team/group:ddp",
    )
    assert (view.workload_type, view.priority, view.preemptible) == ("interactive", 7, False)
    assert view.node_selector == (("nvidia.com/gpu.product", ("A100", "H100")), ("zone", ("a",)))
    assert view.tolerations == (Toleration(key="gpu", operator="Exists", effect="NoSchedule"),)
    assert view.grace_period_s == 90


def test_pod_exit() -> None:
    running = pod(status=PodStatus(phase="Running"))
    assert o.pod_exit(running) is None
    done = pod(status=PodStatus(phase="Succeeded"))
    assert o.pod_exit(done) == (0, "completed")
    failed = pod(
        status=PodStatus(
            phase="Failed",
            containerStatuses=[
                ContainerStatus(
                    name="main",
                    image="x",
                    imageID="",
                    ready=False,
                    restartCount=0,
                    state=ContainerState(
                        terminated=ContainerStateTerminated(exitCode=3, reason="Error")
                    ),
                )
            ],
        )
    )
    code, reason = o.pod_exit(failed) or (None, "")
    assert code == 3 and "Error" in reason


def launch(**fields: Any) -> Launch:
    base: dict[str, Any] = {
        "launch_id": "0123456789abcdef",
        "project": "team_a",
        "workload": "train",
        "task_index": 1,
        "node": "gpu-1",
        "devices": (0, 1),
        "gpu_milli": 1000,
        "gpu_memory_mib": 81920,
        "command": ("python", "train.py"),
        "env": (("LR", "0.1"),),
    }
    return Launch(**(base | fields))


def test_task_pod_for_whole_gpus() -> None:
    manifest = m.task_pod(launch(cpu_milli=2000, memory_mib=4096), "ns", SETTINGS)
    assert manifest.metadata is not None and manifest.spec is not None
    assert manifest.metadata.name == "train-1-01234567"
    assert manifest.metadata.labels is not None
    assert manifest.metadata.labels[o.LAUNCH_ID] == "0123456789abcdef"
    assert manifest.spec.schedulerName == "gpupool" and manifest.spec.nodeName is None
    assert manifest.spec.automountServiceAccountToken is False  # a task gets no API token
    container = manifest.spec.containers[0]
    assert container.image == SETTINGS.default_image
    assert container.resources is not None and container.resources.limits is not None
    assert container.resources.limits["nvidia.com/gpu"] == "2"
    assert container.resources.requests == {"cpu": "2000m", "memory": "4096Mi"}
    env = {e.name: e.value for e in container.env or []}
    assert env["LR"] == "0.1" and env["GPUPOOL_TASK_INDEX"] == "1" and "RANK" not in env
    assert "NVIDIA_VISIBLE_DEVICES" not in env  # the device plugin sets it


def test_a_task_cannot_name_its_own_devices() -> None:
    sneaky = (("NVIDIA_VISIBLE_DEVICES", "all"), ("CUDA_VISIBLE_DEVICES", "0,1"), ("OK", "1"))
    manifest = m.task_pod(launch(gpu_milli=500, devices=(0,), env=sneaky), "ns", SETTINGS)
    assert manifest.spec is not None
    env = manifest.spec.containers[0].env or []
    assert [e.name for e in env].count("NVIDIA_VISIBLE_DEVICES") == 1
    assert {e.name: e.value for e in env}["CUDA_VISIBLE_DEVICES"] == "0"
    assert {e.name: e.value for e in env}["OK"] == "1"


def test_task_pod_for_a_fraction_reads_its_device_from_the_binding() -> None:
    manifest = m.task_pod(launch(devices=(3,), gpu_milli=250, image="mine:2"), "ns", SETTINGS)
    assert manifest.spec is not None
    container = manifest.spec.containers[0]
    assert container.image == "mine:2"
    assert container.resources is not None and not container.resources.limits
    by_name = {e.name: e for e in container.env or []}
    source = by_name["NVIDIA_VISIBLE_DEVICES"].valueFrom
    assert source is not None and source.fieldRef is not None
    assert o.VISIBLE_DEVICES in source.fieldRef.fieldPath
    assert by_name["GPUPOOL_GPU_FRACTION"].value == "0.25"


def test_task_pod_of_a_gang_has_its_rendezvous() -> None:
    manifest = m.task_pod(launch(world_size=4, duration_s=12.5), "ns", SETTINGS)
    assert manifest.spec is not None and manifest.metadata is not None
    env = {e.name: e.value for e in manifest.spec.containers[0].env or []}
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_PORT"]) == ("1", "4", "29500")
    assert env["MASTER_ADDR"] == "train-0.train-gang"
    assert (manifest.spec.hostname, manifest.spec.subdomain) == ("train-1", "train-gang")
    assert manifest.metadata.annotations == {o.DURATION: "12.500s"}


def test_reservation_pod_holds_one_gpu_on_its_node() -> None:
    manifest = m.reservation_pod("gpu-1", 3, SETTINGS)
    assert manifest.spec is not None and manifest.metadata is not None
    assert manifest.spec.nodeName == "gpu-1"
    assert manifest.metadata.namespace == SETTINGS.system_namespace
    container = manifest.spec.containers[0]
    assert container.resources is not None and container.resources.limits is not None
    assert container.resources.limits["nvidia.com/gpu"] == "1"
    assert container.command == ["python", "-m", "gpupool.executors.kubernetes.reserve"]
