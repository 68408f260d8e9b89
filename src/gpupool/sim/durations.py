"""`format_duration_s`, light to import: the server commands of the CLI show ages with it
without loading the simulator (`gpupool.sim.compare` re-exports it)."""

from __future__ import annotations

__all__ = ["format_duration_s"]


def format_duration_s(seconds: float | None) -> str:
    """`0 s`, `45 s`, `12 min`, `3.4 h`, `2.1 d`; `-` for no value."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
