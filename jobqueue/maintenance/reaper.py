"""`Reaper`: keeps the worker registry true — silent workers are marked lost, old rows removed
(leader only).

Every worker process has a row in ``jobqueue.workers`` that it heartbeats (every third of its
lease; it records that interval as ``heartbeat_interval``). A worker that misses ``missed_beats``
beats in a row — killed, hung, cut off — is marked ``lost``; if it comes back, its next heartbeat
makes it ``running`` again. Its jobs need nothing from here: their leases run out and the sweeper
returns them to the queue. Its /metrics rows (``jobqueue.worker_stats``), silent for
``retire_stats_after``, are folded into the '(retired)' row, so totals only ever grow. Rows ``lost`` or ``stopped``
(clean shutdown) for longer than
``forget_after`` are deleted, so the registry shows recent history without growing forever.

Options (`ReaperOptions`, defaults): ``interval`` 10 s (in the runner: the sweep interval,
`JOBQUEUE_SWEEP_INTERVAL`, as both notice dead workers), ``missed_beats`` 3, ``forget_after`` 1 day,
``retire_stats_after`` 1 hour; and the ``clock``. A run returns `Reaped`: the workers marked lost
and the rows forgotten.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from jobqueue.db import gateway as db
from jobqueue.maintenance.base import Service, said
from jobqueue.runtime.clock import Clock
from jobqueue.store import metrics as metrics_store
from jobqueue.store import workers as worker_store

log = logging.getLogger("jobqueue.reaper")


@dataclass(frozen=True, slots=True)
class ReaperOptions:
    interval: float = 10.0
    missed_beats: float = 3.0
    forget_after: float = 86_400.0
    retire_stats_after: float = metrics_store.STALE_STATS_SECONDS


@dataclass(frozen=True, slots=True)
class Reaped:
    lost: int = 0  # workers newly marked lost
    forgotten: int = 0  # registry rows deleted, lost or stopped long enough

    @property
    def count(self) -> int:
        return self.lost + self.forgotten

    def describe(self) -> str:
        return said(
            (self.lost, "silent worker(s) marked lost"),
            (self.forgotten, "worker(s) stopped or lost long ago removed from the registry"),
            nothing="every registered worker heartbeats",
        )


class Reaper(Service[Reaped]):
    name = "reaper"

    def __init__(self, pool, options: ReaperOptions = ReaperOptions(), *, clock: Clock | None = None) -> None:
        super().__init__(interval=options.interval, clock=clock)
        self._pool = pool
        self.missed_beats = options.missed_beats
        self.forget_after = options.forget_after
        self.retire_stats_after = options.retire_stats_after

    async def run_once(self) -> Reaped:
        now = self.clock.db_now()  # heartbeats are the database's times: judged by its clock
        async with db.connection(self._pool) as conn:
            lost = await db.run(conn, worker_store.mark_lost(missed_beats=self.missed_beats, now=now))
            forgotten = await db.run(conn, worker_store.forget(forget_after=self.forget_after, now=now))
            # A crashed worker never folds its /metrics rows into '(retired)' itself.
            await db.run(
                conn,
                metrics_store.retire_worker_stats(worker_id=None, older_than_seconds=self.retire_stats_after, now=now),
            )
        for worker_id, last_heartbeat in lost:
            log.warning("worker %s lost: no heartbeat since %s", worker_id, last_heartbeat.isoformat())
        return Reaped(lost=len(lost), forgotten=forgotten)
