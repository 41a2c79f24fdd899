"""Heartbeat: extends the leases of the attempts this worker holds and keeps its registry row fresh.

Both run every third of the lease, so two beats can be missed before the sweeper reclaims a job,
each in a loop of its own with a fixed cadence: a beat is due every ``interval`` from the start,
however long the last one took (one that overran is followed at once by the next, not by a full
interval more), and a statement that hangs holds up its own loop only. A lease is never extended
past its attempt's deadline (plus ``deadline_grace``), so a handler that hangs cannot keep its job
forever. The lease update also reports attempts this worker no longer holds (reclaimed after a
stall: their late ack may be refused) and cancel requests that a missed NOTIFY did not deliver.
Attempts are (job id, attempt) pairs: a job reclaimed from this worker and claimed by it again is
two attempts.

One locked row does not stall the rest: the renewal passes over a row another transaction holds
locked (an operator's SELECT … FOR UPDATE, a cancel inside a caller's open transaction) instead of
waiting for it, renews the others, and tries that one again at the next beat. Such a row is not a
lost lease; the registry beat lists it (``blocked``), and the sweeper leaves its lease alone while
this worker beats, however long the lock outlived the lease (see job_reclaim_expired).

What it reads of the worker is two narrow views: the attempts it holds (`Holder`, the worker's
`HeldAttempts`), to which it also reports what a renewal says of them, and what the registry row
shows (`RegistryStatus`, the worker's `WorkerStatus`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Awaitable, Callable, Protocol

from jobqueue.db import gateway as db
from jobqueue.model.errors import DatabaseUnavailable
from jobqueue.store import jobs as job_store
from jobqueue.store import workers as worker_store
from jobqueue.store.jobs import Attempt

log = logging.getLogger("jobqueue.worker.heartbeat")


def beat_interval(lease_seconds: float) -> float:
    """Seconds between beats: a third of the lease, so two can be missed before it runs out."""
    return lease_seconds / 3


class Holder(Protocol):
    """The attempts a worker holds, and what their renewal reports back."""

    def held(self) -> list[Attempt]: ...

    def cancel_requested(self, job_id: uuid.UUID) -> None: ...

    def lease_lost(self, attempt: Attempt) -> None: ...


class RegistryStatus(Protocol):
    """What the registry beat writes: running totals, ``running`` or ``stopping``, stuck handlers."""

    @property
    def processed(self) -> int: ...

    @property
    def failed(self) -> int: ...

    @property
    def state(self) -> str: ...

    @property
    def stuck_handlers(self) -> int: ...


class Heartbeat:
    def __init__(
        self,
        pool,
        worker_id: str,
        lease_seconds: float,
        *,
        attempts: Holder,
        status: RegistryStatus,
        deadline_grace: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.interval = beat_interval(lease_seconds)
        self.deadline_grace = self.interval if deadline_grace is None else deadline_grace
        self._attempts = attempts
        self._status = status
        self._clock = clock
        self._reported = (0, 0)
        #: jobs whose lease the last renewal passed over because another transaction held them locked
        self.blocked: frozenset[uuid.UUID] = frozenset()

    async def run(self) -> None:
        await asyncio.gather(self._every(self.renew, "lease renewal"), self._every(self.beat_registry, "heartbeat"))

    async def _every(self, beat: Callable[[], Awaitable[None]], what: str) -> None:
        due = self._clock() + self.interval
        while True:
            await asyncio.sleep(max(due - self._clock(), 0.0))
            try:
                await beat()
            except DatabaseUnavailable as exc:
                log.warning("%s failed: %s", what, exc)
            due = max(due + self.interval, self._clock())  # late: the next one at once, then on the beat

    async def beat(self) -> None:
        """One renewal and one registry beat (each its own statement), one after the other."""
        await self.renew()
        await self.beat_registry()

    async def renew(self) -> None:
        attempts = self._attempts.held()
        if not attempts:
            self.blocked = frozenset()
            return
        async with db.connection(self._pool) as conn:
            renewed = await db.run(
                conn,
                job_store.extend_leases(
                    worker_id=self.worker_id,
                    attempts=attempts,
                    lease_seconds=self.lease_seconds,
                    deadline_grace=self.deadline_grace,
                ),
            )
        if renewed.busy != self.blocked and renewed.busy:
            log.info(
                "%d leases not renewed this time: another transaction holds their rows locked (jobs %s)",
                len(renewed.busy),
                ", ".join(str(job_id) for job_id in sorted(renewed.busy)),
            )
        self.blocked = renewed.busy
        for attempt in attempts:
            if attempt in renewed.written:
                if renewed.written[attempt]:
                    self._attempts.cancel_requested(attempt[0])
            elif attempt[0] not in renewed.busy:
                self._attempts.lease_lost(attempt)

    async def beat_registry(self) -> None:
        totals = (self._status.processed, self._status.failed)
        processed, failed = totals[0] - self._reported[0], totals[1] - self._reported[1]
        async with db.connection(self._pool) as conn:
            await db.run(
                conn,
                worker_store.heartbeat(
                    worker_id=self.worker_id,
                    status=self._status.state,
                    processed=processed,
                    failed=failed,
                    stuck_handlers=self._status.stuck_handlers,
                    leases_blocked=sorted(self.blocked),
                ),
            )
        self._reported = totals
