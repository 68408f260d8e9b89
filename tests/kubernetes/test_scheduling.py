"""`gpupool server --kubernetes` scheduling a real API server's pods on KWOK's fake GPU nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubehelpers import Cluster, FakeDevicePlugin, GpupoolOnKubernetes, wait_for
from lightkube.models.core_v1 import Container, PodSpec, ResourceRequirements
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod, Service


def _env(pod: Pod) -> dict[str, str]:
    assert pod.spec is not None
    return {e.name: e.value or "" for e in pod.spec.containers[0].env or [] if e.value is not None}


def _gpu_limit(pod: Pod) -> str | None:
    assert pod.spec is not None
    resources = pod.spec.containers[0].resources
    return (resources.limits or {}).get("nvidia.com/gpu") if resources else None


def _bound(pods: list[Pod]) -> list[Pod]:
    return [p for p in pods if p.spec is not None and p.spec.nodeName]


def test_founding_story_reclaims_through_eviction(cluster: Cluster, tmp_path: Path) -> None:
    """Bob fills 4 GPUs over his quota; Patty's guaranteed quota takes 2 back through the
    Eviction API (with Bob's grace period); Bob's preempted jobs come back as new pods once
    Patty's are done."""
    with GpupoolOnKubernetes(cluster, tmp_path) as gp:
        node = gp.node("n1", gpus=4)
        cluster.wait_node_ready(node)
        gp.project("bob", 2)
        gp.project("patty", 2)
        for i in range(4):
            gp.submit("bob", f"bob-{i}", gpu=1, duration_s=25, grace_period_s=2)
        for i in range(4):
            gp.wait_status("bob", f"bob-{i}", "running")
        wait_for("Bob's 4 pods running", lambda: len(_bound(gp.pods("bob"))) == 4)
        assert all(_gpu_limit(p) == "1" for p in gp.pods("bob"))
        for i in range(2):
            gp.submit("patty", f"patty-{i}", gpu=1, duration_s=3)
        for i in range(2):
            gp.wait_status("patty", f"patty-{i}", "running", timeout_s=30)
        bob = {w["name"]: w for w in gp.workloads("bob")}
        preempted = sorted(name for name, w in bob.items() if w["preemptions"] == 1)
        assert len(preempted) == 2, bob
        events = gp.workload("bob", preempted[0])["events"]
        assert [e["kind"] for e in events][:3] == ["submitted", "bound", "evicted"]
        for i in range(2):
            gp.wait_status("patty", f"patty-{i}", "completed", timeout_s=30)
        for name in preempted:
            gp.wait_status("bob", name, "running", timeout_s=30)
            tasks = gp.workload("bob", name)["task_list"]
            assert [t["state"] for t in tasks] == ["done", "running"]
        # One pod per launch, never two for a task at once: the preempted pods are gone.
        names = [p.metadata.name for p in gp.pods("bob") if p.metadata]
        assert len(names) == len(set(names)) == 4


def test_two_fractions_share_one_reserved_device(cluster: Cluster, tmp_path: Path) -> None:
    with GpupoolOnKubernetes(cluster, tmp_path) as gp, FakeDevicePlugin(cluster.plane) as plugin:
        node = gp.node("n1", gpus=2)
        cluster.wait_node_ready(node)
        gp.project("team", 2)
        gp.submit("team", "half-a", gpu=0.5, duration_s=6)
        gp.submit("team", "half-b", gpu=0.5, duration_s=6)
        gp.wait_status("team", "half-a", "running")
        gp.wait_status("team", "half-b", "running")
        pods = wait_for(
            "both pods bound", lambda: len(_bound(gp.pods("team"))) == 2 and gp.pods("team")
        )
        reservations = [
            p
            for p in cluster.pods("gpupool-system", {"gpupool.dev/role": "reservation"})
            if p.spec is not None and p.spec.nodeName == node
        ]
        assert len(reservations) == 1
        reserved = reservations[0]
        assert reserved.spec is not None and _gpu_limit(reserved) == "1"
        uuid = plugin.reported[reserved.metadata.name]  # type: ignore[union-attr]
        for pod in pods:
            assert _gpu_limit(pod) is None  # sharing pods do not ask the device plugin
            assert (pod.metadata.annotations or {})["gpupool.dev/visible-devices"] == uuid  # type: ignore[union-attr]
            assert _env(pod)["GPUPOOL_GPU_FRACTION"] == "0.5"
            visible = [
                e for e in pod.spec.containers[0].env or [] if e.name == "NVIDIA_VISIBLE_DEVICES"
            ]  # type: ignore[union-attr]
            assert visible[0].valueFrom is not None  # read from the annotation at start
        gp.wait_status("team", "half-a", "completed", timeout_s=30)
        gp.wait_status("team", "half-b", "completed", timeout_s=30)
        wait_for(
            "the reservation to go with its last sharer",
            lambda: (
                not [
                    p
                    for p in cluster.pods("gpupool-system", {"gpupool.dev/role": "reservation"})
                    if p.spec is not None and p.spec.nodeName == node
                ]
            ),
        )


def test_dynamic_fraction_gets_its_request_and_limit(cluster: Cluster, tmp_path: Path) -> None:
    with GpupoolOnKubernetes(cluster, tmp_path) as gp, FakeDevicePlugin(cluster.plane):
        node = gp.node("n1", gpus=1, memory_mib=40960)
        cluster.wait_node_ready(node)
        gp.project("team", 1)
        gp.submit("team", "dyn", gpu=0.25, gpu_limit=0.8, duration_s=30)
        gp.wait_status("team", "dyn", "running")
        (pod,) = wait_for("bound", lambda: _bound(gp.pods("team")))
        env = _env(pod)
        assert env["GPUPOOL_GPU_FRACTION"] == "0.25"
        assert env["GPUPOOL_GPU_MEMORY_REQUEST_MIB"] == str(40960 // 4)
        assert env["GPUPOOL_GPU_MEMORY_LIMIT_MIB"] == str(40960 * 8 // 10)
        assert (
            (pod.metadata.annotations or {})
            .get("gpupool.dev/visible-devices", "")
            .startswith(  # type: ignore[union-attr]
                "GPU-fake-"
            )
        )


def test_gang_is_all_or_nothing_and_gets_its_rendezvous(cluster: Cluster, tmp_path: Path) -> None:
    with GpupoolOnKubernetes(cluster, tmp_path) as gp:
        for name in ("n1", "n2"):
            cluster.wait_node_ready(gp.node(name, gpus=2))
        gp.project("team", 4)
        gp.submit("team", "fits", gpu=1, tasks=2, duration_s=30)
        gp.wait_status("team", "fits", "running")
        pods = wait_for(
            "the gang's 2 pods bound", lambda: len(_bound(gp.pods("team"))) == 2 and gp.pods("team")
        )
        # 2 GPUs are free, enough for one of its tasks but not both: none may start (a gang that
        # no node set could ever hold is refused at submit instead)
        gp.submit("team", "too-big", gpu=2, tasks=2, duration_s=30)
        wait_for(
            "its reason",
            lambda: "cycle" not in (gp.workload("team", "too-big")["pending_reason"] or "cycle"),
        )
        assert gp.status("team", "too-big") == "pending"
        ranks = sorted(_env(p)["RANK"] for p in pods)
        assert ranks == ["0", "1"]
        for pod in pods:
            env = _env(pod)
            assert env["WORLD_SIZE"] == "2"
            assert env["MASTER_ADDR"] == "fits-0.fits-gang"
            assert env["MASTER_PORT"] == "29500"
            assert pod.spec is not None and pod.spec.subdomain == "fits-gang"
        service = cluster.client.get(Service, "fits-gang", namespace=gp.namespace("team"))
        assert service.spec is not None and service.spec.clusterIP == "None"
        assert not [p for p in gp.pods("team") if "too-big" in (p.metadata.name or "")]  # type: ignore[union-attr]


def _external_pod(name: str, namespace: str, annotations: dict[str, str] | None = None,
                  gpus: int | None = 1, complete_after: str | None = "30s") -> Pod:  # fmt: skip
    notes = dict(annotations or {})
    if complete_after:
        notes["test.gpupool.dev/complete-after"] = complete_after
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else None
    return Pod(
        metadata=ObjectMeta(name=name, namespace=namespace, annotations=notes),
        spec=PodSpec(
            schedulerName="gpupool",
            containers=[
                Container(
                    name="main",
                    image="busybox",
                    command=["sleep", "1000"],
                    resources=ResourceRequirements(limits=limits),
                )
            ],
        ),
    )


def test_kubectl_style_pods_are_workloads(cluster: Cluster, tmp_path: Path) -> None:
    """Pods created through the API by someone else (kubectl, a Job) with schedulerName gpupool
    in a project's namespace are scheduled, bound through the Binding subresource, and shown."""
    with GpupoolOnKubernetes(cluster, tmp_path) as gp:
        cluster.wait_node_ready(gp.node("n1", gpus=4))
        gp.project("team", 4)
        namespace = gp.namespace("team")
        cluster.add_namespace(namespace)
        cluster.client.create(_external_pod("by-hand", namespace, gpus=2))
        wait_for("the pod bound", lambda: _bound(gp.pods("team")))
        (workload,) = gp.workloads("team")
        assert workload["name"] == "by-hand" and workload["origin"] == "kubernetes"
        assert workload["gpu_amount"] == 2
        gp.wait_status("team", "by-hand", "running")
        pod = cluster.client.get(Pod, "by-hand", namespace=namespace)
        launch = (pod.metadata.annotations or {}).get("gpupool.dev/launch-id")  # type: ignore[union-attr]
        assert launch == gp.workload("team", "by-hand")["task_list"][0]["launch_id"]
        # A group waits for its pods, then starts all together.
        group = {"gpupool.dev/pod-group": "ddp", "gpupool.dev/min-available": "2"}
        cluster.client.create(_external_pod("ddp-0", namespace, group))
        wait_for("the group to wait", lambda: any(w["name"] == "ddp" for w in gp.workloads("team")))
        reason = gp.workload("team", "ddp")["pending_reason"]
        assert "1 of the 2 pods" in reason

        def condition() -> str | None:  # where `kubectl describe pod` shows why it waits
            pod = cluster.client.get(Pod, "ddp-0", namespace=namespace)
            for c in (pod.status.conditions if pod.status else None) or []:
                if c.type == "PodScheduled" and c.status == "False":
                    return c.message
            return None

        assert "1 of the 2 pods" in wait_for("the PodScheduled condition", condition, 20)
        cluster.client.create(_external_pod("ddp-1", namespace, group))
        gp.wait_status("team", "ddp", "running")
        assert gp.workload("team", "ddp")["tasks"] == 2
        # A fraction asked for by annotation; a bad annotation says what is wrong.
        cluster.client.create(
            _external_pod("bad", namespace, {"gpupool.dev/gpu-fraction": "lots"}, gpus=None)
        )
        wait_for(
            "the bad pod's workload", lambda: any(w["name"] == "bad" for w in gp.workloads("team"))
        )
        bad = gp.workload("team", "bad")
        assert bad["status"] == "failed"
        assert "gpu-fraction" in bad["events"][0]["message"]
        # Deleting the pod removes its workload.
        cluster.client.delete(Pod, "by-hand", namespace=namespace, grace_period=0)
        wait_for(
            "the workload to go", lambda: all(w["name"] != "by-hand" for w in gp.workloads("team"))
        )


def test_cordoned_node_is_avoided_and_keeps_its_work(cluster: Cluster, tmp_path: Path) -> None:
    with GpupoolOnKubernetes(cluster, tmp_path) as gp:
        first = gp.node("n1", gpus=2)
        cluster.wait_node_ready(first)
        gp.project("team", 4)
        gp.submit("team", "early", gpu=1, duration_s=60)
        gp.wait_status("team", "early", "running")
        cluster.client.patch(Node, first, {"spec": {"unschedulable": True}})
        wait_for(
            "gpupool to see the cordon",
            lambda: any(n["state"] == "cordoned" for n in gp.api.get("/api/v1/nodes").json()),
        )
        gp.submit("team", "late", gpu=1, duration_s=60)
        reason = wait_for(
            "a pending reason about the taint",
            lambda: (
                (gp.workload("team", "late")["pending_reason"] or "")
                if "unschedulable" in (gp.workload("team", "late")["pending_reason"] or "")
                else None
            ),
        )
        assert "unschedulable" in reason
        second = gp.node("n2", gpus=2)
        cluster.wait_node_ready(second)
        gp.wait_status("team", "late", "running")
        assert gp.workload("team", "late")["task_list"][0]["node"] == second
        assert gp.status("team", "early") == "running"  # the cordoned node keeps its work


def test_deleted_node_requeues_its_work(cluster: Cluster, tmp_path: Path) -> None:
    with GpupoolOnKubernetes(cluster, tmp_path) as gp:
        first = gp.node("n1", gpus=1)
        cluster.wait_node_ready(first)
        gp.project("team", 1)
        gp.submit("team", "job", gpu=1, duration_s=120)
        gp.wait_status("team", "job", "running")
        second = gp.node("n2", gpus=1)
        cluster.wait_node_ready(second)
        cluster.client.delete(Node, first)

        def rerun() -> list[dict[str, Any]] | None:
            tasks: list[dict[str, Any]] = gp.workload("team", "job")["task_list"]
            if tasks[-1]["node"] == second and tasks[-1]["state"] == "running":
                return tasks
            seen.append(tasks)
            return None

        seen: list[list[dict[str, Any]]] = []
        try:
            wait_for("the job to run again on the other node", rerun, timeout_s=60)
        except AssertionError as error:
            pods = [
                (
                    pod.metadata and pod.metadata.name,
                    pod.spec and pod.spec.nodeName,
                    pod.status and pod.status.phase,
                )
                for pod in gp.pods("team")
            ]
            raise AssertionError(f"{error}; its tasks: {seen[-1:]}; pods: {pods}") from None
        first_task: dict[str, Any] = gp.workload("team", "job")["task_list"][0]
        assert first_task["state"] == "done" and first == first_task["node"]


def test_logs_come_through_the_pod_log_api(cluster: Cluster, tmp_path: Path) -> None:
    """`gpupool logs` reads the pod log API: the API server asks the node's kubelet (KWOK here,
    serving the control plane's task.log as every task container's log)."""
    with GpupoolOnKubernetes(cluster, tmp_path) as gp:
        cluster.wait_node_ready(gp.node("n1", gpus=1))
        gp.project("team", 1)
        gp.submit("team", "talker", gpu=1, duration_s=30)
        gp.wait_status("team", "talker", "running")
        wait_for("a bound pod", lambda: _bound(gp.pods("team")))

        def log() -> str | None:
            text = str(gp.api.get("/api/v1/workloads/team/talker/logs").json()["text"])
            return text if "hello from a task" in text else None

        assert wait_for("the log", log, 20) == ("hello from a task on a KWOK node\nstep 1 done\n")
        second = gp.api.get("/api/v1/workloads/team/talker/logs", params={"offset": 33}).json()
        assert second["text"] == "step 1 done\n"  # paged by offset like the other executors


def test_node_selector_by_feature_discovery_labels(cluster: Cluster, tmp_path: Path) -> None:
    with GpupoolOnKubernetes(cluster, tmp_path) as gp:
        a100 = gp.node("a100", gpus=2, product="NVIDIA-A100-SXM4-80GB")
        h100 = gp.node("h100", gpus=2, product="NVIDIA-H100-80GB-HBM3")
        cluster.wait_node_ready(a100)
        cluster.wait_node_ready(h100)
        gp.project("team", 4)
        selector = {"nvidia.com/gpu.product": ["NVIDIA-H100-80GB-HBM3"]}
        gp.submit("team", "wants-h100", gpu=1, tasks=2, duration_s=30, node_selector=selector)
        gp.wait_status("team", "wants-h100", "running")
        nodes = {t["node"] for t in gp.workload("team", "wants-h100")["task_list"]}
        assert nodes == {h100}
        listed = {n["name"]: n for n in gp.api.get("/api/v1/nodes").json() if n["name"] == h100}
        assert listed[h100]["gpu_model"] == "NVIDIA-H100-80GB-HBM3"
