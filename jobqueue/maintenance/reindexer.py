"""`Reindexer`: rebuilds the live-state indexes of ``jobqueue.jobs`` once churn has bloated them
(leader only).

Every job enters the claim index (and, while it runs or waits for a retry, the lease and retry
indexes) and leaves it again; btree pages emptied that way are reused but never returned, so after
a burst or a long-held snapshot an index can stay many times larger than the live jobs it holds,
and every claim walks that dead space. River rebuilds its indexes for the same reason (one had
reached 4 GB against 35 MB rebuilt). This service checks the four live-state indexes every
``interval`` and rebuilds, with ``REINDEX INDEX CONCURRENTLY`` (claims and inserts go on), those
whose file is ``factor`` times what their entries need and at least ``min_pages`` pages. A rebuild
that failed before (timeout, cancel) leaves an invalid ``<index>_ccnew``; it is dropped first.

The check runs on the maintenance pool; drops and rebuilds on a connection of their own, opened
for them from ``session`` without a statement or lock timeout: a rebuild of a big index takes
long, and ``REINDEX CONCURRENTLY`` waits for every transaction older than it, which is no harm
(claims and inserts go on) and must not be cut after ``JOBQUEUE_LOCK_TIMEOUT``. Behind PgBouncer
that connection goes to ``JOBQUEUE_DIRECT_DSN``; without one, through PgBouncer, the role's own
timeouts apply (a rebuild they cut is retried next interval, its leftover dropped first).

Options (defaults): ``interval`` 3600 s (`JOBQUEUE_REINDEX_INTERVAL`, 0 turns the service off),
``factor`` 4, ``min_pages`` 1280 (10 MB: smaller indexes cost nothing worth a rebuild), ``clock``.
"""

from __future__ import annotations

import logging

from jobqueue import db
from jobqueue.clock import Clock
from jobqueue.maintenance.base import Service
from jobqueue.store import reindex as reindex_store

log = logging.getLogger("jobqueue.reindexer")


class Reindexer(Service):
    name = "reindexer"

    def __init__(self, pool, session: db.Session, *, interval: float = 3600.0, factor: float = 4.0,
                 min_pages: int = 1280, clock: Clock | None = None) -> None:
        super().__init__(interval=interval, clock=clock)
        self._pool = pool
        self._session = session.unbounded()
        self.factor = factor
        self.min_pages = min_pages

    async def run_once(self) -> int:
        async with db.connection(self._pool) as conn:
            bloated = await db.run(conn, reindex_store.bloated(factor=self.factor, min_pages=self.min_pages))
        if bloated:
            async with await db.connect(self._session) as conn:
                for index in bloated:
                    log.info("rebuilding %s: its file is over %gx what its entries need", index, self.factor)
                    for drop in reindex_store.drop_leftovers(index):
                        await db.run(conn, drop)
                    await db.run(conn, reindex_store.rebuild(index))
        return len(bloated)
