"""The simulator's sharing policies, light to import: `gpupool simulate --policy` names them in
its signature, which Typer reads at every start of the CLI (`gpupool.sim.cluster` re-exports
`Policy` and applies it)."""

from __future__ import annotations

import enum

__all__ = ["Policy"]


class Policy(enum.StrEnum):
    STATIC = "static"
    """Each project gets its quota and never more: idle quota stays idle."""
    GUARANTEED = "guaranteed"
    """Quotas guaranteed, idle quota lent out and reclaimed (gpupool's model)."""
