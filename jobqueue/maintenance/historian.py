"""`Historian`: samples the throughput totals into a per-minute table for the dashboard (leader only).

The dashboard's chart used to know only what one open page had seen since it was loaded; a reload
lost it. Every ``interval`` the leader writes the running totals — jobs submitted (the jobs.seq
sequence), attempts processed and failed (the workers' summed counters) — into the row of the
current minute of ``jobqueue.throughput_history``; ``GET /dashboard/history`` turns consecutive
rows into rates. Sampling several times a minute (the last sample wins) keeps each minute's row
close to its end even when a tick is late. Rows older than ``keep`` are deleted in the same run:
the table stays at about 1,440 rows.

Options (`HistorianOptions`, defaults): ``interval`` 15 s (`JOBQUEUE_HISTORY_INTERVAL`, 0 turns it
off: the runner leaves the service out); ``keep`` one day; and the ``clock``. A run returns
`Sampled`: the minutes dropped (the sample itself is routine, not worth a log line every 15 s).
"""

from __future__ import annotations

from dataclasses import dataclass

from jobqueue.db import gateway as db
from jobqueue.maintenance.base import Service
from jobqueue.runtime.clock import Clock
from jobqueue.store import history as history_store

DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class HistorianOptions:
    interval: float = 15.0
    keep: float = DAY

    def __post_init__(self) -> None:
        if self.interval <= 0 or self.keep < 120:
            raise ValueError("the history interval must be positive and it must keep at least two minutes")


@dataclass(frozen=True, slots=True)
class Sampled:
    dropped: int = 0  # minutes older than ``keep`` deleted

    @property
    def count(self) -> int:
        return self.dropped

    def describe(self) -> str:
        return "sampled this minute's throughput" + (
            f", dropped {self.dropped:,} minute(s) past the history's span" if self.dropped else ""
        )


class Historian(Service[Sampled]):
    name = "historian"

    def __init__(self, pool, options: HistorianOptions = HistorianOptions(), *, clock: Clock | None = None) -> None:
        super().__init__(interval=options.interval, clock=clock)
        self._pool = pool
        self.keep = options.keep

    async def run_once(self) -> Sampled:
        """Write this minute's sample and drop expired minutes."""
        now = self.clock.db_now()  # minutes by the database's clock, as the dashboard reads them
        async with db.connection(self._pool) as conn:
            await db.run(conn, history_store.record(now=now))
            return Sampled(dropped=await db.run(conn, history_store.prune(keep_seconds=self.keep, now=now)))
