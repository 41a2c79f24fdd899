"""Heartbeat: extends the leases of the attempts this worker holds and keeps its registry row fresh.

Runs every third of the lease, so two beats can be missed before the sweeper reclaims a job. A
lease is never extended past its attempt's deadline (plus ``deadline_grace``), so a handler that
hangs cannot keep its job forever. The lease update also reports attempts this worker no longer
holds (reclaimed after a stall: their late ack may be refused) and cancel requests that a missed
NOTIFY did not deliver. Attempts are (job id, attempt) pairs: a job reclaimed from this worker and
claimed by it again is two attempts.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Callable

from jobqueue import db
from jobqueue.errors import DatabaseUnavailable
from jobqueue.store import jobs as job_store
from jobqueue.store import workers as worker_store
from jobqueue.store.jobs import Attempt

log = logging.getLogger("jobqueue.worker.heartbeat")


class Heartbeat:
    def __init__(self, pool, worker_id: str, lease_seconds: float, *,
                 held: Callable[[], list[Attempt]],
                 on_cancel_requested: Callable[[uuid.UUID], None],
                 on_lease_lost: Callable[[Attempt], None],
                 counters: Callable[[], tuple[int, int]],  # running totals (processed, failed)
                 status: Callable[[], str],
                 stuck_handlers: Callable[[], int] = lambda: 0,
                 deadline_grace: float | None = None) -> None:
        self._pool = pool
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.interval = lease_seconds / 3
        self.deadline_grace = self.interval if deadline_grace is None else deadline_grace
        self._held = held
        self._on_cancel_requested = on_cancel_requested
        self._on_lease_lost = on_lease_lost
        self._counters = counters
        self._status = status
        self._stuck_handlers = stuck_handlers
        self._reported = (0, 0)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.beat()
            except DatabaseUnavailable as exc:
                log.warning("heartbeat failed: %s", exc)

    async def beat(self) -> None:
        attempts = self._held()
        totals = self._counters()
        processed, failed = totals[0] - self._reported[0], totals[1] - self._reported[1]
        async with db.connection(self._pool) as conn:
            if attempts:
                held = await db.run(conn, job_store.extend_leases(
                    worker_id=self.worker_id, attempts=attempts, lease_seconds=self.lease_seconds,
                    deadline_grace=self.deadline_grace))
                for attempt in attempts:
                    if attempt not in held:
                        self._on_lease_lost(attempt)
                    elif held[attempt]:
                        self._on_cancel_requested(attempt[0])
            await db.run(conn, worker_store.heartbeat(
                worker_id=self.worker_id, status=self._status(), processed=processed, failed=failed,
                stuck_handlers=self._stuck_handlers()))
        self._reported = totals
