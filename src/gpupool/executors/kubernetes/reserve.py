"""The reservation pod's program: say which GPU this pod was given, then hold it.

A reservation pod requests one `nvidia.com/gpu`, so the device plugin hands it one device and
sets `NVIDIA_VISIBLE_DEVICES` to that device's UUID. This program writes the UUID into its own
pod's annotation `gpupool.dev/gpu-uuid` (with the pod's service account, which may patch pods in
its namespace only), and then sleeps until the pod is deleted. gpupool starts the pods that share
the device with `NVIDIA_VISIBLE_DEVICES` set to that UUID.

Run as `python -m gpupool.executors.kubernetes.reserve`; needs POD_NAME and POD_NAMESPACE (the
downward API sets them). `GPUPOOL_RESERVE_ONCE=1` exits after reporting (tests).
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
import time
from typing import Any

ANNOTATION = "gpupool.dev/gpu-uuid"


def device_uuid(environ: dict[str, str]) -> str | None:
    """The first device the container was given, as its UUID, or None."""
    visible = environ.get("NVIDIA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.startswith(("GPU-", "MIG-")):
        return visible
    if visible and visible not in ("all", "none", "void"):
        return _uuid_from_nvml(visible)
    return _uuid_from_nvml("0")


def _uuid_from_nvml(index: str) -> str | None:
    """The UUID of the visible device `index` from NVML, when the device plugin gave an index."""
    try:
        pynvml: Any = importlib.import_module("pynvml")  # untyped; nvidia-ml-py
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(int(index) if index.isdigit() else 0)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            return uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def report(name: str, namespace: str, uuid: str, attempts: int = 30) -> None:
    from lightkube import Client, KubeConfig
    from lightkube.resources.core_v1 import Pod
    from lightkube.types import PatchType

    client = Client(KubeConfig.from_env(), field_manager="gpupool-reserve")
    patch = {"metadata": {"annotations": {ANNOTATION: uuid}}}
    for attempt in range(attempts):
        try:
            client.patch(Pod, name, patch, namespace=namespace, patch_type=PatchType.MERGE)
            return
        except Exception as error:
            if attempt == attempts - 1:
                raise
            print(f"reserve: cannot annotate {namespace}/{name} yet: {error}", file=sys.stderr)
            time.sleep(min(10.0, 0.5 * 2**attempt))


def main() -> int:
    name = os.environ.get("POD_NAME")
    namespace = os.environ.get("POD_NAMESPACE")
    if not name or not namespace:
        print("reserve: POD_NAME and POD_NAMESPACE must be set (downward API)", file=sys.stderr)
        return 2
    uuid = device_uuid(dict(os.environ))
    if uuid is None:
        print(
            "reserve: no GPU visible to this container (NVIDIA_VISIBLE_DEVICES is "
            f"{os.environ.get('NVIDIA_VISIBLE_DEVICES')!r}, NVML found none): is the NVIDIA "
            "device plugin running on this node?",
            file=sys.stderr,
        )
        return 1
    report(name, namespace, uuid)
    print(f"reserve: holding {uuid} for gpupool's sharing pods", flush=True)
    if os.environ.get("GPUPOOL_RESERVE_ONCE") == "1":
        return 0
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
