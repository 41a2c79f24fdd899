"""`Reindexer`: gives back the space the indexes of ``jobqueue.jobs`` keep after churn and pruning
(leader only).

A btree reuses the pages its deleted entries emptied but never returns them to the file: after a
1,000,000-job backlog was drained and pruned, the job table's indexes kept their peak size (172
MB against 19 MB at the start), and every claim walked the empty part of the claim index. River
rebuilds its indexes for the same reason (one had reached 4 GB against 35 MB rebuilt). Every
``interval`` this service measures each index of the table — the live-state ones (claim, lease,
expiry, retry wait) and the ones that grow with history (primary key, finished, dead letters) —
and rebuilds the one with the most space to win, with ``REINDEX INDEX CONCURRENTLY`` (claims,
acks and inserts go on), if rebuilt it would need at most 1/``factor`` of its file and give back
at least ``min_waste_mb``. One index per run: a rebuild writes a second copy of the index and
reads the whole table, so they go one after another, the next ``follow_up`` seconds after, until
none is left worth it.

How it measures: with ``pgstatindex()`` (the pgstattuple extension, which migration 0010 creates
where the server has it and the role may), how full the leaf pages really are; else an estimate
that can only err towards "healthy": the entries the last VACUUM/ANALYZE counted plus every row
changed since, times the key's width from ``pg_stats`` (``reltuples`` alone lies after a bulk load,
which once made this service rebuild a healthy 400,000-entry claim index). Either way it judges
the index after VACUUM has removed dead entries — the `Vacuumer` sees to it — since an entry not
yet vacuumed still fills its page.

When it does nothing: always, when its role may not REINDEX the table (`MaintainRight`: a worker
role before PostgreSQL 17); else while a transaction of this database has been open for more than
``max_xact_age`` seconds with a snapshot or a transaction id. ``REINDEX CONCURRENTLY`` (and the
``DROP INDEX CONCURRENTLY`` of a leftover) waits for every transaction older than it, holding a lock
on the table that keeps VACUUM away meanwhile: under a held snapshot a rebuild would stall and
bloat the table it is meant to shrink. It runs once such transactions are gone. A transaction that
starts after the check is waited for, however long it takes (no statement or lock timeout on the
rebuild's connection, as a big index takes long).

A rebuild that failed (cancelled, the server restarted, a timeout of a pooler) leaves an invalid
``<index>_ccnew`` or ``_ccold``, which PostgreSQL keeps updating on every write: each run drops
such leftovers first.

It runs on a connection of its own, opened for each run from ``session`` (``JOBQUEUE_DIRECT_DSN``
behind PgBouncer, where a rebuild works only on a direct connection; without one, through
PgBouncer, the role's own timeouts apply and a rebuild they cut is dropped and retried next run).

Options (`ReindexerOptions`, defaults): ``interval`` 600 s (`JOBQUEUE_REINDEX_INTERVAL`, 0 turns
the service off: the runner leaves it out); ``factor`` 2 (`JOBQUEUE_REINDEX_FACTOR`);
``min_waste_mb`` 10 (`JOBQUEUE_REINDEX_MIN_WASTE_MB`: smaller wins are not worth a rebuild);
``max_xact_age`` 10 s (`JOBQUEUE_MAINTENANCE_XACT_AGE`, shared with the `Vacuumer`); ``exact`` True
(False: the estimate even where pgstattuple is installed); ``follow_up`` 5 s; and the ``clock``. A
run returns `Reindexed`: the leftovers dropped and the index rebuilt, if any.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from jobqueue.db import gateway as db
from jobqueue.maintenance.base import Service
from jobqueue.maintenance.maintain_right import MaintainRight
from jobqueue.runtime.clock import Clock
from jobqueue.store import reindex as reindex_store
from jobqueue.store import vacuum as vacuum_store

log = logging.getLogger("jobqueue.reindexer")


@dataclass(frozen=True, slots=True)
class ReindexerOptions:
    interval: float = 600.0
    factor: float = 2.0
    min_waste_mb: float = 10.0
    max_xact_age: float = 10.0
    exact: bool = True
    follow_up: float = 5.0

    def __post_init__(self) -> None:
        if self.factor < 1 or self.min_waste_mb < 0 or self.max_xact_age < 0:
            raise ValueError(
                "the reindex factor must be at least 1, the minimum waste and transaction age not negative"
            )


@dataclass(frozen=True, slots=True)
class Reindexed:
    dropped: int = 0  # invalid leftovers of failed rebuilds dropped
    rebuilt: str | None = None  # the index rebuilt (None: none was worth it, or the run stood aside)

    @property
    def count(self) -> int:
        return self.dropped + (1 if self.rebuilt else 0)

    def describe(self) -> str:
        parts = [f"rebuilt index {self.rebuilt}"] if self.rebuilt else []
        if self.dropped:
            parts.append(f"dropped {self.dropped:,} invalid leftover(s) of failed rebuilds")
        return ", ".join(parts) or "no index worth rebuilding"


class Reindexer(Service[Reindexed]):
    name = "reindexer"

    def __init__(
        self, session: db.Session, options: ReindexerOptions = ReindexerOptions(), *, clock: Clock | None = None
    ) -> None:
        super().__init__(interval=options.interval, clock=clock)
        self._session = session.unbounded()
        self.factor = options.factor
        self.min_waste_mb = options.min_waste_mb
        self.max_xact_age = options.max_xact_age
        self.exact = options.exact
        self.follow_up = options.follow_up
        self._more = False
        self._right = MaintainRight(self.name)

    def next_delay(self) -> float:
        return min(self.follow_up, self.idle_delay()) if self._more else self.idle_delay()

    async def run_once(self) -> Reindexed:
        """Drop leftovers, then rebuild the most bloated index."""
        self._more = False
        async with await db.connect(self._session) as conn:
            if not await self._right.allowed(conn):
                return Reindexed()
            holder = await db.run(conn, vacuum_store.held_back(max_age=self.max_xact_age))
            if holder:
                log.info(
                    "not rebuilding: %s has been open for %.0f s and would stall a rebuild",
                    f"backend {holder.pid}" if holder.pid else "a prepared transaction",
                    holder.seconds,
                )
                return Reindexed()
            dropped = 0
            for leftover in await db.run(conn, reindex_store.leftovers()):
                log.warning("dropping %s, left by a rebuild that failed", leftover)
                await db.run(conn, reindex_store.drop_leftover(leftover))
                dropped += 1
            bloated = await self._measure(conn)
            if not bloated:
                return Reindexed(dropped=dropped)
            worst = bloated[0]
            log.info("rebuilding %s: %d pages, %d needed", worst.name, worst.file_pages, worst.needed_pages)
            await db.run(conn, reindex_store.rebuild(worst.name))
            self._more = len(bloated) > 1
            return Reindexed(dropped=dropped, rebuilt=worst.name)

    async def _measure(self, conn) -> list[reindex_store.Bloated]:
        """The bloated indexes, most space to win first; exactly where pgstattuple can be used."""
        async with conn.transaction():  # the search_path that finds pgstatindex() is this transaction's
            exact = self.exact and await db.run(conn, reindex_store.use_pgstattuple())
            return await db.run(
                conn, reindex_store.bloated(exact=exact, factor=self.factor, min_waste_mb=self.min_waste_mb)
            )
