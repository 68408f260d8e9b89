"""Consoles for the command line's output: as wide as the terminal, or unlimited when piped.

Rich lays a console that writes to no terminal out at 80 columns (or `$COLUMNS`), which cuts
tables (`…`) when the output goes to a file or a pipe. `output_console` keeps rich's terminal
width on a terminal and gives a pipe the full width, so each table row stays one whole line.
"""

from __future__ import annotations

from rich.console import Console

__all__ = ["PIPE_WIDTH", "output_console"]

PIPE_WIDTH = 10_000
"""The width given to a console that is not a terminal: wider than any table we print."""


def output_console(*, stderr: bool = False, highlight: bool = False) -> Console:
    """A console on stdout (stderr with `stderr=True`): the terminal's width on a terminal,
    `PIPE_WIDTH` otherwise."""
    console = Console(stderr=stderr, highlight=highlight)
    if not console.is_terminal:
        console.width = PIPE_WIDTH
    return console
