"""Backpressure for submissions: per-queue waiting jobs against a soft and a hard limit.

What counts, the limits and when to count again are `jobqueue.model.quotas`' (the maintenance leader's
`Gatekeeper` applies the same to SQL and Python producers): every waiting job — pending, due or
scheduled for later, or waiting for a retry — since every one of them is stored.

- Depth comes from a per-process cache of waiting jobs per queue, counted by one bounded query
  (each count capped just above the hard limit) — never a count per request. Jobs this process
  admits are added at once, so a burst cannot overshoot by more than the other API processes'
  share of one refresh period.
- The count is not free (it walks every waiting entry of a queue: tens of milliseconds of a core
  at 50,000 jobs, a latency spike for every request sharing that core), so it runs only when it
  could change a decision. Every ``JOBQUEUE_API_DEPTH_REFRESH`` seconds (default 1) the refresher
  reads the job sequence, which is free: no queue can have grown by more jobs than were submitted
  since the last count, so while every queue's last depth plus that growth stays below its soft
  limit, nothing can be throttled and the count is skipped. It is redone as soon as that bound
  reaches a limit, and at least every ``JOBQUEUE_API_DEPTH_MAX_AGE`` seconds (default 10) for what
  the sequence does not see: jobs finished, deleted or reclaimed, retried dead letters.
- Below the soft limit (default 50,000; per queue in ``jobqueue.queue_settings``) nothing is
  throttled. Above it, each producer draws from its own in-process token bucket
  (``JOBQUEUE_API_RATE_LIMIT`` jobs/s, burst ``JOBQUEUE_API_RATE_BURST``) → 429 when empty, with
  ``Retry-After`` the time until enough tokens return. With ``jobqueue api --workers N`` each
  process holds 1/N of the rate and of the burst, so a producer spreading its connections over
  every process gets the configured limit in all, never N times it (one whose requests all land on
  one process gets 1/N: the limit errs on the safe side, and needs no shared state per request); with
  ``JOBQUEUE_API_SHED_LOW=1`` ``low``
  jobs are refused outright (503).
- At the hard limit (default 100,000) every submission to the queue gets 503 with
  ``Retry-After``; nothing is written.
- Across queues: the same two limits apply to the waiting jobs of all queues together
  (``JOBQUEUE_API_TOTAL_SOFT_LIMIT``, default 200,000: every producer draws from its token bucket
  whatever the queue; ``JOBQUEUE_API_TOTAL_HARD_LIMIT``, default 400,000: 503 ``total_full``), so
  spreading jobs over invented queue names does not dodge the limits. The total is the sum of the
  cached per-queue depths, so it costs no query of its own.
- New queue names: at most ``JOBQUEUE_API_MAX_QUEUES`` (1,000) queues may hold jobs that no live
  worker serves and no admin configured; a request naming a new one past that is 503
  ``too_many_queues``. Every queue is a row of /queues and series in /metrics, and a name costs
  nothing to invent; queues that exist, that workers serve or that an admin configured are never
  refused for it. (Requiring every queue to be declared first would break every producer that
  starts using a queue by naming it; a key's queue allow-list, ``jobqueue apikey create
  --queues``, is that control per key.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from jobqueue.api.store_access import ApiStore
from jobqueue.config import ApiSettings, BackpressureSettings, Settings
from jobqueue.model.errors import DatabaseUnavailable, NotMigrated, PermissionDenied
from jobqueue.model.jobs import Priority
from jobqueue.model.queues import QueueSettings
from jobqueue.model.quotas import QUEUE_FULL, TOO_MANY_QUEUES, TOTAL_FULL, Limits, Recount

log = logging.getLogger("jobqueue.api.backpressure")


def api_limits(settings: BackpressureSettings, queue_settings: Mapping[str, QueueSettings]) -> Limits:
    """The quotas this API admits against: its ``JOBQUEUE_API_*`` depth limits, overridden per queue by
    ``queue_settings``."""
    return Limits(
        settings.soft_limit,
        settings.hard_limit,
        settings.total_soft_limit,
        settings.total_hard_limit,
        settings.max_queues,
        queue_settings,
    )


class Overloaded(Exception):
    """The submission was refused to protect the queue (429 or 503); nothing was written."""

    def __init__(self, status: int, reason: str, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


class TokenBucket:
    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._updated = clock()

    def take(self, n: int) -> float:
        """Take ``n`` tokens and return 0, or take nothing and return the seconds until they exist."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._updated) * self.rate)
        self._updated = now
        n = min(n, self.burst)  # a batch larger than the burst waits for a full bucket, not forever
        if self._tokens >= n:
            self._tokens -= n
            return 0.0
        return (n - self._tokens) / self.rate


@dataclass(frozen=True, slots=True)
class Demand:
    """What one request would add to one queue."""

    queue: str
    jobs: int
    low: int


class Backpressure:
    def __init__(
        self,
        store: ApiStore,
        settings: ApiSettings,
        depth_limits: BackpressureSettings,
        *,
        stale_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``settings``: the API's own (retry hint, shedding, rate limits, its processes);
        ``depth_limits`` and how often they are counted; ``stale_seconds``: a silent worker serves no queue."""
        self.store = store
        self.settings = settings
        self.depth_limits = depth_limits
        self.stale_seconds = stale_seconds
        self._clock = clock
        self.depths: dict[str, int] = {}  # waiting jobs per queue (and 0 for queues live workers serve)
        self.total = 0  # sum(self.depths.values()), kept in step
        self.served: frozenset[str] = frozenset()  # queues live workers serve
        self.undeclared: set[str] = set()  # queues holding jobs that no worker serves and no admin configured
        self.queue_settings: dict[str, QueueSettings] = {}
        self.quota = api_limits(depth_limits, {})
        self._buckets: dict[str, TokenBucket] = {}
        self._recount = Recount(max_age=depth_limits.depth_max_age, clock=clock)
        self._in_flight: dict[str, int] = {}  # reserved jobs whose statement has not ended
        self._committed_meanwhile: list[tuple[str, int]] | None = None  # (queue, jobs) during a count

    @classmethod
    def of(cls, store: ApiStore, settings: Settings, *, clock: Callable[[], float] = time.monotonic) -> "Backpressure":
        """The sections and the value it reads, taken from ``settings``."""
        return cls(
            store, settings.api, settings.backpressure, stale_seconds=settings.metrics.worker_stale_seconds, clock=clock
        )

    def limits(self, queue: str) -> tuple[int, int]:
        return self.quota.of(queue)

    def total_limits(self) -> tuple[int, int]:
        """Soft and hard limit of all queues' waiting jobs together."""
        return self.quota.total()

    async def refresh(self) -> None:
        """New limits always; new depths when `count_needed` says the old ones could mislead."""
        settings = await self.store.client.queue_settings()
        self.queue_settings = settings
        self.quota = api_limits(self.depth_limits, settings)
        submitted = await self.store.submitted_total()
        if not self.count_needed(submitted):
            return
        started = self._recount.started()
        self._committed_meanwhile = []
        try:
            counts = await self.store.waiting_counts(cap=self.quota.cap(), stale_seconds=self.stale_seconds)
        finally:
            meanwhile, self._committed_meanwhile = self._committed_meanwhile, None
        self.depths, self.served = dict(counts.depths), counts.served
        for queue, jobs in list(self._in_flight.items()) + (meanwhile or []):  # maybe not committed when counted
            self.depths[queue] = self.depths.get(queue, 0) + jobs
        self.total = sum(self.depths.values())
        self.undeclared = self.quota.undeclared(self.depths, self.served)
        self._recount.counted(started, submitted)

    def count_needed(self, submitted: int) -> bool:
        """Could any queue have reached its soft limit, or one queue too many been made, since the
        last count? ``submitted`` is the job sequence now: every queue grew by at most the jobs
        submitted since then."""
        return self._recount.needed(
            submitted, lambda growth: self.quota.within_reach(self.depths, len(self.undeclared), growth, hard=False)
        )

    async def run(self) -> None:
        """Refresh until cancelled; while the database is away, keep the last known depths."""
        refused = False
        while True:
            try:
                await self.refresh()
                refused = False
            except (DatabaseUnavailable, NotMigrated) as exc:
                log.debug("queue depth refresh failed: %s", exc)
            except PermissionDenied as exc:  # the wrong role: said once, not a traceback every refresh
                if not refused:
                    log.error(
                        "queue depth refresh refused (%s); is the API's login granted jobqueue_api? "
                        "(`jobqueue roles grant --role api LOGIN`)",
                        exc,
                    )
                refused = True
            except Exception:  # anything else too: a dead refresher would leave depths only growing
                log.exception("queue depth refresh failed; retrying")
            await asyncio.sleep(self.depth_limits.depth_refresh)

    @staticmethod
    def demands(jobs: Iterable[tuple[str, str]]) -> list[Demand]:
        """(queue, priority label) per job → what the request adds to each queue."""
        totals: dict[str, list[int]] = {}
        for queue, priority in jobs:
            entry = totals.setdefault(queue, [0, 0])
            entry[0] += 1
            entry[1] += priority == Priority.LOW.label
        return [Demand(queue, n, low) for queue, (n, low) in totals.items()]

    def admit(self, producer_id: str, demands: list[Demand]) -> None:
        """Raise `Overloaded` unless every queue of the request can take its jobs; all or nothing."""
        throttled = 0
        retry_after = float(self.settings.retry_after)
        jobs = sum(demand.jobs for demand in demands)
        total_soft, total_hard = self.total_limits()
        if self.total + jobs > total_hard:
            raise Overloaded(
                503,
                TOTAL_FULL,
                f"the queues hold {self.total} waiting jobs in all (limit "
                f"{total_hard} across queues); nothing was written",
                retry_after,
            )
        self._admit_new_queues(demands, retry_after)
        for demand in demands:
            soft, hard = self.limits(demand.queue)
            depth = self.depths.get(demand.queue, 0)
            if depth + demand.jobs > hard:
                raise Overloaded(
                    503,
                    QUEUE_FULL,
                    f"queue {demand.queue!r} is at its hard limit "
                    f"({depth} waiting jobs, limit {hard}); nothing was written",
                    retry_after,
                )
            if depth + demand.jobs > soft:
                if demand.low and self.settings.shed_low:
                    raise Overloaded(
                        503,
                        "shed",
                        f"queue {demand.queue!r} is above its soft limit ({soft}): "
                        "low-priority jobs are shed; nothing was written",
                        retry_after,
                    )
                throttled += demand.jobs
        if self.total + jobs > total_soft:  # every job of the request, whichever queue it names
            if self.settings.shed_low and any(demand.low for demand in demands):
                raise Overloaded(
                    503,
                    "shed",
                    f"the queues are above their total soft limit ({total_soft}): "
                    "low-priority jobs are shed; nothing was written",
                    retry_after,
                )
            throttled = jobs
            why = f"the queues together are above their total soft limit ({total_soft})"
        else:
            why = "the queue is above its soft limit"
        if throttled:
            bucket = self._buckets.get(producer_id)
            if bucket is None:
                share = max(self.settings.workers, 1)  # this process's part of the producer's limit
                bucket = self._buckets[producer_id] = TokenBucket(
                    self.settings.rate_limit / share, max(1, -(-self.settings.rate_burst // share)), self._clock
                )
            wait = bucket.take(throttled)
            if wait > 0:
                raise Overloaded(
                    429,
                    "rate_limited",
                    f"{why}: producers are rate limited to {self.settings.rate_limit:g} jobs/s; nothing was written",
                    wait,
                )

    def _admit_new_queues(self, demands: list[Demand], retry_after: float) -> None:
        """Refuse the request if the new queues it names would be more than ``max_queues``
        undeclared ones (new: no job of it waits, no live worker serves it, no admin configured it)."""
        new = [
            d.queue for d in demands if not self.depths.get(d.queue) and not self.quota.declared(d.queue, self.served)
        ]
        if new and len(self.undeclared) + len(new) > self.quota.max_queues:
            raise Overloaded(
                503,
                TOO_MANY_QUEUES,
                f"{len(self.undeclared)} queues that no worker serves and no admin "
                f"configured hold jobs already (at most {self.quota.max_queues}): {new[0]!r} would be a "
                "new one; nothing was written",
                retry_after,
            )

    def reserve(self, producer_id: str, demands: list[Demand]) -> None:
        """`admit`, and count the jobs at once: requests waiting for the database together must not
        all be measured against the same depth. Then either `committed` or `release`: until then
        the jobs are in flight, and a count made meanwhile cannot see them (their statement has not
        committed), so they are added to what it finds."""
        self.admit(producer_id, demands)
        self.admitted(demands)
        for demand in demands:
            self._in_flight[demand.queue] = self._in_flight.get(demand.queue, 0) + demand.jobs

    def admitted(self, demands: list[Demand]) -> None:
        for demand in demands:
            self.depths[demand.queue] = self.depths.get(demand.queue, 0) + demand.jobs
            self.total += demand.jobs
            if not self.quota.declared(demand.queue, self.served):
                self.undeclared.add(demand.queue)

    def committed(self, demands: list[Demand]) -> None:
        """Reserved jobs were created. A count running now may have begun before their commit:
        they are added to what it finds (maybe twice: an overestimate the next count corrects)."""
        self._landed(demands)
        if self._committed_meanwhile is not None:
            self._committed_meanwhile.extend((demand.queue, demand.jobs) for demand in demands)

    def release(self, demands: list[Demand]) -> None:
        """Take back a reservation whose jobs were not created (refused, or already there)."""
        self._landed(demands)
        for demand in demands:
            held = self.depths.get(demand.queue, 0)
            self.depths[demand.queue] = max(0, held - demand.jobs)
            self.total -= held - self.depths[demand.queue]
            if not self.depths[demand.queue]:
                self.undeclared.discard(demand.queue)

    def _landed(self, demands: list[Demand]) -> None:
        for demand in demands:
            left = self._in_flight.get(demand.queue, 0) - demand.jobs
            if left > 0:
                self._in_flight[demand.queue] = left
            else:
                self._in_flight.pop(demand.queue, None)


#: Seconds a key refused another event stream is told to wait.
STREAM_RETRY_AFTER = 15.0


class StreamQuota:
    """Open streams per API key in this process."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[object, int] = {}

    def take(self, key_id: object) -> Callable[[], None]:
        """Count a new stream of ``key_id`` (`Overloaded` 429 past the limit); returns its release."""
        held = self._open.get(key_id, 0)
        if held >= self.limit:
            raise Overloaded(
                429,
                "too_many_streams",
                f"this API key already holds {held} event streams here (at most {self.limit}): close one first",
                retry_after=STREAM_RETRY_AFTER,
            )
        self._open[key_id] = held + 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                left = self._open[key_id] - 1
                if left:
                    self._open[key_id] = left
                else:
                    del self._open[key_id]

        return release
