"""`Historian`: samples the throughput totals into a per-minute table for the dashboard (leader only).

The dashboard's chart used to know only what one open page had seen since it was loaded; a reload
lost it. Every ``interval`` the leader writes the running totals — jobs submitted (the jobs.seq
sequence), attempts processed and failed (the workers' summed counters) — into the row of the
current minute of ``jobqueue.throughput_history``; ``GET /dashboard/history`` turns consecutive
rows into rates. Sampling several times a minute (the last sample wins) keeps each minute's row
close to its end even when a tick is late. Rows older than ``keep`` are deleted in the same run:
the table stays at about 1,440 rows.

Options (defaults): ``interval`` 15 s (`JOBQUEUE_HISTORY_INTERVAL`, 0 turns it off); ``keep``
one day; ``clock``.
"""

from __future__ import annotations

from jobqueue.db import gateway as db
from jobqueue.maintenance.base import Service
from jobqueue.runtime.clock import Clock
from jobqueue.store import history as history_store

DAY = 86_400.0


class Historian(Service):
    name = "historian"

    def __init__(self, pool, *, interval: float = 15.0, keep: float = DAY, clock: Clock | None = None) -> None:
        if interval <= 0 or keep < 120:
            raise ValueError("the history interval must be positive and it must keep at least two minutes")
        super().__init__(interval=interval, clock=clock)
        self._pool = pool
        self.keep = keep

    async def run_once(self) -> int:
        """Write this minute's sample and drop expired minutes; returns how many rows were dropped
        (the sample itself is routine, not worth a log line every 15 s)."""
        now = self.clock.db_now()  # minutes by the database's clock, as the dashboard reads them
        async with db.connection(self._pool) as conn:
            await db.run(conn, history_store.record(now=now))
            return await db.run(conn, history_store.prune(keep_seconds=self.keep, now=now))
