"""`benchmarks/compile_core.py`: the mypyc-compiled copy of the core it builds makes the same
decisions as the source (the recorded digests), and it never builds into `src/`.

The build itself (about 1.5 CPU-minutes) is in the slow tier, and needs a C compiler."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import compile_core

ROOT = Path(__file__).resolve().parent.parent


def test_register_decorators_become_calls_after_the_module() -> None:
    text = (
        '@register("binpack", "pack")\nclass BinPackPolicy(PlacementPolicy):\n    pass\n\n\n'
        '@register("spread")\nclass SpreadPolicy(BinPackPolicy):\n    pass\n'
    )
    out = compile_core.undecorate(text)
    assert "@register" not in out
    assert out.startswith("class BinPackPolicy(PlacementPolicy):")
    assert out.endswith(
        '\nregister("binpack", "pack")(BinPackPolicy)\nregister("spread")(SpreadPolicy)\n'
    )
    assert compile_core.undecorate("x = 1\n") == "x = 1\n"


def test_the_copy_of_the_base_accepts_interpreted_subclasses(tmp_path: Path) -> None:
    compile_core.prepare(tmp_path)
    base = (tmp_path / "gpupool" / "core" / "policies" / "base.py").read_text()
    assert "@mypyc_attr(allow_interpreted_subclasses=True)\nclass PlacementPolicy:" in base
    fgd = (tmp_path / "gpupool" / "core" / "policies" / "fgd.py").read_text()
    assert "@register" not in fgd and 'register("fgd")(FgdPolicy)' in fgd
    # the source tree is left as it was
    assert "@register(" in (ROOT / "src" / "gpupool" / "core" / "policies" / "fgd.py").read_text()


def test_it_refuses_to_build_inside_src() -> None:
    with pytest.raises(SystemExit) as exit_info:
        compile_core.main([str(ROOT / "src" / "compiled")])
    assert exit_info.value.code == 2
    assert not (ROOT / "src" / "compiled").exists()


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


@pytest.mark.slow
@pytest.mark.skipif(
    _compiler() is None or importlib.util.find_spec("mypyc") is None,
    reason="needs a C compiler and mypyc (part of mypy)",
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
        [sys.executable, "-c", "import cycle; print(cycle.core_build())"],
        cwd=ROOT / "benchmarks",
        env=env,
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "compiled", probe.stderr
    tests = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            "tests/core/test_cycle_decisions_stable.py",
            "tests/core/test_policies.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-4000:]
    # nothing compiled was left in the source tree
    assert not list((ROOT / "src").rglob("*.so"))
