"""/health vs /ready, the 503 contract and the loop's backoff, in process (SQLite, fake time
for the loop's staleness). The same with a real PostgreSQL server stopped and started under
load: tests/server/test_database_outage.py."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import exc

from gpupool.clock import FakeClock
from gpupool.server.app import create_app
from gpupool.server.dbfaults import Backoff, is_outage
from gpupool.server.readiness import STALE_AFTER_S
from gpupool.server.settings import ServerSettings
from gpupool.server.state import ServerState
from liveserver import wait_for


class App:
    def __init__(self, tmp: Path, **settings: object) -> None:
        self.clock = FakeClock()
        self.data_dir = tmp / "data"
        self.app = create_app(
            ServerSettings(data_dir=self.data_dir, simulated_nodes="1x4", **settings),  # type: ignore[arg-type]
            clock=self.clock,
            announce=lambda message: None,
        )
        self.state: ServerState = self.app.state.gpupool

    def login(self, client: TestClient) -> TestClient:
        """`client` (started: the first admin exists) with the admin's token."""
        token = (self.data_dir / "admin-token").read_text().strip()
        client.headers["Authorization"] = f"Bearer {token}"
        return client


@pytest.fixture
def idle_loop(tmp_path: Path) -> Iterator[tuple[App, TestClient]]:
    """A loop that iterates once at start and then only when woken (a long interval)."""
    app = App(tmp_path, cycle_interval_s=3600.0)
    with TestClient(app.app) as client:
        yield app, app.login(client)


def test_ready_says_which_part_is_not_ready(idle_loop: tuple[App, TestClient]) -> None:
    app, client = idle_loop
    wait_for(lambda: client.get("/ready").status_code == 200, what="the first iteration")
    body = client.get("/ready").json()
    assert body["ready"] and body["database"]["ready"] and body["scheduler"]["ready"]
    assert body["scheduler_thread_alive"] is True

    loop = app.state.loop
    entered, release = threading.Event(), threading.Event()
    original = loop.run_once

    def stuck() -> None:  # an iteration that hangs (a statement that never returns, say)
        entered.set()
        release.wait(timeout=30)
        original()

    loop.run_once = stuck  # type: ignore[method-assign]
    loop.wake()
    wait_for(entered.is_set, what="the loop stuck in an iteration")
    limit = max(STALE_AFTER_S, 10 * 3600)  # ten cycle intervals, at least STALE_AFTER_S
    app.clock.advance(limit + 1)
    response = client.get("/ready")
    assert response.status_code == 503
    assert response.headers["Retry-After"].isdigit()
    body = response.json()
    assert body["ready"] is False
    assert body["database"] == {"ready": True, "detail": "answers"}
    assert body["scheduler"]["ready"] is False
    assert f"the last iteration completed {limit + 1} s ago" in body["scheduler"]["detail"]
    assert client.get("/health").status_code == 200  # liveness does not depend on it

    release.set()
    wait_for(lambda: client.get("/ready").status_code == 200, what="ready after an iteration")


def test_a_refused_history_write_leaves_the_server_ready_and_says_so(
    idle_loop: tuple[App, TestClient],
) -> None:
    """The database refuses the history's rows (here a trigger; on PostgreSQL before 0008 a
    sum past 32 bits): the iteration completes, `/ready` stays 200 and names the problem, the
    minutes wait in memory and are written once the database takes them."""
    app, client = idle_loop
    loop = app.state.loop
    wait_for(lambda: loop.iterations >= 1, what="the first iteration")
    with app.state.engine.begin() as connection:
        connection.exec_driver_sql(
            "CREATE TRIGGER refuse BEFORE INSERT ON history_cluster "
            "BEGIN SELECT RAISE(ABORT, 'history refused'); END"
        )
    for _ in range(2):  # two minutes over, each refused
        app.clock.advance(65)
        done = loop.iterations
        loop.wake()
        wait_for(lambda: loop.iterations > done, what="an iteration")  # noqa: B023
    assert loop.last_error is None and loop.recording_error is not None
    assert "history refused" in loop.recording_error
    assert len(loop.history.unwritten()) == 3
    response = client.get("/ready")
    assert response.status_code == 200
    detail = response.json()["scheduler"]["detail"]
    assert "not recorded, kept in memory meanwhile: history: " in detail
    assert "history refused" in detail
    app.clock.advance(1)  # an iteration without a step or a write: the error stays
    done = loop.iterations
    loop.wake()
    wait_for(lambda: loop.iterations > done, what="an iteration")
    assert loop.recording_error is not None and "history refused" in loop.recording_error

    with app.state.engine.begin() as connection:
        connection.exec_driver_sql("DROP TRIGGER refuse")
    app.clock.advance(65)
    done = loop.iterations
    loop.wake()
    wait_for(lambda: loop.iterations > done, what="an iteration")
    assert loop.recording_error is None and len(loop.history.unwritten()) == 1
    with app.state.engine.connect() as connection:
        minutes = connection.exec_driver_sql(
            "SELECT count(*) FROM history_cluster WHERE resolution_s = 60"
        ).scalar()
    assert minutes == 3
    assert "not recorded" not in client.get("/ready").json()["scheduler"]["detail"]


def test_a_locked_database_answers_503_with_retry_after(tmp_path: Path) -> None:
    app = App(tmp_path, run_scheduler=False, database_statement_timeout_s=0.2)
    with TestClient(app.app) as client:
        app.login(client)
        body = {"name": "team", "quota": {"gpu": 4}}
        assert client.post("/api/v1/projects", json=body).status_code == 201
        holder = sqlite3.connect(app.data_dir / "gpupool.db", isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # another writer holds the lock past the timeout
        try:
            body = {"name": "w", "project": "team", "gpu": 1}
            response = client.post("/api/v1/workloads", json=body)
            assert response.status_code == 503, response.text
            assert response.headers["Retry-After"].isdigit()
            assert "the database is unavailable or too slow" in response.json()["detail"]
            ready = client.get("/ready").json()  # readers still read (WAL)
            assert ready["database"]["ready"] is True
            assert ready["scheduler"]["detail"] == "not run by this server (API only)"
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert client.post("/api/v1/workloads", json=body).status_code == 201


def test_backoff_doubles_up_to_its_cap_and_resets() -> None:
    backoff = Backoff(first_s=0.5, cap_s=4.0)
    assert [backoff.next_s() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    backoff.reset()
    assert backoff.next_s() == 0.5


def test_what_counts_as_an_outage() -> None:
    refused = exc.OperationalError("SELECT 1", {}, Exception("connection refused"))
    assert is_outage(refused)
    assert is_outage(exc.TimeoutError("QueuePool limit reached"))
    assert not is_outage(exc.IntegrityError("INSERT", {}, Exception("unique")))
    assert not is_outage(exc.ProgrammingError("SELEC", {}, Exception("syntax")))
    assert not is_outage(ValueError("a bad row"))
