"""Declared GPUs (a spec like `4x80G`) whose usage the processes report themselves
(`report_fake_gpu_usage`), so that tests and demos run real processes without a GPU."""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from gpupool.executors.gpus.devices import DeviceSample, GpuDevice, ProcessGpuMemory
from gpupool.units import parse_memory_mib

__all__ = ["DeclaredBackend", "parse_declared_gpus", "report_fake_gpu_usage"]

MAX_DECLARED_DEVICES = 64
"""More declared devices than this on one machine is a typo, not a machine."""

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
