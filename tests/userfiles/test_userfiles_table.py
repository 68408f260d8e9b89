"""Every kind of user file, read the one way: a bad file of each kind is one `UserFileError`
whose message names the file, the line and the key and says how to fix it.

The kinds: a scenario (`gpupool what-if`), simulate's cluster file and workload files (JSON
Lines and CSV), a file of the openb trace, and a workload file (`gpupool submit -f`). The
server takes its settings from options and environment variables only (no config file), so it
has no row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpupool.cli.submit import read_workload_file
from gpupool.sim.cluster import load_cluster
from gpupool.sim.errors import SimInputError
from gpupool.sim.openb import TraceError, load_nodes
from gpupool.sim.workload import load_workloads
from gpupool.userfiles import UserFileError
from gpupool.whatif.loader import ScenarioError, load_scenario

SCENARIO = """\
version: 1
nodes:
  - {name: node-1, gpus: 4}
projects:
  - name: team-a
workloads:
  - name: train-1
    project: team-a
    type: train
    gpus: 1
"""

CLUSTER = """\
nodes:
  - {name: node-1, gpus: 4}
projects:
  - name: team-a
    quota: {gpu: 2}
  - name: team-b
    parent: team-c
"""

JSONL = """\
{"submit_s": 0, "project": "team-a", "type": "train", "gpu": 1, "duration_s": 60}
{"submit_s": 10, "project": "team-a", "type": "train", "gpu": 1, "duration_s": -5}
"""

CSV = """\
submit_s,project,type,gpu,duration_s,mean_gpu_util
0,team-a,train,1,60,0.5
5,team-a,train,1,60,busy
"""

TRACE = """\
sn,cpu_milli,memory_mib,gpu,model
node-1,96000,786432,8,V100M32
node-2,96000,786432,eight,V100M32
"""

SUBMIT = """\
name: job1
gpu: 1
command: [python, train.py]
gpu_memroy: 8G
"""


def _scenario(path: Path) -> object:
    return load_scenario(path)


def _cluster(path: Path) -> object:
    return load_cluster(path)


def _workloads(path: Path) -> object:
    return load_workloads(path, ["team-a"])


@dataclass(frozen=True)
class Case:
    kind: str
    name: str
    text: str
    read: Callable[[Path], object]
    line: int
    key: str
    what: str
    """Words that say what is wrong."""
    fix: str
    """Words that say how to fix it."""


CASES = [
    Case("scenario", "s.yaml", SCENARIO, _scenario, 10, "workloads[0].gpus", "unknown key `gpus`",
         "did you mean `gpu`?"),
    Case("cluster", "c.yaml", CLUSTER, _cluster, 7, "projects[1].parent", "'team-c' is not a "
         "project defined above", "define a parent (department) before its children"),
    Case("workloads (JSON Lines)", "w.jsonl", JSONL, _workloads, 2, "duration_s", "-5 is too small",
         "it must be at least 1"),
    Case("workloads (CSV)", "w.csv", CSV, _workloads, 3, "mean_gpu_util", "'busy'",
         "expected a number from 0 to 1"),
    Case("openb trace", "nodes.csv", TRACE, load_nodes, 3, "gpu", "'eight'",
         "expected a non-negative integer"),
    Case("submit -f", "job.yaml", SUBMIT, read_workload_file, 4, "gpu_memroy",
         "unknown key `gpu_memroy`", "did you mean `gpu_memory`?"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[case.kind for case in CASES])
def test_a_bad_file_of_each_kind_names_file_line_key_and_fix(tmp_path: Path, case: Case) -> None:
    path = tmp_path / case.name
    path.write_text(case.text, encoding="utf-8")
    with pytest.raises(UserFileError) as caught:
        case.read(path)
    error = caught.value
    assert (error.path, error.line, error.key_path) == (str(path), case.line, case.key)
    message = str(error)
    assert message.startswith(f"{path}:{case.line}: {case.key}: ")
    assert case.what in message
    assert case.fix in message


def test_the_old_names_are_the_one_error_type() -> None:
    assert ScenarioError is UserFileError
    assert SimInputError is UserFileError
    assert TraceError is UserFileError


@pytest.mark.parametrize("case", CASES, ids=[case.kind for case in CASES])
def test_a_missing_file_of_each_kind_is_named(tmp_path: Path, case: Case) -> None:
    path = tmp_path / case.name
    with pytest.raises((UserFileError, FileNotFoundError)) as caught:
        case.read(path)
    if case.kind == "openb trace":
        # The trace loaders leave a missing file to the benchmark (it names the --data dir).
        assert isinstance(caught.value, FileNotFoundError)
        return
    error = caught.value
    assert isinstance(error, UserFileError)
    assert (error.path, error.line) == (str(path), None)
    assert str(error).startswith(f"{path}: no such file")
    assert "check the path" in str(error)
