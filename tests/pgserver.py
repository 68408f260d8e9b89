"""A throwaway PostgreSQL server for the tests: real `initdb` + `pg_ctl`, no docker, no mocks.

`TemporaryPostgres` creates a cluster in a temporary directory, starts it on 127.0.0.1 on a
free TCP port (its unix socket stays inside the temporary directory), and hands out databases
as SQLAlchemy URLs. `stop()` (or leaving the `with` block) stops the server and deletes the
directory. Three backstops keep a server from outliving the test process: `stop()` is
registered with atexit, and a small watchdog process stops the server and deletes the
directory when the process that started it dies in any way, SIGKILL included.

PostgreSQL refuses to run as root. As root (this machine, CI), `initdb` and `pg_ctl` run as
the `postgres` system user through `runuser`; Debian's and Ubuntu's `postgresql` packages
create that user. Nothing here creates users: a missing one is reported by `available()`.

Plain Python, no pytest: `tests/conftest.py` wraps it in fixtures.
"""

from __future__ import annotations

import atexit
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import psycopg
from psycopg import sql

USER = "gpupool"
HOST = "127.0.0.1"
# The unprivileged account that runs the server when this process is root.
SERVER_ACCOUNT = "postgres"
_DEBIAN_BIN_GLOB = "/usr/lib/postgresql/*/bin"
_INSTALL_HINT = (
    "install the PostgreSQL server (Debian/Ubuntu: apt-get install postgresql; "
    ".ci/run does this on CI)"
)
# Lower-case SQL identifiers only: such a name needs no quoting in SQL nor in a URL.
_DATABASE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

# Small and fast: a scratch server for tests on a 2-core CI machine, durability off.
_SETTINGS: dict[str, str] = {
    "listen_addresses": HOST,
    "max_connections": "200",
    "shared_buffers": "32MB",
    "work_mem": "4MB",
    "maintenance_work_mem": "32MB",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "wal_level": "minimal",
    "max_wal_senders": "0",
    "max_wal_size": "1GB",
    "checkpoint_timeout": "30min",
    "autovacuum": "off",
    "jit": "off",
    "max_worker_processes": "4",
    "max_parallel_workers": "2",
    "max_parallel_workers_per_gather": "0",
    "log_min_messages": "warning",
    "lc_messages": "C",
    "timezone": "UTC",
}

# Run by the watchdog process: wait until the parent closes our stdin. "done" means it cleaned
# up itself; anything else (EOF because it died) means stop the server and delete the directory.
_WATCHDOG = """
import json, shutil, signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
stop_command, directory = json.loads(sys.argv[1])
if sys.stdin.read() != "done":
    subprocess.run(stop_command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, cwd="/", timeout=60, check=False)
    shutil.rmtree(directory, ignore_errors=True)
"""


class PostgresUnavailableError(RuntimeError):
    """The PostgreSQL server cannot be run here; the message says why and what to install."""


def _version_key(bindir: Path) -> tuple[int, ...]:
    """(15,) for /usr/lib/postgresql/15/bin: numeric, so 16 sorts above 9.6."""
    return tuple(int(part) for part in re.findall(r"\d+", bindir.parent.name))


def find_bindir() -> Path | None:
    """The directory holding both `initdb` and `pg_ctl`: PATH first, then the newest
    /usr/lib/postgresql/*/bin. None when there is none."""
    initdb = shutil.which("initdb")
    if initdb is not None:
        # Resolve symlinks (/usr/local/bin/initdb -> /usr/lib/postgresql/15/bin/initdb) so that
        # pg_ctl and postgres come from the same installation as initdb.
        for candidate in (Path(initdb).parent, Path(initdb).resolve().parent):
            if (candidate / "pg_ctl").is_file() and (candidate / "postgres").is_file():
                return candidate
    candidates = sorted(Path("/").glob(_DEBIAN_BIN_GLOB.lstrip("/")), key=_version_key)
    for bindir in reversed(candidates):
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    return None


def _server_account() -> pwd.struct_passwd | None:
    """The account to run the server as: None means this process itself (not root)."""
    if os.geteuid() != 0:
        return None
    return pwd.getpwnam(SERVER_ACCOUNT)


def available() -> str | None:
    """None when a `TemporaryPostgres` can start here, else the reason it cannot."""
    if find_bindir() is None:
        return f"PostgreSQL server binaries (initdb, pg_ctl) not found: {_INSTALL_HINT}"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_ACCOUNT)
        except KeyError:
            return (
                f"running as root, and PostgreSQL refuses to run as root, but there is no "
                f"{SERVER_ACCOUNT!r} user to run it as: {_INSTALL_HINT}, which creates it "
                f"(or: useradd --system --user-group {SERVER_ACCOUNT})"
            )
        if shutil.which("runuser") is None:
            return "running as root, and `runuser` (util-linux) is missing to drop privileges"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _quote_setting(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def _world_traversable(directory: Path) -> bool:
    """Whether every directory from / down to `directory` lets other users pass through."""
    return all(os.stat(part).st_mode & 0o001 for part in (directory, *directory.parents))


class TemporaryPostgres:
    """One PostgreSQL server in a temporary directory, for as long as the object is started.

    >>> with TemporaryPostgres() as server:
    ...     url = server.create_database("scratch")
    """

    def __init__(self, *, start_timeout_s: float = 30.0) -> None:
        self._start_timeout_s = start_timeout_s
        self._directory: Path | None = None
        self._bindir: Path | None = None
        self._account: pwd.struct_passwd | None = None
        self._port: int | None = None
        self._owner_pid = os.getpid()
        self._watchdog: subprocess.Popen[str] | None = None
        self.startup_seconds: float | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> Self:
        """initdb and start the server; raise `PostgresUnavailableError` if it cannot run."""
        if self._directory is not None:
            raise RuntimeError("TemporaryPostgres is already started")
        reason = available()
        if reason is not None:
            raise PostgresUnavailableError(reason)
        began = time.monotonic()
        self._bindir = find_bindir()
        self._account = _server_account()
        self._owner_pid = os.getpid()
        self._directory = Path(tempfile.mkdtemp(prefix="gpupool-pg-", dir=self._base_dir()))
        atexit.register(self.stop)
        try:
            self._prepare_directory()
            self._start_watchdog()
            self._initdb()
            self._start_server()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Stop the server and delete its directory. Safe to call twice, or unstarted."""
        directory = self._directory
        if directory is None or os.getpid() != self._owner_pid:
            return  # not started, already stopped, or a forked child that does not own it
        self._directory = None
        self._port = None
        atexit.unregister(self.stop)
        if (directory / "data" / "postmaster.pid").exists():
            self._run(self._stop_command(directory), check=False, timeout=60)
        shutil.rmtree(directory, ignore_errors=True)
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            watchdog.communicate("done", timeout=30)

    def pause(self) -> None:
        """Stop the server cleanly (every commit on disk; clients disconnected), keeping its
        files and port: the database is away until `resume`."""
        if self._directory is None:
            raise RuntimeError("TemporaryPostgres is not started")
        data = str(self._directory / "data")
        self._run(self._command("pg_ctl", "stop", "-D", data, "-m", "fast", "-w"), check=True,
                  timeout=60)  # fmt: skip

    def resume(self) -> None:
        """Start the paused server again, on the same port."""
        if self._directory is None or self._port is None:
            raise RuntimeError("TemporaryPostgres is not started")
        data, log = str(self._directory / "data"), str(self._directory / "server.log")
        timeout = str(round(self._start_timeout_s))
        command = ["start", "-D", data, "-l", log, "-w", "-t", timeout, "-o", f"-p {self._port}"]
        self._run(self._command("pg_ctl", *command), check=True, timeout=self._start_timeout_s + 10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- databases ------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("TemporaryPostgres is not started")
        return self._port

    def url(self, database: str = "postgres") -> str:
        """The SQLAlchemy URL (psycopg 3 driver) of `database` on this server."""
        return f"postgresql+psycopg://{USER}@{HOST}:{self.port}/{database}"

    def conninfo(self, database: str = "postgres") -> str:
        """The libpq connection string of `database`, for `psycopg.connect`."""
        return f"host={HOST} port={self.port} user={USER} dbname={database}"

    def create_database(self, name: str) -> str:
        """Create an empty database and return its SQLAlchemy URL.

        `name`: lower-case letters, digits and underscores, at most 63 characters.
        """
        self._check_name(name)
        with psycopg.connect(self.conninfo(), autocommit=True) as connection:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, closing any connections still open to it."""
        self._check_name(name)
        with psycopg.connect(self.conninfo(), autocommit=True) as connection:
            force = " WITH (FORCE)" if connection.info.server_version >= 130000 else ""
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {}" + force).format(sql.Identifier(name))
            )

    # -- internals ------------------------------------------------------------------------

    @staticmethod
    def _check_name(name: str) -> None:
        if not _DATABASE_NAME.fullmatch(name):
            raise ValueError(f"database name {name!r}: use [a-z_][a-z0-9_]*, at most 63 characters")

    def _base_dir(self) -> str | None:
        """Where to make the temporary directory: the default, unless the server account
        could not reach into it (a TMPDIR under /root, say)."""
        if _server_account() is None:
            return None
        default = Path(tempfile.gettempdir())
        return None if _world_traversable(default) else "/tmp"

    def _prepare_directory(self) -> None:
        assert self._directory is not None
        (self._directory / "socket").mkdir()
        if self._account is not None:
            for path in (self._directory, self._directory / "socket"):
                os.chown(path, self._account.pw_uid, self._account.pw_gid)

    def _command(self, program: str, *args: str) -> list[str]:
        assert self._bindir is not None
        command = [str(self._bindir / program), *args]
        if self._account is not None:
            return ["runuser", "-u", self._account.pw_name, "--", *command]
        return command

    def _stop_command(self, directory: Path) -> list[str]:
        return self._command("pg_ctl", "stop", "-D", str(directory / "data"), "-m", "immediate")

    def _run(self, command: Sequence[str], *, check: bool, timeout: float) -> str:
        """Run a command with the temporary directory as its working directory (the caller's
        may be unreadable by the server account); its output, or an error that includes it."""
        completed = subprocess.run(
            command,
            cwd=self._directory if self._directory is not None else "/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and completed.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} exited {completed.returncode}:\n{completed.stdout}"
            )
        return completed.stdout

    def _start_watchdog(self) -> None:
        assert self._directory is not None
        argument = json.dumps([self._stop_command(self._directory), str(self._directory)])
        # Its own session: a Ctrl-C at the terminal does not reach it. Its stdin is the only
        # end of a pipe held by this process, so it sees EOF when this process dies.
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, argument],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            text=True,
            start_new_session=True,
        )

    def _initdb(self) -> None:
        assert self._directory is not None
        data = self._directory / "data"
        self._run(
            self._command(
                "initdb",
                "-D",
                str(data),
                "--auth=trust",
                f"--username={USER}",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ),
            check=True,
            timeout=120,
        )
        settings = {
            **_SETTINGS,
            "unix_socket_directories": str(self._directory / "socket"),
        }
        lines = [f"{key} = {_quote_setting(value)}" for key, value in settings.items()]
        with (data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n# tests/pgserver.py\n" + "\n".join(lines) + "\n")

    def _start_server(self) -> None:
        """pg_ctl start on a free port; retried on another port if the one picked was taken
        between the probe and the server's bind."""
        assert self._directory is not None
        data = self._directory / "data"
        log = self._directory / "server.log"
        for attempt in range(3):
            port = _free_port()
            command = self._command(
                "pg_ctl",
                "start",
                "-D",
                str(data),
                "-l",
                str(log),
                "-w",
                "-t",
                str(round(self._start_timeout_s)),
                "-o",
                f"-p {port}",
            )
            try:
                self._run(command, check=True, timeout=self._start_timeout_s + 10)
            except RuntimeError as error:
                server_log = log.read_text(errors="replace") if log.exists() else ""
                if attempt < 2 and "could not bind" in server_log:
                    log.unlink()
                    continue
                raise RuntimeError(f"{error}\nserver log ({log}):\n{server_log}") from None
            self._port = port
            return


def require_postgres() -> None:
    """Skip the calling test without the PostgreSQL binaries; on CI (CI=true) fail instead."""
    import pytest

    reason = available()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the PostgreSQL tests: {reason}", pytrace=False)
        pytest.skip(reason)
