"""`benchmarks/server_cycle.py` runs end to end on a small cluster, on SQLite and on
PostgreSQL: the seeded rows make a snapshot, the cached snapshot equals a fresh one every cycle
(exit status 0), the first cycle binds work that the later ones read back from the database,
and the later ones read in full only the rows that changed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import server_cycle

from gpupool.server import isolation, persist, scheduler, snapshot


def test_the_server_cycle_benchmark_runs_and_its_snapshots_agree(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert server_cycle.main(["--nodes", "4", "--cycles", "3"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line[:5].strip().isdigit()]
    assert [row[0] for row in rows] == ["1", "2", "3"]
    assert int(rows[0][-1].replace(",", "")) > 0, "the burst binds something"
    # the loop's steps are its own again once the benchmark returns
    assert scheduler.build_snapshot is snapshot.build_snapshot
    assert persist.write.__module__ == "gpupool.server.persist"
    assert isolation.run_isolated.__module__ == "gpupool.server.isolation"


def test_on_postgresql_in_wall_time(capsys: pytest.CaptureFixture[str], postgres_url: str) -> None:
    url = postgres_url
    assert server_cycle.main(["--nodes", "4", "--cycles", "3", "--database-url", url]) == 0
    assert server_cycle.main(["--nodes", "1", "--cycles", "1", "--clock", "wall"]) == 0
    out = capsys.readouterr().out
    assert "PostgreSQL" in out and "wall ms" in out
    rows = [line.split() for line in out.splitlines() if line[:5].strip().isdigit()]
    # PostgreSQL's cycles: every row read at first, then only those whose xmin moved
    read = [row[3] for row in rows[:3]]
    assert read[0] == "all" and all(r.isdigit() and int(r) < 70 for r in read[1:]), read
