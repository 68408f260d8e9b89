"""The cycle benchmark's table (`benchmarks/cycle.py`): whole rows when piped, and the time
ratio per 10x of nodes. No timing assertions: tiny clusters, one cycle each."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import cycle
from cycle import SizeResult, steps

from gpupool.cli.terminal import PIPE_WIDTH, output_console
from gpupool.core.observer import PHASES


def test_a_console_that_is_not_a_terminal_is_unlimited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    assert not output_console().is_terminal  # pytest captures stdout
    assert output_console().width == PIPE_WIDTH
    assert output_console(stderr=True).width == PIPE_WIDTH


def test_piped_table_keeps_whole_rows(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    assert cycle.main(["--nodes", "3,30", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    rows = [line for line in out.splitlines() if line.startswith("│")]
    columns = 4 + len(PHASES) + 2 + 3 + 1  # sizes, phases, other and total, decisions, memory
    assert len(rows) == 3  # two sizes and one step
    assert all(row.count("│") == columns + 1 for row in rows)
    assert rows[-1].split("│")[1].strip() == "3→30"
    assert "Time per 10x of nodes: 3→30 " in out


def _size(nodes: int, total_ms: float) -> SizeResult:
    return SizeResult(
        nodes=nodes,
        gpus=8 * nodes,
        running=0,
        pending=0,
        generate_s=0.0,
        phases_ms={phase: total_ms / len(PHASES) for phase in PHASES},
        unattributed_ms=0.0,
        total_ms=total_ms,
        totals_ms=[total_ms],
        bind=0,
        evict=0,
        move=0,
        still_pending=0,
    )


def test_steps_give_the_ratio_per_10x_of_nodes() -> None:
    ladder = steps([_size(10_000, 2400.0), _size(100, 20.0), _size(1000, 200.0)])
    assert [(s.from_nodes, s.to_nodes) for s in ladder] == [(100, 1000), (1000, 10_000)]
    assert ladder[0].total == pytest.approx(10.0)
    assert ladder[1].total == pytest.approx(12.0)
    # a 100x step that costs 100x is linear: 10x per 10x
    (step,) = steps([_size(10, 1.0), _size(1000, 100.0)])
    assert step.total == pytest.approx(10.0)
    assert step.phases["allocate"] == pytest.approx(10.0)


def test_the_title_says_whether_the_core_is_compiled(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the tests run the source tree: the core is the .py files
    assert cycle.core_build() == "pure Python"
    monkeypatch.setenv("COLUMNS", "60")
    assert cycle.main(["--nodes", "3", "--repeat", "1"]) == 0
    assert "core pure Python)" in capsys.readouterr().out
