"""`benchmarks/server_recording.py` runs end to end on a small cluster, on SQLite and on
PostgreSQL, and what it times is the loop's real recording: after 13 steps the first minute's
usage rows (every device, every running task) and its history rows are in the database."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import server_recording

from gpupool.server.db import make_engine


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_the_recording_benchmark_writes_the_first_minute(
    database: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    if database == "sqlite":
        url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    else:
        url = request.getfixturevalue("postgres_url")
    assert server_recording.main(["--nodes", "3", "--steps", "13", "--database-url", url]) == 0
    out = capsys.readouterr().out
    steps = [line.split() for line in out.splitlines() if line[:4].strip().isdigit()]
    assert [row[0] for row in steps] == [str(n) for n in range(1, 14)]
    [last] = [line for line in out.splitlines() if line.split()[:1] == ["13"]]
    assert "a minute is over: usage and history written" in last
    engine = make_engine(url)
    with engine.connect() as connection:
        devices = connection.execute(
            text(
                "SELECT count(*), min(samples), max(samples) FROM usage WHERE project = '' "
                "AND bucket_s = (SELECT min(bucket_s) FROM usage)"
            )
        ).one()
        tasks = connection.execute(text("SELECT count(*) FROM usage WHERE project <> ''")).one()
        minute = connection.execute(
            text("SELECT samples FROM history_cluster WHERE resolution_s = 60")
        ).all()
    engine.dispose()
    assert tuple(devices) == (24, 12, 12)  # the first minute: 3 nodes x 8 devices, 12 steps
    assert tasks[0] > 0
    assert [row[0] for row in minute] == [12]
