"""The simulator's errors: bad input files (the user's to fix) and broken core contracts (ours)."""

from __future__ import annotations

__all__ = ["SimInputError", "SimulationError"]


class SimInputError(ValueError):
    """A workload or cluster file that cannot be simulated: where, which field, and how to fix it.

    `line` is 1-based, or None when the problem is the file as a whole (it cannot be read).
    """

    def __init__(self, path: str, line: int | None, field: str, message: str) -> None:
        super().__init__(path, line, field, message)
        self.path = path
        self.line = line
        self.field = field
        self.message = message

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )


class SimulationError(RuntimeError):
    """The core decided something the engine cannot carry out: a bug, never bad input."""
