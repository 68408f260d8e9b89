"""What the CLI's end-to-end tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpupool.server.process import ServerProcess
from liveserver import LiveServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One real `gpupool server` (simulated nodes 2x4, SQLite) per test module; each test uses
    its own names (`unique`) and keeps what it runs small. A module that needs another server
    (the local executor, say) defines its own `server`."""
    process = ServerProcess(
        tmp_path_factory.mktemp("server"), simulated_nodes="2x4", cycle_interval_s=0.1
    )
    with process:
        yield LiveServer(process)
