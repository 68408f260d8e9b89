"""The simulator's errors: bad input files (the user's to fix) and broken core contracts (ours)."""

from __future__ import annotations

from gpupool.userfiles import UserFileError

__all__ = ["SimInputError", "SimulationError"]

SimInputError = UserFileError
"""A workload or cluster file that cannot be simulated: the one error type of every user file
(`gpupool.userfiles`), under the name it had here. Where (file, line, key), what, how to fix."""


class SimulationError(RuntimeError):
    """The core decided something the engine cannot carry out: a bug, never bad input."""
