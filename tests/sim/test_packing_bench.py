"""The packing benchmark's protocol (stream, curve, checkpoints, offline reference) and its CLI,
on small hand-made traces."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from tiny_trace import NODES_CSV, PODS_CSV
from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.core.packing import PackingState, PodShape, PolicyName, TypicalShape
from gpupool.sim.openb import TracePod, load_nodes, load_pods
from gpupool.sim.packing import (
    cluster_fragmentation,
    pack_nodes,
    parse_policy,
    pod_stream,
    run_offline,
    run_packing,
)


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes = tmp_path / "nodes.csv"
    pods = tmp_path / "pods.csv"
    nodes.write_text(NODES_CSV)
    pods.write_text(PODS_CSV)
    return nodes, pods


def test_pack_nodes_keeps_gpu_nodes_only(trace: tuple[Path, Path]) -> None:
    nodes = pack_nodes(load_nodes(trace[0]))
    assert [n.name for n in nodes] == ["n0", "n1", "n2"]


def test_pod_stream_is_a_shuffle_then_draws_until_the_inflation(trace: tuple[Path, Path]) -> None:
    pods = load_pods(trace[1])
    capacity = 10_000  # 10 GPUs; the list asks for 5.45
    stream = pod_stream(pods, capacity, seed=7, inflation=1.3)
    asked = [s.total_gpu_milli for s in stream]
    assert sum(asked) >= 1.3 * capacity
    assert sum(asked[:-1]) < 1.3 * capacity  # stops as soon as it is reached
    shapes = sorted((p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli) for p in pods)
    first = sorted((s.cpu_milli, s.memory_mib, s.gpu_count, s.gpu_milli) for s in stream[:6])
    assert first == shapes  # every pod once, in some order, before any draw
    assert stream == pod_stream(pods, capacity, seed=7, inflation=1.3)
    assert stream != pod_stream(pods, capacity, seed=8, inflation=1.3)


def test_pod_stream_rejects_a_list_without_gpu_pods() -> None:
    pods = (TracePod("c", 1000, 1024, 0, 0),)
    with pytest.raises(ValueError, match="no pod in the list asks for a GPU"):
        pod_stream(pods, 1000, seed=1, inflation=1.0)


@pytest.mark.parametrize("policy", list(PolicyName))
def test_run_packing_curve(trace: tuple[Path, Path], policy: PolicyName) -> None:
    nodes = pack_nodes(load_nodes(trace[0]))
    pods = load_pods(trace[1])
    run = run_packing(nodes, pods, policy, seed=3, inflation=1.3)
    assert len(run.arrived_pct) == len(run.allocated_pct) == run.pods
    # arrived and allocated only grow; nothing allocated that did not arrive, nor over 100%.
    for before, after in zip(run.arrived_pct, run.arrived_pct[1:], strict=False):
        assert after >= before
    for before, after in zip(run.allocated_pct, run.allocated_pct[1:], strict=False):
        assert after >= before
    for arrived, allocated in zip(run.arrived_pct, run.allocated_pct, strict=True):
        assert allocated <= arrived + 1e-9
        assert allocated <= 100.0 + 1e-9
    assert set(run.alloc_at) == {90, 95, 100, 130} == set(run.frag_at)
    assert 0 < run.placed <= run.pods
    assert all(0.0 <= v <= 100.0 for v in run.frag_at.values())
    # identical inputs, identical run (the wall time aside)
    again = run_packing(nodes, pods, policy, seed=3, inflation=1.3)
    assert again.allocated_pct == run.allocated_pct


def test_cluster_fragmentation_hand_checked(trace: tuple[Path, Path]) -> None:
    nodes = pack_nodes(load_nodes(trace[0]))
    state = PackingState(nodes)
    state.assign(0, (0,), PodShape(0, 0, 1, 600))  # n0: 400, 1000, 1000, 1000
    state.assign(2, (0, 1), PodShape(15000, 0, 2, 1000))  # n2: no GPU left
    typical = (TypicalShape(PodShape(2000, 0, 1, 500), 1.0),)
    # n0: only the 400 device is too small for 500; n1: nothing; n2: no free GPU.
    assert cluster_fragmentation(state, typical) == pytest.approx(400.0)


def test_offline_reference_is_feasible(trace: tuple[Path, Path]) -> None:
    nodes = pack_nodes(load_nodes(trace[0]))
    pods = load_pods(trace[1])
    offline = run_offline(nodes, pods, seed=3, inflation=1.3)
    online = run_packing(nodes, pods, PolicyName.DEFAULT, seed=3, inflation=1.3)
    for point, value in offline.items():
        assert value <= min(100.0, online.arrived_pct[-1]) + 1e-9
        # the arrival order is one of the orders it tries, so it is never below our default
        assert value >= online.alloc_at[point] - 1e-9


def test_offline_reference_takes_the_arrival_order_from_the_online_default_run(
    trace: tuple[Path, Path],
) -> None:
    nodes = pack_nodes(load_nodes(trace[0]))
    pods = load_pods(trace[1])
    for seed in (1, 2, 3, 4):
        online = run_packing(nodes, pods, PolicyName.DEFAULT, seed=seed, inflation=1.3)
        packed = run_offline(nodes, pods, seed, 1.3)
        assert run_offline(nodes, pods, seed, 1.3, online=online) == packed
    # the run's allocation is what stands for that order (not packed again)
    full = replace(online, allocated_pct=tuple(100.0 for _ in online.allocated_pct))
    assert set(run_offline(nodes, pods, 4, 1.3, online=full).values()) == {100.0}
    fgd = run_packing(nodes, pods, PolicyName.FGD, seed=4, inflation=1.3)
    with pytest.raises(ValueError, match="not the default policy's run"):
        run_offline(nodes, pods, 4, 1.3, online=fgd)
    with pytest.raises(ValueError, match="with seed 3"):
        run_offline(nodes, pods, 3, 1.3, online=online)


def test_cli_json(trace: tuple[Path, Path]) -> None:
    nodes, pods = trace
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "packing",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--policy",
            "fgd",
            "--seeds",
            "1,2",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["policy"] == "fgd"
    assert document["seeds"] == [1, 2]
    assert set(document["alloc_at"]) == {"90", "95", "100", "130"}
    assert set(document["frag_at"]) == {"90", "95", "100", "130"}
    assert len(document["seconds"]) == 2


def test_cli_table_writes_the_plot(trace: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = trace
    plot = tmp_path / "curves.svg"
    result = CliRunner().invoke(
        app,
        [
            *("bench", "packing", "--nodes", str(nodes), "--pods", str(pods)),
            *("--policy", "best-fit,default", "--seeds", "1", "--offline", "--plot", str(plot)),
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "best-fit" in result.stdout and "offline" in result.stdout
    assert plot.read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "tetris"], "no placement policy is called 'tetris'"),
        (["--seeds", "a,b"], "not a comma-separated list of integers"),
        (["--inflation", "9"], "outside 0.5..3.0"),
    ],
)
def test_cli_bad_options(trace: tuple[Path, Path], args: list[str], message: str) -> None:
    nodes, pods = trace
    result = CliRunner().invoke(
        app, ["bench", "packing", "--nodes", str(nodes), "--pods", str(pods), *args]
    )
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_cli_malformed_pods_name_file_and_line(trace: tuple[Path, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(PODS_CSV.replace("p3,8000,16384,2,1000", "p3,8000,16384,2,abc"))
    result = CliRunner().invoke(
        app, ["bench", "packing", "--nodes", str(trace[0]), "--pods", str(bad), "--json"]
    )
    assert result.exit_code == 2
    assert f"{bad}:5:gpu_milli" in "".join(result.output.split())  # however a terminal wraps it


@pytest.mark.parametrize("spec", ["binpack@4", "default@16", "fgd@2", "spread@1"])
def test_the_cycles_placer_packs_the_same_stream(trace: tuple[Path, Path], spec: str) -> None:
    """`NAME@K`: the pods go through the scheduling cycle's placer (a session over the nodes);
    every placement is one the node could hold, and the run is labelled as such."""
    nodes = pack_nodes(load_nodes(trace[0]))
    pods = load_pods(trace[1])
    run = run_packing(nodes, pods, spec, seed=5, inflation=1.3)
    assert run.policy == spec
    assert 0 < run.placed <= run.pods
    assert 0 < run.allocated_pct[-1] <= 100.0
    assert list(run.allocated_pct) == sorted(run.allocated_pct)  # nothing leaves


def test_a_bad_policy_spec_says_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="no placement policy is called 'nope'"):
        parse_policy("nope")
    with pytest.raises(ValueError, match="a positive integer"):
        parse_policy("default@x")
    assert parse_policy("pack@3") == ("binpack", 3)
    assert parse_policy("fgd") == ("fgd", None)
