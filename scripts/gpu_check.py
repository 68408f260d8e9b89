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

from gpupool.executors.gpus.declared import DeclaredBackend
from gpupool.executors.gpus.devices import GpuBackend, GpuUnavailable, backend_report
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
        report = backend_report(backend)
    finally:
        backend.close()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
