"""The executor seam: what the scheduling loop asks of whatever runs tasks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "DeviceInfo",
    "DiscoversWorkloads",
    "Executor",
    "Exit",
    "Launch",
    "NodeInventory",
    "RunRecord",
    "Stop",
    "UsageSample",
    "running_launches",
    "unacknowledged_exits",
]


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    index: int
    memory_mib: int
    model: str | None = None
    uuid: str | None = None


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """A machine as an executor registers it."""

    name: str
    devices: tuple[DeviceInfo, ...]
    cpu_milli: int | None = None
    memory_mib: int | None = None
    labels: tuple[tuple[str, str], ...] = ()
    state: str = "ready"
    """`ready`; on Kubernetes also `cordoned` and `notready` (kept, but no new work lands)."""
    taints: tuple[tuple[str, str, str], ...] = ()
    """(key, value, effect): Kubernetes node taints; only tolerating work lands here."""

    @property
    def gpu_count(self) -> int:
        return len(self.devices)

    @property
    def gpu_memory_mib(self) -> int:
        return min((d.memory_mib for d in self.devices), default=81920)

    @property
    def gpu_model(self) -> str | None:
        return self.devices[0].model if self.devices else None


@dataclass(frozen=True, slots=True)
class Launch:
    """One start of one task. `launch_id` is unique for ever: starting it again is a no-op."""

    launch_id: str
    project: str
    workload: str
    task_index: int
    node: str
    devices: tuple[int, ...]
    gpu_milli: int
    """Charge per device for a shared task (fraction of a device); 1000 for whole devices."""
    gpu_memory_mib: int
    """Memory per device the task is given (its request)."""
    command: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    grace_period_s: int = 30
    duration_s: float | None = None
    """Simulated executors: how long the task 'runs'. Real executors run the command."""
    burst_memory_mib: int | None = None
    """Dynamic fraction: memory per device it may use while the device has it free."""
    working_dir: str | None = None
    image: str | None = None
    """Container image (Kubernetes); other executors run `command` on their own machine."""
    world_size: int = 1
    """Tasks of the workload: a gang's tasks get RANK, WORLD_SIZE and a master address."""
    cpu_milli: int = 0
    memory_mib: int = 0
    external_ref: str | None = None
    """`namespace/name` of a pod someone else created (Kubernetes): bound, not created."""
    workload_type: str = "train"
    """`train`, `interactive` or `inference` (the simulated executor's utilization model)."""

    def to_json(self) -> dict[str, Any]:
        """As a JSON object, for executors' journals."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["devices"] = list(self.devices)
        data["command"] = list(self.command)
        data["env"] = [list(pair) for pair in self.env]
        return data

    @staticmethod
    def from_json(data: dict[str, Any]) -> Launch:
        """The launch `to_json` wrote; fields a journal from an older version lacks default."""
        known = {f.name for f in fields(Launch)}
        values = {key: value for key, value in data.items() if key in known}
        values["devices"] = tuple(values["devices"])
        values["command"] = tuple(values.get("command", ()))
        values["env"] = tuple((k, v) for k, v in values.get("env", ()))
        return Launch(**values)


@dataclass(frozen=True, slots=True)
class Stop:
    launch_id: str
    grace_period_s: int
    reason: str


@dataclass(frozen=True, slots=True)
class Exit:
    """A launch that ended: by itself (`exit_code` 0 or not) or because it was stopped."""

    launch_id: str
    exit_code: int
    finished_at_s: float
    reason: str
    stopped: bool


@dataclass(frozen=True, slots=True)
class UsageSample:
    """One device's measured use at one moment (NVML, or declared devices' reports)."""

    at_s: float
    node: str
    device_index: int
    utilization_percent: int
    memory_used_mib: int


class RunRecord(Protocol):
    """What every executor keeps per launch, whatever else it keeps."""

    ended: Exit | None
    acknowledged: bool


def running_launches(runs: Mapping[str, RunRecord]) -> set[str]:
    """Launch ids started and not ended."""
    return {launch_id for launch_id, run in runs.items() if run.ended is None}


def unacknowledged_exits(runs: Mapping[str, RunRecord]) -> list[Exit]:
    """Ended launches whose end the server has not acknowledged yet."""
    return [run.ended for run in runs.values() if run.ended is not None and not run.acknowledged]


class Executor(Protocol):
    """Runs launches on its nodes. Every method is idempotent and safe to repeat after a crash.

    `start` must record a launch durably before it starts anything, so that a launch id is
    started at most once whatever happens to the caller. `exits` reports ended launches until
    they are acknowledged, so an exit seen just before a crash is seen again after it.
    """

    name: str

    def inventory(self) -> Sequence[NodeInventory]: ...

    def start(self, launches: Sequence[Launch]) -> None: ...

    def stop(self, stops: Sequence[Stop]) -> None: ...

    def alive(self) -> set[str]:
        """Launch ids started and not yet ended."""
        ...

    def known(self, launch_ids: Sequence[str]) -> set[str]:
        """Those of `launch_ids` this executor ever started."""
        ...

    def exits(self) -> Sequence[Exit]:
        """Ended launches not yet acknowledged."""
        ...

    def acknowledge(self, launch_ids: Sequence[str]) -> None: ...

    def read_log(self, launch_id: str, offset: int, limit: int) -> tuple[bytes, bool]:
        """Up to `limit` bytes of the launch's log from `offset`, and whether it has ended."""
        ...

    def log_size(self, launch_id: str) -> tuple[int, bool]:
        """The length of the launch's log now, and whether it had ended before it was measured
        (then the length is final: everything the task wrote is in it)."""
        ...

    def usage_samples(self) -> Sequence[UsageSample]:
        """Device samples taken since the last call (the executor samples every few seconds)."""
        ...

    def stop_all(self, timeout_s: float) -> None:
        """Stop every task and wait (at most about `timeout_s`) until they are gone."""
        ...

    def close(self) -> None:
        """Release files and handles; tasks keep running (a new executor adopts them)."""
        ...


@runtime_checkable
class DiscoversWorkloads(Protocol):
    """An executor whose cluster holds work that others submitted (Kubernetes pods that name
    gpupool as their scheduler): the loop turns it into workloads every iteration."""

    def set_projects(self, projects: Sequence[str]) -> None:
        """The projects that exist, so that the executor knows which namespaces are whose."""
        ...

    def external_pods(self) -> Sequence[Any]:
        """The pods waiting for or placed by gpupool that it did not create itself."""
        ...

    def set_waiting_reasons(self, reasons: dict[tuple[str, str], str]) -> None:
        """Why each of those pods waits, by (namespace, name), to show where their owners
        look (Kubernetes: the pod's PodScheduled condition)."""
        ...
