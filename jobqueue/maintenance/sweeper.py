"""`Sweeper`: returns jobs whose lease expired to the queue (every maintenance process, not only the leader).

A worker that dies or hangs stops heartbeating, so its jobs' `locked_until` passes; a handler that
runs past its attempt's deadline stops having its lease extended, so it passes too. Each tick the
sweeper moves such jobs back to `pending` (to `dead_letter` when that was their last attempt, to
`cancelled` when their cancel was requested), records the lost attempt as a `LeaseExpired` or
`JobTimeout` error, and NOTIFYs idle workers. It also dead-letters jobs still waiting past their
`expires_at` (reason `expired`; the claim never starts them). Work is bounded per statement
(`batch_size`) so a mass expiry never holds long locks.

A row someone else holds locked (an operator's SELECT … FOR UPDATE, a cancel in a caller's open
transaction) is skipped while the lock lasts. Its worker's renewals pass it over too, so when the
lock outlived the lease, the lease has run out only because of the lock: while that worker beats
its registry row and lists the job in ``leases_blocked`` (what its last renewal could not lock),
the sweeper leaves the lease to it, and the worker's next renewal extends it.

It runs in every process that runs maintenance, not only on the elected leader: a sweep is one
probe of the lease index and concurrent sweepers skip each other's rows (SKIP LOCKED), so running
it everywhere costs little — and a crashed worker's jobs come back within lease + interval, never
waiting for a new leader to be elected when the crashed worker was the leader.

After an outage it gives the workers one lease before it reclaims anything. When PostgreSQL
restarts, fails over or cannot be reached, no worker can renew its leases either, and an outage
longer than the time a lease had left (a crash recovery on a loaded machine easily is) would
otherwise have every job in flight reclaimed — an attempt burned, a finished job's ack refused —
by the first sweep after it, before the heartbeats and acks waiting in the workers reach the
database. So when a sweep cannot reach the database, or finds it started since the last sweep
(``pg_postmaster_start_time()``: a restart, or another server behind the DSN after a failover),
expired leases are left alone for ``lease_seconds`` after the database is back: a live worker
renews its leases within a third of that, and a dead one's jobs come back one lease later than
usual. Jobs that expire while waiting are dead-lettered as usual meanwhile.

Options (`SweeperOptions`): ``interval`` seconds between sweeps (default 5,
`JOBQUEUE_SWEEP_INTERVAL`), ``batch_size`` jobs per statement (default 1000), ``lease_seconds`` the
grace after an outage (the workers' lease, default 30, `JOBQUEUE_LEASE_SECONDS`); and the
``clock``. A run returns `Swept`: the leases reclaimed and the waiting jobs expired.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable

from jobqueue.db import gateway as db
from jobqueue.maintenance.base import Service, said
from jobqueue.model.errors import DatabaseUnavailable
from jobqueue.runtime.clock import Clock
from jobqueue.store import jobs as job_store
from jobqueue.store import meta as meta_store

log = logging.getLogger("jobqueue.sweeper")


@dataclass(frozen=True, slots=True)
class SweeperOptions:
    interval: float = 5.0
    batch_size: int = 1000
    lease_seconds: float = 30.0


@dataclass(frozen=True, slots=True)
class Swept:
    reclaimed: int = 0  # jobs whose lease had expired, back to pending (or dead_letter, cancelled)
    expired: int = 0  # jobs still waiting past their expires_at, dead-lettered

    @property
    def count(self) -> int:
        return self.reclaimed + self.expired

    def describe(self) -> str:
        return said(
            (self.reclaimed, "job(s) whose lease expired taken back (a dead or hung worker's)"),
            (self.expired, "waiting job(s) dead-lettered past their expires_at"),
            nothing="no expired lease, no job waiting past its expires_at",
        )


class Sweeper(Service[Swept]):
    name = "sweeper"
    leader_only = False

    def __init__(self, pool, options: SweeperOptions = SweeperOptions(), *, clock: Clock | None = None) -> None:
        super().__init__(interval=options.interval, clock=clock)
        self._pool = pool
        self.batch_size = options.batch_size
        self.lease_seconds = options.lease_seconds
        self._server_started: datetime | None = None
        self._outage = False  # a sweep could not reach the database since the last one that did
        self.holding_until: datetime | None = None  # no lease is reclaimed before then

    async def run_once(self) -> Swept:
        try:
            return await self._sweep()
        except DatabaseUnavailable:
            self._outage = True
            raise

    async def _sweep(self) -> Swept:
        reclaimed = []
        if not await self._holding():
            reclaimed = await self._in_batches(lambda: job_store.reclaim_expired(limit=self.batch_size))
        for job_id, state, lost_by in reclaimed:
            log.warning("job %s: lease of %s expired -> %s", job_id, lost_by, state)
        expired = await self._in_batches(lambda: job_store.expire_waiting(limit=self.batch_size))
        if expired:
            log.warning("%d jobs expired before they started -> dead_letter", len(expired))
        return Swept(reclaimed=len(reclaimed), expired=len(expired))

    async def _holding(self) -> bool:
        """Whether expired leases wait: within one lease of the end of an outage."""
        async with db.connection(self._pool) as conn:
            started = await db.run(conn, meta_store.server_started())
        restarted = self._server_started is not None and started != self._server_started
        self._server_started = started
        now = self.clock.now()
        if self._outage or restarted:
            self._outage = False
            self.holding_until = now + timedelta(seconds=self.lease_seconds)
            log.warning(
                "the database %s: expired leases are not reclaimed for %g s, so that live workers renew theirs first",
                "restarted" if restarted else "is reachable again",
                self.lease_seconds,
            )
        return self.holding_until is not None and now < self.holding_until

    async def _in_batches(self, call: Callable[[], db.Call[list]]) -> list:
        """Runs ``call()`` until a batch comes back short; what every batch returned."""
        rows: list = []
        while True:
            async with db.connection(self._pool) as conn:
                batch = await db.run(conn, call())
            rows += batch
            if len(batch) < self.batch_size:
                return rows
