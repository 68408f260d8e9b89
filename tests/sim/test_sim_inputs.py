"""Workload files (JSONL, CSV) and cluster files: what loads, and bad input rejected with the file,
the line and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpupool.core.model import GpuRequest, WorkloadType
from gpupool.sim.cluster import default_cluster, load_cluster, parse_cluster
from gpupool.sim.errors import SimInputError
from gpupool.sim.workload import load_workloads, parse_workloads

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PROJECTS = ("team-a", "team-b")
GOOD = {"submit_s": 0, "project": "team-a", "type": "train", "gpu": 1, "duration_s": 3600}


def jsonl(*rows: object) -> str:
    return "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows)


# --- workload files ------------------------------------------------------------------------------


def test_jsonl_row_with_every_field() -> None:
    row = {
        "submit_s": 60,
        "name": "sweep-1",
        "project": "team-b",
        "type": "interactive",
        "tasks": 2,
        "gpu": "0.25",
        "gpu_limit": 0.75,
        "duration_s": 600,
        "mean_gpu_util": 0.15,
        "cpu_milli": 4000,
        "memory_mib": 16384,
    }
    (workload,) = parse_workloads(jsonl(row), "w.jsonl", PROJECTS)
    assert workload.name == "sweep-1"
    assert workload.type is WorkloadType.INTERACTIVE
    assert workload.gpu == GpuRequest.fraction(250, 750)
    assert (workload.tasks, workload.duration_s, workload.submit_s) == (2, 600, 60)
    assert workload.mean_gpu_util_permille == 150
    assert (workload.cpu_milli, workload.memory_mib) == (4000, 16384)


def test_defaults_and_generated_names() -> None:
    text = jsonl(GOOD, "", {**GOOD, "type": "interactive", "gpu": 0.5})
    train, notebook = parse_workloads(text, "w.jsonl", PROJECTS)
    assert train.name == "team-a-1" and notebook.name == "team-a-3"
    assert train.gpu == GpuRequest.whole(1) and train.tasks == 1
    assert train.mean_gpu_util_permille == 1000
    assert notebook.mean_gpu_util_permille == 200


def test_csv_file(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text(
        "submit_s,name,project,type,gpu,gpu_limit,duration_s,mean_gpu_util\n"
        "0,a,team-a,train,2,,3600,0.9\n"
        "\n"
        "30,,team-b,interactive,0.5,1,600,\n"
    )
    first, second = load_workloads(path, PROJECTS)
    assert first.gpu == GpuRequest.whole(2) and first.mean_gpu_util_permille == 900
    assert second.name == "team-b-4"
    assert second.gpu == GpuRequest.fraction(500, 1000)
    assert second.mean_gpu_util_permille == 200


def test_the_example_workload_loads_on_the_example_cluster() -> None:
    cluster = load_cluster(EXAMPLES / "cluster.yaml")
    names = [p.name for p in cluster.leaf_projects]
    assert names == ["vision", "nlp", "platform"]
    workloads = load_workloads(EXAMPLES / "workload.jsonl", names)
    assert len(workloads) > 10
    assert {w.type for w in workloads} == set(WorkloadType)


BAD_JSONL_ROWS = [
    ({k: v for k, v in GOOD.items() if k != "duration_s"}, "duration_s", "missing"),
    ({**GOOD, "submit_s": -1}, "submit_s", "at least 0"),
    ({**GOOD, "submit_s": 1.5}, "submit_s", "not a whole number"),
    ({**GOOD, "duration_s": "1h"}, "duration_s", "not a whole number"),
    ({**GOOD, "duration_s": 0}, "duration_s", "at least 1"),
    ({**GOOD, "gpu": 1.5}, "gpu", "between 0 and 1"),
    ({**GOOD, "gpu": 0}, "gpu", "more than 0"),
    ({**GOOD, "gpu": 0.0001}, "gpu", "at most 3 decimals"),
    ({**GOOD, "gpu": 0.5, "gpu_limit": 0.25}, "gpu_limit", "at least the request"),
    ({**GOOD, "gpu_limit": 0.5}, "gpu_limit", "fractional gpu only"),
    ({**GOOD, "type": "batch"}, "type", "train | interactive | inference"),
    ({**GOOD, "project": "team-c"}, "project", "defines team-a, team-b"),
    ({**GOOD, "project": ""}, "project", "non-empty name"),
    ({**GOOD, "tasks": 0}, "tasks", "at least 1"),
    ({**GOOD, "tasks": True}, "tasks", "not a whole number"),
    ({**GOOD, "mean_gpu_util": 1.5}, "mean_gpu_util", "from 0 to 1"),
    ({**GOOD, "mean_gpu_util": "busy"}, "mean_gpu_util", "from 0 to 1"),
    ({**GOOD, "gpus": 1}, "gpus", "unknown field"),
    ("{not json", "row", "not valid JSON"),
    ("[1, 2]", "row", "one JSON object"),
]


@pytest.mark.parametrize(
    ("row", "field", "words"), BAD_JSONL_ROWS, ids=[f"{f}-{w}" for _, f, w in BAD_JSONL_ROWS]
)
def test_bad_jsonl_rows_name_file_line_and_field(row: object, field: str, words: str) -> None:
    text = jsonl(GOOD | {"name": "ok"}, row)
    with pytest.raises(SimInputError) as caught:
        parse_workloads(text, "work.jsonl", PROJECTS)
    error = caught.value
    assert (error.path, error.line, error.key_path) == ("work.jsonl", 2, field)
    assert str(error).startswith(f"work.jsonl:2: {field}: ")
    assert words in error.message


def test_repeated_name_says_where_it_was_first() -> None:
    text = jsonl({**GOOD, "name": "x"}, GOOD, {**GOOD, "name": "x"})
    with pytest.raises(SimInputError, match=r"work.jsonl:3: name: 'x' appears twice \(first on "):
        parse_workloads(text, "work.jsonl", PROJECTS)


BAD_CSV = [
    ("submit_s,project,type,gpus,duration_s\n0,team-a,train,1,60\n", 1, "gpus", "unknown field"),
    ("submit_s,project,type,gpu,duration_s\n0,team-a,train,1,1.5\n", 2, "duration_s", "whole"),
    ("submit_s,project,type,gpu,duration_s\n0,team-a,train,,60\n", 2, "gpu", "missing"),
    ("submit_s,project,type,gpu,duration_s\n0,team-a,train,1\n", 2, "row", "4 fields"),
    ("submit_s,project,type,gpu\n0,team-a,train,1\n", 2, "duration_s", "missing"),
    ("submit_s,gpu,gpu\n", 1, "gpu", "twice"),
]


@pytest.mark.parametrize(("text", "line", "field", "words"), BAD_CSV)
def test_bad_csv_rows(tmp_path: Path, text: str, line: int, field: str, words: str) -> None:
    path = tmp_path / "work.csv"
    path.write_text(text)
    with pytest.raises(SimInputError) as caught:
        load_workloads(path, PROJECTS)
    assert (caught.value.line, caught.value.key_path) == (line, field)
    assert words in caught.value.message
    assert str(caught.value).startswith(f"{path}:{line}: {field}: ")


def test_whole_file_problems(tmp_path: Path) -> None:
    with pytest.raises(SimInputError, match="no workloads"):
        parse_workloads("\n\n", "empty.jsonl", PROJECTS)
    with pytest.raises(SimInputError, match=r"\*.jsonl or \*.csv"):
        load_workloads(tmp_path / "work.txt", PROJECTS)
    with pytest.raises(SimInputError, match="cannot read"):
        load_workloads(tmp_path / "missing.jsonl", PROJECTS)
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b'{"a": 1}\n\xff\n')
    with pytest.raises(SimInputError, match=r"binary.jsonl:2: row: not UTF-8"):
        load_workloads(binary, PROJECTS)


# --- cluster files -------------------------------------------------------------------------------

CLUSTER = """\
name: lab
nodes:
  - {name: node-1, gpus: 8}
  - name: node-2
    gpus: 4
    gpu_memory_mib: 40960
    labels: {pool: small}
projects:
  - name: research
    quota: {gpu: 8}
  - name: vision
    parent: research
    quota: {gpu: 4.5}
  - name: ops
    quota: {gpu: 3}
    limit: {gpu: 6}
    over_quota_weight: 2
"""


def test_cluster_file() -> None:
    cluster = parse_cluster(CLUSTER, "c.yaml")
    assert cluster.name == "lab"
    assert [n.gpu_count for n in cluster.nodes] == [8, 4]
    assert cluster.nodes[1].labels == (("pool", "small"),)
    assert cluster.capacity_gpu_milli == 12000
    assert [p.name for p in cluster.leaf_projects] == ["vision", "ops"]
    vision = cluster.projects[1]
    assert vision.parent == "research" and vision.quota.gpu_milli == 4500
    ops = cluster.projects[2]
    assert ops.limit.gpu_milli == 6000 and ops.over_quota_weight == 2


def test_default_cluster_has_32_gpus_and_quotas_adding_up() -> None:
    cluster = default_cluster()
    assert cluster.capacity_gpu_milli == 32000
    assert len(cluster.leaf_projects) == 4
    assert sum(p.quota.gpu_milli for p in cluster.projects) == 32000


BAD_CLUSTERS = [
    (CLUSTER.replace("{name: node-1, gpus: 8}", "{name: node-1, gpu: 8}"), 3, "nodes[0].gpu"),
    (CLUSTER.replace("gpus: 4", "gpus: -4"), 5, "nodes[1].gpus"),
    (CLUSTER.replace("gpus: 4", 'gpus: "4"'), 5, "nodes[1].gpus"),
    (CLUSTER.replace("parent: research", "parent: reserch"), 12, "projects[1].parent"),
    (CLUSTER.replace("name: ops", "name: vision"), 14, "projects[2].name"),
    (CLUSTER.replace("name: node-2", "name: node-1"), 4, "nodes[1].name"),
    (CLUSTER.replace("quota: {gpu: 3}", "quota: {gpu: 3.0001}"), 15, "projects[2].quota.gpu"),
    (CLUSTER.replace("    gpus: 4\n", "    gpus: 4\n    gpus: 5\n"), 6, "nodes[1].gpus"),
    (CLUSTER + "workloads: []\n", 18, "workloads"),
    (CLUSTER.replace("nodes:\n", "nodes: [\n"), None, ""),
    ("projects: []\n", 1, ""),  # the file as a whole misses `nodes`
]


@pytest.mark.parametrize(("text", "line", "key"), BAD_CLUSTERS)
def test_bad_cluster_files_name_line_and_key(text: str, line: int | None, key: str) -> None:
    with pytest.raises(SimInputError) as caught:
        parse_cluster(text, "c.yaml")
    assert caught.value.key_path == key
    if line is not None:
        assert caught.value.line == line
    assert str(caught.value).startswith("c.yaml")


def test_a_misspelt_key_is_named_with_the_likely_one() -> None:
    text = CLUSTER.replace("{name: node-1, gpus: 8}", "{name: node-1, gpu: 8}")
    with pytest.raises(SimInputError) as caught:
        parse_cluster(text, "c.yaml")
    # The misspelt key comes first, before the `gpus` its misspelling leaves missing.
    assert str(caught.value).startswith(
        "c.yaml:3: nodes[0].gpu: unknown key `gpu`; did you mean `gpus`? (allowed here: name, gpus,"
    )
    assert [str(p) for p in caught.value.also] == [
        "c.yaml:3: nodes[0]: missing required key `gpus`"
    ]


def test_a_missing_key_is_named_in_the_message() -> None:
    with pytest.raises(SimInputError) as caught:
        parse_cluster("projects: []\n", "c.yaml")
    assert str(caught.value) == "c.yaml:1: missing required key `nodes`"
