"""Fixtures shared by all the tests.

PostgreSQL: `postgres_server` is one real server per test session (`tests/pgserver.py`),
started only when a test asks for it; `postgres_url` is a fresh empty database on it per test,
and `database_url` runs a test on SQLite and again on PostgreSQL.
Without the PostgreSQL binaries those tests skip, except on CI (CI=true), where they fail.

Server: `live_server` is a real `gpupool server` (uvicorn child process, simulated nodes 2x4,
SQLite in a temp dir) per test; `api_server` is one per test module, on SQLite and again on
PostgreSQL.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.server.process import ServerProcess
from liveserver import LiveServer
from pgserver import TemporaryPostgres, require_postgres

_database_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[TemporaryPostgres]:
    """A PostgreSQL server for the whole session, stopped (and its files deleted) at the end."""
    require_postgres()
    with TemporaryPostgres() as server:
        yield server


@pytest.fixture
def postgres_url(
    postgres_server: TemporaryPostgres, request: pytest.FixtureRequest
) -> Iterator[str]:
    """The SQLAlchemy URL (`postgresql+psycopg://...`) of a new empty database for this test
    alone; dropped afterwards, connections still open to it included."""
    test_name = re.sub(r"[^a-z0-9_]+", "_", request.node.name.lower())
    name = f"t{next(_database_numbers)}_{test_name}"[:63]
    url = postgres_server.create_database(name)
    yield url
    postgres_server.drop_database(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database, once SQLite (a file in the test's directory) and once
    PostgreSQL (`postgres_url`): for tests of what the two must do alike."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'db.sqlite'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[LiveServer]:
    process = ServerProcess(tmp_path / "server", simulated_nodes="2x4", cycle_interval_s=0.1)
    with process:
        yield LiveServer(process)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """One server per test module and database; tests use their own names to stay apart."""
    database_url = None
    if request.param == "postgresql":
        postgres = request.getfixturevalue("postgres_server")
        module = request.module.__name__.rsplit(".", 1)[-1].lower()
        database_url = postgres.create_database(f"api_{module}"[:60])
    process = ServerProcess(
        tmp_path_factory.mktemp("server"),
        database_url=database_url,
        simulated_nodes="2x4",
        cycle_interval_s=0.1,
    )
    with process:
        yield LiveServer(process)
