"""Whether a fairness eviction would hand its victim a guarantee claim back (G8).

G4 lets a reclaim justified by fairness (a) take one indivisible victim that leaves its project
below its fair share: the reclaimer's own guard (it ends within its fair share) keeps the victim
from reclaiming back by fairness. It does not keep it from reclaiming back by guarantee (b):
when the eviction leaves the victim's side below its *quota*, and the reclaimer's side ends above
its own quota, any pending work of the victim's side that fits in what is left of that quota
reclaims from the reclaimer next cycle, the freed room goes to the victim's other pending work,
and the fairness reclaim comes again: ping-pong. `ReverseClaims` says when an eviction would open
such a claim, so that fairness alone does not justify it (a quota is the stronger promise).

The asks it compares with are those of the work not running when first needed (pending, or
evicted earlier in the cycle), lowered by every victim taken since; work placed meanwhile, and
victims an attempt puts back, stay in: that can only turn down more evictions, never fewer.
"""

from __future__ import annotations

from typing import Final

from gpupool.core.context import GPU, CycleContext
from gpupool.core.session import WorkRecord, WorkState

_NONE: Final = 1 << 62
"""No ask at all: larger than any room."""
_RUNNING: Final = WorkState.RUNNING


class ReverseClaims:
    """Per reclaim action: the smallest GPU ask of unplaced work under each project-tree node."""

    __slots__ = ("_ctx", "_smallest", "_taken", "held_back")

    def __init__(self, ctx: CycleContext) -> None:
        self._ctx = ctx
        self._smallest: list[int] | None = None
        self._taken: list[WorkRecord] = []
        """Victims taken before `_smallest` was first needed (counted out by a walk, they
        still look running)."""
        self.held_back = -1
        """The project of the last victim `opens_claim` turned down (-1: none); the caller
        resets it per attempt, to say why the attempt failed."""

    def opens_claim(self, levels: tuple[int, ...], freed_gpu: int, victim: WorkRecord) -> bool:
        """Whether taking `freed_gpu` from every level of `levels` (the victim's side, from where
        its path parts from the reclaimer's, down to its project) leaves one of them below its
        quota by at least an ask of the work under it: the victim's own (it becomes pending)
        or that of unplaced work there."""
        projects = self._ctx.session.projects
        room = _NONE
        for level in levels:
            record = projects[level]
            room = min(room, record.spec.quota.gpu_milli - (record.holding[GPU] - freed_gpu))
            if room <= 0:
                return False
            if self._asks()[level] <= room:
                self.held_back = victim.project
                return True
        if _ask(victim) <= room:
            self.held_back = victim.project
            return True
        return False

    def taken(self, victim: WorkRecord) -> None:
        """`victim` is taken out (or counted out) by an attempt: from now on it is unplaced
        work too, whether or not the attempt keeps it out (once more is turned down, not less)."""
        smallest = self._smallest
        if smallest is None:
            self._taken.append(victim)
        else:
            _lower(smallest, self._ctx.session.projects[victim.project].ancestors, _ask(victim))

    def _asks(self) -> list[int]:
        smallest = self._smallest
        if smallest is None:
            session = self._ctx.session
            smallest = self._smallest = [_NONE] * len(session.projects)
            projects = session.projects
            for work in session.works:
                if work.state is not _RUNNING:
                    _lower(smallest, projects[work.project].ancestors, _ask(work))
            for work in self._taken:
                _lower(smallest, projects[work.project].ancestors, _ask(work))
            self._taken.clear()
        return smallest


def _ask(work: WorkRecord) -> int:
    """What `work` asks once it is pending: the tasks that must start together."""
    spec = work.spec
    gang = spec.min_available
    tasks = spec.tasks if gang is None else min(gang, spec.tasks)
    return work.task_gpu_milli * tasks


def _lower(smallest: list[int], ancestors: tuple[int, ...], ask: int) -> None:
    if ask <= 0:  # work without GPUs reclaims none
        return
    for level in ancestors:
        if ask < smallest[level]:
            smallest[level] = ask
