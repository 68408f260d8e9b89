"""The GPU seam of the local executor: which devices this machine has, how busy they are, and
how much memory each process holds on each, so that the executor can register the machine and
a watchdog can catch a task using more than its share.

Two implementations, as at every seam: `nvml.NvmlBackend` asks the NVIDIA driver (NVML, through
`pynvml` from the `nvidia-ml-py` package), and `declared.DeclaredBackend` declares devices from a
spec like `4x80G` and takes usage from report files that the processes themselves write
(`report_fake_gpu_usage`), so that tests and demos run real processes without a GPU. The
protocol and what it answers are in `devices`; this package chooses a backend (`open_backend`).

`pynvml` is imported only when NVML is opened: importing this package (as workload scripts in
tests do, to report fake usage) needs neither the package nor a driver.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from gpupool.executors.gpus.declared import DeclaredBackend, report_fake_gpu_usage
from gpupool.executors.gpus.devices import GpuBackend, GpuUnavailable
from gpupool.executors.gpus.nvml import NvmlBackend

# `report_fake_gpu_usage` is re-exported: workload scripts import it from here
# (docs/local-executor.md), so this path is part of what gpupool offers them.
__all__ = ["OpenedBackend", "open_backend", "report_fake_gpu_usage"]


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
