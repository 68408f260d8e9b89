"""Build a copy of gpupool with its pure core (`gpupool.core`) compiled by mypyc, for measuring.

    .venv/bin/python benchmarks/compile_core.py OUT_DIR       # about 1.5 CPU-minutes
    PYTHONPATH=OUT_DIR .venv/bin/python benchmarks/cycle.py --nodes 1000 --clock cpu

The tried-and-measured experiment of benchmarks/RESULTS.md ("Compiling the core with mypyc"):
the compiled core made a cycle 1.6-1.9x faster, short of the targets, so gpupool does not ship
a compiled build; this script keeps the experiment repeatable. It needs mypy (which ships mypyc,
a dev dependency) and a C compiler.

OUT_DIR receives a copy of `src/gpupool` with an extension module (`.so`) beside every module
of `gpupool.core`; an extension module shadows the `.py` of the same name on import, so OUT_DIR
may not be inside `src/` (later edits of the `.py` files would silently not run). The copy is
changed in two mechanical ways that mypyc needs and that change no decision:

- `@register("name")` above a policy class becomes `register("name")(Class)` after the module:
  mypyc compiles a decorated class as a plain Python class, which may not subclass a compiled
  one;
- `PlacementPolicy` allows interpreted subclasses (`mypyc_attr`), so a policy written in Python
  (as `tests/core/test_policies.py` adds one) still works with the compiled core.

Prints the PYTHONPATH to use. Exit status 0, or 1 when the build fails.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "gpupool"

_REGISTER = re.compile(r"^@register\(([^)]*)\)\nclass (\w+)", re.MULTILINE)
_BASE_CLASS = "\nclass PlacementPolicy:\n"

SETUP = """\
import os
from setuptools import setup
from mypyc.build import mypycify

setup(
    name="gpupool-core-compiled",
    ext_modules=mypycify(["gpupool/core"], opt_level="3"),
    script_args=["build_ext", "--inplace", "--parallel", str(os.cpu_count() or 1)],
)
"""


def undecorate(text: str) -> str:
    """`@register(...)` class decorators as calls after the module (mypyc needs native classes)."""
    calls: list[str] = []

    def plain(match: re.Match[str]) -> str:
        calls.append(f"register({match.group(1)})({match.group(2)})")
        return f"class {match.group(2)}"

    text = _REGISTER.sub(plain, text)
    if not calls:
        return text
    return text.rstrip("\n") + "\n\n\n" + "\n".join(calls) + "\n"


def open_base(text: str) -> str:
    """`PlacementPolicy` open to subclasses defined in Python code (tests, user policies)."""
    if text.count(_BASE_CLASS) != 1:
        raise SystemExit("compile_core: class PlacementPolicy not found in policies/base.py")
    text = text.replace(
        _BASE_CLASS,
        "\n@mypyc_attr(allow_interpreted_subclasses=True)\nclass PlacementPolicy:\n",
    )
    return text.replace(
        "\nfrom gpupool.core.model import",
        "\nfrom mypy_extensions import mypyc_attr\n\nfrom gpupool.core.model import",
        1,
    )


def prepare(out: Path) -> Path:
    """Copy `src/gpupool` into `out` and make the core's copy compilable; the copy's root."""
    target = out / "gpupool"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(SOURCE, target, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"))
    for path in (target / "core" / "policies").glob("*.py"):
        path.write_text(undecorate(path.read_text()))
    base = target / "core" / "policies" / "base.py"
    base.write_text(open_base(base.read_text()))
    return out


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out", type=Path, help="directory for the compiled copy (not in src/)")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    if out == ROOT / "src" or (ROOT / "src") in out.parents:
        parser.error("OUT_DIR may not be inside src/: its .so files would shadow the .py files")
    out.mkdir(parents=True, exist_ok=True)
    prepare(out)
    (out / "setup_compiled_core.py").write_text(SETUP)
    env = dict(os.environ, PYTHONPATH=str(out))
    build = subprocess.run(
        [sys.executable, "setup_compiled_core.py"], cwd=out, env=env, capture_output=True, text=True
    )
    if build.returncode != 0:
        sys.stderr.write(build.stdout[-4000:] + build.stderr[-4000:])
        print(f"compile_core: mypyc build failed (exit {build.returncode})", file=sys.stderr)
        return 1
    sources = sorted((out / "gpupool" / "core").rglob("*.py"))
    compiled = compiled_core_modules(out)
    print(f"compiled {len(compiled)} of {len(sources)} modules of gpupool.core")
    print(f"PYTHONPATH={out}")
    return 0 if len(compiled) == len(sources) else 1


if __name__ == "__main__":
    sys.exit(main())
