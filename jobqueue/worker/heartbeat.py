"""Heartbeat: extends the leases of the jobs this worker holds and keeps its registry row fresh.

Runs every third of the lease, so two beats can be missed before the sweeper reclaims a job.
The lease update also reports jobs this worker no longer holds (reclaimed after a stall: their
late ack will be refused) and cancel requests that a missed NOTIFY did not deliver.
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

log = logging.getLogger("jobqueue.worker.heartbeat")


class Heartbeat:
    def __init__(self, pool, worker_id: str, lease_seconds: float, *,
                 held_ids: Callable[[], list[uuid.UUID]],
                 on_cancel_requested: Callable[[uuid.UUID], None],
                 on_lease_lost: Callable[[uuid.UUID], None],
                 counters: Callable[[], tuple[int, int]],  # running totals (processed, failed)
                 status: Callable[[], str]) -> None:
        self._pool = pool
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.interval = lease_seconds / 3
        self._held_ids = held_ids
        self._on_cancel_requested = on_cancel_requested
        self._on_lease_lost = on_lease_lost
        self._counters = counters
        self._status = status
        self._reported = (0, 0)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.beat()
            except DatabaseUnavailable as exc:
                log.warning("heartbeat failed: %s", exc)

    async def beat(self) -> None:
        ids = self._held_ids()
        totals = self._counters()
        processed, failed = totals[0] - self._reported[0], totals[1] - self._reported[1]
        async with db.connection(self._pool) as conn:
            if ids:
                held = await db.run(conn, job_store.extend_leases(
                    worker_id=self.worker_id, ids=ids, lease_seconds=self.lease_seconds))
                for job_id in ids:
                    if job_id not in held:
                        self._on_lease_lost(job_id)
                    elif held[job_id]:
                        self._on_cancel_requested(job_id)
            await db.run(conn, worker_store.heartbeat(
                worker_id=self.worker_id, status=self._status(), processed=processed, failed=failed))
        self._reported = totals
