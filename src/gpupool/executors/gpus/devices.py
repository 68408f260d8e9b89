"""What a GPU backend answers (devices, how busy they are, GPU memory per process) and the
`GpuBackend` protocol that the local executor asks it through."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol

from gpupool.executors.base import DeviceInfo

__all__ = [
    "DeviceSample",
    "GpuBackend",
    "GpuDevice",
    "GpuUnavailable",
    "ProcessGpuMemory",
    "backend_report",
]


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One device. `index` is NVML's (PCI bus order): give a task its devices by `uuid`, or set
    `CUDA_DEVICE_ORDER=PCI_BUS_ID`, since CUDA's default order may differ."""

    index: int
    uuid: str
    model: str
    memory_mib: int

    def as_device_info(self) -> DeviceInfo:
        """The device as an executor registers it."""
        return DeviceInfo(
            index=self.index, memory_mib=self.memory_mib, model=self.model, uuid=self.uuid
        )


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """How busy one device is now."""

    index: int
    utilization_percent: int
    memory_used_mib: int


@dataclass(frozen=True, slots=True)
class ProcessGpuMemory:
    """GPU memory one process holds on one device now."""

    pid: int
    device_index: int
    used_mib: int


class GpuBackend(Protocol):
    """What the local executor asks of the GPUs of its machine."""

    name: str

    def devices(self) -> tuple[GpuDevice, ...]: ...

    def sample(self) -> tuple[DeviceSample, ...]:
        """Utilization and memory in use per device, now."""
        ...

    def process_memory(self) -> tuple[ProcessGpuMemory, ...]:
        """GPU memory per process per device, now."""
        ...

    def mps_active(self) -> bool:
        """Whether an NVIDIA MPS control daemon serves this machine."""
        ...

    def close(self) -> None: ...


class GpuUnavailable(Exception):  # noqa: N818 - the name says it all
    """NVML cannot be used here (no package, no driver, no GPU); `reason` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def backend_report(backend: GpuBackend) -> dict[str, object]:
    """What `backend` answers, as plain data (devices, one sample, memory per process, MPS):
    the GPU check scripts print it."""
    return {
        "backend": backend.name,
        "devices": [asdict(d) for d in backend.devices()],
        "sample": [asdict(s) for s in backend.sample()],
        "process_memory": [asdict(p) for p in backend.process_memory()],
        "mps_active": backend.mps_active(),
    }
