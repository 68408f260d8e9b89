"""The real server for tests: a `gpupool server` child process on a free localhost port."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable

import httpx

from gpupool.server.process import ServerProcess

_names = itertools.count()


def unique(prefix: str) -> str:
    """A name no other test in this run uses (tests share module-scoped servers)."""
    return f"{prefix}-{os.getpid()}-{next(_names)}"


class LiveServer:
    def __init__(self, process: ServerProcess) -> None:
        self.process = process

    @property
    def url(self) -> str:
        return self.process.url

    @property
    def admin_token(self) -> str:
        return self.process.admin_token

    def client(self, token: str | None = None) -> httpx.Client:
        """An httpx client with the admin's token (or `token`)."""
        bearer = token if token is not None else self.admin_token
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {bearer}"}, timeout=30
        )


def wait_for(check: Callable[[], bool], timeout_s: float = 15.0, what: str = "condition") -> None:
    """Poll `check` until true; fail after `timeout_s` (the scheduler runs every 0.1 s here)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
