"""`Statement`: a session's changes made tentatively, then committed or rolled back as one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpupool.core.records import TaskAlloc, WorkRecord

if TYPE_CHECKING:
    from gpupool.core.session import Session


class Statement:
    """A tentative group of changes that is committed or rolled back as one.

    A statement opened with a `parent` hands its changes to the parent on commit, so rolling
    back the parent undoes them too.
    """

    __slots__ = ("_undo", "parent", "session")

    def __init__(self, session: Session, parent: Statement | None = None) -> None:
        self.session = session
        self.parent = parent
        self._undo: list[tuple[bool, WorkRecord, TaskAlloc]] = []

    def place(self, work: WorkRecord, alloc: TaskAlloc) -> None:
        self.session._add_alloc(work, alloc)
        self._undo.append((True, work, alloc))

    def remove(self, work: WorkRecord, task_index: int) -> TaskAlloc:
        alloc = self.session._remove_alloc(work, task_index)
        self._undo.append((False, work, alloc))
        return alloc

    def rollback(self) -> None:
        session = self.session
        for added, work, alloc in reversed(self._undo):
            if added:
                session._remove_alloc(work, alloc.task_index)
            else:
                session._add_alloc(work, alloc)
        self._undo.clear()

    def commit(self) -> None:
        if self.parent is not None:
            self.parent._undo.extend(self._undo)
        self._undo.clear()
