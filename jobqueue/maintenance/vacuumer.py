"""`Vacuumer`: vacuums ``jobqueue.jobs`` when dead row versions pile up and autovacuum has not got
to them (leader only).

Every claim and ack leaves a dead row version and the pruner deletes finished jobs by the
thousand; until VACUUM runs, their space in the heap cannot be reused, their index entries stay in
front of every claim, and the visibility map is not set. The table's own autovacuum settings
(scale factor 0.01, no cost delay) ask for it early, but autovacuum naps a minute between rounds,
its workers may be busy elsewhere, and a 1,000,000-job drain once saw it run not at all. So every
``interval`` this service checks the table's statistics and runs ``VACUUM (SKIP_LOCKED, ANALYZE)``
when at least ``min_dead`` dead row versions, and ``dead_fraction`` of the live rows, are waiting
and no vacuum is running on the table (so autovacuum, when it is on time, leaves it nothing to
do). ANALYZE as well, so the planner and the `Reindexer`'s estimate see the table as it is after a
drain or a prune.

It does nothing while a transaction of this database has been open for more than
``max_xact_age`` seconds with a snapshot or a transaction id: VACUUM could remove nothing that
transaction may still see, and would read the whole table for nothing.

The VACUUM runs on a connection of its own from ``session`` without a statement timeout (on a big
table it takes longer than the maintenance pool's statements may); it blocks no claim, ack or
insert (it truncates the file's empty tail only when it gets that lock at once).

A role that may not VACUUM the table (`MaintainRight`: a worker role before PostgreSQL 17) leaves
it to autovacuum.

Options (`VacuumerOptions`, defaults): ``interval`` 60 s (`JOBQUEUE_VACUUM_INTERVAL`, 0 turns the
service off: the runner leaves it out); ``min_dead`` 50,000 (`JOBQUEUE_VACUUM_MIN_DEAD`);
``dead_fraction`` 0.2; ``max_xact_age`` 10 s (`JOBQUEUE_MAINTENANCE_XACT_AGE`, shared with the
`Reindexer`); and the ``clock``. A run returns `Vacuumed`: whether it vacuumed, and the dead row
versions it found due.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from jobqueue.db import gateway as db
from jobqueue.maintenance.base import Service
from jobqueue.maintenance.maintain_right import MaintainRight
from jobqueue.runtime.clock import Clock
from jobqueue.store import vacuum as vacuum_store

log = logging.getLogger("jobqueue.vacuumer")


DEFAULT_MIN_DEAD = 50_000


@dataclass(frozen=True, slots=True)
class VacuumerOptions:
    interval: float = 60.0
    min_dead: int = DEFAULT_MIN_DEAD
    dead_fraction: float = 0.2
    max_xact_age: float = 10.0

    def __post_init__(self) -> None:
        if self.min_dead < 0 or self.dead_fraction < 0 or self.max_xact_age < 0:
            raise ValueError("the vacuumer's minimum dead rows, dead fraction and transaction age must not be negative")


@dataclass(frozen=True, slots=True)
class Vacuumed:
    vacuumed: bool = False
    dead_rows: int = 0  # dead row versions found due (0: not due, or the role may not vacuum)

    @property
    def count(self) -> int:
        return 1 if self.vacuumed else 0

    def describe(self) -> str:
        if self.vacuumed:
            return f"vacuumed jobqueue.jobs ({self.dead_rows:,} dead row versions)"
        if self.dead_rows:
            return f"not vacuumed: {self.dead_rows:,} dead row versions wait (held back, or the table was locked)"
        return "jobqueue.jobs needs no vacuum"


class Vacuumer(Service[Vacuumed]):
    name = "vacuumer"

    def __init__(
        self, pool, session: db.Session, options: VacuumerOptions = VacuumerOptions(), *, clock: Clock | None = None
    ) -> None:
        super().__init__(interval=options.interval, clock=clock)
        self._pool = pool
        self._session = session.unbounded()
        self.min_dead = options.min_dead
        self.dead_fraction = options.dead_fraction
        self.max_xact_age = options.max_xact_age
        self._right = MaintainRight(self.name)

    async def run_once(self) -> Vacuumed:
        """VACUUM the job table if it is due."""
        async with db.connection(self._pool) as conn:
            if not await self._right.allowed(conn):
                return Vacuumed()
            dead = await db.run(conn, vacuum_store.jobs_due(min_dead=self.min_dead, dead_fraction=self.dead_fraction))
            if dead is None:
                return Vacuumed()
            holder = await db.run(conn, vacuum_store.held_back(max_age=self.max_xact_age))
        if holder:
            log.info(
                "not vacuuming %d dead rows: %s has been open for %.0f s and still sees them",
                dead,
                f"backend {holder.pid}" if holder.pid else "a prepared transaction",
                holder.seconds,
            )
            return Vacuumed(dead_rows=dead)
        log.info("vacuuming jobqueue.jobs: %d dead row versions", dead)
        skipped: list[str] = []
        async with await db.connect(self._session) as conn:
            conn.add_notice_handler(
                lambda notice: (
                    skipped.append(notice.message_primary or "")
                    if (notice.message_primary or "").startswith("skipping vacuum")
                    else None
                )
            )
            await db.run(conn, vacuum_store.vacuum_jobs())
        if skipped:  # SKIP_LOCKED: someone holds the table's lock (a rebuild, a VACUUM started meanwhile)
            log.info("vacuum skipped: %s", skipped[0])
            return Vacuumed(dead_rows=dead)
        return Vacuumed(vacuumed=True, dead_rows=dead)
