"""`gpupool bench packing --all` on a tiny trace: the job runner, the published curves' reader,
the per-variant table, results.md / results.json / curves.png. No timing assertions."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from tiny_trace import NODES_CSV, PODS_CSV
from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.core.packing import PolicyName
from gpupool.sim.fgd_refs import ALLOC_FILE, FGD_POLICY, load_published_fgd, pod_list_name
from gpupool.sim.openb import GPU_NODE_LIST_FILE, load_nodes, load_pods
from gpupool.sim.packing import PackingRun, pack_nodes, run_offline, run_packing
from gpupool.sim.packing_report import PackingJob, grid_run, published_mean_curve, run_job

LEVELS = ",".join(str(i) for i in range(131))


def _published_row(variant: str, policy: str, seed: int, at_100: float) -> str:
    curve = ",".join(f"{min(i, at_100):.2f}" for i in range(131))
    return f"openb_pod_list_{variant},{policy},1.3,{seed},10,{curve}\n"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "openb"
    folder.mkdir()
    (folder / GPU_NODE_LIST_FILE).write_text(NODES_CSV)
    (folder / pod_list_name("default")).write_text(PODS_CSV)
    (folder / pod_list_name("tiny2")).write_text(PODS_CSV.replace("p5,4000,8192,1,700\n", ""))
    return folder


@pytest.fixture
def published(tmp_path: Path) -> Path:
    """A folder of the artifact's results: FGD's rows for two seeds, and another policy's."""
    folder = tmp_path / "refs"
    folder.mkdir()
    (folder / ALLOC_FILE).write_text(
        f"workload,sc_policy,tune,seed,total_gpus,{LEVELS}\n"
        + _published_row("default", FGD_POLICY, 42, 95.0)
        + _published_row("default", FGD_POLICY, 43, 93.0)
        + _published_row("default", "05-BestFit", 42, 90.0)
    )
    return folder


def test_published_mean_curve_is_over_the_seeds_given(published: Path) -> None:
    fgd = load_published_fgd(published)["default"]
    curve = published_mean_curve(fgd, [42, 43])
    assert len(curve) == 131
    assert curve[100] == pytest.approx(94.0)
    assert curve[50] == pytest.approx(50.0)
    assert published_mean_curve(fgd, []) == ()


def test_grid_run_takes_the_curve_at_whole_percents() -> None:
    run = PackingRun(
        policy="fgd",
        seed=1,
        pods=4,
        placed=3,
        arrived_pct=(0.5, 1.0, 2.5, 3.2),
        allocated_pct=(0.5, 1.0, 1.0, 3.2),
        alloc_at={},
        frag_at={},
        frag_of_capacity_at={},
        seconds=0.0,
    )
    grid = grid_run(run)
    assert grid.arrived_pct == (0.0, 1.0, 2.0, 3.0)
    # after the first pod at which x% had arrived
    assert grid.allocated_pct == (0.5, 1.0, 1.0, 3.2)
    # a run that has the artifact's level means: those
    leveled = grid_run(replace(run, alloc_levels={0: 0.5, 1: 0.9, 2: 1.0}))
    assert leveled.arrived_pct == (0.0, 1.0, 2.0)
    assert leveled.allocated_pct == (0.5, 0.9, 1.0)


def test_the_bound_job_is_run_offline_at_100(data: Path) -> None:
    nodes_file, pods_file = data / GPU_NODE_LIST_FILE, data / pod_list_name("default")
    nodes, pods = pack_nodes(load_nodes(nodes_file)), load_pods(pods_file)
    for seed in (1, 2, 3):
        result = run_job(PackingJob("default", nodes_file, pods_file, None, seed, 1.3))
        assert result.offline == {100: run_offline(nodes, pods, seed, 1.3)[100]}
        run = run_job(PackingJob("default", nodes_file, pods_file, PolicyName.FGD, seed, 1.3)).run
        assert run is not None
        assert run.alloc_at == run_packing(nodes, pods, PolicyName.FGD, seed, 1.3).alloc_at


def test_a_default_job_with_the_bound_gives_what_the_two_jobs_give(data: Path) -> None:
    nodes_file, pods_file = data / GPU_NODE_LIST_FILE, data / pod_list_name("default")
    for seed in (1, 2, 3):
        both = run_job(PackingJob("default", nodes_file, pods_file, "default", seed, 1.3, True))
        bound = run_job(PackingJob("default", nodes_file, pods_file, None, seed, 1.3))
        alone = run_job(PackingJob("default", nodes_file, pods_file, "default", seed, 1.3))
        assert both.offline is not None and both.offline == bound.offline
        assert both.run is not None and alone.run is not None and alone.offline is None
        assert replace(both.run, seconds=0.0) == replace(alone.run, seconds=0.0)
    assert both.job.label == "default seed 3 default+offline"
    assert both.job.weight > alone.job.weight
    with pytest.raises(ValueError, match="only the default policy's job computes the bound"):
        PackingJob("default", nodes_file, pods_file, PolicyName.FGD, 1, 1.3, bound=True)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_cli_all_writes_the_table_json_and_png(
    data: Path, published: Path, tmp_path: Path, jobs: str
) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            *("bench", "packing", "--all", "--data", str(data), "--variants", "default,tiny2"),
            *("--seeds", "42", "--refs", str(published), "--out", str(out), "--jobs", jobs),
        ],
        env={"COLUMNS": "60"},  # piped: the table keeps its full width whatever COLUMNS says
    )
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith("│ default")]
    assert len(rows) == 1
    # variant, published, fgd, Δ, curve gap, default, Δ, default@16, Δ, bound, to bound
    assert rows[0].count("│") == 12
    assert "95.00" in rows[0]

    document = json.loads((out / "results.json").read_text())
    assert document["seeds"] == [42]
    assert document["command"].startswith("gpupool bench packing --all --variants default,tiny2")
    # the default policy's jobs compute the bound alongside (their run is its arrival order)
    assert set(document["cpu_s_per_run"]) == {"fgd", "default+offline", "default@16"}
    assert document["policies"] == ["fgd", "default", "default@16"]
    assert set(document["variants"]) == {"default", "tiny2"}
    default = document["variants"]["default"]
    assert default["published_fgd"]["alloc_at_100"] == 95.0
    assert default["published_fgd"]["seeds"] == [42]
    assert set(default["policies"]) == {"fgd", "default", "default@16"}
    assert default["policies"]["fgd"]["curve"][0] >= 0.0
    assert set(default["offline_alloc_at"]) == {"100"}
    assert document["variants"]["tiny2"]["published_fgd"]["alloc_at_100"] is None

    markdown = (out / "results.md").read_text()
    assert markdown.startswith("## Packing every openb variant")
    header = (
        "| variant | published FGD | fgd | Δ | curve gap | default | Δ | default@16 | Δ | bound |"
    )
    assert header + " bound - best |" in markdown
    assert "| default | 95.00 |" in markdown
    assert "| tiny2 | n/a |" in markdown
    assert (out / "curves.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_cli_all_json_without_published_curves(data: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            *("bench", "packing", "--all", "--data", str(data), "--variants", "default"),
            *("--seeds", "1", "--policy", "best-fit", "--no-offline", "--jobs", "1"),
            *("--out", str(tmp_path / "out"), "--json"),
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    variant = document["variants"]["default"]
    assert list(variant["policies"]) == ["best-fit"]
    assert variant["offline_alloc_at"] is None
    assert document["offline_bound_at"] is None


def test_cli_all_runs_the_bound_alone_without_the_default_policy(
    data: Path, tmp_path: Path
) -> None:
    result = CliRunner().invoke(
        app,
        [
            *("bench", "packing", "--all", "--data", str(data), "--variants", "default"),
            *("--seeds", "1,2", "--policy", "best-fit", "--jobs", "1"),
            *("--out", str(tmp_path / "out"), "--json"),
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert set(document["cpu_s_per_run"]) == {"best-fit", "offline"}
    nodes_file, pods_file = data / GPU_NODE_LIST_FILE, data / pod_list_name("default")
    nodes, pods = pack_nodes(load_nodes(nodes_file)), load_pods(pods_file)
    bound = [run_offline(nodes, pods, seed, 1.3)[100] for seed in (1, 2)]
    offline = document["variants"]["default"]["offline_alloc_at"]["100"]
    assert offline == pytest.approx(sum(bound) / 2)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--variants", "nope"], "no pod list for variant 'nope'"),
        (["--pods", "x.csv"], "--pods does not go with --all"),
    ],
)
def test_cli_all_bad_input(data: Path, tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(
        app,
        [
            *("bench", "packing", "--all", "--data", str(data), "--seeds", "1"),
            *("--out", str(tmp_path / "out"), *args),
        ],
    )
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_all_only_options_need_all(data: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "packing", "--data", str(data)])
    assert result.exit_code == 2
    assert "--data goes with --all" in " ".join(result.output.split())
