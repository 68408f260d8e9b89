"""Group commit for submissions: concurrent POSTs are written by one thread, many per
transaction, and each is answered only after its transaction committed.

A burst of submissions is the API's hardest load. Writes to SQLite are serialized anyway; doing
them on one thread, in batches, saves each request a thread hop, a transaction of its own and
the contention of many threads for one write lock, and on PostgreSQL most of the round trips:
a batch is two reads and two multi-row inserts. A bad submission (a name taken) fails alone.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from gpupool.api.schemas import WorkloadIn, WorkloadOut
from gpupool.clock import Clock
from gpupool.server.auth import Principal
from gpupool.server.errors import ApiError, conflict
from gpupool.server.services import workloads


@dataclass(frozen=True, slots=True)
class _Request:
    body: WorkloadIn
    who: Principal
    future: asyncio.Future[WorkloadOut]
    loop: asyncio.AbstractEventLoop


class SubmitBatcher:
    def __init__(
        self,
        writer: sessionmaker[Session],
        clock: Clock,
        on_commit: Callable[[], None],
        max_batch: int = 256,
    ) -> None:
        self._writer = writer
        self._clock = clock
        self._on_commit = on_commit
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="gpupool-submit", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    async def submit(self, body: WorkloadIn, who: Principal) -> WorkloadOut:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[WorkloadOut] = loop.create_future()
        self._queue.put(_Request(body, who, future, loop))
        return await future

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stopping = False
            while len(batch) < self._max_batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                batch.append(more)
            self._write(batch)
            if stopping:
                return

    def _write(self, batch: list[_Request]) -> None:
        outcomes: list[WorkloadOut | BaseException]
        try:
            outcomes = list(self._commit(batch))
        except IntegrityError:
            # Another writer took a name meanwhile: each on its own, to find which.
            outcomes = []
            for request in batch:
                try:
                    outcomes.extend(self._commit([request]))
                except IntegrityError:
                    outcomes.append(
                        conflict(
                            f"project {request.body.project!r} already has a workload named "
                            f"{request.body.name!r}: pick another name",
                            "name",
                        )
                    )
                except Exception as error:
                    outcomes.append(error)
        except Exception as error:  # nothing in this batch was stored: say so to each
            outcomes = [error] * len(batch)
        for request, outcome in zip(batch, outcomes, strict=True):
            request.loop.call_soon_threadsafe(_settle, request.future, outcome)

    def _commit(self, batch: list[_Request]) -> list[WorkloadOut | ApiError]:
        with self._writer.begin() as session:
            now = self._clock.now_s()
            outcomes = workloads.submit_many(
                session, [(request.body, request.who) for request in batch], now
            )
        self._on_commit()
        return outcomes


def _settle(future: asyncio.Future[WorkloadOut], outcome: WorkloadOut | BaseException) -> None:
    if future.cancelled():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
