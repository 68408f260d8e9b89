"""The PostgreSQL fixtures themselves: a real server, a fresh database per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from pgserver import TemporaryPostgres


def _conninfo(url: str) -> str:
    """The libpq connection string of a SQLAlchemy URL."""
    parsed = make_url(url)
    return f"host={parsed.host} port={parsed.port} user={parsed.username} dbname={parsed.database}"


def _public_tables(url: str) -> list[str]:
    with psycopg.connect(_conninfo(url)) as connection:
        rows = connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
    return [name for (name,) in rows]


def test_a_table_round_trips_a_row(postgres_url: str) -> None:
    assert postgres_url.startswith("postgresql+psycopg://gpupool@127.0.0.1:")
    with psycopg.connect(_conninfo(postgres_url)) as connection:
        connection.execute("CREATE TABLE node (name text PRIMARY KEY, gpus integer NOT NULL)")
        connection.execute("INSERT INTO node VALUES (%s, %s)", ("a100-01", 8))
        connection.commit()
    with psycopg.connect(_conninfo(postgres_url)) as connection:
        rows = connection.execute("SELECT name, gpus FROM node").fetchall()
    assert rows == [("a100-01", 8)]


def test_sqlalchemy_uses_the_url_as_given(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    try:
        with engine.begin() as connection:
            connection.execute(text("CREATE TABLE project (name text)"))
            connection.execute(text("INSERT INTO project VALUES ('vision')"))
        with engine.connect() as connection:
            assert connection.execute(text("SELECT name FROM project")).scalar_one() == "vision"
            encoding = connection.execute(text("SHOW server_encoding")).scalar_one()
            assert encoding == "UTF8"
    finally:
        engine.dispose()


@pytest.fixture
def second_database_url(postgres_server: TemporaryPostgres) -> Iterator[str]:
    """A second database in the same test, made the way `postgres_url` makes its own."""
    name = f"second_{uuid.uuid4().hex}"
    yield postgres_server.create_database(name)
    postgres_server.drop_database(name)


def test_two_databases_are_separate(postgres_url: str, second_database_url: str) -> None:
    assert make_url(postgres_url).database != make_url(second_database_url).database
    with psycopg.connect(_conninfo(postgres_url)) as connection:
        connection.execute("CREATE TABLE only_here (x integer)")
    assert _public_tables(postgres_url) == ["only_here"]
    assert _public_tables(second_database_url) == []


_databases_seen: set[str] = set()


@pytest.mark.parametrize("run", ["first", "second"])
def test_each_test_gets_a_new_empty_database(postgres_url: str, run: str) -> None:
    database = make_url(postgres_url).database
    assert database is not None
    assert database not in _databases_seen
    _databases_seen.add(database)
    with psycopg.connect(_conninfo(postgres_url)) as connection:
        connection.execute("CREATE TABLE left_behind (x integer)")
    # The tests above created tables too; a new database sees none of them.
    assert _public_tables(postgres_url) == ["left_behind"]
