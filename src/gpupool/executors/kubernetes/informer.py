"""List + watch caches of Kubernetes objects that survive API server restarts.

An `Informer` lists a kind, hands every object to its handler, then watches from the list's
resource version. When the watch fails (the API server restarts, the version is too old, the
network drops), it lists again after a short back-off and reports what changed in between as
events, deletions included: a handler sees every object's latest state and every deletion, even
across a gap. This is client-go's reflector, reduced to what gpupool needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

__all__ = ["ADDED", "DELETED", "MODIFIED", "Informer"]

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"

R = TypeVar("R")
Key = tuple[str, str]
Handler = Callable[[str, Any], None]


def object_key(obj: Any) -> Key:
    meta = obj.metadata
    return (meta.namespace or "", meta.name or "")


class Informer(Generic[R]):
    """One kind's cache. `handler(event, obj)` runs on the event loop's thread, in order."""

    def __init__(
        self,
        client: AsyncClient,
        resource: type[R],
        handler: Handler,
        *,
        name: str,
        fields: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        report: Callable[[str], None] = lambda message: None,
        max_backoff_s: float = 5.0,
    ) -> None:
        self._client = client
        self._resource = resource
        self._handler = handler
        self._fields = fields
        self._labels = labels
        self._report = report
        self._max_backoff_s = max_backoff_s
        self.name = name
        self.store: dict[Key, R] = {}
        self.synced = asyncio.Event()
        self.relists = 0
        """Full lists done: 1 after the start, one more after each gap."""

    async def run(self) -> None:
        """List and watch until cancelled."""
        backoff_s = 0.2
        failing = False
        while True:
            try:
                version = await self._relist()
                if failing:
                    self._report(f"{self.name}: the API server answers again; caches resynced")
                failing = False
                backoff_s = 0.2
                await self._watch(version)
            except asyncio.CancelledError:
                raise
            except ApiError as error:
                if error.status.code == 410:  # too old a version: list again at once
                    continue
                failing = self._failed(error, failing)
            except Exception as error:  # the connection broke; retry, never give up
                failing = self._failed(error, failing)
            await asyncio.sleep(backoff_s)
            backoff_s = min(self._max_backoff_s, backoff_s * 2)

    def _failed(self, error: BaseException, failing: bool) -> bool:
        if not failing:
            self._report(
                f"{self.name}: watch lost ({type(error).__name__}: {error}); retrying with back-off"
            )
        return True

    async def _relist(self) -> str:
        listing: Any = self._client.list(
            self._resource,
            namespace="*" if _namespaced(self._resource) else None,
            fields=self._fields,  # type: ignore[arg-type]
            labels=self._labels,  # type: ignore[arg-type]
            chunk_size=500,
        )
        fresh: dict[Key, R] = {}
        async for obj in listing:
            fresh[object_key(obj)] = obj
        version = str(listing.resourceVersion)
        gone = [key for key in self.store if key not in fresh]
        for key in gone:
            old = self.store.pop(key)
            self._handler(DELETED, old)
        for key, obj in fresh.items():
            event = MODIFIED if key in self.store else ADDED
            previous = self.store.get(key)
            self.store[key] = obj
            if previous is None or _version(previous) != _version(obj):
                self._handler(event, obj)
        self.relists += 1
        self.synced.set()
        return version

    async def _watch(self, version: str) -> None:
        stream: Any = self._client.watch(
            self._resource,
            namespace="*" if _namespaced(self._resource) else None,
            fields=self._fields,  # type: ignore[arg-type]
            labels=self._labels,  # type: ignore[arg-type]
            resource_version=version,
            server_timeout=300,
        )
        async for event, obj in stream:
            key = object_key(obj)
            if event == DELETED:
                self.store.pop(key, None)
            else:
                self.store[key] = obj
            self._handler(event, obj)


def _version(obj: Any) -> str | None:
    return obj.metadata.resourceVersion if obj.metadata is not None else None


def _namespaced(resource: type[Any]) -> bool:
    from lightkube.core import resource as res

    return issubclass(resource, res.NamespacedResource)
