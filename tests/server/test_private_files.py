"""What the server and the CLI write is their owner's alone: the data directory 0700, the
database (and its -wal and -shm), the first admin's token, the server log and the CLI's config
0600, whatever the umask; an older data directory left open to others is tightened at start,
and the log says so."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpupool.client.config import ClientConfig, write_config
from gpupool.private import append_private, create_private, private_dir, touch_private
from gpupool.server.process import ServerProcess

SECRET_FILES = ("gpupool.db", "gpupool.db-wal", "gpupool.db-shm", "admin-token", "server.log")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """umask 0: every mode below comes from how the file was created, none from the umask."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def started(data_dir: Path) -> ServerProcess:
    server = ServerProcess(data_dir, simulated_nodes="1x1").start()
    # a write, so that SQLite has made its -wal and -shm files
    token = server.admin_token
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}) as http:
        assert http.post("/api/v1/projects", json={"name": "p"}).status_code in (201, 409)
    return server


@pytest.mark.usefixtures("open_umask")
def test_a_new_data_directory_and_its_secrets_are_the_owners_alone(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    server = started(data_dir)
    try:
        assert mode(data_dir) == 0o700
        assert {name: mode(data_dir / name) for name in SECRET_FILES} == dict.fromkeys(
            SECRET_FILES, 0o600
        )
    finally:
        server.stop()


def test_a_data_directory_left_open_is_tightened_and_the_log_says_so(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    started(data_dir).stop()
    data_dir.chmod(0o755)
    for name in ("gpupool.db", "admin-token"):
        (data_dir / name).chmod(0o644)
    server = started(data_dir)
    try:
        assert mode(data_dir) == 0o700
        assert mode(data_dir / "gpupool.db") == mode(data_dir / "admin-token") == 0o600
        log = server.log_path.read_text()
        assert f"the data directory {data_dir} was open to other users (mode 0755)" in log
        assert f"{data_dir / 'gpupool.db'} was readable by other users (mode 0644)" in log
    finally:
        server.stop()


@pytest.mark.usefixtures("open_umask")
def test_the_helpers_create_with_the_final_mode(tmp_path: Path) -> None:
    directory = tmp_path / "a" / "b"
    assert private_dir(directory) is None and mode(directory) == 0o700
    create_private(directory / "token", "secret\n")
    touch_private(directory / "db")
    with append_private(directory / "log") as log:
        log.write(b"line\n")
    assert [mode(directory / n) for n in ("token", "db", "log")] == [0o600] * 3
    with pytest.raises(FileExistsError):
        create_private(directory / "token", "again")
    (directory / "log").chmod(0o644)
    append_private(directory / "log").close()
    assert mode(directory / "log") == 0o600


@pytest.mark.usefixtures("open_umask")
def test_the_cli_config_is_0600_in_a_0700_directory(tmp_path: Path) -> None:
    path = tmp_path / "config" / "gpupool" / "config.json"
    write_config(ClientConfig(server="http://127.0.0.1:8000", token="t"), path)
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700
