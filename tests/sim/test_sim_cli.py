"""`gpupool simulate` end to end: the report, the JSON summary, the examples, and bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from gpupool.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", re.IGNORECASE)


def simulate(*args: str | Path) -> Result:
    result = CliRunner().invoke(app, ["simulate", *(str(a) for a in args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


@pytest.mark.slow
def test_smoke_writes_a_self_contained_report_and_json(tmp_path: Path) -> None:
    out, summary = tmp_path / "tmp" / "report.html", tmp_path / "tmp" / "s.json"
    result = simulate("--weeks", "1", "--seed", "1", "--out", out, "--json", summary)
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<svg") == 5
    assert not EXTERNAL.search(page), EXTERNAL.search(page)
    assert "<script" not in page and "<link" not in page and "@import" not in page
    data = json.loads(summary.read_text())
    assert list(data["policies"]) == ["static", "guaranteed"]
    for numbers in data["policies"].values():
        assert 0 < numbers["allocation_pct"] <= 100
        assert 0 < numbers["utilization_pct"] <= numbers["allocation_pct"]
        assert set(numbers["queueing_delay_s"]["by_type"]) == {"interactive", "train"}
        assert len(numbers["queueing_delay_s"]["by_project"]) == 4
    assert data["window_s"] == 7 * 86400
    assert "static" in result.output and "guaranteed" in result.output
    assert str(out.resolve()) in result.output.replace("\n", "")


@pytest.mark.slow
def test_same_seed_same_files(tmp_path: Path) -> None:
    for run in ("a", "b"):
        args = ["--weeks", "1", "--seed", "2", "--policy", "guaranteed"]
        result = simulate(
            *args, "--out", tmp_path / f"{run}.html", "--json", tmp_path / f"{run}.json"
        )
        assert result.exit_code == 0, result.output
    assert (tmp_path / "a.json").read_text() == (tmp_path / "b.json").read_text()
    assert (tmp_path / "a.html").read_text() == (tmp_path / "b.html").read_text()


@pytest.mark.slow
def test_default_report_in_the_current_directory_and_json_on_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = simulate("--weeks", "1", "--policy", "static", "--json", "-", "--quiet")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "gpupool-report.html").is_file()
    assert list(json.loads(result.stdout)["policies"]) == ["static"]
    assert "gpupool-report.html" in result.stderr


def test_the_examples_run(tmp_path: Path) -> None:
    result = simulate(
        "--workload",
        EXAMPLES / "workload.jsonl",
        "--cluster",
        EXAMPLES / "cluster.yaml",
        "--out",
        tmp_path / "r.html",
        "--json",
        tmp_path / "s.json",
        "--checkpoint-interval-s",
        "600",
        "--min-cycle-interval-s",
        "10",
    )
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["source"].endswith("workload.jsonl")
    assert data["settings"] == {"checkpoint_interval_s": 600, "min_cycle_interval_s": 10}
    assert set(data["policies"]["guaranteed"]["projects"]) == {"vision", "nlp", "platform"}


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--synthetic", "--workload", "w.jsonl"], "not both"),
        (["--workload", "w.jsonl", "--weeks", "2"], "--synthetic only"),
        (["--workload", "missing.jsonl"], "missing.jsonl: no such file (cannot read the file)"),
        (["--workload", "bad.jsonl"], "bad.jsonl:2: gpu: "),
        (["--cluster", "bad.yaml"], "bad.yaml:1: nodes[0].gpu: unknown key"),
        (["--weeks", "0"], "--weeks"),
        (["--policy", "fair"], "--policy"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], words: str
) -> None:
    monkeypatch.chdir(tmp_path)
    row = {"submit_s": 0, "project": "vision", "type": "train", "gpu": 1, "duration_s": 60}
    (tmp_path / "w.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "bad.jsonl").write_text(json.dumps(row) + "\n" + json.dumps(row | {"gpu": 1.5}))
    (tmp_path / "bad.yaml").write_text("nodes: [{name: n, gpu: 8}]\nprojects: [{name: p}]\n")
    result = simulate(*args, "--json", "s.json")
    assert result.exit_code == 2, result.output
    assert words in " ".join(result.output.split())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "bad.yaml", "w.jsonl"]


def test_a_device_or_pipe_is_written_to_not_replaced(tmp_path: Path) -> None:
    """`--json /dev/null` as root once renamed a file over /dev/null; a pipe shows the same."""
    import os
    import stat
    import threading

    from gpupool.cli.main import _write_all

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(pipe.read_text()), daemon=True)
    reader.start()
    _write_all({pipe: '{"ok": true}', tmp_path / "report.html": "<html>"})
    reader.join(timeout=10)
    assert stat.S_ISFIFO(pipe.stat().st_mode)
    assert received == ['{"ok": true}']
    assert (tmp_path / "report.html").read_text() == "<html>"
