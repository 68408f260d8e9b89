"""Print what gpupool's NVML backend sees on this machine, as JSON: devices, one sample, GPU
memory per process, whether MPS runs. A check to run on a GPU machine before trusting the local
executor there; it needs no gpupool server.

    .venv/bin/python scripts/gpu_check.py            # NVML; exit 2 (and why) without it
    .venv/bin/python scripts/gpu_check.py --fake 2x24G:RTX4090   # declared devices instead
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from gpupool.executors.gpus.declared import DeclaredBackend
from gpupool.executors.gpus.devices import GpuBackend, GpuUnavailable
from gpupool.executors.gpus.nvml import NvmlBackend


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fake", metavar="SPEC", help="declared devices, like 4x80G")
    args = parser.parse_args()
    backend: GpuBackend
    try:
        backend = DeclaredBackend(args.fake) if args.fake else NvmlBackend.open()
    except GpuUnavailable as error:
        print(f"gpu_check: no NVIDIA GPU usable here: {error.reason}", file=sys.stderr)
        return 2
    try:
        report = {
            "backend": backend.name,
            "devices": [asdict(d) for d in backend.devices()],
            "sample": [asdict(s) for s in backend.sample()],
            "process_memory": [asdict(p) for p in backend.process_memory()],
            "mps_active": backend.mps_active(),
        }
    finally:
        backend.close()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
