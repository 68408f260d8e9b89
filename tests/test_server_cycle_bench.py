"""`benchmarks/server_cycle.py` runs end to end on a small cluster: the seeded rows make a
snapshot, the cached snapshot equals a fresh one every cycle (exit status 0), and the first
cycle binds work that the later ones read back from the database."""

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
