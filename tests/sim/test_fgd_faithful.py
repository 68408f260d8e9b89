"""Our `fgd` against the FGD artifact's published results (data/fgd-refs), and the protocol's
pieces that make the comparison fair: the artifact's way of reading a curve at an arrival
level, the node priority, the target workload per policy, the published files' loader."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.core.packing import PodShape, PolicyName
from gpupool.sim.fgd_refs import (
    ALLOC_FILE,
    VARIANTS,
    compare,
    default_refs_dir,
    load_published_fgd,
    pod_list_name,
)
from gpupool.sim.openb import GPU_NODE_LIST_FILE, TracePod, default_data_dir, load_nodes, load_pods
from gpupool.sim.packing import (
    artifact_node_rank,
    level_means,
    node_priority,
    pack_nodes,
    target_workload,
    tie_break,
)

FAITHFUL_TOLERANCE = 0.3
"""Issue 13: our fgd within 0.3 point of the published mean allocation at 100% arrived."""
CURVE_TOLERANCE = 0.5
"""The mean curves (0..130% arrived) no further apart than this anywhere."""
GPUSPEC_CURVE_TOLERANCE = 0.3
"""gpuspec10, two seeds: the curve no further than this from the published one anywhere."""


@pytest.mark.slow
def test_our_fgd_matches_the_published_fgd_on_the_default_trace() -> None:
    """Two seeds of the real trace (a few seconds): alloc@100 and the whole curve."""
    published = load_published_fgd(default_refs_dir())["default"]
    data = default_data_dir()
    nodes = pack_nodes(load_nodes(data / GPU_NODE_LIST_FILE))
    pods = load_pods(data / pod_list_name("default"))
    result = compare(nodes, pods, "default", PolicyName.FGD, (42, 43), published)
    assert abs(result.difference) <= FAITHFUL_TOLERANCE, result
    assert result.curve_max_gap <= CURVE_TOLERANCE, result


def test_the_published_files_hold_fgd_for_every_variant_and_seed() -> None:
    published = load_published_fgd(default_refs_dir())
    assert set(published) == set(VARIANTS)
    for variant, fgd in published.items():
        assert sorted(fgd.alloc) == list(range(42, 52)), variant
        assert all(sorted(curve) == list(range(131)) for curve in fgd.alloc.values()), variant
        assert all(100 in ratios for ratios in fgd.frag_ratio.values()), variant
    assert published["default"].alloc_mean(range(42, 52), 100) == pytest.approx(95.23, abs=0.005)


def test_a_malformed_published_file_names_its_line(tmp_path: Path) -> None:
    (tmp_path / ALLOC_FILE).write_text(
        "workload,sc_policy,tune,seed,total_gpus,0,1\nopenb_pod_list_x,06-FGD,1.3,42,10,0.0\n"
    )
    with pytest.raises(ValueError, match=rf"{ALLOC_FILE}:2: row: 6 fields, expected 7"):
        load_published_fgd(tmp_path)


def test_level_means_read_a_curve_as_the_artifact_does() -> None:
    gpus = 10  # 10,000 milli of capacity: 1% is 100 milli
    arrived = [1000, 1040, 1060, 2000, 3050]  # 10.0, 10.4, 10.6, 20.0, 30.5 %
    values = [1.0, 2.0, 4.0, 8.0, 16.0]
    means = level_means(arrived, values, gpus, 31)
    assert means[10] == pytest.approx(1.5)  # the pods that round to 10: 10.0 and 10.4
    assert means[11] == pytest.approx(4.0)  # 10.6
    assert means[12] == pytest.approx(4.0)  # none round to 12: those that round to 11..13
    assert means[21] == pytest.approx(8.0)
    assert means[30] == pytest.approx(16.0)  # 30.5 rounds half to even: 30
    assert means[25] == pytest.approx(16.0)  # nothing within a point: the first pod at 25%
    assert means[0] == pytest.approx(1.0)


def test_node_priority_is_a_permutation_drawn_from_the_seed() -> None:
    first = node_priority(50, 42)
    assert sorted(first) == list(range(50))
    assert first == node_priority(50, 42)
    assert first != node_priority(50, 43)


def test_fgd_ties_go_to_the_node_the_artifacts_parallel_filter_finds_first() -> None:
    # 1,213 openb GPU nodes: chunks of 34 filtered 16 at a time, so the first node of each of the
    # first 16 chunks share rank 0, their second nodes rank 1, ...; the next 16 chunks follow.
    ranks = artifact_node_rank(1213)
    assert [ranks[i] for i in (0, 34, 15 * 34)] == [0, 0, 0]
    assert [ranks[i] for i in (1, 33, 16 * 34, 16 * 34 + 1, 32 * 34, 1212)] == [
        1,
        33,
        34,
        35,
        68,
        90,
    ]
    assert artifact_node_rank(5) == (0,) * 5  # five chunks of one node, all checked at once
    assert tie_break(PolicyName.FGD, 1213, 42) == ranks
    assert tie_break(PolicyName.DEFAULT, 50, 42) == node_priority(50, 42)


@pytest.mark.slow
def test_our_fgd_tracks_the_published_curve_with_gpu_model_constraints() -> None:
    """gpuspec10: constrained pods fail from 40% arrived; which nodes the ties fill first
    decides how many (the seeded node priority left the curve 0.48 low at 74%)."""
    published = load_published_fgd(default_refs_dir())["gpuspec10"]
    data = default_data_dir()
    nodes = pack_nodes(load_nodes(data / GPU_NODE_LIST_FILE))
    pods = load_pods(data / pod_list_name("gpuspec10"))
    result = compare(nodes, pods, "gpuspec10", PolicyName.FGD, (42, 43), published)
    assert abs(result.difference) <= FAITHFUL_TOLERANCE, result
    assert result.curve_max_gap <= GPUSPEC_CURVE_TOLERANCE, result


def test_fgd_measures_against_the_artifacts_target_workload() -> None:
    pods = [TracePod("c", 4000, 1024, 0, 0)] * 3 + [TracePod("g", 2000, 512, 1, 500)] * 7
    pods = [
        TracePod(f"p{i}", p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli)
        for i, p in enumerate(pods)
    ]
    fgd = target_workload(pods, PolicyName.FGD)
    ours = target_workload(pods, PolicyName.DEFAULT)
    assert [(t.shape, t.weight) for t in fgd] == [
        (PodShape(2000, 0, 1, 500), pytest.approx(0.7)),
        (PodShape(4000, 0, 0, 0), pytest.approx(0.3)),
    ]
    assert [(t.shape, t.weight) for t in ours] == [(PodShape(2000, 512, 1, 500), 1.0)]


def test_cli_fgd_check_refuses_bad_input(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["bench", "fgd-check", "--variants", "nonsense"],
    )
    assert result.exit_code == 2
    assert "unknown variant" in result.output
    empty = tmp_path / "refs"
    empty.mkdir()
    result = CliRunner().invoke(app, ["bench", "fgd-check", "--refs", str(empty), "--json"])
    assert result.exit_code == 2
    assert "No such file" in result.output
