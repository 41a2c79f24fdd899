"""`Claimer`: what one worker's claim statements are — which query, where a claim resumes, and how
an uncertain claim is reconciled. The claim loop (`worker.Worker`) decides when to claim.

- Strict priorities on one queue (the usual case): `job_claim` resuming, per priority level, just
  past the last job this worker claimed there while its claims keep filling up — with a backlog,
  what lies behind is taken already, and skipping it skips its dead index entries. It scans from
  the start whenever a claim did not fill, or ``RESUME_FOR`` has passed (a job put back behind the
  mark — a reclaimed lease, a late commit with an old ``run_at`` — waits at most that long).
- Several queues: `job_claim` from the start. Weighted priorities: `job_claim_weighted` with
  slots drawn by weight, then a strict fill-up claim for slots a level could not use.
- Every claim sets each attempt's deadline and lease from `Deadlines`, takes only the job types
  in ``served`` (those the app has handlers for: another app's jobs in the same queue stay pending,
  no attempt used) and skips ``blocked`` ones (those of open circuit breakers); `claim_probe` takes
  one job of a half-open breaker's types. When the head of a queue's level is a job this worker
  may not take (another app's backlog, a type nobody serves), the claim goes by type past it
  (see job_claim), so what lies in front costs it nothing.
- Global limits (`jobqueue.limits`): while ``limits.active``, `claim_limited` claims in one
  transaction that first locks and reads what each limit allows (``limit_allowances``), then
  claims per `LimitPlan` (strict priority order within each statement, no resume points, weights
  not applied), then records the rate-limited starts. ``recheck_in`` says when a spent limit may
  have room again. Without limits every claim is the statement it always was. An attempt claimed
  under a limit holds one of its slots until its ack is written: the worker tells the claimer so
  (`acked`), which says whether a limit's slot came free (the worker then claims again at once).
- `reconcile()`, after a claim whose outcome is unknown (the connection dropped, maybe after the
  commit): attempts the database says this worker holds but that it does not know of were claimed
  by the lost statement and never started; they go back uncounted.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Callable, Sequence

from jobqueue.config import WorkerSettings
from jobqueue.db import gateway as db
from jobqueue.model.jobs import Job
from jobqueue.store import jobs as job_store
from jobqueue.store import limits as limit_store
from jobqueue.store.jobs import Attempt, Deadlines
from jobqueue.worker.limit_plan import LimitPlan
from jobqueue.worker.limit_watch import LimitWatch
from jobqueue.worker.priorities import draw_slots

log = logging.getLogger("jobqueue.worker")

#: How long claims resume after the last job they took before one scans from the start again.
RESUME_FOR = 1.0


class Claimer:
    def __init__(
        self,
        pool,
        worker_id: str,
        settings: WorkerSettings,
        deadlines: Deadlines,
        limits: LimitWatch | None = None,
        *,
        served: Sequence[str] | None,
    ) -> None:
        self._pool = pool
        #: the job types this worker has handlers for: the only ones its claims take (None: any
        #: type — for tests of the claim itself; a worker always gives its app's)
        self.served = None if served is None else sorted(served)
        self.limits = limits
        #: after a limited claim: seconds until a limit it found spent may have room (None: none was)
        self.recheck_in: float | None = None
        self._limited: set[Attempt] = set()  # claimed under a limit, not acked yet: each holds a slot
        self.worker_id = worker_id
        self.settings = settings
        self.deadlines = deadlines
        self.last_claim_at = time.monotonic()
        self._resume: list = []  # per level: the order key the next one-queue claim resumes after
        self._resume_queue = ""
        self._resume_until = 0.0
        self._rng = random.Random()

    async def claim(self, queues: Sequence[str], free: int, blocked: Sequence[str] = ()) -> list[Job]:
        """Up to ``free`` jobs of ``queues`` (none when there are no queues to claim from), none of
        the ``blocked`` job types."""
        if not queues:
            return []
        self.last_claim_at = time.monotonic()
        self.recheck_in = None
        if self.limits is not None and self.limits.active:
            return await self.claim_limited(queues, free, blocked)
        if self.settings.priority_mode == "weighted":
            return await self._claim_weighted(queues, free, blocked)
        if len(queues) == 1:
            return await self._claim_resuming(queues[0], free, blocked)
        return await self._run(
            job_store.claim(
                worker_id=self.worker_id,
                queues=queues,
                limit=free,
                lease_seconds=self.settings.lease_seconds,
                deadlines=self.deadlines,
                blocked=blocked,
                served=self.served,
            )
        )

    async def claim_limited(self, queues: Sequence[str], free: int, blocked: Sequence[str] = ()) -> list[Job]:
        """Up to ``free`` jobs, within every limit that applies to ``queues``, in one transaction."""
        async with db.connection(self._pool) as conn, conn.transaction():
            return await self._claim_within_limits(conn, queues, free, blocked)

    async def _claim_within_limits(
        self, conn, queues: Sequence[str], free: int, blocked: Sequence[str], only: Sequence[str] | None = None
    ) -> list[Job]:
        """In the caller's transaction: what `LimitPlan` allows (of ``only`` these job types, if given)."""
        jobs: list[Job] = []
        plan = LimitPlan(await db.run(conn, limit_store.allowances(queues)), queues, free, blocked)
        for group, queue in plan.groups():
            budget = plan.budget(queue)
            rest: list[Job] = []
            typed_types = plan.typed(budget)
            rest_only = None if only is None else [t for t in only if t not in typed_types]
            if budget > 0 and rest_only != []:
                rest = await db.run(
                    conn,
                    self._claim_call(
                        group, budget, plan.rest_blocked(budget), only=rest_only, limited=plan.rest_marks(queue, budget)
                    ),
                )
            horizon = plan.horizon(rest, budget)
            typed: list[Job] = []
            for job_type in typed_types:
                room = plan.typed_room(job_type, budget - len(typed)) if only is None or job_type in only else 0
                if room > 0:
                    taken = await db.run(
                        conn, self._claim_call(group, room, blocked, only=[job_type], limited=True, until=horizon)
                    )
                    plan.took(taken, queue)
                    typed += taken
            excess = len(rest) + len(typed) - budget
            if excess > 0:  # limited jobs in front of the others' last ones: those go back
                back, rest = rest[-excess:], rest[:-excess]
                await db.run(conn, job_store.release_each(worker_id=self.worker_id, attempts=[j.key for j in back]))
            plan.took(rest, queue)
            jobs += typed + rest
        if any(plan.started.values()):
            await db.run(conn, limit_store.record_starts(plan.started))
        self.recheck_in = plan.recheck_in()
        self._limited.update(job.key for job in jobs if plan.holds_slot(job))
        return jobs

    def _claim_call(
        self,
        queues: Sequence[str],
        limit: int,
        blocked: Sequence[str],
        *,
        limited: bool,
        only: Sequence[str] | None = None,
        until: tuple[int, tuple | None] = (3, None),
    ) -> db.Call[list[Job]]:
        return job_store.claim(
            worker_id=self.worker_id,
            queues=queues,
            limit=limit,
            lease_seconds=self.settings.lease_seconds,
            deadlines=self.deadlines,
            blocked=blocked,
            only=only,
            limited=limited,
            until=until,
            served=self.served,
        )

    async def claim_probe(self, conn, queues: Sequence[str], job_types: Sequence[str]) -> list[Job]:
        """One job of ``job_types`` (a half-open circuit's probe), on ``conn``: in the transaction
        that made the circuit half-open, so that it rolls back when there is none."""
        if self.limits is not None and self.limits.active:  # the probe job is held to its limits too
            return await self._claim_within_limits(conn, queues, 1, (), only=job_types)
        return await db.run(
            conn,
            job_store.claim(
                worker_id=self.worker_id,
                queues=queues,
                limit=1,
                lease_seconds=self.settings.lease_seconds,
                deadlines=self.deadlines,
                only=job_types,
                served=self.served,
            ),
        )

    async def _claim_resuming(self, queue: str, free: int, blocked: Sequence[str]) -> list[Job]:
        resuming = time.monotonic() < self._resume_until and self._resume_queue == queue
        resume = self._resume if resuming else ()
        jobs = await self._run(
            job_store.claim(
                worker_id=self.worker_id,
                queues=[queue],
                limit=free,
                lease_seconds=self.settings.lease_seconds,
                deadlines=self.deadlines,
                resume=resume,
                blocked=blocked,
                served=self.served,
            )
        )
        if len(jobs) < free:
            self._resume_until = 0.0
            return jobs
        points = list(resume) or [None] * 4
        for job in jobs:  # in claim order: the last one of each level is where it resumes
            points[job.priority] = job.order_key
        if not resuming:
            self._resume_until = time.monotonic() + RESUME_FOR
        self._resume, self._resume_queue = points, queue
        return jobs

    async def _claim_weighted(self, queues: Sequence[str], free: int, blocked: Sequence[str]) -> list[Job]:
        lease = self.settings.lease_seconds
        slots = draw_slots(free, self.settings.priority_weights, list(queues), self._rng)
        async with db.connection(self._pool) as conn:
            jobs = await db.run(
                conn,
                job_store.claim_weighted(
                    worker_id=self.worker_id,
                    slots=slots,
                    lease_seconds=lease,
                    deadlines=self.deadlines,
                    blocked=blocked,
                    served=self.served,
                ),
            )
            if len(jobs) < free:
                more = await db.run(
                    conn,
                    job_store.claim(
                        worker_id=self.worker_id,
                        queues=queues,
                        limit=free - len(jobs),
                        lease_seconds=lease,
                        deadlines=self.deadlines,
                        blocked=blocked,
                        served=self.served,
                    ),
                )
                jobs.extend(more)
        return jobs

    def acked(self, attempts: Sequence[Attempt]) -> bool:
        """The acks of ``attempts`` are written: those claimed under a limit no longer hold its
        slot. True if one did (a claim may find room now)."""
        limited = self._limited
        if not limited or not any(attempt in limited for attempt in attempts):
            return False
        limited.difference_update(attempts)
        return True

    async def reconcile(self, known: Callable[[], list[Attempt]]) -> int:
        """Release the attempts this worker holds in the database but not in ``known()``."""
        async with db.connection(self._pool) as conn:
            held = await db.run(conn, job_store.held_by(self.worker_id))
            unknown = held - set(known())
            if not unknown:
                return 0
            released = await db.run(conn, job_store.release_many(worker_id=self.worker_id, attempts=list(unknown)))
        log.warning("released %s jobs claimed by a statement whose reply was lost", released)
        return released

    async def _run(self, call: db.Call[list[Job]]) -> list[Job]:
        async with db.connection(self._pool) as conn:
            return await db.run(conn, call)
