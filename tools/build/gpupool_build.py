"""gpupool's build backend: setuptools', plus the scheduling core compiled by mypyc on request.

    GPUPOOL_COMPILE_CORE=1 pip install .     # a wheel whose gpupool.core is native code

Without the variable the wheel is pure Python, as before. With it, the build also needs the
mypy that compiles the core (asked for here, so pip's isolated build environment gets it) and a
C compiler with the Python headers; `setup.py` does the compiling. An editable install is
refused with it: the extension modules would land in src/ beside the .py files and shadow them,
so later edits of the source would silently not run. docs/performance.md says why and what it
gains.
"""

from __future__ import annotations

import os

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the rest of the PEP 517 hooks, unchanged)

COMPILE_ENV = "GPUPOOL_COMPILE_CORE"
MYPYC_REQUIREMENT = "mypy==2.4.1"
"""The mypy (which ships mypyc) the compiled core is built and tested with."""
BUILDING_WHEEL_ENV = "_GPUPOOL_BUILDING_WHEEL"
"""Set by `build_wheel` for `setup.py`: the step that compiles."""


def compile_core_requested() -> bool:
    value = os.environ.get(COMPILE_ENV, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise SystemExit(f"{COMPILE_ENV}={value!r}: set it to 1 to compile the core, or unset it")


def get_requires_for_build_wheel(
    config_settings: dict[str, str | list[str]] | None = None,
) -> list[str]:
    requires = list(_setuptools.get_requires_for_build_wheel(config_settings))
    if compile_core_requested():
        requires.append(MYPYC_REQUIREMENT)
    return requires


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, str | list[str]] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """setuptools' wheel; `setup.py` compiles the core in this step only (not while pip asks
    for requirements or metadata, when mypyc may not be installed yet)."""
    os.environ[BUILDING_WHEEL_ENV] = "1"
    try:
        return str(_setuptools.build_wheel(wheel_directory, config_settings, metadata_directory))
    finally:
        del os.environ[BUILDING_WHEEL_ENV]


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, str | list[str]] | None = None,
    metadata_directory: str | None = None,
) -> str:
    if compile_core_requested():
        raise SystemExit(
            f"{COMPILE_ENV}=1 compiles the core into a wheel, not an editable install (the "
            "compiled modules would shadow the sources in src/): run `pip install .` without "
            f"-e, or unset {COMPILE_ENV}"
        )
    return str(_setuptools.build_editable(wheel_directory, config_settings, metadata_directory))
