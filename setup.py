"""Only for the compiled core: the project's metadata is in pyproject.toml.

With GPUPOOL_COMPILE_CORE=1 (tools/build/gpupool_build.py) every module of `gpupool.core` is
compiled by mypyc into an extension module; without it, this adds nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

sys.path.insert(0, str(Path(__file__).resolve().parent / "tools" / "build"))

from gpupool_build import BUILDING_WHEEL_ENV, MYPYC_REQUIREMENT, compile_core_requested


class _ParallelBuildExt(build_ext):
    """The extension modules (mypyc's shared library and a small one per module) compiled on
    every CPU."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1


def _compiled_core() -> list[object]:
    if not compile_core_requested() or BUILDING_WHEEL_ENV not in os.environ:
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        raise SystemExit(
            f"GPUPOOL_COMPILE_CORE=1 needs mypyc, which {MYPYC_REQUIREMENT} ships: pip installs "
            "it into its build environment unless told --no-build-isolation; then install it "
            "first"
        ) from None

    # The core's own mypy settings: the project's (pyproject.toml) load the pydantic plugin,
    # which the core does not use and the build environment does not have.
    return list(
        mypycify(["--config-file", "tools/build/mypyc.ini", "src/gpupool/core"], opt_level="3")
    )


setup(ext_modules=_compiled_core(), cmdclass={"build_ext": _ParallelBuildExt})
