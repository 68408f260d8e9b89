"""Loading scenario files: every malformed input gets file, line, key path and a way out."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.core.model import GpuRequest, PlacementStrategy, TaskPlacement, WorkloadType
from gpupool.whatif.loader import ScenarioError, load_scenario, load_scenario_text
from gpupool.whatif.scenario import (
    Expectations,
    Lifecycle,
    LifecycleAction,
    Scenario,
    SetQuota,
    Submit,
)

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"

HEAD = """\
version: 1
nodes:
  - {name: node-1, gpus: 4}
  - {name: node-2, gpus: 2, gpu_memory_mib: 40960}
projects:
  - {name: research, quota: {gpu: 4}}
  - {name: team-a, parent: research, quota: {gpu: 2.5}}
  - {name: team-b, parent: research}
"""


def load(body: str, head: str = HEAD) -> Scenario:
    return load_scenario_text(head + textwrap.dedent(body), "x.yaml")


def error_of(body: str, head: str = HEAD) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load(body, head)
    return info.value


def test_a_minimal_scenario_loads() -> None:
    scenario = load_scenario_text("version: 1\nnodes: []\nprojects: []\n", "min.yaml")
    assert scenario.name == "min"
    assert scenario.workloads == ()
    assert scenario.events == ()
    assert scenario.expect is None


def test_unknown_key_names_key_path_and_line() -> None:
    error = error_of(
        """\
        workloads:
          - {name: a, project: team-a, type: train, gpu: 1}
          - name: b
            project: team-a
            type: train
            gpus: 1
        """
    )
    assert error.line == 14
    assert error.key_path == "workloads[1].gpus"
    assert "unknown key `gpus`" in error.message
    assert "did you mean `gpu`?" in error.message
    assert str(error).startswith("x.yaml:14: workloads[1].gpus: unknown key `gpus`")


def test_unknown_top_level_key() -> None:
    error = error_of("worklods: []\n")
    assert (error.line, error.key_path) == (9, "worklods")
    assert "did you mean `workloads`?" in error.message


def test_gpu_one_and_a_half_is_refused_with_its_line() -> None:
    error = error_of(
        """\
        workloads:
          - {name: a, project: team-a, type: train, gpu: 1}
          - {name: b, project: team-a, type: train, gpu: 1}
          - {name: c, project: team-a, type: train, gpu: 1.5}
        """
    )
    assert str(error).startswith(
        "x.yaml:12: workloads[2].gpu: a fraction must be between 0 and 1 (got 1.5)"
    )
    assert "split into tasks" in error.message


def test_unknown_project() -> None:
    error = error_of(
        """\
        workloads:
          - name: a
            project: team-c
            type: train
            gpu: 1
        """
    )
    assert (error.line, error.key_path) == (11, "workloads[0].project")
    assert "unknown project `team-c`" in error.message
    assert "known projects: research, team-a, team-b" in error.message


def test_workload_in_a_department_is_refused() -> None:
    error = error_of("workloads: [{name: a, project: research, type: train, gpu: 1}]\n")
    assert "`research` is a department" in error.message


def test_yaml_syntax_error_gives_the_line() -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario_text("version: 1\nnodes:\n  - {name: n, gpus: 2\nprojects: []\n", "s.yaml")
    assert info.value.line == 4
    assert "YAML syntax error" in info.value.message
    assert str(info.value).startswith("s.yaml:4: YAML syntax error")


def test_bad_indentation_is_a_syntax_error_with_line() -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario_text("version: 1\nnodes: []\n projects: []\n", "s.yaml")
    assert info.value.line == 3


def test_duplicate_key_is_refused() -> None:
    error = error_of("workloads: []\nworkloads: []\n")
    assert error.line == 10
    assert "appears twice" in error.message and "line 9" in error.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "got an empty file"),
        ("- 1\n", "got a list"),
        ("nodes: []\nprojects: []\n", "missing required key `version`"),
        ("version: 2\nnodes: []\nprojects: []\n", "format version 1 (got 2)"),
        ("version: 1\nprojects: []\n", "missing required key `nodes`"),
    ],
)
def test_top_level_shape(text: str, message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario_text(text, "s.yaml")
    assert message in info.value.message


def test_all_schema_errors_are_reported_in_line_order() -> None:
    error = error_of(
        """\
        workloads:
          - {name: a, project: team-a, type: trian, gpu: 1}
          - {name: b, project: team-a, type: train, gpu: 0.0005, tasks: 1.5}
        """
    )
    messages = [(e.line, e.key_path) for e in error.all]
    assert messages == [
        (10, "workloads[0].type"),
        (11, "workloads[1].tasks"),
        (11, "workloads[1].gpu"),
    ]
    assert "must be 'train', 'interactive' or 'inference' (got 'trian')" in error.message


@pytest.mark.parametrize(
    ("body", "key_path", "message"),
    [
        (
            "workloads: [{name: a, project: team-a, type: train}]\n",
            "workloads[0]",
            "exactly one of gpu",
        ),
        (
            "workloads: [{name: a, project: team-a, type: train, gpu: 1, gpu_memory_mib: 10}]\n",
            "workloads[0]",
            "(got both)",
        ),
        (
            "workloads: [{name: a, project: team-a, type: train, gpu: 0}]\n",
            "workloads[0].gpu",
            "more than 0",
        ),
        (
            "workloads: [{name: a, project: team-a, type: train, gpu: 1, gpu_limit: 1}]\n",
            "workloads[0].gpu_limit",
            "fractional gpu only",
        ),
        (
            "workloads: [{name: a, project: team-a, type: train, gpu: 1, tasks: 2, "
            "min_available: 3}]\n",
            "workloads[0].min_available",
            "cannot be more than tasks",
        ),
        (
            "workloads: [{name: a, project: team-a, type: train, gpu: 1, tasks: 2, "
            "running_on: [node-1]}]\n",
            "workloads[0].running_on",
            "2 node(s)",
        ),
        (
            "workloads: [{name: a, project: team-a, type: train, gpu: 1, devices: [[0]]}]\n",
            "workloads[0].devices",
            "needs running_on",
        ),
        (
            "workloads: [{name: a, project: team-a, type: train, gpu: 2, running_on: [node-1], "
            "devices: [[0]]}]\n",
            "workloads[0].devices",
            "2 device(s)",
        ),
        (
            "workloads: [{name: a, project: team-a, type: train, gpu: 1, preemptible: maybe}]\n",
            "workloads[0].preemptible",
            "expected true or false",
        ),
        (
            "workloads: [{name: 7, project: team-a, type: train, gpu: 1}]\n",
            "workloads[0].name",
            "quote it",
        ),
        (
            "settings: {placement: scatter}\n",
            "settings.placement",
            "no placement policy is called 'scatter'",
        ),
        ("settings: {placment: spread}\n", "settings.placment", "did you mean `placement`"),
        ("events: [{at: 5}]\n", "events[0]", "exactly one of submit"),
        ("events: [{at: -5, delete: x}]\n", "events[0].at", "at least 0"),
        ("expect: {runing: []}\n", "expect.runing", "did you mean `running`"),
        ("expect: {count: {running: 1, evictd: 2}}\n", "expect.count.evictd", "unknown key"),
        ("expect: {fair_share: {team-a: {gpus: 1}}}\n", "expect.fair_share.team-a.gpus", "gpu"),
        ("projects: []\n", "projects", "twice"),
    ],
)
def test_schema_errors(body: str, key_path: str, message: str) -> None:
    error = error_of(body)
    assert error.key_path == key_path
    assert message in error.message


@pytest.mark.parametrize(
    ("projects", "key_path", "message"),
    [
        ("  - {name: a, parent: b}\n  - {name: b}\n", "projects[0].parent", "listed before"),
        ("  - {name: a, parent: z}\n", "projects[0].parent", "unknown project `z`"),
        ("  - {name: a}\n  - {name: a}\n", "projects[1].name", "listed twice"),
        ("  - {name: a, parent: a}\n", "projects[0].parent", "its own parent"),
        ("  - {name: a, quota: {gpu: -1}}\n", "projects[0].quota.gpu", "0 or more"),
        ("  - {name: a, quota: 2}\n", "projects[0].quota", "expected a mapping"),
    ],
)
def test_project_tree_errors(projects: str, key_path: str, message: str) -> None:
    head = "version: 1\nnodes: []\nprojects:\n"
    with pytest.raises(ScenarioError) as info:
        load_scenario_text(head + projects, "p.yaml")
    assert info.value.key_path == key_path
    assert message in info.value.message
    assert info.value.line is not None


@pytest.mark.parametrize(
    ("workloads", "key_path", "message"),
    [
        (
            "[{name: a, project: team-a, type: train, gpu: 1, running_on: [node-9]}]",
            "workloads[0].running_on[0]",
            "unknown node `node-9`",
        ),
        (
            "[{name: a, project: team-a, type: train, gpu: 1, running_on: [node-2],"
            " devices: [[2]]}]",
            "workloads[0].devices[0]",
            "device 2 does not exist on node-2",
        ),
        (
            "[{name: a, project: team-a, type: train, gpu: 3, running_on: [node-2]}]",
            "workloads[0].running_on[0]",
            "needs 3 free whole device(s) on node-2; 2 left",
        ),
        (
            "[{name: a, project: team-a, type: train, gpu: 1, running_on: [node-2],"
            " devices: [[0]]}, {name: b, project: team-a, type: train, gpu: 0.5,"
            " running_on: [node-2], devices: [[0]]}]",
            "workloads[1].devices[0]",
            "no room",
        ),
        (
            "[{name: a, project: team-a, type: train, gpu: 1},"
            " {name: a, project: team-a, type: train, gpu: 1}]",
            "workloads[1].name",
            "defined twice",
        ),
    ],
)
def test_workload_reference_errors(workloads: str, key_path: str, message: str) -> None:
    error = error_of(f"workloads: {workloads}\n")
    assert error.key_path == key_path
    assert message in error.message
    assert error.line == 9


@pytest.mark.parametrize(
    ("body", "key_path", "message"),
    [
        ("events: [{at: 1, complete: ghost}]\n", "events[0].complete", "unknown workload `ghost`"),
        (
            "events: [{at: 1, set_quota: {project: z, quota: {gpu: 1}}}]\n",
            "events[0].set_quota.project",
            "unknown project `z`",
        ),
        (
            "events: [{at: 1, submit: {name: s, project: team-a, type: train, gpu: 1, "
            "running_on: [node-1]}}]\n",
            "events[0].submit.running_on",
            "starts pending",
        ),
        (
            "events: [{at: 1, submit: {name: s, project: team-a, type: train, gpu: 1, "
            "submitted_at: 3}}]\n",
            "events[0].submit.submitted_at",
            "remove submitted_at",
        ),
        (
            "events: [{at: 1, submit: {name: s, project: zz, type: train, gpu: 1}}]\n",
            "events[0].submit.project",
            "unknown project",
        ),
        ("expect: {running: [ghost]}\n", "expect.running[0]", "unknown workload `ghost`"),
        (
            "expect: {placements: {ghost: [node-1]}}\n",
            "expect.placements.ghost",
            "unknown workload",
        ),
        (
            "events: [{at: 1, expect: {pending: [ghost]}}]\n",
            "events[0].expect.pending[0]",
            "unknown workload",
        ),
        (
            "expect: {fair_share: {nobody: {gpu: 1}}}\n",
            "expect.fair_share.nobody",
            "unknown project",
        ),
    ],
)
def test_event_and_expect_reference_errors(body: str, key_path: str, message: str) -> None:
    error = error_of(body)
    assert error.key_path == key_path
    assert message in error.message


def test_same_device_needs_single_task_workloads() -> None:
    error = error_of(
        """\
        workloads:
          - {name: a, project: team-a, type: train, gpu: 0.5, tasks: 2}
          - {name: b, project: team-a, type: train, gpu: 0.5}
        expect:
          same_device: [[a, b]]
        """
    )
    assert error.key_path == "expect.same_device[0][0]"
    assert "single-task" in error.message


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario(tmp_path / "missing.yaml")
    with pytest.raises(ScenarioError, match="is a directory"):
        load_scenario(tmp_path)
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ScenarioError, match="UTF-8"):
        load_scenario(binary)


def test_conversion_to_core_objects() -> None:
    scenario = load(
        """\
        settings: {placement: spread, grace_period_s: 30}
        workloads:
          - {name: late, project: team-a, type: train, gpu: 1, submitted_at: 5}
          - {name: early, project: team-b, type: inference, gpu: 0.25, gpu_limit: 0.5,
             submitted_at: -10, priority: 7, preemptible: true}
          - {name: mem, project: team-a, type: interactive, gpu_memory_mib: 8000,
             node_selector: {gpu_model: [A100, H100], pool: default}, min_runtime_s: 60}
          - {name: big, project: team-a, type: train, gpu: 2, tasks: 2,
             running_on: [node-1, node-1], started_at: -600, duration_s: 3600}
          - {name: half, project: team-a, type: train, gpu: 0.5, running_on: [node-2]}
          - {name: pinned, project: team-a, type: train, gpu: 0.5, running_on: [node-2],
             devices: [[1]]}
        events:
          - {at: 20, submit: {name: second, project: team-a, type: train, gpu: 1}}
          - {at: 10, submit: {name: first, project: team-a, type: train, gpu: 1}}
          - {at: 10, set_quota: {project: team-a, quota: {gpu: 3}}}
          - {at: 30, suspend: big}
          - {at: 40, expect: {running: [big]}}
        """
    )
    assert scenario.settings.placement == PlacementStrategy.SPREAD
    assert scenario.grace_period_s == 30
    assert [n.name for n in scenario.nodes] == ["node-1", "node-2"]
    assert scenario.nodes[1].gpu_memory_mib == 40960
    team_a = scenario.projects[1]
    assert (team_a.parent, team_a.quota.gpu_milli) == ("research", 2500)
    order = [s.workload.name for s in scenario.workloads]
    assert order == ["early", "mem", "big", "half", "pinned", "late"]
    assert [s.workload.submit_seq for s in scenario.workloads] == list(range(6))
    by_name = {s.workload.name: s for s in scenario.workloads}
    early = by_name["early"].workload
    assert early.type is WorkloadType.INFERENCE
    assert early.gpu == GpuRequest.fraction(250, 500)
    assert (early.priority, early.preemptible, early.is_preemptible) == (7, True, True)
    mem = by_name["mem"].workload
    assert mem.gpu == GpuRequest.memory(8000)
    assert mem.node_selector == (("gpu_model", ("A100", "H100")), ("pool", ("default",)))
    assert mem.min_runtime_s == 60
    big = by_name["big"]
    assert big.duration_s == 3600
    assert big.workload.started_at_s == -600
    assert big.workload.placements == (
        TaskPlacement(0, "node-1", (0, 1)),
        TaskPlacement(1, "node-1", (2, 3)),
    )
    # explicit devices are placed first; "first free" fractions then share the first device
    assert by_name["half"].workload.placements == (TaskPlacement(0, "node-2", (0,)),)
    assert by_name["half"].workload.started_at_s == 0
    assert by_name["pinned"].workload.placements == (TaskPlacement(0, "node-2", (1,)),)
    assert by_name["late"].workload.placements == ()
    assert by_name["late"].workload.started_at_s is None

    events = scenario.events
    assert [e.at_s for e in events] == [10, 10, 20, 30, 40]
    first, quota, second, suspend, expect = (e.action for e in events)
    assert isinstance(first, Submit) and first.setup.workload.name == "first"
    assert first.setup.workload.submit_seq == 6
    assert isinstance(second, Submit) and second.setup.workload.submit_seq == 7
    assert quota == SetQuota("team-a", 3000, None, None)
    assert suspend == LifecycleAction(Lifecycle.SUSPEND, "big")
    assert isinstance(expect, Expectations) and expect.running == ("big",)


def test_fractions_without_devices_pack_onto_the_first_device_with_room() -> None:
    scenario = load(
        """\
        workloads:
          - {name: a, project: team-a, type: train, gpu: 0.5, running_on: [node-2]}
          - {name: b, project: team-a, type: train, gpu: 0.5, running_on: [node-2]}
          - {name: c, project: team-a, type: train, gpu: 0.75, running_on: [node-2]}
          - {name: d, project: team-a, type: train, gpu: 1, running_on: [node-1]}
        """
    )
    devices = {s.workload.name: s.workload.placements[0].devices for s in scenario.workloads}
    assert devices == {"a": (0,), "b": (0,), "c": (1,), "d": (0,)}


def test_yaml_anchors_and_merge_keys_work() -> None:
    scenario = load(
        """\
        workloads:
          - &train {name: a, project: team-a, type: train, gpu: 1}
          - {<<: *train, name: b}
        """
    )
    assert [s.workload.name for s in scenario.workloads] == ["a", "b"]


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.name)
def test_project_scenarios_load(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.nodes and scenario.projects


SCENARIO_TEXTS = [path.read_text() for path in sorted(SCENARIOS.glob("*.yaml"))]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_scenarios_fail_only_with_scenario_errors(data: st.DataObject) -> None:
    """Whatever a typo does to a valid file, the answer is a ScenarioError, not a traceback."""
    text = data.draw(st.sampled_from(SCENARIO_TEXTS))
    position = data.draw(st.integers(0, len(text)))
    cut = data.draw(st.integers(0, 8))
    insert = data.draw(st.text(alphabet=":-[]{},&*!#'\" \n0123456789.abcgpu_", max_size=8))
    mutated = text[:position] + insert + text[position + cut :]
    try:
        load_scenario_text(mutated, "m.yaml")
    except ScenarioError as error:
        assert error.line is None or error.line >= 1
        assert str(error).startswith("m.yaml")
