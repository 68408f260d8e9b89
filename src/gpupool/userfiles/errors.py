"""The one error for a user's file that is wrong: which file, which line, which key, what to do.

Scenario files, `gpupool simulate`'s cluster and workload files, the openb trace's CSV files
and `gpupool submit -f` workload files all report their problems as a `UserFileError`, shown the
way a compiler shows one: `path:line: key.path: message`. The message says what is wrong and
how to fix it; it never is a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["KeyPath", "UserFileError", "format_key_path"]

KeyPath = tuple[str | int, ...]
"""Where a value is inside a file: `("workloads", 2, "gpu")`; a row's column is `("gpu",)`."""


class UserFileError(ValueError):
    """A user's file that cannot be used: where (file, line, key path) and what to do about it.

    `line` is 1-based, or None when the problem is the file as a whole (it cannot be read).
    `key_path` names the key (`workloads[1].gpu`), a row's field or column (`duration_s`), or
    `row` / `header` for a whole line of a table; it is empty when no key is at fault. `also`
    holds further problems found in the same pass (schema errors come all at once), so that a
    user can fix them in one go; `str()` shows the first, `all` every one.
    """

    def __init__(
        self,
        path: str,
        line: int | None,
        key_path: str,
        message: str,
        also: tuple[UserFileError, ...] = (),
    ) -> None:
        super().__init__(path, line, key_path, message)
        self.path = path
        self.line = line
        self.key_path = key_path
        self.message = message
        self.also = also

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        if self.key_path:
            return f"{where}: {self.key_path}: {self.message}"
        return f"{where}: {self.message}"

    @property
    def all(self) -> tuple[UserFileError, ...]:
        """This problem followed by the others found with it."""
        return (self, *self.also)

    def explain(self) -> str:
        """Every problem, one per line (what a command prints)."""
        return "\n".join(str(problem) for problem in self.all)


def format_key_path(path: Iterable[str | int]) -> str:
    """`("workloads", 2, "gpu")` -> `workloads[2].gpu`."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text
