"""The packing experiment placed as the scheduling cycle places tasks.

`Packer` (core.packing) scores every node for every pod, as the FGD artifact does. The live
scheduler's placer scores a bounded number of candidate nodes found through its capacity
indexes (`SchedulerSettings.placement_candidates`). `CyclePacker` runs the same pod stream
through that placer, over a session of the trace's nodes, so the benchmark can say what the
server itself would pack, with the same policy object.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.core.model import (
    MILLI_PER_GPU,
    GpuRequest,
    Node,
    Project,
    SchedulerSettings,
    Snapshot,
    Workload,
    WorkloadType,
)
from gpupool.core.packing import PackNode, PackPlacement, PodShape, TypicalShape
from gpupool.core.placement import Placer
from gpupool.core.session import Session, Statement, WorkRecord

_PROJECT = "trace"


class CyclePacker:
    """Places pods one at a time with the cycle's placer; see the module docstring."""

    def __init__(
        self,
        nodes: Sequence[PackNode],
        policy: str,
        typical: Sequence[TypicalShape],
        candidates: int,
    ) -> None:
        snapshot = Snapshot(
            nodes=tuple(
                Node(
                    name=n.name,
                    gpu_count=n.gpu_count,
                    gpu_model=n.gpu_model,
                    cpu_milli=n.cpu_milli,
                    memory_mib=n.memory_mib,
                )
                for n in nodes
            ),
            projects=(Project(name=_PROJECT),),
            workloads=(),
            settings=SchedulerSettings(placement=policy, placement_candidates=candidates),
        )
        self.session = Session(snapshot)
        self.placer = Placer(self.session, tuple(typical))
        self._statement = Statement(self.session)

    def place(self, shape: PodShape) -> PackPlacement | None:
        if shape.gpu_count == 1 and shape.gpu_milli < MILLI_PER_GPU:
            request = GpuRequest.fraction(shape.gpu_milli)
        else:
            request = GpuRequest.whole(shape.gpu_count)
        session = self.session
        spec = Workload(
            name=f"pod-{len(session.works)}",
            project=_PROJECT,
            type=WorkloadType.TRAIN,
            gpu=request,
            cpu_milli=shape.cpu_milli,
            memory_mib=shape.memory_mib,
            node_selector=(("gpu_model", shape.gpu_models),) if shape.gpu_models else (),
        )
        alloc = self.placer.find(spec, 0)
        if alloc is None:
            return None
        work = WorkRecord(len(session.works), spec, 0, shape.gpu_milli * shape.gpu_count)
        session.works.append(work)
        self._statement.place(work, alloc)
        return PackPlacement(alloc.node, alloc.devices)
