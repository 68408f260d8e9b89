"""Install gpupool with its scheduling core compiled by mypyc into a directory, for measuring.

    .venv/bin/python benchmarks/compile_core.py OUT_DIR       # about 2 CPU-minutes
    PYTHONPATH=OUT_DIR .venv/bin/python benchmarks/cycle.py --nodes 1000 --clock cpu

The build is the shipped one (`GPUPOOL_COMPILE_CORE=1 pip install .`, docs/performance.md),
made from this checkout with this environment's setuptools and mypy (no download), and installed
into OUT_DIR instead of the environment: the environment keeps its editable, pure-Python
install, and `PYTHONPATH=OUT_DIR` picks the compiled one. OUT_DIR may not be inside `src/`.
It needs a C compiler and the Python headers.

Prints the PYTHONPATH to use. Exit status 0, or 1 when the build fails.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def compiled_core_modules(root: Path) -> list[str]:
    """Modules of `gpupool.core` under `root` with an extension module beside the source."""
    core = root / "gpupool" / "core"
    found = []
    for source in sorted(core.rglob("*.py")):
        stem = source.with_suffix("")
        if any(
            Path(f"{stem}{suffix}").exists() for suffix in importlib.machinery.EXTENSION_SUFFIXES
        ):
            found.append(".".join(source.relative_to(root).with_suffix("").parts))
    return found


def _run(command: list[str], env: dict[str, str]) -> bool:
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        print(f"compile_core: {' '.join(command[:4])} ... failed", file=sys.stderr)
    return done.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out", type=Path, help="directory to install into (not in src/)")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    if out == ROOT / "src" or (ROOT / "src") in out.parents:
        parser.error("OUT_DIR may not be inside src/: its .so files would shadow the .py files")
    env = dict(os.environ, GPUPOOL_COMPILE_CORE="1")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    with tempfile.TemporaryDirectory() as wheels:
        built = _run(
            [*pip, "wheel", "--no-build-isolation", "--no-deps", "-w", wheels, str(ROOT)], env
        )
        if not built:
            return 1
        if (out / "gpupool").exists():
            shutil.rmtree(out / "gpupool")
        wheel = next(Path(wheels).glob("gpupool-*.whl"))
        if not _run(
            [*pip, "install", "--no-deps", "--upgrade", "--target", str(out), str(wheel)], env
        ):
            return 1
    sources = sorted((out / "gpupool" / "core").rglob("*.py"))
    compiled = compiled_core_modules(out)
    print(f"compiled {len(compiled)} of {len(sources)} modules of gpupool.core")
    print(f"PYTHONPATH={out}")
    return 0 if sources and len(compiled) == len(sources) else 1


if __name__ == "__main__":
    sys.exit(main())
