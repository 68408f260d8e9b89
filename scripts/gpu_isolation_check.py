"""Run one task in gpupool's bubblewrap sandbox on a GPU machine and report, as JSON, what it
could do there: use the GPU (CUDA through PyTorch, `nvidia-smi`) and, as it must not, read a
secret in the data directory or stay root. A check to run as root on a GPU machine with
bubblewrap, before trusting isolated tasks with GPUs there; it needs no gpupool server.

    sudo .venv/bin/python scripts/gpu_isolation_check.py [--bwrap PATH]

Exit 0 when the task used the GPU and every forbidden read failed; 1 otherwise; 2 when the
sandbox cannot run here (not root, no bubblewrap).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from gpupool.executors.base import Launch
from gpupool.executors.isolation import Bubblewrap, bubblewrap_problem, remove_account

TASK = r"""
import json, os, subprocess
report = {"uid": os.getuid(), "user": os.environ.get("USER")}
try:
    open(os.environ["SECRET_PATH"]).read()
    report["secret_read"] = True
except OSError as error:
    report["secret_read"] = False
    report["secret_error"] = type(error).__name__
try:
    import torch
    report["cuda_available"] = torch.cuda.is_available()
    if report["cuda_available"]:
        a = torch.randn(1024, 1024, device="cuda")
        report["matmul_sum_finite"] = bool(torch.isfinite((a @ a).sum()).item())
        report["device_name"] = torch.cuda.get_device_name(0)
except ImportError as error:
    report["torch"] = str(error)
try:
    smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    report["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
except OSError as error:
    report["nvidia_smi"] = f"not run: {error}"
report["processes_seen"] = sorted(p for p in os.listdir("/proc") if p.isdigit())
print(json.dumps(report))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bwrap", default="bwrap", help="the bubblewrap program")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("gpu_isolation_check: run as root (tasks switch accounts)", file=sys.stderr)
        return 2
    problem = bubblewrap_problem(args.bwrap)
    if problem is not None:
        print(f"gpu_isolation_check: no sandbox here: {problem}", file=sys.stderr)
        return 2
    project = "gpu-isolation-check"
    with tempfile.TemporaryDirectory(prefix="gpupool-check-") as tmp:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir(mode=0o700)
        secret = data_dir / "admin-token"
        secret.write_text("not for tasks\n")
        secret.chmod(0o600)
        sandbox = Bubblewrap(data_dir, bwrap=args.bwrap)
        launch = Launch("check-1", project, "check", 0, "local", (0,), 1000, 0)
        work = sandbox.working_dir(launch, data_dir)
        env = sandbox.prepare(launch, [work])
        env.update(PATH=os.environ.get("PATH", "/usr/bin:/bin"), HOME=str(work))
        env.update(SECRET_PATH=str(secret), CUDA_VISIBLE_DEVICES="0")
        command = sandbox.wrap(launch, [sys.executable, "-c", TASK], [work], work)
        try:
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=300, check=False
            )
        finally:
            remove_account(project)
    lines = done.stdout.strip().splitlines()
    report = json.loads(lines[-1]) if lines else {}
    report["exit_code"] = done.returncode
    report["stderr_tail"] = done.stderr[-2000:]
    print(json.dumps(report, indent=2))
    ok = (
        done.returncode == 0
        and report.get("uid") not in (None, 0)
        and report.get("secret_read") is False
        and report.get("cuda_available") is True
        and report.get("matmul_sum_finite") is True
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
