"""A snapshot after one cycle's decisions, as the simulated cluster carries them out at once.

Property tests and the cycle benchmark iterate cycles on bare snapshots: this puts the
snapshot's workloads into a `SimulatedCluster` with zero grace period (running ones as
running), applies the decisions there, and reads the snapshot back. So there is one way to
carry out a decision, not a second copy for snapshots.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gpupool.core.decisions import CycleResult, Decision
from gpupool.core.model import Snapshot
from gpupool.simcluster.cluster import SimulatedCluster
from gpupool.simcluster.hooks import ClusterSettings
from gpupool.simcluster.records import State

__all__ = ["apply_decisions"]


def apply_decisions(snapshot: Snapshot, decisions: Iterable[Decision]) -> Snapshot:
    """The snapshot after `decisions`, with evicted work stopped at once.

    Evicted preemptible workloads return to pending; a non-preemptible one evicted is dropped
    (it failed). Started workloads get `started_at_s = snapshot.now_s`. A decision the cluster
    cannot carry out (about a workload that is not pending or running) is a `CoreContractError`.
    """
    cluster = SimulatedCluster(
        snapshot.nodes, snapshot.projects, ClusterSettings(scheduler=snapshot.settings), _no_cycle
    )
    for workload in snapshot.workloads:
        state = State.RUNNING if workload.placements else State.PENDING
        cluster.add(workload, None, state)
    cluster.apply(decisions, snapshot.now_s)
    return replace(snapshot, workloads=cluster.snapshot(snapshot.now_s).workloads)


def _no_cycle(snapshot: Snapshot) -> CycleResult:
    raise AssertionError("apply_decisions runs no cycle")
