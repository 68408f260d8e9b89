"""Every `gpupool` command pays the CLI's start: importing `gpupool.cli.main` and Typer reading
every command's signature. The simulator, what-if, the scheduling core's cycle, the API's
models and httpx load inside the commands that use them, never at the start. A structural
check (which modules load), not a timing one."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from gpupool.api import enums, schemas
from gpupool.cli.bench import ALL_POLICIES, POLICY_NAMES
from gpupool.cli.main import app
from gpupool.core.packing import PolicyName
from gpupool.core.policies import policy_names

HEAVY = (
    "gpupool.sim.engine",
    "gpupool.simcluster",
    "gpupool.sim.compare",
    "gpupool.sim.metrics",
    "gpupool.sim.fgd_refs",
    "gpupool.sim.packing",
    "gpupool.whatif.runner",
    "gpupool.whatif.loader",
    "gpupool.userfiles.yamlfile",
    "gpupool.core.cycle",
    "gpupool.core.policies",
    "gpupool.api.schemas",
    "gpupool.client.http",
    "httpx",
    "yaml",
    "matplotlib",
    "numpy",
)

START = (
    "import typer.main, gpupool.cli.main as cli; "
    "typer.main.get_command(cli.app)"  # what every start does: read every command's signature
)


def imported_modules(code: str) -> set[str]:
    """The modules `python -X importtime -c code` imports, from its report on stderr."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [line for line in run.stderr.splitlines() if line.startswith("import time:")]
    assert lines, run.stderr
    return {line.rsplit("|", 1)[1].strip() for line in lines[1:]}  # the first is the header


@pytest.mark.parametrize("code", ["import gpupool.cli.main", START])
def test_the_cli_starts_without_the_simulator_the_core_or_the_client(code: str) -> None:
    modules = imported_modules(code)
    assert "gpupool.cli.main" in modules
    assert sorted(set(HEAVY) & modules) == []


def test_the_cli_enums_are_the_apis() -> None:
    """Command signatures name `gpupool.api.enums` (light), the very enums of the wire models."""
    assert (schemas.Role, schemas.WorkloadType, schemas.WorkloadStatus) == (
        enums.Role,
        enums.WorkloadType,
        enums.WorkloadStatus,
    )


def test_bench_all_policies_are_the_packing_policies() -> None:
    fgd, default = str(PolicyName.FGD), str(PolicyName.DEFAULT)
    assert list(ALL_POLICIES) == [fgd, default, f"{default}@16"]


def test_bench_packing_help_lists_the_registered_policies() -> None:
    """The names are written into the help when it is shown (the registry is heavy)."""
    result = CliRunner().invoke(app, ["bench", "packing", "--help"], env={"COLUMNS": "2000"})
    assert result.exit_code == 0, result.output
    assert POLICY_NAMES not in result.output
    assert ", ".join(policy_names()) in result.output
