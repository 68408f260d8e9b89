"""The database goes away under load and comes back: a real PostgreSQL server stopped and
started under a live gpupool server. While it is away the API answers JSON 503 with
Retry-After, /ready says the database is not ready, /health stays up and the loop's thread
lives; once it is back, every submission that was acknowledged (201) is there and scheduled,
without restarting gpupool."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpupool.server.process import ServerProcess
from liveserver import LiveServer, wait_for
from pgserver import TemporaryPostgres, require_postgres


@pytest.fixture
def postgres() -> Iterator[TemporaryPostgres]:
    """A server of this test's own: stopping the session's would disturb other tests."""
    require_postgres()
    with TemporaryPostgres() as server:
        yield server


class Submitter(threading.Thread):
    """Submits workloads one after another until stopped; notes what was acknowledged."""

    def __init__(self, server: LiveServer) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.acknowledged: list[str] = []
        self.refused: list[httpx.Response] = []
        self.halt = threading.Event()
        self.back = threading.Event()
        """Set by the test once the database is back: after a refusal the thread waits for it
        (a client that honours Retry-After, without a clock)."""

    def run(self) -> None:
        with self.server.client() as http:
            number = 0
            while not self.halt.is_set():
                name = f"load-{number}"
                number += 1
                body = {"name": name, "project": "team", "gpu": 0.1, "duration_s": 0.2}
                try:
                    response = http.post("/api/v1/workloads", json=body, timeout=20)
                except httpx.HTTPError:
                    continue  # no answer: not acknowledged
                if response.status_code == 201:
                    self.acknowledged.append(name)
                else:
                    self.refused.append(response)
                    self.back.wait(timeout=120)


def _ready(http: httpx.Client) -> httpx.Response:
    return http.get("/ready", timeout=20)


def _statuses(http: httpx.Client) -> dict[str, str]:
    response = http.get("/api/v1/workloads", params={"project": "team", "limit": 1000})
    assert response.status_code == 200, response.text
    body: Any = response.json()
    items = body["items"] if isinstance(body, dict) else body
    return {item["name"]: item["status"] for item in items}


def test_the_database_stops_and_starts_under_load(
    postgres: TemporaryPostgres, tmp_path: Path
) -> None:
    url = postgres.create_database("outage")
    process = ServerProcess(
        tmp_path / "server", database_url=url, simulated_nodes="2x4", cycle_interval_s=0.1
    )
    with process:
        server = LiveServer(process)
        with server.client() as http:
            response = http.post("/api/v1/projects", json={"name": "team", "quota": {"gpu": 8}})
            assert response.status_code == 201, response.text
            wait_for(lambda: _ready(http).status_code == 200, what="ready before the outage")

            load = Submitter(server)
            load.start()
            wait_for(lambda: len(load.acknowledged) >= 5, what="submissions acknowledged")

            postgres.pause()
            try:
                listing = http.get("/api/v1/workloads", params={"project": "team"})
                assert listing.status_code == 503, listing.text
                assert listing.headers["Retry-After"].isdigit()
                assert "database is unavailable" in listing.json()["detail"]
                refused = http.post(
                    "/api/v1/workloads",
                    json={"name": "while-down", "project": "team", "gpu": 0.1},
                )
                assert refused.status_code == 503, refused.text
                assert "Retry-After" in refused.headers
                assert http.get("/health").status_code == 200

                ready = _ready(http)
                assert ready.status_code == 503, ready.text
                assert "Retry-After" in ready.headers
                body = ready.json()
                assert body["ready"] is False
                assert body["database"]["ready"] is False
                assert body["scheduler_thread_alive"] is True
                wait_for(lambda: load.refused != [], what="a submission refused under load")
                assert {r.status_code for r in load.refused} == {503}
                log_path = tmp_path / "server" / "server.log"
                wait_for(  # the loop met the outage (on a loaded machine it may take a while)
                    lambda: (
                        "scheduling loop: OperationalError" in log_path.read_text(errors="replace")
                    ),
                    timeout_s=60,
                    what="the loop to meet the outage",
                )
            finally:
                postgres.resume()
                before = len(load.acknowledged)
                load.back.set()

            wait_for(lambda: _ready(http).status_code == 200, timeout_s=60, what="ready again")
            body = _ready(http).json()
            assert body["database"]["ready"] and body["scheduler"]["ready"], body
            wait_for(lambda: len(load.acknowledged) >= before + 3, what="submissions after it")
            load.halt.set()
            load.join(timeout=30)

            acknowledged = load.acknowledged
            statuses = _statuses(http)
            assert set(acknowledged) <= set(statuses), set(acknowledged) - set(statuses)
            assert "while-down" not in statuses
            wait_for(
                lambda: all(_statuses(http)[name] == "completed" for name in acknowledged),
                timeout_s=60,
                what="every acknowledged submission scheduled and completed",
            )
            log = (tmp_path / "server" / "server.log").read_text(errors="replace")
            assert "scheduling loop: the database answers again: resumed after" in log
