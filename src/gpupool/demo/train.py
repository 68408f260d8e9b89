"""A CPU-only "training" script that checkpoints and resumes: what a preemptible gpupool
workload should look like. It fits y = 3x + 1 by gradient descent, one step every
`--step-s` seconds, checkpointing every few steps and when asked to stop.

    gpupool submit fit --gpu 1 -- python -m gpupool.demo.train --steps 200
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from gpupool import job


def report_declared_gpu_use(step: int) -> None:
    """On declared (fake) GPUs, say how busy this task keeps its devices, as NVML would."""
    report_dir = os.environ.get("GPUPOOL_FAKE_GPU_REPORT_DIR")
    if not report_dir:
        return
    from gpupool.executors.gpus import report_fake_gpu_usage

    fraction = float(os.environ.get("GPUPOOL_GPU_FRACTION", "1"))
    memory_mib = int(os.environ.get("GPUPOOL_GPU_MEMORY_REQUEST_MIB", "1024")) // 2
    devices = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    for device in (int(d) for d in devices.split(",") if d):
        busy = int(fraction * (70 + 20 * (step % 2)))
        report_fake_gpu_usage(Path(report_dir), device, memory_mib, busy)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--step-s", type=float, default=0.05)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    args = parser.parse_args()

    job.stop_requested()  # install the SIGTERM handler before any work
    state = job.load_checkpoint()
    if state is None:
        state = {"step": 0, "w": 0.0, "b": 0.0, "resumed": 0}
        print("starting from scratch", flush=True)
    else:
        state["resumed"] += 1
        print(f"resumed from checkpoint at step {state['step']}", flush=True)
    while state["step"] < args.steps:
        if job.stop_requested():
            job.save_checkpoint(state)
            print(f"stop requested: checkpointed at step {state['step']}", flush=True)
            return 143
        x = (state["step"] % 10) / 10
        error = state["w"] * x + state["b"] - (3 * x + 1)
        state["w"] -= 0.5 * error * x
        state["b"] -= 0.5 * error
        state["step"] += 1
        if state["step"] % args.checkpoint_every == 0:
            job.save_checkpoint(state)
            report_declared_gpu_use(state["step"])
        time.sleep(args.step_s)
    job.save_checkpoint(state)
    print(f"done: step {state['step']}, w={state['w']:.3f}, b={state['b']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
