"""What a task is given in its environment: its devices, who it is, and framework hints that
keep a fractional task within its share of a device."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from gpupool.core.model import MILLI_PER_GPU
from gpupool.executors.base import Launch

TORCH_HOOK_DIR = Path(__file__).parent / "torch_hook"


def task_identity(launch: Launch) -> dict[str, str]:
    """The `GPUPOOL_*` variables every executor gives a task: who it is and its share."""
    return {
        "GPUPOOL_WORKLOAD": launch.workload,
        "GPUPOOL_PROJECT": launch.project,
        "GPUPOOL_TASK_INDEX": str(launch.task_index),
        "GPUPOOL_LAUNCH_ID": launch.launch_id,
        "GPUPOOL_GPU_FRACTION": f"{launch.gpu_milli / MILLI_PER_GPU:g}",
        "GPUPOOL_GPU_MEMORY_LIMIT_MIB": str(launch.burst_memory_mib or launch.gpu_memory_mib),
        "GPUPOOL_GPU_MEMORY_REQUEST_MIB": str(launch.gpu_memory_mib),
        "GPUPOOL_GRACE_PERIOD_S": str(launch.grace_period_s),
        "PYTHONUNBUFFERED": "1",
    }


def gang_rendezvous(launch: Launch, master_addr: str, master_port: int) -> dict[str, str]:
    """What a task of a gang (`world_size` > 1) needs to meet the others, under the names
    `torch.distributed` (`env://`) reads and under `GPUPOOL_*` names. `LOCAL_RANK` is 0: each
    task sees only its own devices (`CUDA_VISIBLE_DEVICES`), so its first device is `cuda:0`."""
    if launch.world_size <= 1:
        return {}
    values = {
        "RANK": str(launch.task_index),
        "LOCAL_RANK": "0",
        "WORLD_SIZE": str(launch.world_size),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
    }
    values.update({f"GPUPOOL_{key}": values[key] for key in _GANG_GPUPOOL_NAMES})
    return values


_GANG_GPUPOOL_NAMES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def fraction_hints(fraction: float) -> dict[str, str]:
    """Framework settings that keep a task on part of a device within its part: JAX's and
    CuPy's are caps (a CuPy task took more than its share without one, on an H200:
    docs/local-executor.md#on-a-real-gpu), TensorFlow's only stops it taking all at once."""
    return {
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{fraction:.3f}",
        "CUPY_GPU_MEMORY_LIMIT": f"{fraction * 100:.1f}%",
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    }


PASSED_THROUGH = (
    "PATH",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "VIRTUAL_ENV",
    "CUDA_HOME",
    "CUDA_PATH",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TERM",
)
"""The server's variables a task gets: where programs and libraries are found, and the locale;
never the rest (tokens, database URLs and other secrets live there)."""
PASSED_THROUGH_NOT_ISOLATED = ("HOME", "USER", "LOGNAME", "TMPDIR")
"""And, where tasks run as the server's user anyway, who that is."""
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def inherited_environment(server_env: Mapping[str, str], isolated: bool) -> dict[str, str]:
    """What a task gets of the server's environment `server_env`: `PASSED_THROUGH`, `LC_*`,
    and without isolation `PASSED_THROUGH_NOT_ISOLATED`; a default `PATH` if it has none."""
    names = PASSED_THROUGH if isolated else PASSED_THROUGH + PASSED_THROUGH_NOT_ISOLATED
    env = {
        name: value
        for name, value in server_env.items()
        if name in names or (name.startswith("LC_") and name.isupper())
    }
    env.setdefault("PATH", DEFAULT_PATH)
    return env


def task_environment(
    base: dict[str, str],
    launch: Launch,
    checkpoint_dir: Path,
    mps_active: bool = False,
    fake_gpu_report_dir: Path | None = None,
    master_port: int | None = None,
) -> dict[str, str]:
    """`base` (what it gets of the server's environment: `inherited_environment`) + the
    workload's own variables + gpupool's, which win.

    - `CUDA_VISIBLE_DEVICES`: the task's devices, numbered as NVML and nvidia-smi number them
      (`CUDA_DEVICE_ORDER=PCI_BUS_ID`); a fractional task sees its one shared device.
    - `GPUPOOL_*`: workload, project, task index, launch id, fraction, memory limit in MiB,
      checkpoint directory, grace period.
    - A gang's task (`world_size` > 1, with `master_port`): `RANK`, `LOCAL_RANK`, `WORLD_SIZE`,
      `MASTER_ADDR` (127.0.0.1: every task runs on this machine), `MASTER_PORT`, and the same
      as `GPUPOOL_RANK`, `GPUPOOL_WORLD_SIZE`, `GPUPOOL_MASTER_ADDR`, `GPUPOOL_MASTER_PORT`.
    - For a fraction: JAX without preallocation and with `XLA_PYTHON_CLIENT_MEM_FRACTION`,
      CuPy's memory pool capped (`CUPY_GPU_MEMORY_LIMIT`), TensorFlow with memory growth, a
      PyTorch start-up hook that applies `set_per_process_memory_fraction`, and with an MPS
      daemon, its per-client limits.
    """
    env = dict(base)
    env.update(dict(launch.env))
    fraction = launch.gpu_milli / MILLI_PER_GPU
    devices = ",".join(str(d) for d in launch.devices)
    env.update(
        {
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": devices,
            "NVIDIA_VISIBLE_DEVICES": devices,
            **task_identity(launch),
            "GPUPOOL_CHECKPOINT_DIR": str(checkpoint_dir),
        }
    )
    if master_port is not None:
        env.update(gang_rendezvous(launch, "127.0.0.1", master_port))
    if fake_gpu_report_dir is not None:
        env["GPUPOOL_FAKE_GPU_REPORT_DIR"] = str(fake_gpu_report_dir)
    if launch.gpu_milli < MILLI_PER_GPU:
        env.update(fraction_hints(fraction))
        existing = env.get("PYTHONPATH")
        env["PYTHONPATH"] = (
            f"{TORCH_HOOK_DIR}{os.pathsep}{existing}" if existing else str(TORCH_HOOK_DIR)
        )
        if mps_active:
            limit_mib = launch.burst_memory_mib or launch.gpu_memory_mib
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(
                f"{index}={limit_mib}M" for index in range(len(launch.devices))
            )
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, round(fraction * 100)))
    return env
