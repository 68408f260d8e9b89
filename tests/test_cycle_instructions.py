"""`benchmarks/cycle_instructions.py`: the instruction count of one warm cycle under valgrind.

No count is asserted (it changes with every change to the core); the tests check that the
script reads valgrind's total, refuses bad input, and that a real run reports a positive
figure where valgrind is installed (CI has none: skipped there)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import cycle_instructions

SCRIPT = Path(cycle_instructions.__file__)


def test_reads_the_instruction_total_from_cachegrind() -> None:
    output = "==1== Cachegrind, a tracing profiler\n==1== I refs:      1,234,567,890\n"
    assert cycle_instructions.instruction_refs(output) == 1_234_567_890


def test_output_without_a_total_is_an_error_not_a_zero() -> None:
    with pytest.raises(ValueError, match="no 'I refs' line"):
        cycle_instructions.instruction_refs("==1== error: something else\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--placement", "nope"], "no placement policy is called 'nope'"),
        (["--placement", ","], "name at least one policy"),
        (["--nodes", "0"], "--nodes must be a positive integer"),
    ],
)
def test_bad_input_is_refused_with_the_fix(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert message in done.stderr


def test_the_measured_process_runs_cycles_without_valgrind() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--run-cycles", "2", "--nodes", "3", "--placement", "fgd"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_a_real_count_is_positive() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--nodes", "3", "--placement", "binpack"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    row = done.stdout.strip().splitlines()[-1]
    name, figure = row.split()
    assert name == "binpack"
    assert float(figure.replace(",", "")) > 0
