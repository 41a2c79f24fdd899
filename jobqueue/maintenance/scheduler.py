"""`Scheduler`: turns cron schedules into jobs, each tick exactly once (leader only).

It sleeps until the earliest ``next_fire_at`` (so a fire is late by milliseconds, not by a poll
period), wakes early on a ``jobqueue_schedules`` NOTIFY (a schedule was added or changed) or when
this process becomes leader, and then, for every due schedule:

1. plans the ticks to fire from ``next_fire_at`` up to now (`plan_fires`), in the schedule's zone;
2. calls ``jobqueue.fire_schedule`` — one transaction that moves ``next_fire_at`` on only if it
   is still what was read (compare-and-set), and writes each tick's ``schedule_fires`` row (its
   key is (schedule, tick)) together with its job.

So two schedulers that both believe they lead — a stale leader, a test running three at once —
cannot both fire a tick: one wins the compare-and-set, the other changes nothing, and the fires
table refuses a second job for a tick in any case.

Ticks older than ``misfire_grace`` are *missed* (the scheduler was down); the schedule's misfire
policy decides: ``fire_once`` (one job, for the latest missed tick), ``fire_all`` (one job per
missed tick, the latest ``misfire_limit`` of them) or ``skip``. Ticks within the grace always fire
— a leader failover delays them, it does not drop them.

Options (`SchedulerOptions`): ``misfire_grace`` seconds (default 60, `JOBQUEUE_MISFIRE_GRACE`),
``interval`` the longest sleep when nothing is due (default 60; NOTIFYs wake it sooner; in the
runner the poll interval when LISTEN is off), ``batch_size`` schedules per query (default 100); and
``fired_by`` (the leader's id, written on each fire) and the ``clock`` (tests pass a
`ManualClock`). A run returns `Fired`: the schedules that were due and the jobs it fired for them.
"""

from __future__ import annotations

import functools
import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobqueue.db import gateway as db
from jobqueue.maintenance.base import Service
from jobqueue.model.cron import CronSchedule
from jobqueue.model.errors import ValidationError
from jobqueue.runtime.clock import Clock
from jobqueue.store import schedules as schedule_store
from jobqueue.store.schedules import DueSchedule

log = logging.getLogger("jobqueue.scheduler")

_LATE_MARGIN = 0.001  # wake this long after a tick, so the clock has surely passed it


@dataclass(frozen=True, slots=True)
class FirePlan:
    ticks: list[datetime]  # to fire now, ascending
    next_fire_at: datetime  # the first tick after now
    missed_from: datetime | None = None  # first missed tick, when some were missed
    missed_fired: int = 0  # how many of the missed ticks get a job


def plan_fires(
    cron: CronSchedule,
    *,
    next_fire_at: datetime | None,
    anchor: datetime,
    now: datetime,
    policy: str,
    limit: int,
    grace: timedelta,
) -> FirePlan:
    """Which ticks to fire at ``now`` for a schedule whose first unfired tick is ``next_fire_at``
    (None: a new schedule, whose ticks start after ``anchor``)."""
    first = next_fire_at if next_fire_at is not None else cron.next_after(anchor)
    if first > now:
        return FirePlan([], first)
    cutoff = now - grace
    on_time = cron.between(max(first, cutoff), now)
    if first >= cutoff:
        return FirePlan(on_time, cron.next_after(now))
    missed = {"fire_all": limit, "fire_once": 1, "skip": 0}[policy]
    chosen = cron.latest(first, cutoff, missed)
    return FirePlan(chosen + on_time, cron.next_after(now), missed_from=first, missed_fired=len(chosen))


@functools.lru_cache(maxsize=1024)
def _cron_schedule(expression: str, zone: str) -> CronSchedule:
    """Parsed once per definition, not once per tick."""
    return CronSchedule(expression, zone)


@dataclass(frozen=True, slots=True)
class SchedulerOptions:
    misfire_grace: float = 60.0
    interval: float = 60.0
    batch_size: int = 100


@dataclass(frozen=True, slots=True)
class Fired:
    due: int = 0  # schedules due in this run
    jobs: int = 0  # jobs fired for their ticks (one per tick; a tick another scheduler fired: none)

    @property
    def count(self) -> int:
        return self.jobs

    def describe(self) -> str:
        if not self.due:
            return "no schedule due"
        return f"enqueued {self.jobs:,} cron job(s) for {self.due:,} due schedule(s)"


class Scheduler(Service[Fired]):
    name = "scheduler"

    def __init__(
        self, pool, options: SchedulerOptions = SchedulerOptions(), *, fired_by: str, clock: Clock | None = None
    ) -> None:
        super().__init__(interval=options.interval, clock=clock)
        self._pool = pool
        self.fired_by = fired_by
        self.misfire_grace = timedelta(seconds=options.misfire_grace)
        self.batch_size = options.batch_size
        self._next_due: datetime | None = None

    async def run_once(self) -> Fired:
        self._next_due = None
        now = self.clock.now()
        async with db.connection(self._pool) as conn:
            due = await db.run(conn, schedule_store.due(now=now, limit=self.batch_size))
        fired = 0
        for schedule in due:
            fired += await self._fire(schedule, now)
        async with db.connection(self._pool) as conn:
            self._next_due = now if len(due) == self.batch_size else await db.run(conn, schedule_store.next_due())
        return Fired(due=len(due), jobs=fired)

    def next_delay(self) -> float:
        if self._next_due is None:
            return self.interval
        wait = (self._next_due - self.clock.now()).total_seconds()
        return min(max(wait, 0.0) + _LATE_MARGIN, self.interval)

    def retry_delay(self) -> float:
        return min(self.interval, 1.0) * (1 + random.random() * self.jitter)

    async def _fire(self, schedule: DueSchedule, now: datetime) -> int:
        try:
            cron = _cron_schedule(schedule.cron, schedule.timezone)
        except ValidationError as exc:
            log.error("schedule %s cannot be used: %s", schedule.name, exc)
            async with db.connection(self._pool) as conn:
                await db.run(conn, schedule_store.set_error(schedule, str(exc)))
            return 0
        plan = plan_fires(
            cron,
            next_fire_at=schedule.next_fire_at,
            anchor=schedule.updated_at,
            now=now,
            policy=schedule.misfire_policy,
            limit=schedule.misfire_limit,
            grace=self.misfire_grace,
        )
        async with db.connection(self._pool) as conn:
            fired = await db.run(
                conn,
                schedule_store.fire(schedule, ticks=plan.ticks, next_fire_at=plan.next_fire_at, fired_by=self.fired_by),
            )
        if plan.missed_from is not None and fired:
            log.warning(
                "schedule %s missed ticks since %s (%s): fired %d of them",
                schedule.name,
                plan.missed_from.isoformat(),
                schedule.misfire_policy,
                plan.missed_fired,
            )
        for tick, job_id in fired:
            log.debug("schedule %s fired %s -> job %s", schedule.name, tick.isoformat(), job_id)
        return len(fired)
