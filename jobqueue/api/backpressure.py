"""Backpressure for submissions: per-queue runnable depth against a soft and a hard limit.

- Depth comes from a per-process cache of runnable jobs per queue, counted by one bounded query
  (each count capped just above the hard limit) — never a count per request. Jobs this process
  admits are added at once, so a burst cannot overshoot by more than the other API processes'
  share of one refresh period.
- The count is not free (it walks every runnable entry of a queue: tens of milliseconds of a core
  at 50,000 jobs, a latency spike for every request sharing that core), so it runs only when it
  could change a decision. Every ``JOBQUEUE_API_DEPTH_REFRESH`` seconds (default 1) the refresher
  reads the job sequence, which is free: no queue can have grown by more jobs than were submitted
  since the last count, so while every queue's last depth plus that growth stays below its soft
  limit, nothing can be throttled and the count is skipped. It is redone as soon as that bound
  reaches a limit, and at least every ``JOBQUEUE_API_DEPTH_MAX_AGE`` seconds (default 10) for what
  the sequence does not see: scheduled jobs falling due, retried dead letters, reclaimed leases.
- Below the soft limit (default 50,000; per queue in ``jobqueue.queue_settings``) nothing is
  throttled. Above it, each producer draws from its own in-process token bucket
  (``JOBQUEUE_API_RATE_LIMIT`` jobs/s, burst ``JOBQUEUE_API_RATE_BURST``) → 429 when empty, with
  ``Retry-After`` the time until enough tokens return. With ``jobqueue api --workers N`` each
  process holds 1/N of the rate and of the burst, so a producer spreading its connections over
  every process gets the configured limit in all, never N times it (one whose requests all land on
  one process gets 1/N: the limit errs on the safe side, and needs no shared state per request); with ``JOBQUEUE_API_SHED_LOW=1`` ``low``
  jobs are refused outright (503).
- At the hard limit (default 100,000) every submission to the queue gets 503 with
  ``Retry-After``; nothing is written.
- Across queues: the same two limits apply to the runnable jobs of all queues together
  (``JOBQUEUE_API_TOTAL_SOFT_LIMIT``, default 200,000: every producer draws from its token bucket
  whatever the queue; ``JOBQUEUE_API_TOTAL_HARD_LIMIT``, default 400,000: 503 ``total_full``). So a
  producer cannot dodge backpressure by spreading its jobs over queue names it invents — a new
  name costs nothing to make, and each would be far below its own limit. (The other way, queues an
  admin must declare first, would break every producer that relies on a queue existing once it is
  used; a key's queue allow-list, ``jobqueue apikey create --queues``, is that control per key.)
  The total is the sum of the cached per-queue depths, so it costs no query of its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from jobqueue.client import AsyncClient
from jobqueue.config import Settings
from jobqueue.errors import DatabaseUnavailable, NotMigrated, PermissionDenied
from jobqueue.models import Priority, QueueSettings

log = logging.getLogger("jobqueue.api.backpressure")


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
    def __init__(self, client: AsyncClient, settings: Settings, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.settings = settings
        self._clock = clock
        self.depths: dict[str, int] = {}
        self.total = 0  # sum(self.depths.values()), kept in step
        self.queue_settings: dict[str, QueueSettings] = {}
        self._buckets: dict[str, TokenBucket] = {}
        # (clock, job sequence at the count before it) of the last count: growth is measured from
        # one count further back, so jobs inserted but not yet committed when the last count ran
        # (invisible to it, yet already in the sequence) are still counted as growth.
        self._counted: tuple[float, int] | None = None
        self._submitted_at_last_count = 0

    def limits(self, queue: str) -> tuple[int, int]:
        custom = self.queue_settings.get(queue)
        soft = custom.soft_limit if custom and custom.soft_limit else self.settings.api_soft_limit
        hard = custom.hard_limit if custom and custom.hard_limit else self.settings.api_hard_limit
        return min(soft, hard), hard

    def total_limits(self) -> tuple[int, int]:
        """Soft and hard limit of all queues' runnable jobs together."""
        hard = self.settings.api_total_hard_limit
        return min(self.settings.api_total_soft_limit, hard), hard

    async def refresh(self) -> None:
        """New limits always; new depths when `count_needed` says the old ones could mislead."""
        settings = await self.client.queue_settings()
        self.queue_settings = settings
        submitted = await self.client.submitted_total()
        if not self.count_needed(submitted):
            return
        cap = max([self.settings.api_hard_limit] + [s.hard_limit for s in settings.values() if s.hard_limit]) + 1
        started = self._clock()
        self.depths = await self.client.runnable_counts(cap=cap)
        self.total = sum(self.depths.values())
        self._counted = (started, self._submitted_at_last_count)
        self._submitted_at_last_count = submitted

    def count_needed(self, submitted: int) -> bool:
        """Could any queue have reached its soft limit since the last count? ``submitted`` is the
        job sequence now: every queue grew by at most the jobs submitted since then."""
        if self._counted is None:
            return True
        counted_at, counted_submitted = self._counted
        growth = submitted - counted_submitted
        if growth < 0 or self._clock() - counted_at >= self.settings.api_depth_max_age:
            return True
        if growth >= self.settings.api_soft_limit:  # enough for a queue the last count did not see
            return True
        if self.total + growth >= self.total_limits()[0]:
            return True
        return any(self.depths.get(queue, 0) + growth >= self.limits(queue)[0]
                   for queue in self.depths.keys() | self.queue_settings.keys())

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
                    log.error("queue depth refresh refused (%s); is the API's login granted jobqueue_api? "
                              "(`jobqueue roles grant --role api LOGIN`)", exc)
                refused = True
            except Exception:  # anything else too: a dead refresher would leave depths only growing
                log.exception("queue depth refresh failed; retrying")
            await asyncio.sleep(self.settings.api_depth_refresh)

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
        retry_after = float(self.settings.api_retry_after)
        jobs = sum(demand.jobs for demand in demands)
        total_soft, total_hard = self.total_limits()
        if self.total + jobs > total_hard:
            raise Overloaded(503, "total_full", f"the queues hold {self.total} runnable jobs in all (limit "
                             f"{total_hard} across queues); nothing was written", retry_after)
        for demand in demands:
            soft, hard = self.limits(demand.queue)
            depth = self.depths.get(demand.queue, 0)
            if depth + demand.jobs > hard:
                raise Overloaded(503, "queue_full", f"queue {demand.queue!r} is at its hard limit "
                                 f"({depth} runnable jobs, limit {hard}); nothing was written", retry_after)
            if depth + demand.jobs > soft:
                if demand.low and self.settings.api_shed_low:
                    raise Overloaded(503, "shed", f"queue {demand.queue!r} is above its soft limit ({soft}): "
                                     "low-priority jobs are shed; nothing was written", retry_after)
                throttled += demand.jobs
        if self.total + jobs > total_soft:  # every job of the request, whichever queue it names
            if self.settings.api_shed_low and any(demand.low for demand in demands):
                raise Overloaded(503, "shed", f"the queues are above their total soft limit ({total_soft}): "
                                 "low-priority jobs are shed; nothing was written", retry_after)
            throttled = jobs
            why = f"the queues together are above their total soft limit ({total_soft})"
        else:
            why = "the queue is above its soft limit"
        if throttled:
            bucket = self._buckets.get(producer_id)
            if bucket is None:
                share = max(self.settings.api_workers, 1)  # this process's part of the producer's limit
                bucket = self._buckets[producer_id] = TokenBucket(
                    self.settings.api_rate_limit / share, max(1, -(-self.settings.api_rate_burst // share)),
                    self._clock)
            wait = bucket.take(throttled)
            if wait > 0:
                raise Overloaded(429, "rate_limited", f"{why}: producers are rate "
                                 f"limited to {self.settings.api_rate_limit:g} jobs/s; nothing was written", wait)

    def reserve(self, producer_id: str, demands: list[Demand]) -> None:
        """`admit`, and count the jobs at once: requests waiting for the database together must not
        all be measured against the same depth."""
        self.admit(producer_id, demands)
        self.admitted(demands)

    def admitted(self, demands: list[Demand]) -> None:
        for demand in demands:
            self.depths[demand.queue] = self.depths.get(demand.queue, 0) + demand.jobs
            self.total += demand.jobs

    def release(self, demands: list[Demand]) -> None:
        """Take back a reservation whose jobs were not created (refused, or already there)."""
        for demand in demands:
            held = self.depths.get(demand.queue, 0)
            self.depths[demand.queue] = max(0, held - demand.jobs)
            self.total -= held - self.depths[demand.queue]


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
            raise Overloaded(429, "too_many_streams", f"this API key already holds {held} event streams here "
                             f"(at most {self.limit}): close one first", retry_after=STREAM_RETRY_AFTER)
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
