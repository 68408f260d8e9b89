"""One simulated cluster under `gpupool what-if` and `gpupool simulate`.

Simulated time, workload records and their states, core decisions carried out (bind, evict with
a grace period and checkpoint progress, move), completions, the settle loop, and the hooks each
driver observes it through. It imports the core and the standard library only.

  events   the event queue: what happens at which simulated second, in which order
  records  a workload's record, its lifecycle status and printed state; checkpoint and
           GPU-holding arithmetic
  hooks    settings, the `ClusterHooks` seam, settle and run outcomes
  cluster  `SimulatedCluster`: the loop and every state change
  words    placements and decisions in words
"""

from gpupool.simcluster.cluster import SimulatedCluster
from gpupool.simcluster.events import Event, EventKind, EventQueue
from gpupool.simcluster.hooks import (
    ClusterHooks,
    ClusterSettings,
    CoreContractError,
    CycleFunction,
    QuietHooks,
    RunEnd,
    SettleResult,
    SettleStatus,
)
from gpupool.simcluster.records import State, WorkloadRecord, checkpointed_s, held_gpu_milli

__all__ = [
    "ClusterHooks",
    "ClusterSettings",
    "CoreContractError",
    "CycleFunction",
    "Event",
    "EventKind",
    "EventQueue",
    "QuietHooks",
    "RunEnd",
    "SettleResult",
    "SettleStatus",
    "SimulatedCluster",
    "State",
    "WorkloadRecord",
    "checkpointed_s",
    "held_gpu_milli",
]
