"""Files and directories only their owner may read: the data directory (0700) and what holds
secrets or everyone's work in it (database, admin token, server log: 0600).

Files are created with their final mode (`os.open(..., 0o600)`), never written and then
chmod'ed, so there is no moment at which another user could open them. What an older gpupool
left with looser modes is tightened, and the caller says so.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import BinaryIO

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> int | None:
    """Make `path` (parents too, with the default mode) a 0700 directory. Returns its old mode
    when it existed open to others and was tightened, else None."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    return _tighten(path, DIR_MODE)


def tighten_file(path: Path) -> int | None:
    """If `path` exists with any group or other bit, make it 0600; returns the old mode then."""
    try:
        return _tighten(path, FILE_MODE)
    except FileNotFoundError:
        return None


def create_private(path: Path, text: str) -> None:
    """Write a new file that is 0600 from the start; `FileExistsError` if it exists."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)


def touch_private(path: Path) -> None:
    """Create `path` empty with mode 0600 unless it exists (for files another library creates
    and then only opens, like SQLite's database: its -wal and -shm files take its mode)."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))


def append_private(path: Path) -> BinaryIO:
    """`path` opened to append bytes, created 0600 (an existing one is tightened to 0600)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    if stat.S_IMODE(os.fstat(descriptor).st_mode) & 0o077:
        os.fchmod(descriptor, FILE_MODE)
    return os.fdopen(descriptor, "ab")


def _tighten(path: Path, mode: int) -> int | None:
    old = stat.S_IMODE(path.stat().st_mode)
    if not old & 0o077:
        return None
    path.chmod(mode)
    return old
