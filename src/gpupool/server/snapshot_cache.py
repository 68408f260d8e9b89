"""The scheduling loop's cache of the workload rows between snapshots (`SnapshotCache`), and
the snapshot's read of those rows: all of them, or only those whose change marker moved."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

from sqlalchemy import (
    Connection,
    Integer,
    Select,
    Text,
    any_,
    bindparam,
    cast,
    literal_column,
    null,
    select,
    text,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.elements import ColumnElement

from gpupool.api.schemas import TaskState, WorkloadStatus
from gpupool.core.model import Node, TaskPlacement, Workload
from gpupool.server.db import TaskRow, WorkloadRow
from gpupool.server.quarantine import describe
from gpupool.server.snapshot_rows import (
    LIVE_TASKS,
    SCHEDULED,
    BadRowError,
    WorkloadKey,
    checked_columns,
    core_workload,
    placement_of,
    task_index_of,
)

_COMPLETING = WorkloadStatus.COMPLETING.value
_STOPPING = TaskState.STOPPING.value
_READ = (
    WorkloadRow.id,
    WorkloadRow.version,
    WorkloadRow.project_id,
    WorkloadRow.name,
    WorkloadRow.type,
    WorkloadRow.status,
    WorkloadRow.gpu_kind,
    WorkloadRow.gpu_amount,
    WorkloadRow.gpu_limit_milli,
    WorkloadRow.tasks,
    WorkloadRow.min_available,
    WorkloadRow.priority,
    WorkloadRow.preemptible,
    WorkloadRow.cpu_milli,
    WorkloadRow.memory_mib,
    # As text, parsed here: a value that does not parse costs its row only.
    cast(WorkloadRow.node_selector, Text).label("node_selector"),
    WorkloadRow.started_at,
    WorkloadRow.origin,
    cast(WorkloadRow.tolerations, Text).label("tolerations"),
    WorkloadRow.min_runtime_s,
    WorkloadRow.pending_reason,  # not part of what the cache compares
)
"""The workload columns the snapshot reads, in the order of its rows (its change marker comes
after them)."""
_AT = {name: at for at, name in enumerate(select(*_READ).selected_columns.keys())}
_PROJECT_ID, _STATUS, _TASKS = _AT["project_id"], _AT["status"], _AT["tasks"]
_MIN_AVAILABLE, _ORIGIN = _AT["min_available"], _AT["origin"]
_REASON = len(_READ) - 1
assert _AT["pending_reason"] == _REASON, "the pending reason is read last"
_PENDING = WorkloadStatus.PENDING.value
_TaskKey = tuple[int, str, str, int | None]
"""A task row as read: task index, node, devices (JSON text), burst device."""

CHANGED_IN_ONE_QUERY: Final = 500
"""Changed workload rows read per query on SQLite (`id IN (...)`, a bound value each: SQLite
before 3.32 allows 999)."""
CHANGED_IN_ONE_QUERY_POSTGRESQL: Final = 20_000
"""The same on PostgreSQL, where the ids go as one array (`id = ANY(...)`)."""
FULL_READ_SHARE = 2
FULL_READ_ABOVE = 2000
"""With more than one row in `FULL_READ_SHARE` changed, and more than `FULL_READ_ABOVE` (a
burst of binds), every row is read at once: then reading rows by id costs as much as reading
them all in order (`benchmarks/server_cycle.py`)."""
FULL_READ_EVERY: Final = 60
"""Every this many snapshots the cache reads every row anyway, whatever the markers say: a
write that escaped the marker (a trigger dropped by hand) is seen within that many cycles."""
SQLITE_TRIGGERS: Final = ("workloads_changed", "tasks_inserted", "tasks_updated", "tasks_deleted")
"""Migration 0007's triggers, which keep `workloads.change_seq` moving on SQLite."""


class _Entry(NamedTuple):
    """What the last snapshot read of one scheduled workload row, and made of it."""

    values: tuple[object, ...]
    project: str
    placements: tuple[TaskPlacement, ...]
    workload: Workload | None
    """None: left out of this snapshot (stopping, on a lost node, a pod group still waiting for
    its pods, completing with nothing running, or a bad row)."""
    key: WorkloadKey | None
    reason: str | None
    """The pending reason stored in the row."""
    bad: str | None
    """Why the row cannot be scheduled (`BuiltSnapshot.bad`)."""


class SnapshotCache:
    """What the last snapshot read and made of each row, kept by the scheduling loop between
    cycles.

    A loaded server has 100,000 rows to give the core and all but a few are unchanged. With the
    cache, a snapshot reads each scheduled workload's id and change marker (a trigger-kept
    counter on SQLite, the row version's `xmin` on PostgreSQL, with its tasks' `xmin`), reads
    in full only the rows whose marker moved, and gives every other row's `Workload` as the
    object made before (the core's model is immutable). Every write counts, whoever makes it:
    the marker is kept by the database, not by the write paths; one exception on SQLite: a
    write of the pending reason alone, which the loop makes every cycle and tells the cache
    itself (`note_reasons`; one made by hand is read at the next full read). Rows read in full
    are still compared by value (`_Rows._entry`), so a row written without a change gives its
    old objects, and a task or node row that reads as last time is its `TaskPlacement` or
    `Node` of then.

    Every row is read when the nodes or projects changed (a workload's place in the snapshot
    depends on them), when many rows changed (`FULL_READ_ABOVE`), every `FULL_READ_EVERY`
    snapshots, and where the database keeps no marker (SQLite without migration 0007's
    triggers).
    """

    __slots__ = (
        "_bad",
        "_entries",
        "_keys",
        "_markers",
        "_node_names",
        "_nodes",
        "_placements",
        "_project_names",
        "_reads_since_full",
        "_reasons",
        "_task_marks",
        "_triggers",
        "_workloads",
        "last_read",
        "rows_read",
    )

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        """Per scheduled row id, in id order."""
        self._markers: dict[int, object] = {}
        """Per scheduled row id, its marker as read with its values."""
        self._task_marks: dict[int, _TaskMarks] = {}
        """PostgreSQL: per workload with live tasks, theirs as read with them."""
        self._workloads: tuple[Workload, ...] = ()
        self._keys: dict[str, WorkloadKey] = {}
        self._reasons: dict[str, str | None] = {}
        self._bad: dict[int, str] = {}
        self._placements: dict[_TaskKey, TaskPlacement] = {}
        self._nodes: dict[tuple[object, ...], Node] = {}
        self._node_names: tuple[str, ...] = ()
        self._project_names: dict[int, str] = {}
        self._reads_since_full = 0
        self._triggers: bool | None = None
        self.last_read = ""
        """How the last snapshot read the workloads: "all" or "changed"."""
        self.rows_read = 0
        """How many workload rows the last snapshot read in full."""

    def __len__(self) -> int:
        return len(self._entries)

    def _marker(self, connection: Connection) -> ColumnElement[Any] | None:
        """The workload rows' change marker on this database, or None."""
        dialect = connection.dialect.name
        if dialect == "postgresql":
            return literal_column("workloads.xmin::text")
        if dialect != "sqlite":
            return None
        if self._triggers is None:
            found = connection.execute(
                text("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            ).scalars()
            self._triggers = set(SQLITE_TRIGGERS) <= set(found)
        return WorkloadRow.__table__.c.change_seq if self._triggers else None

    def note_reasons(self, written: dict[int, str]) -> None:
        """The pending reasons the loop wrote (by workload id) after this cache's last read: on
        SQLite writing a reason alone does not move the row's marker, so the cache takes them
        from the loop. A row that was no longer pending when written (the write skips it) has
        a moved marker anyway and is read again."""
        entries = self._entries
        for row_id, reason in written.items():
            entry = entries.get(row_id)
            if entry is None or entry.workload is None or entry.reason == reason:
                continue
            entries[row_id] = entry._replace(reason=reason)
            if entry.values[_STATUS] == _PENDING:
                self._reasons[entry.workload.name] = reason

    def _assembled(self) -> _Assembled:
        """The snapshot's part from the workload rows, as copies (the next read changes these)."""
        return self._workloads, dict(self._keys), dict(self._bad), dict(self._reasons)


_TaskMarks = tuple[tuple[int, str], ...]
_TASK_MARKER: Final[ColumnElement[Any]] = literal_column("tasks.xmin::text")
_MARKER = _REASON + 1
"""Where a row read in full has its marker."""
_ABSENT: Final = object()
_NEW_TUPLE: Final = tuple.__new__
"""A named tuple made without its Python-level `__new__` (`_replace` costs several times more)."""
_LIVE: Final = frozenset(LIVE_TASKS)
_SCHEDULED: Final = frozenset(SCHEDULED)


_Assembled = tuple[
    tuple[Workload, ...], dict[str, WorkloadKey], dict[int, str], dict[str, str | None]
]


def read_workloads(
    connection: Connection,
    cache: SnapshotCache | None,
    node_names: dict[str, str],
    project_names: dict[int, str],
) -> _Assembled:
    """The snapshot's workloads, their rows' keys, the bad rows and the stored pending reasons;
    with `cache`, only the rows that changed since it last read are read in full. `node_names`:
    the snapshot's nodes (each name as its `Node` holds it), `project_names`: by project id."""
    reader = _Rows(connection, cache, node_names, project_names)
    return (reader.incremental and reader.changed()) or reader.all()


class _Tasks:
    """The live tasks of some workloads as read: placements, and which are left out."""

    __slots__ = ("live", "lost", "marks", "stopping")

    def __init__(self) -> None:
        self.live: dict[int, list[TaskPlacement]] = defaultdict(list)
        self.stopping: set[int] = set()
        self.lost: set[int] = set()
        """Workloads with tasks on nodes the snapshot lacks: left out until those tasks end."""
        self.marks: dict[int, list[tuple[int, str]]] = defaultdict(list)
        """PostgreSQL: per workload, (task id, xmin) of its live tasks."""

    def marks_of(self, workload_id: int) -> _TaskMarks:
        return tuple(sorted(self.marks.get(workload_id, ())))


class _Rows:
    """One snapshot's read of the workload rows: all of them, or the changed ones."""

    def __init__(
        self,
        connection: Connection,
        cache: SnapshotCache | None,
        node_names: dict[str, str],
        project_names: dict[int, str],
    ) -> None:
        self.connection = connection
        self.cache = cache
        self.node_names = node_names
        self.project_names = project_names
        marker = None if cache is None else cache._marker(connection)
        self.marker: ColumnElement[Any] = null() if marker is None else marker
        self.postgresql = connection.dialect.name == "postgresql"
        self.task_marks = self.postgresql and marker is not None
        """Whether tasks carry their own marker (PostgreSQL; SQLite's workload marker moves with
        its tasks)."""
        self.made_placements: dict[_TaskKey, TaskPlacement] = (
            {} if cache is None else cache._placements
        )
        self.kept_placements = self.made_placements
        """Where the placements read go: a full read keeps only those it read, a read of the
        changed rows adds to the last ones (pruned at the next full read)."""
        self.incremental = (
            cache is not None
            and marker is not None
            and bool(cache._entries)
            and cache._reads_since_full < FULL_READ_EVERY
            and cache._node_names == tuple(node_names)
            and cache._project_names == project_names
        )

    def all(self) -> _Assembled:
        """Every scheduled row, read in full."""
        self.kept_placements = {}
        tasks = self._tasks(None)
        entries: dict[int, _Entry] = {}
        markers: dict[int, object] = {}
        made = {} if self.cache is None else self.cache._entries
        workloads: list[Workload] = []
        keys: dict[str, WorkloadKey] = {}
        bad: dict[int, str] = {}
        reasons: dict[str, str | None] = {}
        entry_of = self._entry
        for row in self.connection.execute(
            select(*_READ, self.marker)
            .where(WorkloadRow.status.in_(SCHEDULED))
            .order_by(WorkloadRow.id)
        ).all():
            read = tuple(row)
            row_id: int = read[0]
            entry = entries[row_id] = entry_of(read, tasks, made.get(row_id))
            markers[row_id] = read[_MARKER]
            _add(row_id, entry, keys, bad, reasons)
            if entry.workload is not None:
                workloads.append(entry.workload)
        cache = self.cache
        if cache is None:
            return tuple(workloads), keys, bad, reasons
        cache._entries = entries
        cache._markers = markers
        cache._task_marks = {wid: tasks.marks_of(wid) for wid in tasks.marks}
        cache._workloads, cache._keys, cache._bad, cache._reasons = (
            tuple(workloads),
            keys,
            bad,
            reasons,
        )
        cache._placements = self.kept_placements
        cache._reads_since_full = 0
        cache.last_read = "all"
        cache.rows_read = len(entries)
        return cache._assembled()

    def changed(self) -> _Assembled | None:
        """Every scheduled row's marker read, and in full only the rows whose marker moved;
        None when too many did (`FULL_READ_ABOVE`)."""
        cache = self.cache
        assert cache is not None
        rows = self._plain(
            select(WorkloadRow.id, self.marker).where(WorkloadRow.status.in_(SCHEDULED))
        )
        last = cache._markers
        get = last.get
        # a comprehension over the rows: a set difference of (id, marker) pairs hashes them all
        changed = {row_id for row_id, marker in rows if get(row_id, _ABSENT) != marker}
        new = sum(1 for row_id in changed if row_id not in last)
        gone: set[int] = set()
        scheduled: dict[int, object] | None = None
        if len(rows) - new != len(last):  # some rows are no longer scheduled
            scheduled = dict(rows)  # made and compared in C: a set comprehension is 4x slower
            gone = set(last.keys() - scheduled.keys())
        if self.task_marks:
            by_workload: dict[int, list[tuple[int, str]]] = defaultdict(list)
            for workload_id, task_id, mark in self._plain(
                select(TaskRow.workload_id, TaskRow.id, _TASK_MARKER).where(
                    TaskRow.state.in_(LIVE_TASKS)
                )
            ):
                by_workload[workload_id].append((task_id, mark))
            task_marks = {wid: tuple(sorted(marks)) for wid, marks in by_workload.items()}
            moved = {wid for wid, _ in task_marks.items() ^ cache._task_marks.items()}
            if scheduled is None:
                scheduled = dict(rows)
            changed |= moved & scheduled.keys()  # scheduled ones' tasks moved
        cache._reads_since_full += 1
        cache.last_read = "changed"
        cache.rows_read = len(changed)
        if not changed and not gone:
            return cache._assembled()
        if len(changed) > FULL_READ_ABOVE and len(changed) * FULL_READ_SHARE > len(rows):
            return None
        entries = cache._entries
        for row_id in gone | changed:  # what the old rows gave goes first: names move
            self._forget(row_id, keep=row_id in changed)
        last_id = next(reversed(entries), -1)
        in_order = True
        ids = sorted(changed)
        step = CHANGED_IN_ONE_QUERY_POSTGRESQL if self.postgresql else CHANGED_IN_ONE_QUERY
        by_id = WorkloadRow.__table__.c.id
        for start in range(0, len(ids), step):
            chunk = ids[start : start + step]
            tasks = self._tasks(chunk)
            # by the key alone, the status checked here (as `_tasks` does the tasks' state)
            query = select(*_READ, self.marker).where(self._among(by_id, chunk))
            for row in self.connection.execute(query.order_by(by_id)).all():
                read = tuple(row)
                if read[_STATUS] not in _SCHEDULED:
                    continue
                row_id = read[0]
                old = entries.get(row_id)
                if old is None:
                    in_order = in_order and row_id > last_id
                    last_id = max(last_id, row_id)
                entry = entries[row_id] = self._entry(read, tasks, old)
                _add(row_id, entry, cache._keys, cache._bad, cache._reasons)
                cache._markers[row_id] = read[_MARKER]
                if self.task_marks:
                    marks = tasks.marks_of(row_id)
                    if marks:
                        cache._task_marks[row_id] = marks
                    else:
                        cache._task_marks.pop(row_id, None)
                changed.discard(row_id)
        for row_id in changed:  # no longer scheduled when read in full
            self._forget(row_id, keep=False)
        if not in_order:
            cache._entries = dict(sorted(entries.items()))
        cache._workloads = tuple(
            [entry.workload for entry in cache._entries.values() if entry.workload is not None]
        )
        return cache._assembled()

    def _forget(self, row_id: int, keep: bool) -> None:
        """Take what row `row_id` gave out of the assembled snapshot; `keep`: its entry (the row
        is read again and compared with it)."""
        cache = self.cache
        assert cache is not None
        entry = cache._entries.get(row_id)
        if entry is None:
            return
        if entry.workload is not None:
            name = entry.workload.name
            del cache._keys[name]
            cache._reasons.pop(name, None)
        cache._bad.pop(row_id, None)
        if not keep:
            del cache._entries[row_id]
            cache._markers.pop(row_id, None)
            cache._task_marks.pop(row_id, None)

    def _among(self, column: ColumnElement[int], ids: Sequence[int]) -> ColumnElement[bool]:
        """`column` is one of `ids`: one array on PostgreSQL (a bound value per id costs it
        more than the read), `IN (...)` elsewhere."""
        if self.postgresql:
            return column == any_(bindparam("ids", list(ids), type_=postgresql.ARRAY(Integer)))
        return column.in_(ids)

    def _plain(self, query: Select[Any]) -> list[Any]:
        """The rows of a narrow query as plain tuples from the driver's cursor: at 100,000 rows
        the result objects cost as much as the read."""
        sql = str(
            query.compile(dialect=self.connection.dialect, compile_kwargs={"literal_binds": True})
        )
        cursor = self.connection.connection.cursor()
        try:
            cursor.execute(sql)
            return list(cursor.fetchall())
        finally:
            cursor.close()

    def _tasks(self, workload_ids: Sequence[int] | None) -> _Tasks:
        """The live tasks of `workload_ids` (None: of every workload)."""
        tasks = _Tasks()
        made_placements = self.made_placements
        kept_placements = self.kept_placements
        node_names = self.node_names
        query = select(
            TaskRow.workload_id,
            TaskRow.task_index,
            TaskRow.node,
            # As text, parsed here and only when this task reads otherwise than last cycle.
            cast(TaskRow.devices, Text).label("devices"),
            TaskRow.burst_device,
            TaskRow.state,
            TaskRow.id,
            _TASK_MARKER if self.task_marks else null(),
        )
        # By the workloads' ids alone, the state checked here: with both, SQLite walks every live
        # task by the state's index for each group of ids.
        if workload_ids is None:
            query = query.where(TaskRow.state.in_(LIVE_TASKS))
        else:
            query = query.where(self._among(TaskRow.__table__.c.workload_id, workload_ids))
        live = tasks.live
        for (
            workload_id,
            task_index,
            node,
            devices_text,
            burst,
            state,
            task_id,
            mark,
        ) in self.connection.execute(query).all():
            if state not in _LIVE:
                continue
            if self.task_marks:
                tasks.marks[workload_id].append((task_id, mark))
            if state == _STOPPING:
                tasks.stopping.add(workload_id)
            elif node not in node_names:
                tasks.lost.add(workload_id)
            else:
                task_key = (task_index, node, devices_text, burst)
                placement = made_placements.get(task_key)
                if placement is None:
                    placement = placement_of(task_index, node_names[node], devices_text, burst)
                kept_placements[task_key] = placement
                live[workload_id].append(placement)
        return tasks

    def _entry(self, read: tuple[object, ...], tasks: _Tasks, last: _Entry | None) -> _Entry:
        """What one row read in full (its `_READ` columns and its marker) makes."""
        values = read[:_REASON]
        stored = read[_REASON]
        reason = stored if isinstance(stored, str) else None
        row_id: int = values[0]  # type: ignore[assignment]
        found = tasks.live.get(row_id)
        placements: tuple[TaskPlacement, ...] = ()
        if found is not None:
            if len(found) > 1:
                found.sort(key=task_index_of)
            placements = tuple(found)
        external = values[_ORIGIN] == "kubernetes"
        at_least = values[_MIN_AVAILABLE]
        completing = values[_STATUS] == _COMPLETING
        if (
            (not placements and row_id in tasks.stopping)
            or row_id in tasks.lost
            # a pod group that still waits for its pods
            or (external and at_least is not None and values[_TASKS] < at_least)  # type: ignore[operator]
            or (completing and not placements)
        ):
            return _Entry(values, "", (), None, None, None, None)
        project = self.project_names[values[_PROJECT_ID]]  # type: ignore[index]
        if (
            last is not None
            and last.workload is not None
            and last.values == values
            and last.project == project
            and last.placements == placements
        ):
            # not a new entry where nothing changed: what a cycle keeps is what changed
            if last.reason == reason:
                return last
            return _NEW_TUPLE(_Entry, (values, project, placements, last[3], last[4], reason, None))
        try:
            columns = checked_columns(_Mapping(read))
            workload = core_workload(columns, project, placements, completing=completing)
        except Exception as error:  # a bad row: left out, and failed by the loop
            message = str(error) if isinstance(error, BadRowError) else describe(error)
            return _Entry(values, "", (), None, None, None, message)
        key = WorkloadKey(
            row_id,
            values[_AT["version"]],  # type: ignore[arg-type]
            project,
            values[_AT["name"]],  # type: ignore[arg-type]
            external,
            values[_PROJECT_ID],  # type: ignore[arg-type]
            values[_STATUS],  # type: ignore[arg-type]
        )
        return _Entry(values, project, placements, workload, key, reason, None)


def _add(
    row_id: int,
    entry: _Entry,
    keys: dict[str, WorkloadKey],
    bad: dict[int, str],
    reasons: dict[str, str | None],
) -> None:
    """Put what one row gives into the assembled snapshot's dicts."""
    workload = entry.workload
    if workload is None:
        if entry.bad is not None:
            bad[row_id] = entry.bad
        return
    keys[workload.name] = entry.key  # type: ignore[assignment]
    if entry.values[_STATUS] == _PENDING:
        reasons[workload.name] = entry.reason


class _Mapping:
    """A row read by position, looked up by column name (`checked_columns`)."""

    __slots__ = ("_read",)

    def __init__(self, read: tuple[object, ...]) -> None:
        self._read = read

    def __getitem__(self, name: str) -> object:
        return self._read[_AT[name]]
