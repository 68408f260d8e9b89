"""Which build of the scheduling core this process runs.

"compiled" when `gpupool.core` was installed compiled by mypyc (`GPUPOOL_COMPILE_CORE=1 pip
install .`, docs/performance.md), else "pure Python". Both make the same decisions; the compiled
one is faster.
"""

from __future__ import annotations

import importlib.machinery

import gpupool.core.cycle


def core_build() -> str:
    path = getattr(gpupool.core.cycle, "__file__", None) or ""
    compiled = path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    return "compiled" if compiled else "pure Python"
