"""The cycle benchmark's table (`benchmarks/cycle.py`): a column per size and a row per measure,
split by sizes to fit any width and never cut, and the time ratio per 10x of nodes. No timing
assertions: tiny clusters, one cycle each."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import cycle
from cycle import SizeResult, steps
from cycle_bench.report import FILE_WIDTH, fit_tables
from rich.console import Console

from gpupool.core.observer import PHASES


def test_piped_report_fits_100_columns_with_whole_rows(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "60")  # not a terminal: the width is the report's own
    assert cycle.main(["--nodes", "3,30", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= FILE_WIDTH
    rows = {
        cells[1].strip(): [c.strip() for c in cells[2:-1]]
        for line in out.splitlines()
        if line.startswith("│") and len(cells := line.split("│")) > 2
    }
    # a row per measure: every phase, the totals, the decisions, the memory
    assert set(PHASES) | {"GPUs", "total", "bind", "peak RSS MiB"} <= set(rows)
    header = next(line for line in out.splitlines() if "nodes" in line and "┃" in line)
    assert [c.strip() for c in header.split("┃")[1:-1]] == ["nodes", "3", "30", "3→30"]
    assert len(rows["total"]) == 3  # two sizes and the step between them
    assert rows["total"][2].endswith("x")
    assert rows["GPUs"] == ["24", "240", ""]
    assert "Time per 10x of nodes: 3→30 " in out


@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_the_table_splits_by_sizes_to_fit_any_width(width: int) -> None:
    results = [_size(n, n / 10) for n in (100, 1000, 10_000, 100_000, 1_000_000)]
    console = Console(width=width, file=io.StringIO(), force_terminal=True, color_system=None)
    tables = fit_tables(results, steps(results), console, width)
    for table in tables:
        console.print(table)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "…" not in text
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    # every size and every step is shown exactly once, and no number is cut
    for r in results:
        assert sum(f" {r.nodes:,} ┃" in line for line in lines) == 1
    assert sum(line.count("→") for line in lines if "┃" in line) == len(results) - 1
    assert sum("100,000.0" in line for line in lines) == 1  # the total at a million nodes
    assert (len(tables) == 1) == (width >= 120)


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


def test_an_unknown_placement_is_refused_with_the_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cycle.main(["--nodes", "3", "--placement", "binpack,default"])
    assert exit_info.value.code == 2
    error = " ".join(capsys.readouterr().err.split())
    assert "--placement: no placement policy is called 'binpack,default'" in error
    assert "binpack, default" in error
