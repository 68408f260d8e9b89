"""`benchmarks/usage_report.py` runs end to end on a small cluster: it seeds the rows it says,
and each report answers (the averages per workload, devices by the hour) or is refused as the
server refuses it (workloads by the minute, past the points an answer may hold)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import usage_report

from gpupool.server import usage
from gpupool.server.db import UsageRow, make_engine


def test_the_usage_report_benchmark_seeds_and_reports(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'usage.db'}"
    assert usage_report.main(["--nodes", "2", "--hours", "1", "--database-url", url]) == 0
    out = capsys.readouterr().out
    with make_engine(url).connect() as connection:
        rows = connection.execute(select(func.count()).select_from(UsageRow)).scalar_one()
    assert f"seeded {rows:,} rows" in out and rows >= 16 * 60  # every device, every minute
    answers = _answers(out)
    assert answers["devices by the hour"] == "16 points, 16 keys"  # 16 devices, one hour
    workloads = answers["usage --by workload"].split()
    assert workloads[1:] == ["points,", workloads[0], "keys"]  # one bucket: a point per key
    assert (
        answers["workloads by the minute"]
        == f"{60 * int(workloads[0])} points, {workloads[0]} keys"
    )

    # A bound lower than the minute points (as a large cluster's day): refused, as the server
    # refuses it; the children read it from the module, so it is patched in their environment.
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "patched"))
    patched = tmp_path / "patched"
    patched.mkdir()
    (patched / "sitecustomize.py").write_text(
        "import gpupool.server.usage as usage\nusage.MAX_POINTS = 100\n"
    )
    assert usage.MAX_POINTS == 100_000
    assert usage_report.main(["--database-url", url, "--keep", "--hours", "1"]) == 0
    refused = _answers(capsys.readouterr().out)["workloads by the minute"]
    assert refused.startswith("ApiError: usage by workload in buckets of 60 s")


def _answers(out: str) -> dict[str, str]:
    """Each report's answer (the text after its three numbers)."""
    return {
        line[:26].strip(): line[26:].split(None, 3)[3]
        for line in out.splitlines()
        if line[:26].strip()
        in ("usage --by workload", "devices by the hour", "workloads by the minute")
    }
