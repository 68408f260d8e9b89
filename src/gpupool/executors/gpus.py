"""The GPU seam of the local executor: which devices this machine has, how busy they are, and
how much memory each process holds on each, so that the executor can register the machine and
a watchdog can catch a task using more than its share.

Two implementations, as at every seam: `NvmlBackend` asks the NVIDIA driver (NVML, through
`pynvml` from the `nvidia-ml-py` package), and `DeclaredBackend` declares devices from a spec
like `4x80G` and takes usage from report files that the processes themselves write
(`report_fake_gpu_usage`), so that tests and demos run real processes without a GPU.

`pynvml` is imported only when NVML is opened: importing this module (as workload scripts in
tests do, to report fake usage) needs neither the package nor a driver.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Protocol, Self, TypeGuard

from gpupool.executors.base import DeviceInfo
from gpupool.units import parse_memory_mib

__all__ = [
    "DeclaredBackend",
    "DeviceSample",
    "GpuBackend",
    "GpuDevice",
    "GpuUnavailable",
    "NvmlBackend",
    "OpenedBackend",
    "ProcessGpuMemory",
    "mps_active",
    "open_backend",
    "parse_declared_gpus",
    "report_fake_gpu_usage",
]

_MIB = 2**20
MAX_DECLARED_DEVICES = 64
"""More declared devices than this on one machine is a typo, not a machine."""


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


# --- declared ---------------------------------------------------------------------------------

_DECLARED_GROUP = re.compile(r"^(\d+)\s*[xX]\s*([^:]+?)\s*(?::\s*(.*))?$")
_DECLARED_HELP = (
    "write COUNTxMEMORY[:MODEL] like 4x80G or 2x24G:RTX4090, groups separated by commas"
)


def parse_declared_gpus(spec: str) -> tuple[GpuDevice, ...]:
    """`"4x80G"` is four devices of 80 GiB; `"2x80G:H100,2x24G:RTX4090"` mixes groups, indexed
    on from one group to the next. An empty spec declares no devices."""
    if not spec.strip():
        return ()
    devices: list[GpuDevice] = []
    for group in (g.strip() for g in spec.split(",")):
        if not group:
            raise ValueError(f"GPU spec {spec!r} has an empty group: {_DECLARED_HELP}")
        match = _DECLARED_GROUP.match(group)
        if not match:
            raise ValueError(f"GPU spec group {group!r} not understood: {_DECLARED_HELP}")
        count = int(match[1])
        if count < 1:
            raise ValueError(f"GPU spec group {group!r}: the count must be at least 1")
        try:
            memory_mib = parse_memory_mib(match[2])
        except ValueError as error:
            raise ValueError(f"GPU spec group {group!r}: {error}") from None
        model = match[3]
        if model is not None and not model.strip():
            raise ValueError(
                f"GPU spec group {group!r}: the model after ':' is empty ({_DECLARED_HELP})"
            )
        if len(devices) + count > MAX_DECLARED_DEVICES:
            raise ValueError(f"GPU spec {spec!r} declares more than {MAX_DECLARED_DEVICES} devices")
        for _ in range(count):
            index = len(devices)
            devices.append(
                GpuDevice(
                    index=index,
                    uuid=f"GPU-declared-{index}",
                    model=model.strip() if model else "declared",
                    memory_mib=memory_mib,
                )
            )
    return tuple(devices)


class DeclaredBackend:
    """Declared devices whose usage the processes report themselves.

    A process (or a test on its behalf) writes `<report_dir>/<pid>.json` with
    `report_fake_gpu_usage`: `{"device": 0, "used_mib": 1234, "utilization_percent": 80}`, or a
    list of such objects for several devices. Reports of processes that have ended (zombies
    included: a real driver frees their memory at exit) are ignored and removed, so a reused
    pid does not inherit them; unreadable or malformed files and entries for devices not
    declared are ignored. With no `report_dir`, every device is idle.
    """

    name = "declared"

    def __init__(self, spec: str, report_dir: Path | None = None, *, mps: bool = False) -> None:
        """`ValueError` on a bad spec; `mps` declares an MPS daemon (no process is started)."""
        self._devices = parse_declared_gpus(spec)
        self._report_dir = report_dir
        self._mps = mps

    @property
    def report_dir(self) -> Path | None:
        return self._report_dir

    def devices(self) -> tuple[GpuDevice, ...]:
        return self._devices

    def sample(self) -> tuple[DeviceSample, ...]:
        memory = dict.fromkeys((d.index for d in self._devices), 0)
        utilization = dict(memory)
        for report in self._reports():
            memory[report.device] += report.used_mib
            utilization[report.device] += report.utilization_percent
        return tuple(
            DeviceSample(index, min(100, utilization[index]), memory[index]) for index in memory
        )

    def process_memory(self) -> tuple[ProcessGpuMemory, ...]:
        used: dict[tuple[int, int], int] = {}
        for report in self._reports():
            key = (report.pid, report.device)
            used[key] = used.get(key, 0) + report.used_mib
        return tuple(
            ProcessGpuMemory(pid, device, mib)
            for (pid, device), mib in sorted(
                used.items(), key=lambda item: (item[0][1], item[0][0])
            )
        )

    def mps_active(self) -> bool:
        return self._mps

    def close(self) -> None:
        pass

    def _reports(self) -> list[_Report]:
        if self._report_dir is None:
            return []
        declared = {d.index for d in self._devices}
        try:
            paths = sorted(self._report_dir.glob("*.json"))
        except OSError:
            return []
        reports: list[_Report] = []
        for path in paths:
            if not path.stem.isdigit():
                continue
            pid = int(path.stem)
            if not _pid_alive(pid):
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            entries = _read_report(path, pid)
            reports.extend(entry for entry in entries if entry.device in declared)
        return reports


@dataclass(frozen=True, slots=True)
class _Report:
    pid: int
    device: int
    used_mib: int
    utilization_percent: int


def _read_report(path: Path, pid: int) -> list[_Report]:
    """The entries of one report file; none if the file is unreadable or any entry malformed."""
    try:
        data: object = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    items = data if isinstance(data, list) else [data]
    reports: list[_Report] = []
    for item in items:
        if not isinstance(item, dict):
            return []
        fields = (item.get("device"), item.get("used_mib"), item.get("utilization_percent", 0))
        numbers = [value for value in fields if _natural(value)]
        if len(numbers) != len(fields):
            return []
        device, used, utilization = numbers
        reports.append(_Report(pid, device, used, utilization))
    return reports


def _natural(value: object) -> TypeGuard[int]:
    """A whole number >= 0, and not a bool (JSON `true` is not a device)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _pid_alive(pid: int) -> bool:
    """Whether `pid` runs; a zombie does not (it holds no GPU memory any more)."""
    if pid <= 0:  # os.kill(0, ...) would address our own process group
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        if Path("/proc/self").exists():  # /proc is there, the process is not
            return False
    except OSError:
        pass
    else:
        state = stat.rpartition(")")[2].split()[:1]
        return state not in (["Z"], ["X"])
    try:  # no /proc (not Linux)
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def report_fake_gpu_usage(
    report_dir: Path,
    device: int,
    used_mib: int,
    utilization_percent: int,
    pid: int | None = None,
) -> Path:
    """Report, for `DeclaredBackend`, what process `pid` (default: this one, or in an isolated
    task its shim, `GPUPOOL_FAKE_GPU_REPORT_PID`) uses on `device`
    now; replaces its previous report. Written to a temporary file and renamed, so a reader
    never sees half a report. Returns the report's path."""
    for what, value in (("device", device), ("used_mib", used_mib)):
        if not _natural(value):
            raise ValueError(f"{what} must be a whole number >= 0 (got {value!r})")
    if not _natural(utilization_percent) or utilization_percent > 100:
        raise ValueError(f"utilization_percent must be 0 to 100 (got {utilization_percent!r})")
    if pid is None:
        pid = int(os.environ.get("GPUPOOL_FAKE_GPU_REPORT_PID") or os.getpid())
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    target = report_dir / f"{pid}.json"
    data = {"device": device, "used_mib": used_mib, "utilization_percent": utilization_percent}
    fd, temporary = tempfile.mkstemp(dir=report_dir, prefix=f".{pid}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(data, file)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return target


# --- choosing ---------------------------------------------------------------------------------


class OpenedBackend(NamedTuple):
    """The backend to use, and why it has no GPUs when that is not what was asked for."""

    backend: GpuBackend
    note: str | None


def open_backend(fake: str | None, report_dir: Path | None = None) -> OpenedBackend:
    """Declared devices when `fake` is given (`ValueError` on a bad spec); else NVML; else,
    where NVML cannot be used, no devices, with the reason in `note`.

    A caller would say: "no NVIDIA GPU found ({note}); running with no GPUs — use
    --fake-gpus 4x80G to declare some".
    """
    if fake is not None:
        return OpenedBackend(DeclaredBackend(fake, report_dir), None)
    try:
        nvml = NvmlBackend.open()
    except GpuUnavailable as error:
        return OpenedBackend(DeclaredBackend("", report_dir), error.reason)
    if not nvml.devices():
        return OpenedBackend(nvml, "NVML lists no usable device")
    return OpenedBackend(nvml, None)
