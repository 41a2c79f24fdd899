"""`Pruner`: deletes finished jobs once they are past their retention (leader only).

Finished means ``completed``, ``cancelled`` or ``dead_letter``. A job in ``failed`` is waiting for
its retry — live, like ``pending`` and ``processing`` — and is never pruned, so the SPEC's
"failed/cancelled: 7 days" applies to cancelled jobs; failures that finished are dead letters and
have their own retention. A pruned job's ``job_results`` and ``job_errors`` rows go with it, and
so does its idempotency key if it still holds one (a key never outlives its job: with a retention
shorter than the key's window, a repeat after the prune creates a new job).

Deletes run in bounded batches (``batch_size`` jobs per statement, each its own short
transaction, rows someone else holds skipped), so pruning a large backlog never holds long locks.
The fire history of cron schedules (``schedule_fires``) and the idempotency keys whose window has
closed (``idempotency_keys``; such a key is already free, the row is only dead weight) are pruned
the same way, and so are audit log entries past their retention — as the log's owner
(``jobqueue.prune_audit_log()``: no role may delete them), oldest first and only ever a prefix of
its hash chain, whose anchor moves with it so that what remains still verifies; they are kept at
least a day by the database's own clock, whatever the caller asks, and each prune that removed
some is an entry of its own (``audit.prune``).

Options (`PrunerOptions`, defaults): ``interval`` 60 s (`JOBQUEUE_PRUNE_INTERVAL`); ``retention``
per state — completed 30 days, cancelled 7, dead_letter 90 (`JOBQUEUE_RETENTION_COMPLETED_DAYS`,
`…_CANCELLED_DAYS`, `…_DEAD_LETTER_DAYS`; a state left out keeps its default), overridden per queue
by rows of ``jobqueue.queue_retention``; ``fire_history`` 7 days; ``audit_log`` 365 days
(`JOBQUEUE_RETENTION_AUDIT_DAYS`); ``batch_size`` 1000; and the ``clock``. A run returns `Pruned`:
the jobs, schedule fires, expired idempotency keys and audit entries deleted (the loop logs the jobs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Mapping

from jobqueue.db import gateway as db
from jobqueue.maintenance.base import Service, said
from jobqueue.runtime.clock import Clock
from jobqueue.store import audit as audit_store
from jobqueue.store import retention as retention_store
from jobqueue.store import schedules as schedule_store

DAY = 86_400.0
DEFAULT_RETENTION = {"completed": 30 * DAY, "cancelled": 7 * DAY, "dead_letter": 90 * DAY}


@dataclass(frozen=True, slots=True)
class PrunerOptions:
    interval: float = 60.0
    retention: Mapping[str, float] = field(default_factory=dict)  # seconds per finished state (over the defaults)
    fire_history: float = 7 * DAY
    audit_log: float = 365 * DAY  # seconds an audit entry is kept (at least a day; by the database's clock)
    batch_size: int = 1000

    def __post_init__(self) -> None:
        unknown = set(self.retention) - set(retention_store.FINISHED_STATES)
        if unknown:
            raise ValueError(
                f"retention is set per finished state ({', '.join(retention_store.FINISHED_STATES)}), "
                f"not {', '.join(sorted(unknown))}"
            )


@dataclass(frozen=True, slots=True)
class Pruned:
    jobs: int = 0  # finished jobs past their retention (their results, errors and keys with them)
    fires: int = 0  # schedule_fires rows older than the fire history
    keys: int = 0  # idempotency keys whose window has closed
    audit: int = 0  # audit log entries past their retention

    @property
    def count(self) -> int:
        return self.jobs

    def describe(self) -> str:
        return said(
            (self.jobs, "finished job(s) past their retention deleted"),
            (self.fires, "schedule fire(s) past the fire history deleted"),
            (self.keys, "expired idempotency key(s) deleted"),
            (self.audit, "audit log entries past their retention deleted"),
            nothing="nothing past its retention",
        )


class Pruner(Service[Pruned]):
    name = "pruner"

    def __init__(self, pool, options: PrunerOptions = PrunerOptions(), *, clock: Clock | None = None) -> None:
        super().__init__(interval=options.interval, clock=clock)
        self._pool = pool
        self.retention = {**DEFAULT_RETENTION, **options.retention}
        self.fire_history = options.fire_history
        self.audit_log = options.audit_log
        self.batch_size = options.batch_size

    async def run_once(self) -> Pruned:
        now = self.clock.now()
        jobs = 0
        for state, keep in self.retention.items():
            jobs += await self._drain(
                retention_store.prune_jobs, state=state, keep_seconds=keep, limit=self.batch_size, now=now
            )
        fires = await self._drain(
            schedule_store.prune_fires, before=now - timedelta(seconds=self.fire_history), limit=self.batch_size
        )
        keys = await self._drain(retention_store.prune_idempotency_keys, limit=self.batch_size, now=now)
        audit = await self._drain(audit_store.prune, keep=timedelta(seconds=self.audit_log), limit=self.batch_size)
        return Pruned(jobs=jobs, fires=fires, keys=keys, audit=audit)

    async def _drain(self, make_call, **params) -> int:
        """Run one batch after another until a batch comes back short."""
        total = 0
        while True:
            async with db.connection(self._pool) as conn:
                done = await db.run(conn, make_call(**params))
            total += done
            if done < self.batch_size:
                return total
