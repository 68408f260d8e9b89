"""The parent of every local task: `python -m gpupool.executors.shim STATE_DIR LAUNCH_ID -- CMD`.

It leads the task's session and process group, so the executor signals the whole group at
once. It writes `LAUNCH_ID.pid` before starting the command (a restarted server finds the task
by it) and `LAUNCH_ID.exit` with the command's exit code after it ends (a restarted server is
not the task's parent and cannot wait for it). It survives SIGTERM (which the group's processes
receive) so that it can record how the command ended; SIGKILL ends it with no record, which the
executor reads as "killed".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    with temporary.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m gpupool.executors.shim STATE_DIR LAUNCH_ID -- COMMAND...")
        return 2
    state_dir, launch_id, command = Path(argv[0]), argv[1], argv[3:]
    stop_requested = False

    def note_stop(signum: int, frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    # A handler, not SIG_IGN: an ignored signal would stay ignored in the command after exec.
    signal.signal(signal.SIGTERM, note_stop)
    _write_atomically(state_dir / f"{launch_id}.pid", str(os.getpid()))
    env = None
    if os.environ.get("GPUPOOL_ISOLATION") == "bubblewrap":
        # In its own PID namespace a task does not know its pid as the machine counts it:
        # declared (fake) GPU usage is reported under the shim's, which leads its group.
        env = {**os.environ, "GPUPOOL_FAKE_GPU_REPORT_PID": str(os.getpid())}
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as error:
        print(f"gpupool: cannot start {command[0]!r}: {error}", flush=True)
        code = 127
    else:
        code = child.wait()
        if code < 0:
            code = 128 - code
    _write_atomically(
        state_dir / f"{launch_id}.exit",
        json.dumps({"exit_code": code, "stop_requested": stop_requested}),
    )
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
