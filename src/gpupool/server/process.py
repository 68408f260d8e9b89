"""Start `gpupool server` as a child process and wait until it answers: for tests, benchmarks
and commands that run a server in the background."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from gpupool.private import append_private


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """One `gpupool server` child process on a free localhost port."""

    def __init__(
        self,
        data_dir: Path,
        *,
        database_url: str | None = None,
        port: int | None = None,
        simulated_nodes: str = "4x8",
        cycle_interval_s: float = 0.2,
        extra_args: tuple[str, ...] = (),
        log_path: Path | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.database_url = database_url
        self.simulated_nodes = simulated_nodes
        self.cycle_interval_s = cycle_interval_s
        self.extra_args = extra_args
        self.log_path = log_path or data_dir / "server.log"
        self.port = port or free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_token(self) -> str:
        return (self.data_dir / "admin-token").read_text(encoding="utf-8").strip()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def exit_code(self) -> int | None:
        """None while it runs."""
        return self._process.poll() if self._process else None

    def start(self, timeout_s: float = 30.0) -> ServerProcess:
        # 0700 when new; one an older version left open is the server's to tighten (and log)
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        args = [
            sys.executable,
            "-m",
            "gpupool",
            "server",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            "--simulated-nodes",
            self.simulated_nodes,
            "--cycle-interval",
            str(self.cycle_interval_s),
            *self.extra_args,
        ]
        env = dict(os.environ)
        if self.database_url:
            env["GPUPOOL_DATABASE_URL"] = self.database_url
        log = append_private(self.log_path)
        self._process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()
        try:
            self.wait_healthy(timeout_s)
        except BaseException:
            self.stop()  # a server that never answered is not left behind
            raise
        return self

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(
                    f"gpupool server exited with code {self._process.returncode}; "
                    f"its log:\n{self.log_path.read_text(errors='replace')[-4000:]}"
                )
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"gpupool server did not answer on {self.url} in {timeout_s} s")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait(timeout=30)

    def stop(self) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
