"""Leader election with a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it.

Replicas race to write their name into one Lease. The holder renews it every `retry_period_s`;
a candidate takes it over only when the record it last saw has not changed for
`lease_duration_s`, measured on the candidate's own monotonic clock from when it saw that record
(remote timestamps are never compared with local ones). The holder believes it leads only while
its last successful renewal is younger than `renew_deadline_s` (less than the lease duration),
so a leader cut off from the API server stops acting before anyone else may start. A leader that
stops cleanly releases the lease, and a successor takes over at its next try.

Every write carries the resourceVersion it read, so two candidates never both win one round.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["KubeLeaseStore", "LeaderElector", "LeaseRecord", "LeaseStore", "MemoryLeaseStore"]


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    holder: str
    """Empty when released."""
    duration_s: int
    acquired_at: str
    renewed_at: str
    transitions: int
    version: str = ""
    """The resourceVersion it was read at (set by stores)."""


class LeaseStore(Protocol):
    """Where the lease lives. Writes carry the version read; a stale one loses (False)."""

    def get(self) -> LeaseRecord | None: ...

    def create(self, record: LeaseRecord) -> bool: ...

    def update(self, record: LeaseRecord) -> bool: ...


class MemoryLeaseStore:
    """A lease in memory, with the API server's optimistic concurrency: for tests."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self._versions = 0
        self.fail = False
        """When True, every call raises, as an unreachable API server would."""

    def get(self) -> LeaseRecord | None:
        self._check()
        return self.record

    def create(self, record: LeaseRecord) -> bool:
        self._check()
        if self.record is not None:
            return False
        self._versions += 1
        self.record = replace(record, version=str(self._versions))
        return True

    def update(self, record: LeaseRecord) -> bool:
        self._check()
        if self.record is None or self.record.version != record.version:
            return False
        self._versions += 1
        self.record = replace(record, version=str(self._versions))
        return True

    def _check(self) -> None:
        if self.fail:
            raise ConnectionError("the API server does not answer")


class KubeLeaseStore:
    """The Lease `name` in `namespace` (created, with the namespace if missing)."""

    def __init__(self, client: object, namespace: str, name: str) -> None:
        self._client = client
        self._namespace = namespace
        self._name = name

    def get(self) -> LeaseRecord | None:
        from lightkube.core.exceptions import ApiError
        from lightkube.resources.coordination_v1 import Lease

        try:
            lease = self._client.get(Lease, self._name, namespace=self._namespace)  # type: ignore[attr-defined]
        except ApiError as error:
            if error.status.code == 404:
                return None
            raise
        spec = lease.spec
        return LeaseRecord(
            holder=(spec.holderIdentity if spec else None) or "",
            duration_s=int((spec.leaseDurationSeconds if spec else None) or 0),
            acquired_at=str((spec.acquireTime if spec else None) or ""),
            renewed_at=str((spec.renewTime if spec else None) or ""),
            transitions=int((spec.leaseTransitions if spec else None) or 0),
            version=(lease.metadata.resourceVersion if lease.metadata else None) or "",
        )

    def create(self, record: LeaseRecord) -> bool:
        from lightkube.core.exceptions import ApiError
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Namespace

        try:
            self._client.create(self._lease(record))  # type: ignore[attr-defined]
        except ApiError as error:
            if error.status.code == 409:
                return False
            if error.status.code != 404:
                raise
            with contextlib.suppress(ApiError):
                self._client.create(Namespace(metadata=ObjectMeta(name=self._namespace)))  # type: ignore[attr-defined]
            return False
        return True

    def update(self, record: LeaseRecord) -> bool:
        from lightkube.core.exceptions import ApiError

        try:
            self._client.replace(self._lease(record))  # type: ignore[attr-defined]
        except ApiError as error:
            if error.status.code in (404, 409):
                return False
            raise
        return True

    def _lease(self, record: LeaseRecord) -> object:
        from lightkube.models.coordination_v1 import LeaseSpec
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.coordination_v1 import Lease

        return Lease(
            metadata=ObjectMeta(
                name=self._name,
                namespace=self._namespace,
                resourceVersion=record.version or None,
                labels={"app.kubernetes.io/managed-by": "gpupool"},
            ),
            spec=LeaseSpec(
                holderIdentity=record.holder or None,
                leaseDurationSeconds=record.duration_s,
                acquireTime=record.acquired_at or None,  # type: ignore[arg-type]
                renewTime=record.renewed_at or None,  # type: ignore[arg-type]
                leaseTransitions=record.transitions,
            ),
        )


def _now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """One replica's view of the election. `step()` is one try; `start()` tries on a thread."""

    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        *,
        lease_duration_s: float = 10.0,
        renew_deadline_s: float = 7.0,
        retry_period_s: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] = lambda leading: None,
        report: Callable[[str], None] = lambda message: None,
    ) -> None:
        if not retry_period_s < renew_deadline_s < lease_duration_s:
            raise ValueError("need retry period < renew deadline < lease duration")
        self.store = store
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self._monotonic = monotonic
        self._on_change = on_change
        self._report = report
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        self._leading = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def is_leader(self) -> bool:
        """True only while the last renewal is younger than the renew deadline."""
        with self._lock:
            return self._leading_now()

    def _leading_now(self) -> bool:
        renewed = self._renewed_at
        return renewed is not None and self._monotonic() - renewed < self.renew_deadline_s

    def step(self) -> bool:
        """Try to acquire or renew once; returns whether this replica leads now."""
        now = self._monotonic()
        try:
            won = self._try(now)
        except Exception as error:  # the API server may be restarting: keep trying
            self._report(f"leader election: {type(error).__name__}: {error}")
            won = False
        with self._lock:
            if won:
                self._renewed_at = now
            elif self._observed is not None and self._observed.holder not in ("", self.identity):
                self._renewed_at = None  # someone else holds it: we lost it, stop at once
            leading = self._leading_now()
            changed = leading != self._leading
            self._leading = leading
        if changed:
            self._report(
                f"leader election: {self.identity} "
                + ("leads now" if leading else "no longer leads")
            )
            self._on_change(leading)
        return leading

    def _try(self, now: float) -> bool:
        current = self.store.get()
        if current is None:
            stamp = _now_text()
            record = LeaseRecord(self.identity, round(self.lease_duration_s), stamp, stamp, 0)
            if self.store.create(record):
                self._observe(self.store.get(), now)
                return True
            return False
        if self._observed is None or _differs(current, self._observed):
            self._observe(current, now)
        held_by_other = current.holder not in ("", self.identity)
        if held_by_other and now - self._observed_at < self.lease_duration_s:
            return False
        stamp = _now_text()
        ours = current.holder == self.identity
        record = replace(
            current,
            holder=self.identity,
            duration_s=round(self.lease_duration_s),
            acquired_at=current.acquired_at if ours else stamp,
            renewed_at=stamp,
            transitions=current.transitions if ours else current.transitions + 1,
        )
        if not self.store.update(record):
            return False
        self._observe(self.store.get(), now)
        return True

    def _observe(self, record: LeaseRecord | None, now: float) -> None:
        self._observed = record
        self._observed_at = now

    def release(self) -> None:
        """Give the lease up at once (clean shutdown), if this replica holds it."""
        with self._lock:
            was_leading = self._leading
            self._leading = False
            self._renewed_at = None
        try:
            current = self.store.get()
            if current is not None and current.holder == self.identity:
                self.store.update(replace(current, holder="", duration_s=1))
        except Exception as error:
            self._report(f"leader election: could not release the lease: {error}")
        if was_leading:
            self._on_change(False)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpupool-leader", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if release:
            self.release()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self.retry_period_s)


def _differs(a: LeaseRecord, b: LeaseRecord) -> bool:
    return (a.holder, a.renewed_at, a.version) != (b.holder, b.renewed_at, b.version)
