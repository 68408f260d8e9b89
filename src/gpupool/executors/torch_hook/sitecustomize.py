"""gpupool's start-up hook for tasks with a GPU fraction (on PYTHONPATH only for those).

When the task imports torch, cap its memory on each visible device at the fraction it was given
(`torch.cuda.set_per_process_memory_fraction`), so that two tasks sharing a device cannot take
each other's memory by accident. Nothing happens if torch is never imported or has no CUDA.
A `sitecustomize` of the task's own environment, which this one shadows, is run afterwards.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any


def _apply(torch: Any) -> None:
    fraction = float(os.environ.get("GPUPOOL_GPU_FRACTION", "1"))
    if fraction >= 1 or not torch.cuda.is_available():
        return
    for device in range(torch.cuda.device_count()):
        torch.cuda.set_per_process_memory_fraction(fraction, device)
    os.environ["GPUPOOL_TORCH_FRACTION_APPLIED"] = str(fraction)


class _TorchWatcher(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            try:
                _apply(module)
            except Exception as error:  # the task must run even if the cap cannot be set
                print(f"gpupool: could not cap torch GPU memory: {error}", file=sys.stderr)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _run_shadowed_sitecustomize() -> None:
    """Run the next `sitecustomize` on the path after this one, as Python would have."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            with open(candidate, encoding="utf-8") as source:
                code = compile(source.read(), candidate, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": candidate})
            return


if os.environ.get("GPUPOOL_GPU_FRACTION"):
    sys.meta_path.insert(0, _TorchWatcher())
_run_shadowed_sitecustomize()
