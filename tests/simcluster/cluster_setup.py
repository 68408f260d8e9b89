"""The small cluster the simulated-cluster tests run on: two nodes of two GPUs, one project."""

from __future__ import annotations

from gpupool.core.model import GpuRequest, Node, Project, Resources, Workload, WorkloadType

NODES = (Node(name="n1", gpu_count=2), Node(name="n2", gpu_count=2))
PROJECTS = (Project(name="a", quota=Resources(gpu_milli=4000)),)


def job(name: str, *, preemptible: bool = True, tasks: int = 1, seq: int = 0) -> Workload:
    """A training workload of project `a`, one whole GPU per task."""
    return Workload(
        name=name,
        project="a",
        type=WorkloadType.TRAIN,
        gpu=GpuRequest.whole(1),
        tasks=tasks,
        preemptible=preemptible,
        submit_seq=seq,
    )
