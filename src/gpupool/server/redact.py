"""What a researcher may read of the text the scheduler writes.

The core names workloads `project/workload` and says why in those names: an eviction says which
workload it made room for, a reclaimer's start which workloads it took GPUs from, a move which
workload it made fit. A researcher reads these reasons in their own project's events and
pending reasons; there, another project's workload becomes `a workload of project P`: the
project and what it holds stay visible, its workloads' names do not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.server.auth import Principal
from gpupool.server.db import ProjectRow

Redact = Callable[[str | None], str | None]

_WORKLOAD = r"[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?"


def _unchanged(text: str | None) -> str | None:
    return text


def redactor_for(hidden_projects: Iterable[str]) -> Redact:
    """Replace `P/W` for each project P of `hidden_projects` (names, as the API validates)."""
    hidden = sorted(set(hidden_projects), key=lambda name: (-len(name), name))
    if not hidden:
        return _unchanged
    alternatives = "|".join(re.escape(name) for name in hidden)
    pattern = re.compile(rf"(?<![A-Za-z0-9._/-])({alternatives})/{_WORKLOAD}")

    def redact(text: str | None) -> str | None:
        if not text or "/" not in text:
            return text
        return pattern.sub(lambda found: f"a workload of project {found[1]}", text)

    return redact


def redactor(session: Session, viewer: Principal) -> Redact:
    """For `viewer`: admins read everything; a researcher, the names of their projects' work."""
    if viewer.is_admin:
        return _unchanged
    names = session.scalars(select(ProjectRow.name).where(ProjectRow.is_department.is_(False)))
    return redactor_for(name for name in names if not viewer.may_use(name))
