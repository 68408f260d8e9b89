"""What gpupool creates in a cluster: task pods, Bindings, reservation pods, gang Services.

Pure functions from gpupool's launches to lightkube objects; the executor sends them.
"""

from __future__ import annotations

from collections.abc import Mapping

from lightkube.models.core_v1 import (
    Capabilities,
    Container,
    EnvVar,
    EnvVarSource,
    ObjectFieldSelector,
    ObjectReference,
    PodSpec,
    ResourceRequirements,
    SeccompProfile,
    SecurityContext,
    ServicePort,
    ServiceSpec,
)
from lightkube.models.core_v1 import Toleration as KubeToleration
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod, PodBinding, Service

from gpupool.core.model import MILLI_PER_GPU
from gpupool.executors.base import Launch
from gpupool.executors.kubernetes.objects import (
    DURATION,
    LAUNCH_ID,
    MANAGED,
    PROJECT,
    RESERVED_DEVICE,
    RESERVED_NODE,
    ROLE,
    ROLE_RESERVATION,
    ROLE_TASK,
    TASK_INDEX,
    VISIBLE_DEVICES,
    WORKLOAD,
    dns_label,
    gang_service_name,
    reservation_pod_name,
    task_hostname,
    task_pod_name,
)
from gpupool.executors.kubernetes.settings import KubeSettings, Toleration
from gpupool.executors.taskenv import fraction_hints, gang_rendezvous, task_identity

_RESERVED_ENV = ("NVIDIA_", "CUDA_VISIBLE_DEVICES", "GPUPOOL_")


def _toleration(t: Toleration) -> KubeToleration:
    return KubeToleration(key=t.key, operator=t.operator, value=t.value, effect=t.effect)


def task_environment(launch: Launch, settings: KubeSettings) -> list[EnvVar]:
    """gpupool's variables for a task: who it is, its share of a device, its gang."""
    fraction = launch.gpu_milli / MILLI_PER_GPU
    # A task must not choose its own devices: the variables that name them are gpupool's.
    values: dict[str, str] = {
        key: value for key, value in launch.env if not key.startswith(_RESERVED_ENV)
    }
    values.update(task_identity(launch))
    master_addr = f"{task_hostname(launch.workload, 0)}.{gang_service_name(launch.workload)}"
    values.update(gang_rendezvous(launch, master_addr, settings.master_port))
    if launch.gpu_milli < MILLI_PER_GPU:
        values.update(fraction_hints(fraction))
    env = [EnvVar(name=key, value=value) for key, value in sorted(values.items())]
    if launch.gpu_milli < MILLI_PER_GPU:
        # The device is known only once its reservation reports it: the Binding writes it into
        # this annotation, and the kubelet reads the annotation when it starts the container.
        source = EnvVarSource(
            fieldRef=ObjectFieldSelector(fieldPath=f"metadata.annotations['{VISIBLE_DEVICES}']")
        )
        env += [
            EnvVar(name="NVIDIA_VISIBLE_DEVICES", valueFrom=source),
            EnvVar(name="CUDA_VISIBLE_DEVICES", value="0"),
        ]
    return env


def task_pod(launch: Launch, namespace: str, settings: KubeSettings) -> Pod:
    """The pod of one gpupool-submitted task, created unbound and then bound by gpupool."""
    shared = launch.gpu_milli < MILLI_PER_GPU
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if not shared:
        limits[settings.gpu_resource] = str(len(launch.devices))
    if launch.cpu_milli:
        requests["cpu"] = f"{launch.cpu_milli}m"
    if launch.memory_mib:
        requests["memory"] = f"{launch.memory_mib}Mi"
        limits["memory"] = f"{launch.memory_mib}Mi"
    annotations = {}
    if launch.duration_s is not None:
        annotations[DURATION] = f"{max(0.0, launch.duration_s):.3f}s"
    gang = launch.world_size > 1
    return Pod(
        metadata=ObjectMeta(
            name=task_pod_name(launch),
            namespace=namespace,
            labels={
                MANAGED: "true",
                ROLE: ROLE_TASK,
                PROJECT: dns_label(launch.project),
                WORKLOAD: dns_label(launch.workload),
                TASK_INDEX: str(launch.task_index),
                LAUNCH_ID: launch.launch_id,
            },
            annotations=annotations or None,
        ),
        spec=PodSpec(
            schedulerName=settings.scheduler_name,
            restartPolicy="Never",
            terminationGracePeriodSeconds=launch.grace_period_s,
            automountServiceAccountToken=False,
            enableServiceLinks=False,
            hostname=task_hostname(launch.workload, launch.task_index) if gang else None,
            subdomain=gang_service_name(launch.workload) if gang else None,
            tolerations=[_toleration(t) for t in settings.default_tolerations] or None,
            containers=[
                Container(
                    name="task",
                    image=launch.image or settings.default_image,
                    command=list(launch.command) or None,
                    env=task_environment(launch, settings),
                    resources=ResourceRequirements(
                        limits=limits or None, requests=requests or None
                    ),
                    securityContext=SecurityContext(allowPrivilegeEscalation=False),
                )
            ],
        ),
    )


def binding(pod_name: str, namespace: str, node: str, annotations: Mapping[str, str]) -> PodBinding:
    """Binds a pod to a node; its annotations are written onto the pod in the same step."""
    return PodBinding(
        metadata=ObjectMeta(name=pod_name, namespace=namespace, annotations=dict(annotations)),
        target=ObjectReference(apiVersion="v1", kind="Node", name=node),
    )


def reservation_pod(node: str, device: int, settings: KubeSettings) -> Pod:
    """Holds one device of `node` for the pods that share it: it requests the GPU, so neither
    the device plugin nor another scheduler hands it out, and reports which device it got."""
    return Pod(
        metadata=ObjectMeta(
            name=reservation_pod_name(node, device),
            namespace=settings.system_namespace,
            labels={
                MANAGED: "true",
                ROLE: ROLE_RESERVATION,
                RESERVED_NODE: dns_label(node),
                RESERVED_DEVICE: str(device),
            },
            annotations={RESERVED_NODE: node},
        ),
        spec=PodSpec(
            nodeName=node,
            schedulerName=settings.scheduler_name,
            restartPolicy="Always",
            terminationGracePeriodSeconds=0,
            serviceAccountName="gpupool-reservation",
            enableServiceLinks=False,
            tolerations=[KubeToleration(operator="Exists")],
            priorityClassName=None,
            containers=[
                Container(
                    name="reserve",
                    image=settings.reservation_image,
                    command=["python", "-m", "gpupool.executors.kubernetes.reserve"],
                    env=[
                        EnvVar(
                            name="POD_NAME",
                            valueFrom=EnvVarSource(
                                fieldRef=ObjectFieldSelector(fieldPath="metadata.name")
                            ),
                        ),
                        EnvVar(
                            name="POD_NAMESPACE",
                            valueFrom=EnvVarSource(
                                fieldRef=ObjectFieldSelector(fieldPath="metadata.namespace")
                            ),
                        ),
                    ],
                    resources=ResourceRequirements(
                        limits={settings.gpu_resource: "1", "cpu": "50m", "memory": "64Mi"},
                        requests={settings.gpu_resource: "1", "cpu": "10m", "memory": "32Mi"},
                    ),
                    securityContext=SecurityContext(
                        allowPrivilegeEscalation=False,
                        readOnlyRootFilesystem=True,
                        runAsNonRoot=True,
                        capabilities=Capabilities(drop=["ALL"]),
                        seccompProfile=SeccompProfile(type="RuntimeDefault"),
                    ),
                )
            ],
        ),
    )


def gang_service(workload: str, project: str, namespace: str, port: int) -> Service:
    """Headless Service that gives a gang's pods DNS names (`MASTER_ADDR`)."""
    return Service(
        metadata=ObjectMeta(
            name=gang_service_name(workload),
            namespace=namespace,
            labels={MANAGED: "true", WORKLOAD: dns_label(workload), PROJECT: dns_label(project)},
        ),
        spec=ServiceSpec(
            clusterIP="None",
            selector={WORKLOAD: dns_label(workload), ROLE: ROLE_TASK},
            ports=[ServicePort(name="master", port=port)],
            publishNotReadyAddresses=True,
        ),
    )
