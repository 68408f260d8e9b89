"""The GPUs of this machine as the NVIDIA driver reports them (NVML, through `pynvml` from the
`nvidia-ml-py` package, imported only when NVML is opened), and whether an MPS daemon runs."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from gpupool.executors.gpus.devices import (
    DeviceSample,
    GpuDevice,
    GpuUnavailable,
    ProcessGpuMemory,
)

__all__ = ["NvmlBackend", "mps_active"]

_MIB = 2**20


# --- MPS --------------------------------------------------------------------------------------

_MPS_COMM_PREFIX = "nvidia-cuda-mps"
"""The kernel truncates /proc/<pid>/comm to 15 characters: `nvidia-cuda-mps-control` reads as
`nvidia-cuda-mps` (so does `nvidia-cuda-mps-server`, which runs only under a control daemon)."""


def mps_active(proc_root: Path = Path("/proc"), environ: Mapping[str, str] | None = None) -> bool:
    """Whether an MPS control daemon runs here: its process is visible, or its pipe directory
    (`$CUDA_MPS_PIPE_DIRECTORY`, default /tmp/nvidia-mps) has a `control` pipe, which also
    finds a daemon in another PID namespace that shares the directory."""
    env = os.environ if environ is None else environ
    pipe_dir = Path(env.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps")
    try:
        if (pipe_dir / "control").exists():
            return True
    except OSError:
        pass
    try:
        entries = list(proc_root.iterdir())
    except OSError:
        return False
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text(encoding="utf-8", errors="replace").strip()
        except OSError:  # gone meanwhile, or hidden
            continue
        if comm.startswith(_MPS_COMM_PREFIX):
            return True
    return False


# --- NVML -------------------------------------------------------------------------------------


class _Nvml:
    """The few pynvml calls used, typed: the untyped module stays inside this class."""

    def __init__(self, module: Any) -> None:
        self._m = module
        self._mismatch: type[Exception] = getattr(
            module, "NVMLLibraryMismatchError", _NoMismatchError
        )
        self.error: tuple[type[Exception], ...] = (module.NVMLError, self._mismatch)
        """What a call may raise: NVMLError, or (not a subclass of it) a driver too old for
        this pynvml."""

    def init(self) -> None:
        self._m.nvmlInit()

    def shutdown(self) -> None:
        self._m.nvmlShutdown()

    def device_count(self) -> int:
        return int(self._m.nvmlDeviceGetCount())

    def handle(self, index: int) -> object:
        handle: object = self._m.nvmlDeviceGetHandleByIndex(index)
        return handle

    def uuid(self, handle: object) -> str:
        return _text(self._m.nvmlDeviceGetUUID(handle))

    def name(self, handle: object) -> str:
        return _text(self._m.nvmlDeviceGetName(handle))

    def memory_bytes(self, handle: object) -> tuple[int, int]:
        """(total, used) in bytes."""
        info = self._m.nvmlDeviceGetMemoryInfo(handle)
        return int(info.total), int(info.used)

    def utilization_percent(self, handle: object) -> int:
        return int(self._m.nvmlDeviceGetUtilizationRates(handle).gpu)

    def compute_processes(self, handle: object) -> list[tuple[int, int]]:
        """(pid, used bytes) of the compute processes on the device."""
        return self._processes("nvmlDeviceGetComputeRunningProcesses", handle)

    def graphics_processes(self, handle: object) -> list[tuple[int, int]]:
        return self._processes("nvmlDeviceGetGraphicsRunningProcesses", handle)

    def _processes(self, function: str, handle: object) -> list[tuple[int, int]]:
        """Recent pynvml asks for the `_v3` call, which older drivers (before about R510) lack:
        it then raises `NVMLLibraryMismatchError`, and the `_v2` call still answers."""
        try:
            return _processes(getattr(self._m, function)(handle))
        except self._mismatch:
            older = getattr(self._m, f"{function}_v2", None)
            if older is None:
                raise
            return _processes(older(handle))


class _NoMismatchError(Exception):
    """Stands for `NVMLLibraryMismatchError` in a pynvml that has none."""


def _text(value: object) -> str:
    """Older pynvml returns bytes, newer str."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _processes(infos: Iterable[Any]) -> list[tuple[int, int]]:
    """`usedGpuMemory` is None where the driver cannot tell (Windows WDDM, some MIG setups)."""
    return [(int(p.pid), int(p.usedGpuMemory or 0)) for p in infos]


class NvmlBackend:
    """The devices of this machine as the NVIDIA driver reports them.

    Devices are listed once, at `open()`; a device that errors then is left out (its NVML index
    stays unused), and one that errors later is left out of that sample only, so a GPU fallen
    off the bus degrades the report instead of crashing the executor.
    """

    name = "nvml"

    def __init__(self, nvml: _Nvml, devices: tuple[tuple[GpuDevice, object], ...]) -> None:
        """Use `open()`: this takes an initialised NVML and the devices listed on it."""
        self._nvml = nvml
        self._handles = devices
        self._devices = tuple(device for device, _ in devices)
        self._closed = False

    @classmethod
    def open(cls) -> NvmlBackend:
        """Initialise NVML and list the devices; `GpuUnavailable` when NVML cannot be used."""
        try:
            import pynvml  # type: ignore[import-untyped]
        except ImportError as error:
            raise GpuUnavailable(
                f"pynvml is not importable ({error}): install nvidia-ml-py"
            ) from None
        nvml = _Nvml(pynvml)
        try:
            nvml.init()
        except nvml.error as error:
            raise GpuUnavailable(f"cannot initialise NVML: {error}") from None
        try:
            count = nvml.device_count()
        except nvml.error as error:
            with contextlib.suppress(*nvml.error):
                nvml.shutdown()
            raise GpuUnavailable(f"NVML cannot count the devices: {error}") from None
        devices: list[tuple[GpuDevice, object]] = []
        for index in range(count):
            try:
                handle = nvml.handle(index)
                total, _ = nvml.memory_bytes(handle)
                device = GpuDevice(
                    index=index,
                    uuid=nvml.uuid(handle),
                    model=nvml.name(handle),
                    memory_mib=total // _MIB,
                )
            except nvml.error:
                continue
            devices.append((device, handle))
        return cls(nvml, tuple(devices))

    def devices(self) -> tuple[GpuDevice, ...]:
        return self._devices

    def sample(self) -> tuple[DeviceSample, ...]:
        self._check_open()
        samples: list[DeviceSample] = []
        for device, handle in self._handles:
            try:
                _, used = self._nvml.memory_bytes(handle)
                utilization = self._nvml.utilization_percent(handle)
            except self._nvml.error:
                continue
            samples.append(DeviceSample(device.index, utilization, used // _MIB))
        return tuple(samples)

    def process_memory(self) -> tuple[ProcessGpuMemory, ...]:
        """Compute and graphics processes; one in both lists (`C+G`) counts once, not twice."""
        self._check_open()
        found: list[ProcessGpuMemory] = []
        for device, handle in self._handles:
            per_pid: dict[int, int] = {}
            for query in (self._nvml.compute_processes, self._nvml.graphics_processes):
                try:
                    processes = query(handle)
                except self._nvml.error:
                    continue
                for pid, used in processes:
                    per_pid[pid] = max(per_pid.get(pid, 0), used)
            found.extend(
                ProcessGpuMemory(pid, device.index, used // _MIB)
                for pid, used in sorted(per_pid.items())
            )
        return tuple(found)

    def mps_active(self) -> bool:
        return mps_active()

    def close(self) -> None:
        """Shut NVML down once; safe to repeat."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(*self._nvml.error):
            self._nvml.shutdown()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the NVML backend is closed")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
