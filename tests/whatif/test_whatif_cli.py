"""`gpupool what-if` end to end, through the real scheduling core."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.whatif.loader import load_scenario, load_scenario_text
from gpupool.whatif.runner import State, run_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
SCENARIO_FILES = sorted(SCENARIOS.glob("*.yaml"))

PASSING = """\
version: 1
name: two projects share a node
nodes:
  - {name: node-1, gpus: 2}
projects:
  - {name: a, quota: {gpu: 1}}
  - {name: b, quota: {gpu: 1}}
workloads:
  - {name: a-1, project: a, type: train, gpu: 1}
  - {name: b-1, project: b, type: train, gpu: 1}
expect:
  running: [a-1, b-1]
  fair_share: {a: {gpu: 1}}
"""

FAILING = PASSING.replace("running: [a-1, b-1]", "running: [a-1]")
MALFORMED = PASSING.replace("gpu: 1}\n  - {name: b-1", "gpu: 1.5}\n  - {name: b-1")


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    written = {}
    for name, text in (("passing", PASSING), ("failing", FAILING), ("malformed", MALFORMED)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        written[name] = path
    return written


def invoke(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["what-if", *(str(a) for a in args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_project_has_scenarios() -> None:
    assert len(SCENARIO_FILES) >= 8


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: p.name)
def test_every_project_scenario_passes(path: Path) -> None:
    result = run_scenario(load_scenario(path))
    assert result.passed, "\n".join(
        f"{f.check} at {f.at_s}: expected {f.expected}, actual {f.actual} {f.detail}"
        for f in result.failures
    )


def test_all_project_scenarios_through_the_cli() -> None:
    code, output = invoke(*SCENARIO_FILES)
    assert code == 0, output
    assert f"{len(SCENARIO_FILES)} file(s): {len(SCENARIO_FILES)} passed" in output


@pytest.mark.parametrize("placement", ["default", "fgd", "spread"])
def test_every_project_scenario_holds_under_the_servers_policies(placement: str) -> None:
    """The scenarios' expectations are about who runs and who waits, not which node: they hold
    whichever placement policy places the work (`--placement` replaces each file's)."""
    code, output = invoke("--placement", placement, *SCENARIO_FILES)
    assert code == 0, output


def test_an_unknown_placement_policy_is_refused(files: dict[str, Path]) -> None:
    code, output = invoke("--placement", "tetris", files["passing"])
    assert code == 2
    assert "no placement policy is called 'tetris'; choose one of:" in " ".join(output.split())


def test_exit_0_when_expectations_hold(files: dict[str, Path]) -> None:
    code, output = invoke(files["passing"])
    assert code == 0
    assert "two projects share a node" in output
    assert "PASSED" in output
    assert "bind a-1" in output


def test_exit_1_and_failed_items_when_an_expectation_fails(files: dict[str, Path]) -> None:
    code, output = invoke(files["passing"], files["failing"])
    assert code == 1
    assert "FAILED: 1 expectation(s)" in output
    assert "running at the end (line 12)" in output
    assert "expected: [a-1]" in output
    assert "actual:   [a-1, b-1]" in output


def test_exit_2_for_a_malformed_file_wins_and_other_files_still_run(
    files: dict[str, Path],
) -> None:
    code, output = invoke(files["failing"], files["malformed"], files["passing"])
    assert code == 2
    assert "malformed.yaml:9: workloads[0].gpu: a fraction must be between 0 and 1" in output
    assert "3 file(s): 1 passed, 1 failed, 1 malformed" in output
    assert "Traceback" not in output


def test_missing_file_is_malformed(tmp_path: Path) -> None:
    code, output = invoke(tmp_path / "nope.yaml")
    assert code == 2
    assert "nope.yaml: no such file" in output


def test_json_output(files: dict[str, Path]) -> None:
    result = CliRunner().invoke(
        app, ["what-if", "--json", str(files["failing"]), str(files["malformed"])]
    )
    assert result.exit_code == 2
    document = json.loads(result.stdout)
    failing, malformed = document
    assert failing["name"] == "two projects share a node"
    assert failing["path"] == str(files["failing"])
    assert failing["passed"] is False
    assert failing["failures"] == [
        {
            "check": "running",
            "at": None,
            "line": 12,
            "expected": "[a-1]",
            "actual": "[a-1, b-1]",
            "detail": ["b-1 is running on node-1:1 but not expected"],
        }
    ]
    assert {w["name"]: w["state"] for w in failing["workloads"]} == {
        "a-1": "running",
        "b-1": "running",
    }
    a1 = failing["workloads"][0]
    assert a1["placements"] == [{"task": 0, "node": "node-1", "devices": [0], "burst_device": None}]
    assert a1["pending_reason"] is None
    projects = {p["name"]: p for p in failing["projects"]}
    assert projects["a"]["quota"]["gpu"] == 1
    assert projects["a"]["fair_share"]["gpu"] == 1
    assert projects["a"]["holding"]["gpu"] == 1
    assert [(d["at"], d["kind"], d["workload"]) for d in failing["decisions"]] == [
        (0, "bind", "a-1"),
        (0, "bind", "b-1"),
    ]
    assert malformed["passed"] is False
    assert malformed["errors"][0]["line"] == 9
    assert malformed["errors"][0]["key"] == "workloads[0].gpu"
    assert malformed["workloads"] == []


def test_json_pending_reason_and_fractional_gpus(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            version: 1
            nodes: [{name: n, gpus: 1}]
            projects: [{name: p, quota: {gpu: 0.5}}]
            workloads:
              - {name: x, project: p, type: train, gpu: 0.75}
              - {name: y, project: p, type: train, gpu: 0.5}
            """
        )
    )
    result = CliRunner().invoke(app, ["what-if", "--json", str(path)])
    assert result.exit_code == 0
    (entry,) = json.loads(result.stdout)
    y = next(w for w in entry["workloads"] if w["name"] == "y")
    assert y["state"] == "pending"
    assert y["pending_reason"]
    (project,) = entry["projects"]
    assert project["quota"]["gpu"] == 0.5
    assert project["holding"]["gpu"] == 0.75


def test_no_arguments_shows_help() -> None:
    result = CliRunner().invoke(app, [])
    assert "what-if" in result.output


def test_console_script(files: dict[str, Path]) -> None:
    script = Path(sys.executable).parent / "gpupool"
    command = [str(script)] if script.exists() else [shutil.which("gpupool") or "gpupool"]
    done = subprocess.run(
        [*command, "what-if", str(files["passing"]), str(files["malformed"])],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "workloads[0].gpu" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_reclaim_with_a_grace_period_through_the_core() -> None:
    scenario = load_scenario_text(
        textwrap.dedent(
            """\
            version: 1
            settings: {grace_period_s: 30}
            nodes: [{name: node-1, gpus: 2}]
            projects:
              - {name: bob, quota: {gpu: 1}}
              - {name: patty, quota: {gpu: 1}}
            workloads:
              - {name: bob-1, project: bob, type: train, gpu: 1, submitted_at: 0}
              - {name: bob-2, project: bob, type: train, gpu: 1, submitted_at: 1}
            events:
              - {at: 10, submit: {name: patty-1, project: patty, type: train, gpu: 1}}
              - {at: 20, expect: {running: [bob-1, patty-1], pending: []}}
            expect:
              running: [bob-1, patty-1]
              pending: [bob-2]
              evicted: [bob-2]
              not_evicted: [bob-1]
            """
        ),
        "grace.yaml",
    )
    result = run_scenario(scenario)
    assert result.passed, result.failures
    assert result.end_s == 40
    bob_2 = next(r for r in result.workloads if r.name == "bob-2")
    assert bob_2.state is State.PENDING
