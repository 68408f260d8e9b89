"""gpupool on a real NVIDIA GPU, end to end, the way a researcher uses it; prints a JSON report.

    .venv/bin/python scripts/gpu_live_check.py [--out FILE] [--seconds 20]
    .venv/bin/python scripts/gpu_live_check.py --fake-gpus 1x80G   # the same steps, no GPU

Starts `gpupool up` in a temporary data directory on a free port (with a CLI config of its own),
then, on the machine's first GPU:

1. NVML: what gpupool's backend sees (devices, one sample, memory per process, MPS).
2. `share-a` and `share-b` (`--gpu 0.5`) run PyTorch at the same time on the one device. Each
   reports the fraction the start-up hook gave `set_per_process_memory_fraction`, allocates
   80% of its share (must work), then 120% of it (must fail: out of memory), and multiplies
   bf16 matrices for `--seconds`. `whole` (`--gpu 1`) waits while they share the device and
   then has all of it; `by-memory` (`--gpu-memory 16G`) gets the share that 16 GiB is of the
   device and the same checks. A task with less than 0.2 of the device also allocates 120% of
   its share with CuPy (no start-up hook: `CUPY_GPU_MEMORY_LIMIT`, and MPS's limit, refuse it).
3. While the two share: `gpupool nodes`, `gpupool top` and NVML's memory per process.
4. After: `gpupool usage --by workload` (allocated vs utilized, from NVML), every task's report.

Exit 0 when every expectation holds, 1 otherwise, 2 without a usable GPU. With `--fake-gpus`
the scheduling steps run on declared devices and the GPU expectations are skipped (a dry run of
this script where there is no GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpupool.executors.gpus.devices import GpuUnavailable, backend_report
from gpupool.executors.gpus.nvml import NvmlBackend

PROBE = r"""
import json, os, sys, time
keys = ("CUDA_VISIBLE_DEVICES", "GPUPOOL_GPU_FRACTION", "GPUPOOL_GPU_MEMORY_LIMIT_MIB",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
report = {key: os.environ.get(key) for key in keys}
seconds = float(sys.argv[1])
try:
    import torch
except ImportError as error:
    report["torch"] = f"not importable: {error}"
    time.sleep(seconds)
    print("PROBE " + json.dumps(report), flush=True)
    sys.exit(0)
report["fraction_applied"] = os.environ.get("GPUPOOL_TORCH_FRACTION_APPLIED")
report["cuda"] = torch.cuda.is_available()
if report["cuda"]:
    total = torch.cuda.get_device_properties(0).total_memory
    report["device"] = torch.cuda.get_device_name(0)
    report["device_total_mib"] = total >> 20
    report["mem_get_info_total_mib"] = torch.cuda.mem_get_info()[1] >> 20
    share = float(os.environ.get("GPUPOOL_GPU_FRACTION", "1"))

    def allocates(part):
        try:
            block = torch.empty(int(total * part), dtype=torch.uint8, device="cuda")
            del block
            return True
        except torch.OutOfMemoryError:
            return False
        finally:
            torch.cuda.empty_cache()

    report["allocates_80pct_of_share"] = allocates(share * 0.8)
    report["allocates_120pct_of_share"] = allocates(share * 1.2) if share < 0.8 else None
    try:  # a framework without gpupool's hook: CUPY_GPU_MEMORY_LIMIT (and MPS) refuse it
        import cupy
        try:
            block = cupy.empty(int(total * share * 1.2), dtype=cupy.uint8) if share < 0.2 else None
            report["cupy_allocates_120pct_of_share"] = None if block is None else True
            del block
        except cupy.cuda.memory.OutOfMemoryError:
            report["cupy_allocates_120pct_of_share"] = False
        cupy.get_default_memory_pool().free_all_blocks()
    except ImportError:
        pass
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    products = 0
    start = time.time()
    while time.time() - start < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
        products += 10
    report["bf16_tflops"] = round(products * 2 * 8192**3 / (time.time() - start) / 1e12, 1)
print("PROBE " + json.dumps(report), flush=True)
"""

DONE = {"completed", "failed", "stopped", "deleted"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cli:
    """`gpupool ...` in a subprocess, with this check's own config file."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env = env
        self.cwd = cwd

    def run(self, *args: str, timeout_s: float = 120) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "gpupool", *args],
            env=self.env,
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"gpupool {' '.join(args[:2])}: {done.stderr.strip()[-1500:]}")
        return done.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json"))


def nvml_report() -> dict[str, Any]:
    backend = NvmlBackend.open()
    try:
        return backend_report(backend)
    finally:
        backend.close()


def statuses(cli: Cli) -> dict[str, str]:
    rows = cli.json("list")
    items = rows["items"] if isinstance(rows, dict) else rows
    return {row["name"]: row["status"] for row in items}


def probe_of(cli: Cli, name: str) -> dict[str, Any]:
    for line in cli.run("logs", name).splitlines():
        if line.startswith("PROBE "):
            result: dict[str, Any] = json.loads(line[len("PROBE ") :])
            return result
    return {"log_tail": cli.run("logs", name)[-1500:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument("--seconds", type=float, default=20.0, help="matrix work per sharer")
    parser.add_argument("--fake-gpus", help="declared devices (a dry run without a GPU)")
    parser.add_argument(
        "--mps",
        action="store_true",
        help="start an NVIDIA MPS control daemon first (and stop it after): shares then also "
        "get MPS's per-client memory and thread limits",
    )
    args = parser.parse_args()
    if args.mps:
        try:
            subprocess.run(["nvidia-cuda-mps-control", "-d"], check=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as error:
            print(f"gpu_live_check: cannot start MPS: {error}", file=sys.stderr)
            return 2
        time.sleep(2)
    try:
        return check(args)
    finally:
        if args.mps:
            subprocess.run(
                ["nvidia-cuda-mps-control"], input="quit\n", text=True, timeout=30, check=False
            )


def check(args: argparse.Namespace) -> int:
    report: dict[str, Any] = {}
    checks: dict[str, bool] = {}
    if not args.fake_gpus:
        try:
            report["nvml"] = nvml_report()
        except GpuUnavailable as error:
            print(f"gpu_live_check: no NVIDIA GPU usable here: {error.reason}", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="gpupool-live-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "GPUPOOL_CONFIG": str(root / "config.json")}
        cli = Cli(env, root)
        port = free_port()
        up = ["up", "--data-dir", str(root / "data"), "--port", str(port)]
        if args.fake_gpus:
            up += ["--fake-gpus", args.fake_gpus]
        report["up"] = cli.run(*up, timeout_s=180).strip().splitlines()[:3]
        try:
            run_checks(cli, args.seconds, report, checks, bool(args.fake_gpus), args.mps)
        finally:
            report["server_log_tail"] = (root / "data" / "server.log").read_text(errors="replace")[
                -3000:
            ]
            cli.run("down", "--data-dir", str(root / "data"), timeout_s=120)
    report["checks"] = checks
    report["ok"] = all(checks.values())
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0 if report["ok"] else 1


def run_checks(
    cli: Cli,
    seconds: float,
    report: dict[str, Any],
    checks: dict[str, bool],
    fake: bool,
    mps: bool,
) -> None:
    submit = ("submit", "--project", "default")
    short = max(5.0, seconds / 3)
    for name, ask, length in (
        ("share-a", ("--gpu", "0.5"), seconds),
        ("share-b", ("--gpu", "0.5"), seconds),
        ("whole", ("--gpu", "1"), short),
        ("by-memory", ("--gpu-memory", "16G"), short),
    ):
        cli.run(*submit, name, *ask, "--", sys.executable, "-c", PROBE, str(length))
    timeline: list[tuple[float, dict[str, str]]] = []
    start = time.monotonic()
    shared_seen = False
    sharing_since: float | None = None
    while time.monotonic() - start < 6 * seconds + 240:
        now = statuses(cli)
        timeline.append((round(time.monotonic() - start, 1), now))
        both = now.get("share-a") == "running" and now.get("share-b") == "running"
        if both and sharing_since is None:
            sharing_since = time.monotonic()
        # what the server and NVML show once the two are well into their matrix work
        into = 0.0 if sharing_since is None else time.monotonic() - sharing_since
        if both and not shared_seen and into >= seconds / 3:
            shared_seen = True
            report["while_sharing"] = {
                "list": now,
                "nodes": cli.json("nodes"),
                "top": cli.json("top"),
                "nvml": None if fake else nvml_report(),
            }
        if all(status in DONE for status in now.values()) and len(now) == 4:
            break
        time.sleep(1)
    report["timeline"] = [t for i, t in enumerate(timeline) if i == 0 or t[1] != timeline[i - 1][1]]
    final = timeline[-1][1]
    checks["every task completed"] = all(final.get(n) == "completed" for n in final)
    # by the server's own times, not by what the polls happened to see
    rows = cli.json("list")
    times = {
        row["name"]: (row["started_at"], row["finished_at"])
        for row in (rows["items"] if isinstance(rows, dict) else rows)
    }
    report["times"] = times
    if all(None not in times.get(name, (None,)) for name in ("share-a", "share-b", "whole")):
        (a_start, a_end), (b_start, b_end) = times["share-a"], times["share-b"]
        checks["share-a and share-b ran at the same time"] = a_start < b_end and b_start < a_end
        checks["whole started once both had finished"] = times["whole"][0] >= max(a_end, b_end)
    else:
        checks["share-a, share-b and whole have start and end times"] = False
    probes = {name: probe_of(cli, name) for name in final}
    report["probes"] = probes
    report["usage_by_workload"] = cli.json("usage", "--by", "workload", "--since", "1h")
    if fake:
        return
    used = {row["key"]: row["utilized_gpu_milli"] for row in report["usage_by_workload"]["summary"]}
    checks["a view of the device while shared was taken"] = shared_seen
    sharing = report.get("while_sharing", {})
    devices = sharing["top"]["nodes"][0]["devices"] if sharing else [{}]
    memory_used = devices[0].get("memory_used_mib")
    checks["top shows the device's memory used (NVML)"] = memory_used is not None
    checks["NVML's utilization reached the usage report"] = used.get("default/share-a", 0) > 0
    for name, probe in probes.items():
        fraction = float(probe.get("GPUPOOL_GPU_FRACTION") or 1)
        checks[f"{name}: CUDA available"] = probe.get("cuda") is True
        checks[f"{name}: 80% of its share allocates"] = (
            probe.get("allocates_80pct_of_share") is True
        )
        if fraction < 0.8:
            checks[f"{name}: the hook applied its fraction"] = (
                probe.get("fraction_applied") is not None
                and abs(float(probe["fraction_applied"]) - fraction) < 1e-6
            )
            checks[f"{name}: 120% of its share is refused"] = (
                probe.get("allocates_120pct_of_share") is False
            )
            if probe.get("cupy_allocates_120pct_of_share") is not None:
                checks[f"{name}: CuPy beyond the share is refused"] = (
                    probe["cupy_allocates_120pct_of_share"] is False
                )
            if mps:
                checks[f"{name}: MPS limits given"] = bool(
                    probe.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
                    and probe.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
                )


if __name__ == "__main__":
    sys.exit(main())
