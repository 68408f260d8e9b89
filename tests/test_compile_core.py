"""The compiled core (`GPUPOOL_COMPILE_CORE=1 pip install .`, docs/performance.md): the build
backend's switch, and (slow tier, needs a C compiler) a build installed aside that makes the
recorded decisions and passes every core test.

The build takes about 2 CPU-minutes the first time (less when build/ holds an earlier one)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools" / "build"))

import compile_core
import gpupool_build

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("value", "wanted"), [("", False), ("0", False), ("no", False), ("1", True), ("True", True)]
)
def test_the_switch_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, wanted: bool
) -> None:
    monkeypatch.setenv(gpupool_build.COMPILE_ENV, value)
    assert gpupool_build.compile_core_requested() is wanted


def test_a_switch_it_cannot_read_is_an_error_that_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(gpupool_build.COMPILE_ENV, "fast")
    with pytest.raises(SystemExit, match="set it to 1 to compile the core, or unset it"):
        gpupool_build.compile_core_requested()


def test_compiling_asks_for_the_pinned_mypy_and_only_then(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpupool_build._setuptools, "get_requires_for_build_wheel", lambda c: [])
    monkeypatch.delenv(gpupool_build.COMPILE_ENV, raising=False)
    assert gpupool_build.get_requires_for_build_wheel() == []
    monkeypatch.setenv(gpupool_build.COMPILE_ENV, "1")
    assert gpupool_build.get_requires_for_build_wheel() == ["mypy==2.4.1"]


def test_an_editable_install_is_not_compiled(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(gpupool_build.COMPILE_ENV, "1")
    with pytest.raises(SystemExit, match="not an editable install"):
        gpupool_build.build_editable(str(tmp_path))
    assert not list(tmp_path.iterdir())


def test_the_source_distribution_holds_the_build_backend(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # pyproject.toml names tools/build as the backend's path: without it (MANIFEST.in) no wheel
    # could be built from the sdist, compiled or not. Built from a copy without the egg-info
    # that an earlier build leaves in src/ (setuptools would take that build's file list).
    tree = tmp_path / "tree"
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tree / name)
    skip = shutil.ignore_patterns("*.egg-info", "__pycache__", "*.so")
    shutil.copytree(ROOT / "src", tree / "src", ignore=skip)
    shutil.copytree(ROOT / "tools" / "build", tree / "tools" / "build", ignore=skip)
    monkeypatch.chdir(tree)
    monkeypatch.delenv(gpupool_build.COMPILE_ENV, raising=False)
    name = gpupool_build.build_sdist(str(tmp_path))
    with tarfile.open(tmp_path / name) as sdist:
        members = {Path(member).relative_to(Path(member).parts[0]) for member in sdist.getnames()}
    assert {
        Path("tools/build/gpupool_build.py"),
        Path("tools/build/mypyc.ini"),
        Path("setup.py"),
        Path("src/gpupool/core/cycle.py"),
    } <= members


def test_it_refuses_to_install_inside_src() -> None:
    with pytest.raises(SystemExit) as exit_info:
        compile_core.main([str(ROOT / "src" / "compiled")])
    assert exit_info.value.code == 2
    assert not (ROOT / "src" / "compiled").exists()


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


@pytest.mark.slow
@pytest.mark.skipif(
    (_compiler() is None or importlib.util.find_spec("mypyc") is None)
    and os.environ.get("CI") != "true",
    reason="needs a C compiler and mypyc (part of mypy); under CI=true it runs (and fails)",
)
def test_the_compiled_core_makes_the_recorded_decisions(tmp_path: Path) -> None:
    build = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compile_core.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    modules = len(list((ROOT / "src" / "gpupool" / "core").rglob("*.py")))
    assert f"compiled {modules} of {modules} modules of gpupool.core" in build.stdout
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    probe = subprocess.run(
        [sys.executable, "-m", "gpupool", "--version"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip().endswith("(scheduling core: compiled)"), probe.stderr
    # Every core test: the recorded digests, the table tests with their invariant checks, the
    # properties; the few that patch the core's functions skip themselves (`pure_core_only`).
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "tests/core"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-4000:]
    # (the project's addopts say -q: the summary line is there, "N passed, M skipped in ...")
    summary = re.search(r"(\d+) passed(?:, (\d+) skipped)? in ", tests.stdout)
    assert summary is not None, tests.stdout[-2000:]
    passed, skipped = int(summary.group(1)), int(summary.group(2) or 0)
    assert passed > 10 * skipped, tests.stdout[-2000:]
    # nothing compiled was left in the source tree
    assert not list((ROOT / "src").rglob("*.so"))
