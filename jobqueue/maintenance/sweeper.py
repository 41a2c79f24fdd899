"""`Sweeper`: returns jobs whose lease expired to the queue (every maintenance process, not only the leader).

A worker that dies or hangs stops heartbeating, so its jobs' `locked_until` passes; a handler that
runs past its attempt's deadline stops having its lease extended, so it passes too. Each tick the
sweeper moves such jobs back to `pending` (to `dead_letter` when that was their last attempt, to
`cancelled` when their cancel was requested), records the lost attempt as a `LeaseExpired` or
`JobTimeout` error, and NOTIFYs idle workers. It also dead-letters jobs still waiting past their
`expires_at` (reason `expired`; the claim never starts them). Work is bounded per statement
(`batch_size`) so a mass expiry never holds long locks.

It runs in every process that runs maintenance, not only on the elected leader: a sweep is one
probe of the lease index and concurrent sweepers skip each other's rows (SKIP LOCKED), so running
it everywhere costs little — and a crashed worker's jobs come back within lease + interval, never
waiting for a new leader to be elected when the crashed worker was the leader.

Options: ``interval`` seconds between sweeps (default 5, `JOBQUEUE_SWEEP_INTERVAL`),
``batch_size`` jobs per statement (default 1000).
"""

from __future__ import annotations

import logging
from typing import Callable

from jobqueue import db
from jobqueue.maintenance.base import Service
from jobqueue.store import jobs as job_store

log = logging.getLogger("jobqueue.sweeper")


class Sweeper(Service):
    name = "sweeper"
    leader_only = False

    def __init__(self, pool, *, interval: float = 5.0, batch_size: int = 1000) -> None:
        super().__init__(interval=interval)
        self._pool = pool
        self.batch_size = batch_size

    async def run_once(self) -> int:
        reclaimed = await self._in_batches(lambda: job_store.reclaim_expired(limit=self.batch_size))
        for job_id, state, lost_by in reclaimed:
            log.warning("job %s: lease of %s expired -> %s", job_id, lost_by, state)
        expired = await self._in_batches(lambda: job_store.expire_waiting(limit=self.batch_size))
        if expired:
            log.warning("%d jobs expired before they started -> dead_letter", len(expired))
        return len(reclaimed) + len(expired)

    async def _in_batches(self, call: Callable[[], db.Call[list]]) -> list:
        """Runs ``call()`` until a batch comes back short; what every batch returned."""
        rows: list = []
        while True:
            async with db.connection(self._pool) as conn:
                batch = await db.run(conn, call())
            rows += batch
            if len(batch) < self.batch_size:
                return rows
