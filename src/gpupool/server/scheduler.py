"""The scheduling loop: snapshot from the database -> the core -> decisions persisted -> executor.

One iteration (`run_once`):

1. **Exits.** Launches the executor reports as ended are written down (task done; workload
   completed, failed, requeued or removed), then acknowledged to the executor.
2. **Cycle.** A snapshot is read in one transaction and `run_cycle` decides. The decisions are
   written in one transaction, each only if its workload's `version` is still the one decided on
   (a user may have suspended or deleted it meanwhile): a bind adds task rows in state
   `starting` with a new launch id; an eviction or move marks tasks `stopping`.
3. **Dispatch.** Stopping tasks are stopped; starting tasks are started once nothing that is
   stopping still holds their devices or their task, then marked `running`.

Every step is safe to repeat: the database says what should happen, launch ids make starts
idempotent, and exits stay reported until acknowledged. So after a crash anywhere, the next
iteration finishes the work and starts nothing twice.

This module is the loop and one iteration's order; the rooms it calls on: `snapshot` (rows ->
the core's snapshot), `persist` (a cycle's decisions written), `launches` (stop and start),
`exits` (tasks that ended, lost tasks, deleted workloads), `history` and `usage` (what was
used), `isolation` and `quarantine` (a bad row or launch fails its workload only).
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from gpupool.clock import Clock
from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import CycleResult, EvictionCause, ProjectShare
from gpupool.core.model import SchedulerSettings, Snapshot
from gpupool.executors.base import DiscoversWorkloads, Executor, NodeInventory
from gpupool.gcpause import collector_paused
from gpupool.server import exits, external, history, isolation, persist, quarantine, usage
from gpupool.server.db import NodeRow, ProjectRow
from gpupool.server.dbfaults import Backoff, is_outage
from gpupool.server.launches import Launches
from gpupool.server.metrics import ServerMetrics
from gpupool.server.quarantine import describe
from gpupool.server.services import cluster
from gpupool.server.snapshot import BuiltSnapshot, SnapshotCache, build_snapshot

USAGE_WRITE_S = 15.0
"""How often the loop writes the usage rows it folded (and when a minute is over): at 10,000
nodes a write is about 140,000 rows, which were written every 5 s before."""
MAX_UNWRITTEN_USAGE_ROWS = 1_000_000
"""Usage rows kept in memory while the database refuses them (about 150 bytes each): past
this the oldest minutes are dropped. At 10,000 nodes a minute is about 140,000 rows."""

_MAX_REST_S = 0.5


@dataclass(frozen=True, slots=True)
class CycleInfo:
    at_s: float
    duration_s: float
    decisions: int


class SchedulingLoop:
    """Runs `run_once` on a thread: at least every `interval_s`, sooner when woken."""

    def __init__(
        self,
        writer: sessionmaker[Session],
        executor: Executor,
        clock: Clock,
        settings: SchedulerSettings,
        metrics: ServerMetrics,
        interval_s: float = 1.0,
        min_gap_s: float = 0.05,
        on_error: Callable[[BaseException], None] | None = None,
        reader: sessionmaker[Session] | None = None,
        is_leader: Callable[[], bool] | None = None,
        announce: Callable[[str], None] | None = None,
    ) -> None:
        self._writer = writer
        self._reader = reader or writer
        self._executor = executor
        self._clock = clock
        self._settings = settings
        self._metrics = metrics
        self._interval_s = interval_s
        self._min_gap_s = min_gap_s
        self._on_error = on_error
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.shares: dict[str, ProjectShare] = {}
        self.last_cycle: CycleInfo | None = None
        self.iterations = 0
        self._registered: tuple[NodeInventory, ...] = ()
        self._is_leader = is_leader
        self._leading = is_leader is None
        """With leader election, iterations run only while this replica leads; each time it
        starts leading it first takes over (nodes, recovery) as at a start."""
        self.history = history.HistoryRecorder()
        self._outcome: tuple[CycleResult, Snapshot] | None = None
        """The last cycle's result and snapshot: the history's next step reads their facts
        (`CycleFacts`), made only when a step is due (every 5 s), not after every cycle (about
        30 ms at 10,000 nodes)."""
        self._facts: history.CycleFacts | None = None
        """`_outcome`'s facts, once made."""
        self._announce = announce or (lambda message: None)
        self._launches = Launches(writer, executor, clock, self._announce)
        self._backoff = Backoff()
        self._snapshot_cache = SnapshotCache()
        """What the last snapshot made of each row (`SnapshotCache`): most rows read the same
        from one cycle to the next."""
        self._reasons = persist.ReasonLedger()
        """When each waiting workload's reason's numbers come due again (refreshed within a
        minute), and what the last write wrote."""
        self.last_iteration_s: float | None = None
        """When (clock time) the last iteration completed: what `/ready` looks at."""
        self.last_error: str | None = None
        """The last iteration's error, None once one succeeds."""
        self._recording_errors: dict[str, str] = {}
        """Per part ("usage", "history"): why its last write failed (`recording_error`)."""
        self._usage = usage.UsageFold()
        """The usage rows not written yet (`_write_usage`)."""
        self._usage_written_s = -math.inf
        """When (clock time) every folded row was last written."""

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._is_leader is None:
            self.take_over()
        self._thread = threading.Thread(target=self._run, name="gpupool-scheduler", daemon=True)
        self._thread.start()

    def take_over(self) -> None:
        """What a scheduler does before its first iteration: its nodes, and its tasks that
        the executor no longer knows (lost while nobody scheduled)."""
        self._launches.forget_stops()
        self._registered = tuple(self._executor.inventory())
        self.register_nodes(self._registered)
        self.recover()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            if not self._thread.is_alive():
                try:
                    self._write_usage(everything=True)
                    self._write_history(everything=True)
                except Exception as error:  # shutting down: report it, lose one minute
                    if self._on_error is not None:
                        self._on_error(error)

    def _write_history(self, everything: bool = False) -> bool:
        """Write the history minutes that are over (`everything`: the current one too, at
        shutdown); whether there were any. On a failure they stay in memory and are written
        with the next ones."""
        now = self._clock.now_s()
        minutes = self.history.unwritten() if everything else self.history.complete(now)
        if not minutes:
            return False
        with self.history.writing(minutes), self._writer.begin() as session:
            history.write(session, minutes, now)
        return True

    def _may_run(self) -> bool:
        """Without leader election: always. With it: while leading, after taking over."""
        if self._is_leader is None:
            return True
        leading = self._is_leader()
        if leading and not self._leading:
            self.take_over()
        self._leading = leading
        return leading

    def wake(self) -> None:
        self._wake.set()

    @property
    def thread_alive(self) -> bool | None:
        """None when the loop was never started (an API-only server)."""
        return None if self._thread is None else self._thread.is_alive()

    @property
    def standing_by(self) -> bool:
        """With leader election, while another replica schedules."""
        return self._is_leader is not None and not self._leading

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                if not self._may_run():
                    self._stop.wait(0.2)
                    continue
                self.run_once()
                if self._backoff.failures:
                    self._announce(
                        f"the database answers again: resumed after {self._backoff.failures} "
                        "failed iteration(s)"
                    )
                self._backoff.reset()
                self.last_error = None
            except Exception as error:  # the loop must outlive one bad iteration
                self.last_error = describe(error)
                if self._on_error is not None:
                    self._on_error(error)
                if is_outage(error):  # the database is away: wait longer each time, capped
                    self._stop.wait(self._backoff.next_s())
                    continue
            took = time.monotonic() - began
            # Rest as long as the iteration took (up to a bound): under a burst of submissions
            # the loop gets about half of the interpreter and each cycle takes a bigger batch,
            # while the work that arrived meanwhile waits at most `_MAX_REST_S` more.
            self._stop.wait(min(_MAX_REST_S, max(self._min_gap_s, took)))
            self._wake.wait(timeout=max(0.0, self._interval_s - took))
            self._wake.clear()

    # -- one iteration -----------------------------------------------------------------------

    def run_once(self) -> None:
        self.collect_exits()
        self.follow_executor()
        self.remove_deleted()
        self.cycle()
        self.dispatch()
        self.collect_exits()
        self.record_usage()
        self.iterations += 1
        self.last_iteration_s = self._clock.now_s()

    def record_usage(self) -> None:
        """Fold the executor's device samples into the per-minute usage rows (per workload),
        and record a step of the history store when one is due; write the minutes that are
        over. A write the database refuses is reported (`recording_error`), and its minutes
        wait in memory. The
        collector is paused for it, as for the cycle: at 10,000 nodes a step makes a few
        hundred thousand short-lived objects (charges, device points, rows), and the passes
        they set off walk the loop's snapshot cache (`benchmarks/server_recording.py`)."""
        with collector_paused():
            self._record_usage()

    def _record_usage(self) -> None:
        samples = self._executor.usage_samples()
        self.history.observe(samples)
        now = self._clock.now_s()
        outcome = self._outcome
        facts = None  # the last cycle's, when a history step is due
        if outcome is not None and self.history.due(now):
            if self._facts is None:
                self._facts = history.CycleFacts.of(*outcome)
            facts = self._facts
        step = None
        if samples or facts is not None:
            # One read of who holds what, for both: at 10,000 nodes 45,000 tasks' charges.
            with self._reader() as session, session.begin():
                held = cluster.charges(session)
                if facts is not None:
                    fresh = self.history.fresh_samples(now)
                    step = history.read_step(session, now, facts, fresh, held)
            if samples:
                self._usage.add(samples, held)
        if step is not None:
            self.history.add(step)
            self._metrics.observe_use(self.history.recent())
        writes = (("usage", self._write_usage), ("history", self._write_history))
        for part, write in writes[: 2 if step is not None else 1]:
            try:
                wrote = write()
            except Exception as error:
                if is_outage(error):
                    raise
                # A write the database refuses (a value out of its range, a constraint) must
                # not fail every iteration from then on: `/ready` would take the server out.
                if part not in self._recording_errors and self._on_error is not None:
                    self._on_error(error)
                self._recording_errors[part] = describe(error)
            else:
                if wrote:
                    self._recording_errors.pop(part, None)

    @property
    def recording_error(self) -> str | None:
        """Why the last write of the usage rows or of the history store failed (each until one
        of its writes succeeds), None when neither did: reported once, and the iteration
        completes (the minutes stay in memory and are written with the next)."""
        errors = self._recording_errors
        return "; ".join(f"{part}: {why}" for part, why in errors.items()) if errors else None

    def _write_usage(self, everything: bool = False) -> bool:
        """Write the usage minutes that are over, and everything folded once `USAGE_WRITE_S`
        passed since the last such write (`everything`: now, at shutdown): a row is added to
        in the database at most every 15 s, and `top` is at most that far behind. On a failure
        the rows stay in memory, the oldest minutes dropped past `MAX_UNWRITTEN_USAGE_ROWS`."""
        fold = self._usage
        if not len(fold):
            return False
        now = self._clock.now_s()
        if everything or not now - USAGE_WRITE_S < self._usage_written_s <= now:
            before = math.inf
        else:
            before = history.bucket_of(now, usage.BUCKET_S)
        rows = fold.rows(before)
        if not rows:
            return False
        try:
            with self._writer.begin() as session:
                usage.write(session, rows, now)
        except Exception:
            fold.trim(MAX_UNWRITTEN_USAGE_ROWS)
            raise
        fold.written(before)
        if before == math.inf:
            self._usage_written_s = now
        return True

    def follow_executor(self) -> None:
        """Nodes that came, went or changed (Kubernetes), and pods someone else created for
        gpupool: written down before the cycle reads them."""
        nodes = tuple(self._executor.inventory())
        if nodes != self._registered:
            self.register_nodes(nodes)
            self._registered = nodes
        if isinstance(self._executor, DiscoversWorkloads):
            now = self._clock.now_s()
            with self._writer.begin() as session:
                projects = session.scalars(select(ProjectRow.name)).all()
                self._executor.set_projects(projects)
                external.sync(session, self._executor.external_pods(), now)
                reasons = external.waiting_reasons(session, now)
            self._executor.set_waiting_reasons(reasons)

    def register_nodes(self, nodes: Sequence[NodeInventory]) -> None:
        """Record the executor's nodes and devices; its nodes no longer reported go down."""
        now = self._clock.now_s()
        with self._writer.begin() as session:
            known = {
                row.name: row
                for row in session.scalars(
                    select(NodeRow).where(NodeRow.executor == self._executor.name)
                )
            }
            for node in nodes:
                known.pop(node.name, None)
                cluster.register(session, node, self._executor.name, now)
            for row in known.values():
                row.state = "down"

    def collect_exits(self) -> None:
        """Write down the executor's exits (`exits.collect`)."""
        self._launches.collect_exits()

    def recover(self) -> None:
        """After a restart: tasks the executor never heard of are lost (`exits.recover`)."""
        exits.recover(self._writer, self._executor, self._clock)

    def remove_deleted(self) -> None:
        """Remove deleted workloads whose tasks have stopped (`exits.remove_deleted`)."""
        exits.remove_deleted(self._writer, self._clock)

    def dispatch(self) -> None:
        """Stop what should stop, then start what may start (`launches.Launches`)."""
        self._launches.dispatch()

    def cycle(self) -> CycleResult:
        """One cycle: snapshot, core, writes. The collector is paused for all of it, not only
        for the core: the snapshot and the writes allocate a few hundred thousand objects at
        10,000 nodes on top of the loop's long-lived ones (the snapshot cache), and its passes
        during them cost as much as the snapshot itself (`benchmarks/server_cycle.py`). What
        they leave in reference cycles is collected once after."""
        with collector_paused():
            return self._cycle()

    def _cycle(self) -> CycleResult:
        began = time.perf_counter()
        now = self._clock.now_s()
        with self._reader() as session, session.begin():
            built = build_snapshot(session, now, self._settings, self._snapshot_cache)
        # A workload whose row or decisions break a step is failed; the others go on.
        result, snapshot, culprits = isolation.run_isolated(built.snapshot, run_cycle)
        problems = dict(built.bad)
        problems.update({built.keys[name].workload_id: why for name, why in culprits.items()})
        try:
            counts = self._persist(built, result, now)
        except Exception as error:
            if is_outage(error):
                raise
            counts, failed = isolation.persist_apart(
                lambda part: self._persist(built, part, now), result
            )
            counts = defaultdict(int, counts)
            problems.update({built.keys[name].workload_id: why for name, why in failed.items()})
        if problems:
            quarantine.fail_each(self._writer, problems, now, self._announce)
        duration_s = time.perf_counter() - began
        self.shares = {share.name: share for share in result.projects}
        self.last_cycle = CycleInfo(now, duration_s, len(result.decisions))
        self._outcome = (result, snapshot)
        self._facts = None
        capacity = sum(node.gpu_count for node in snapshot.nodes)
        self._metrics.observe_cycle(result, duration_s, float(capacity))
        for kind in ("bind", "evict", "move"):
            self._metrics.count_decisions(kind, counts[kind])
        for cause in EvictionCause:
            self._metrics.count_evictions(cause.value, counts[cause.value])
        return result

    def _persist(self, built: BuiltSnapshot, result: CycleResult, now: float) -> dict[str, int]:
        """Write the cycle's decisions (`persist.write`): one seam, so that a test can change a
        workload between the snapshot and the write."""
        counts = persist.write(self._writer, built, result, now, self._reasons)
        self._snapshot_cache.note_reasons(self._reasons.written)  # committed
        return counts
