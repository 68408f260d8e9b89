"""Kubernetes objects <-> gpupool's nodes, launches and workloads: pure functions, no API calls.

What gpupool reads from a pod created by someone else (`schedulerName: gpupool`), all optional:

- `gpupool.dev/pod-group` and `gpupool.dev/min-available`: pods of one group are one gang
  workload; it starts when `min-available` of them (default: all the group's pods seen) fit.
- `gpupool.dev/gpu-fraction` (`0.5`), `gpupool.dev/gpu-memory` (`8G`) and
  `gpupool.dev/gpu-fraction-limit` (`0.8`, a dynamic fraction): a task that shares a device. Such
  a pod must not request `nvidia.com/gpu`; without these it gets the whole GPUs it requests.
- `gpupool.dev/workload-type` (`train`, `interactive`, `inference`), `gpupool.dev/priority`,
  `gpupool.dev/preemptible` (`true`/`false`).

What gpupool writes: labels on the pods it creates (`gpupool.dev/managed=true`, role, project,
workload, task index, launch id) and, through the Binding, the annotations `gpupool.dev/launch-id`
and, on sharing pods, `gpupool.dev/visible-devices` (the UUID of the reserved device).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from lightkube.models.core_v1 import (
    Container,
    PodSpec,
)
from lightkube.resources.core_v1 import Node, Pod
from lightkube.utils.quantity import parse_quantity

from gpupool.executors.base import DeviceInfo, Launch, NodeInventory
from gpupool.executors.kubernetes.settings import PREFIX, KubeSettings, Toleration
from gpupool.units import parse_gpu, parse_gpu_limit, parse_memory_mib

# Labels gpupool sets on what it creates.
MANAGED = f"{PREFIX}/managed"
ROLE = f"{PREFIX}/role"
PROJECT = f"{PREFIX}/project"
WORKLOAD = f"{PREFIX}/workload"
TASK_INDEX = f"{PREFIX}/task-index"
LAUNCH_ID = f"{PREFIX}/launch-id"
RESERVED_NODE = f"{PREFIX}/reserved-node"
CREATED_FOR = f"{PREFIX}/created-for"
"""On a namespace gpupool made from the template: the project it made it for."""
RESERVED_DEVICE = f"{PREFIX}/reserved-device"
ROLE_TASK = "task"
ROLE_RESERVATION = "reservation"

# Annotations users set on their own pods.
POD_GROUP = f"{PREFIX}/pod-group"
MIN_AVAILABLE = f"{PREFIX}/min-available"
GPU_FRACTION = f"{PREFIX}/gpu-fraction"
GPU_MEMORY = f"{PREFIX}/gpu-memory"
GPU_FRACTION_LIMIT = f"{PREFIX}/gpu-fraction-limit"
WORKLOAD_TYPE = f"{PREFIX}/workload-type"
PRIORITY = f"{PREFIX}/priority"
PREEMPTIBLE = f"{PREFIX}/preemptible"

# Annotations gpupool writes.
VISIBLE_DEVICES = f"{PREFIX}/visible-devices"
GPU_UUID = f"{PREFIX}/gpu-uuid"
"""On a reservation pod: the device it was given, written by the pod itself (`reserve`)."""
ACKNOWLEDGED = f"{PREFIX}/acknowledged"
DEVICES = f"{PREFIX}/devices"
"""gpupool's device indices of a bound pod ("0,1"): a new leader reads them back."""
DURATION = "test.gpupool.dev/complete-after"
"""Simulated clusters (KWOK): how long a task 'runs' (from the workload's `duration_s`)."""

NODE_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
NODE_NOT_READY = "node.kubernetes.io/not-ready"
DEFAULT_GPU_MEMORY_MIB = 81920
_MAX_NAME = 63
_WORKLOAD_TYPES = ("train", "interactive", "inference")


def dns_label(text: str, max_length: int = _MAX_NAME) -> str:
    """`text` as a DNS-1123 label (lower-case alphanumerics and '-'), with a short hash when it
    had to change or be cut, so that two names never meet by accident."""
    clean = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "x"
    if clean == text and len(clean) <= max_length:
        return clean
    digest = hashlib.sha256(text.encode()).hexdigest()[:6]
    return f"{clean[: max_length - 7].rstrip('-')}-{digest}"


def namespace_for(project: str, settings: KubeSettings) -> str:
    return dns_label(settings.namespace_template.format(project=project))


def format_devices(devices: tuple[int, ...]) -> str:
    return ",".join(str(d) for d in devices)


def parse_devices(text: str) -> tuple[int, ...]:
    """The indices `format_devices` wrote; nothing for anything else."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        return ()


def task_pod_name(launch: Launch) -> str:
    """Unique per launch, readable: `<workload>-<task>-<launch id prefix>`."""
    base = dns_label(f"{launch.workload}-{launch.task_index}", _MAX_NAME - 9)
    return f"{base}-{launch.launch_id[:8]}"


def reservation_pod_name(node: str, device: int) -> str:
    return dns_label(f"gpupool-reserve-{node}-{device}")


def gang_service_name(workload: str) -> str:
    return dns_label(f"{workload}-gang")


def task_hostname(workload: str, task_index: int) -> str:
    return dns_label(f"{workload}-{task_index}")


# --- nodes -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeView:
    """What gpupool makes of a Node object."""

    inventory: NodeInventory
    state: str
    """`ready`, `cordoned` or `notready`."""
    taints: tuple[tuple[str, str, str], ...]
    """(key, value, effect) of its NoSchedule/NoExecute/PreferNoSchedule taints."""


def _quantity_int(value: str | None, scale: int = 1) -> int | None:
    number = parse_quantity(value) if value is not None else None
    if number is None:
        return None
    return int(number * scale)


def _mib(value: str | None) -> int | None:
    number = parse_quantity(value) if value is not None else None
    return None if number is None else int(number / (1 << 20))


def node_view(node: Node, gpu_resource: str = "nvidia.com/gpu") -> NodeView | None:
    """None for a node with no GPUs to offer (none allocatable, or a name too long to store)."""
    meta = node.metadata
    if meta is None or meta.name is None or len(meta.name) > _MAX_NAME:
        return None
    allocatable = (node.status.allocatable if node.status else None) or {}
    gpus = _quantity_int(allocatable.get(gpu_resource)) or 0
    if gpus <= 0:
        return None
    labels = dict(meta.labels or {})
    memory_mib = DEFAULT_GPU_MEMORY_MIB
    with contextlib.suppress(ValueError):
        memory_mib = int(labels.get("nvidia.com/gpu.memory", "")) or DEFAULT_GPU_MEMORY_MIB
    model = labels.get("nvidia.com/gpu.product")
    devices = tuple(
        DeviceInfo(index=i, memory_mib=memory_mib, model=model) for i in range(min(gpus, 64))
    )
    inventory = NodeInventory(
        name=meta.name,
        devices=devices,
        cpu_milli=_quantity_int(allocatable.get("cpu"), 1000),
        memory_mib=_mib(allocatable.get("memory")),
        labels=tuple(sorted(labels.items())),
    )
    spec = node.spec
    taints = {
        (t.key, t.value or "", t.effect)
        for t in ((spec.taints if spec else None) or [])
        if t.effect in ("NoSchedule", "NoExecute", "PreferNoSchedule")
    }
    ready = any(
        c.type == "Ready" and c.status == "True"
        for c in ((node.status.conditions if node.status else None) or [])
    )
    cordoned = bool(spec and spec.unschedulable)
    # What the node lifecycle controller would add; added here too so that a cluster that has
    # not caught up yet is not trusted with new work.
    if cordoned:
        taints.add((NODE_UNSCHEDULABLE, "", "NoSchedule"))
    if not ready:
        taints.add((NODE_NOT_READY, "", "NoSchedule"))
    state = "notready" if not ready else "cordoned" if cordoned else "ready"
    return NodeView(inventory, state, tuple(sorted(taints)))


# --- pods: GPU accounting and exits ----------------------------------------------------------


def pod_gpu_count(pod: Pod, gpu_resource: str = "nvidia.com/gpu") -> int:
    """Whole devices a pod asks the device plugin for (limits, as the device plugin reads)."""
    spec = pod.spec
    if spec is None:
        return 0
    total = 0
    for container in spec.containers or []:
        resources = container.resources
        amount = None
        if resources is not None:
            amount = (resources.limits or {}).get(gpu_resource) or (resources.requests or {}).get(
                gpu_resource
            )
        total += _quantity_int(amount) or 0
    init = 0
    for container in spec.initContainers or []:
        resources = container.resources
        if resources is not None:
            init = max(init, _quantity_int((resources.limits or {}).get(gpu_resource)) or 0)
    return max(total, init)


def pod_is_terminal(pod: Pod) -> bool:
    phase = pod.status.phase if pod.status else None
    return phase in ("Succeeded", "Failed")


def pod_exit(pod: Pod) -> tuple[int, str] | None:
    """(exit code, reason) of a finished pod; None while it runs."""
    status = pod.status
    if status is None or status.phase not in ("Succeeded", "Failed"):
        return None
    codes = []
    reasons = []
    for container in status.containerStatuses or []:
        terminated = container.state.terminated if container.state else None
        if terminated is not None:
            codes.append(terminated.exitCode)
            if terminated.reason:
                reasons.append(terminated.reason)
    failed = [code for code in codes if code != 0]
    if status.phase == "Succeeded":
        return 0, "completed"
    code = failed[0] if failed else 1
    why = status.reason or (reasons[0] if reasons else "Failed")
    message = f": {status.message}" if status.message else ""
    return code, f"pod failed ({why}){message}"


# --- pods created by others: external workloads ----------------------------------------------


@dataclass(frozen=True, slots=True)
class ExternalPod:
    """A pod someone else created for gpupool to place, read into gpupool's terms."""

    namespace: str
    name: str
    uid: str
    project: str
    group: str | None
    min_available: int | None
    gpu_kind: str
    """`whole`, `fraction` or `memory`, as in the database."""
    gpu_amount: int
    gpu_limit_milli: int | None
    cpu_milli: int
    memory_mib: int
    node_selector: tuple[tuple[str, tuple[str, ...]], ...]
    tolerations: tuple[Toleration, ...]
    workload_type: str
    priority: int | None
    preemptible: bool | None
    image: str | None
    command: tuple[str, ...]
    grace_period_s: int
    created_at: str
    node: str | None
    """Already bound (by gpupool before a restart, or by hand)."""
    launch_id: str | None
    terminating: bool
    finished: bool
    problem: str | None = None
    """Why it cannot be scheduled as written (a bad annotation); the rest may be defaults."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def workload_key(self) -> str:
        """What makes pods one workload: their group, else the pod itself."""
        return f"{self.namespace}/{'group:' + self.group if self.group else self.name}"


def _requests(container: Container, name: str) -> str | None:
    resources = container.resources
    if resources is None:
        return None
    return (resources.requests or {}).get(name) or (resources.limits or {}).get(name)


def external_pod(pod: Pod, project: str, gpu_resource: str = "nvidia.com/gpu") -> ExternalPod:
    """Read a pod into gpupool's terms; a bad annotation is a `problem`, never an exception."""
    meta = pod.metadata
    spec = pod.spec
    assert meta is not None and spec is not None
    annotations = dict(meta.annotations or {})
    problems: list[str] = []
    containers = spec.containers or []
    cpu_milli = sum(_quantity_int(_requests(c, "cpu"), 1000) or 0 for c in containers)
    memory_mib = sum(_mib(_requests(c, "memory")) or 0 for c in containers)
    whole = pod_gpu_count(pod, gpu_resource)
    kind, amount, limit = "whole", whole, None
    fraction = annotations.get(GPU_FRACTION)
    memory = annotations.get(GPU_MEMORY)
    if fraction is not None or memory is not None:
        if whole:
            problems.append(
                f"it requests {whole} {gpu_resource} and also annotates {GPU_FRACTION} or "
                f"{GPU_MEMORY}: a pod that shares a device must not request {gpu_resource}"
            )
        if fraction is not None and memory is not None:
            problems.append(f"annotate {GPU_FRACTION} or {GPU_MEMORY}, not both")
        key = GPU_MEMORY if fraction is None else GPU_FRACTION
        try:
            if memory is not None and fraction is None:
                kind, amount = "memory", parse_memory_mib(memory)
            elif fraction is not None:
                parsed = parse_gpu(fraction)
                if parsed.is_whole:
                    problems.append(
                        f"{GPU_FRACTION} {fraction!r} is not below 1: request whole devices "
                        f"with {gpu_resource} instead"
                    )
                kind, amount = "fraction", parsed.milli
                if GPU_FRACTION_LIMIT in annotations:
                    key = GPU_FRACTION_LIMIT
                    limit = parse_gpu_limit(annotations[GPU_FRACTION_LIMIT], parsed)
        except ValueError as error:
            problems.append(f"annotation {key}: {error}")
    elif GPU_FRACTION_LIMIT in annotations:
        problems.append(f"{GPU_FRACTION_LIMIT} needs {GPU_FRACTION} too")
    elif whole == 0:
        problems.append(
            f"it requests no GPU: request {gpu_resource} or annotate {GPU_FRACTION} or "
            f"{GPU_MEMORY}; pods without GPUs belong to the default scheduler"
        )
    if kind != "whole" and amount <= 0:
        kind, amount = "whole", max(whole, 1)
    if kind == "whole" and amount <= 0:
        amount = 1
    workload_type = annotations.get(WORKLOAD_TYPE, "train")
    if workload_type not in _WORKLOAD_TYPES:
        problems.append(
            f"{WORKLOAD_TYPE} {workload_type!r} is not one of {', '.join(_WORKLOAD_TYPES)}"
        )
        workload_type = "train"
    priority = _int_annotation(annotations, PRIORITY, -1_000_000, 1_000_000, problems)
    min_available = _int_annotation(annotations, MIN_AVAILABLE, 1, 10_000, problems)
    preemptible: bool | None = None
    if PREEMPTIBLE in annotations:
        text = annotations[PREEMPTIBLE].strip().lower()
        if text in ("true", "false"):
            preemptible = text == "true"
        else:
            problems.append(
                f"{PREEMPTIBLE} must be true or false (got {annotations[PREEMPTIBLE]!r})"
            )
    group = annotations.get(POD_GROUP) or None
    if group is not None and len(group) > 253:
        problems.append(f"{POD_GROUP} is longer than 253 characters")
        group = group[:253]
    first = containers[0] if containers else None
    command = tuple((first.command or []) + (first.args or [])) if first else ()
    return ExternalPod(
        namespace=meta.namespace or "default",
        name=meta.name or "",
        uid=meta.uid or "",
        project=project,
        group=group,
        min_available=min_available,
        gpu_kind=kind,
        gpu_amount=amount,
        gpu_limit_milli=limit,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        node_selector=_node_selector(spec),
        tolerations=tuple(
            Toleration(
                key=t.key or None, operator=t.operator or "Equal", value=t.value, effect=t.effect
            )
            for t in spec.tolerations or []
        ),
        workload_type=workload_type,
        priority=priority,
        preemptible=preemptible,
        image=first.image if first else None,
        command=command[:256],
        grace_period_s=(
            30
            if spec.terminationGracePeriodSeconds is None
            else max(0, min(86_400, int(spec.terminationGracePeriodSeconds)))
        ),
        created_at=str(meta.creationTimestamp or ""),
        node=spec.nodeName or None,
        launch_id=annotations.get(LAUNCH_ID),
        terminating=meta.deletionTimestamp is not None,
        finished=pod_is_terminal(pod),
        problem="; ".join(problems) or None,
    )


def _int_annotation(
    annotations: Mapping[str, str], key: str, low: int, high: int, problems: list[str]
) -> int | None:
    if key not in annotations:
        return None
    try:
        value = int(annotations[key].strip())
    except ValueError:
        problems.append(f"{key} must be a whole number (got {annotations[key]!r})")
        return None
    if not low <= value <= high:
        problems.append(f"{key} must be between {low} and {high} (got {value})")
        return None
    return value


def _node_selector(spec: PodSpec) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`nodeSelector` (and required node affinity of the simple `In` kind) as key -> values."""
    selector: dict[str, tuple[str, ...]] = {
        key: (value,) for key, value in (spec.nodeSelector or {}).items()
    }
    affinity = spec.affinity.nodeAffinity if spec.affinity else None
    required = affinity.requiredDuringSchedulingIgnoredDuringExecution if affinity else None
    terms = required.nodeSelectorTerms if required else []
    if len(terms) == 1:
        for expression in terms[0].matchExpressions or []:
            if expression.operator == "In" and expression.values:
                selector[expression.key] = tuple(expression.values)
    return tuple(sorted(selector.items()))


# --- what gpupool creates --------------------------------------------------------------------
