"""`gpupool usage`: durations, and the project, cluster, device and workload views against one
real server (simulated nodes, whose utilization is a model: a training task keeps its GPU
100% busy)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from gpupool.api.schemas import DeviceHistoryOut, HistoryOut, ProjectIn, WorkloadIn
from gpupool.cli.main import app
from gpupool.cli.usage import parse_since, sparkline
from gpupool.client.config import ClientConfig, write_config
from gpupool.client.http import GpupoolClient
from liveserver import LiveServer, unique, wait_for

Cli = Callable[..., Result]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1h", 3600), ("90m", 5400), ("2d", 172_800), ("1.5h", 5400), ("1w", 604_800)],
)
def test_since_takes_any_duration(text: str, seconds: int) -> None:
    assert parse_since(text) == seconds


@pytest.mark.parametrize(("text", "message"), [("week", "not a duration"), ("30s", "too short")])
def test_a_bad_since_says_how_to_write_one(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_since(text)


def test_sparkline_scales_to_the_highest_and_leaves_gaps_blank() -> None:
    assert sparkline([0.0, 1.0, None, 2.0]) == "▁▅ █"
    assert sparkline([float(i) for i in range(100)], width=10) == "▁▂▃▄▄▅▆▇▇█"


@pytest.fixture
def admin(tmp_path: Path, server: LiveServer) -> Cli:
    config = tmp_path / "config.json"
    write_config(ClientConfig(server=server.url, token=server.admin_token), config)
    runner = CliRunner()
    env = {"GPUPOOL_CONFIG": str(config), "GPUPOOL_SERVER": None, "GPUPOOL_TOKEN": None}
    env["COLUMNS"] = "200"
    return lambda *args: runner.invoke(app, list(args), env=env)


@pytest.fixture(scope="module")
def busy_project(server: LiveServer) -> str:
    """A project whose training workload has been recorded running and measured."""
    name = unique("p")
    with GpupoolClient(server.url, server.admin_token) as client:
        client.create_project(ProjectIn.model_validate({"name": name, "quota": {"gpu": 2}}))
        client.submit(WorkloadIn.model_validate({"name": "train", "project": name, "gpu": 1}))

        def recorded() -> bool:
            series = [s for s in client.history("1h").projects if s.key == name]
            return bool(series) and any(series[0].utilized_gpu)

        wait_for(recorded, 30, "a step of the history with the workload running")
    return name


def test_by_project(admin: Cli, busy_project: str) -> None:
    result = admin("usage", "--since", "1h", "--by", "project", "--json")
    assert result.exit_code == 0, result.output
    out = HistoryOut.model_validate(json.loads(result.stdout))
    assert (out.resolution_s, out.step_s) == (60, 60)
    shown = admin("usage", "--since", "90m")
    assert shown.exit_code == 0, shown.output
    [row] = [line.split() for line in shown.stdout.splitlines() if busy_project in line]
    # Averages over whole minutes, the first of which began before the work ran; the model's
    # exact numbers are checked on fake time (tests/server/test_history.py).
    assert row[0] == busy_project and 0 < float(row[2]) <= float(row[1]) <= 1
    assert "GPU-hours allocated" in shown.stdout


def test_by_cluster_and_device(admin: Cli, busy_project: str) -> None:
    cluster = admin("usage", "--by", "cluster", "--since", "24h")
    assert cluster.exit_code == 0, cluster.output
    assert "The cluster over the last 24h" in cluster.stdout
    assert "8.00" in cluster.stdout  # capacity
    result = admin("usage", "--by", "device", "--since", "1h", "--json")
    assert result.exit_code == 0, result.output
    devices = DeviceHistoryOut.model_validate(json.loads(result.stdout))
    assert {(d.node, d.device_index) for d in devices.devices} >= {("sim-1", 0), ("sim-2", 3)}
    busy = [d for d in devices.devices if d.utilization_percent]
    assert len(busy) == 1 and busy[0].allocated_gpu > 0  # idle before the workload started
    assert "sim-1/0" in admin("usage", "--by", "device").stdout


def test_by_workload_reads_the_per_minute_samples_of_14_days(admin: Cli) -> None:
    result = admin("usage", "--by", "workload", "--since", "2h")
    assert result.exit_code == 0, result.output
    # one line or two: the title wraps to the table's width, which its rows set
    assert "average over the last 120 min" in " ".join(result.stdout.split())
    refused = admin("usage", "--by", "workload", "--since", "30d")
    assert refused.exit_code == 2
    assert "kept 14 days" in refused.stderr


def test_bad_durations_and_spans_exit_2(admin: Cli) -> None:
    bad = admin("usage", "--since", "forever")
    assert bad.exit_code == 2 and "like 1h, 90m" in bad.stderr
    too_long = admin("usage", "--since", "400d")
    assert too_long.exit_code == 2 and "at most 366 days" in too_long.stderr
