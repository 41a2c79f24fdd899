"""What a worker reports for /metrics: counts and a processing-time histogram, kept in memory and
written every few seconds — one statement per interval, never one per job.

`WorkerStats.record(outcome)` adds a finished attempt to the (queue, job type) counters and to the
duration bucket it falls in (a dict lookup and a bisect). `run()` samples how many of the worker's
slots are busy (``occupancy``: its running jobs and its slots, the worker's `WorkerStatus`, every
`sample_interval`) and, every `interval` (default 2 s, `JOBQUEUE_STATS_INTERVAL`), adds the counted
deltas to this worker's rows of `jobqueue.worker_stats` and sets its utilization (busy slot-time
over slot-time of the interval) in the registry. A failed flush keeps the deltas for the next one.
``concurrency`` is the slot count utilization is measured against (``occupancy.slots``: an
autoscaling worker's target moves), and ``busy_total`` / ``slot_total`` (cumulative busy and
available slot-seconds) let its autoscaler measure utilization over its own window. `close()`
flushes and folds this worker's rows into the '(retired)' row (the leader's reaper does the same
for crashed workers' rows), so totals only ever grow.

Options and defaults: interval 2 s, sample_interval 0.1 s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Protocol

from jobqueue.db import gateway as db
from jobqueue.model.errors import DatabaseUnavailable
from jobqueue.store import metrics as metrics_store
from jobqueue.store.metrics import TypeDelta, TypeTotals, bucket_index
from jobqueue.worker.executor import CANCELLED, COMPLETED, Outcome

log = logging.getLogger("jobqueue.worker.stats")


class Occupancy(Protocol):
    """How many jobs run now, in how many slots."""

    @property
    def running(self) -> int: ...

    @property
    def slots(self) -> int: ...


class WorkerStats:
    def __init__(
        self,
        pool,
        worker_id: str,
        occupancy: Occupancy,
        *,
        interval: float = 5.0,
        sample_interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self.worker_id = worker_id
        self.interval = interval
        self.sample_interval = min(sample_interval, interval)
        self._occupancy = occupancy
        self._clock = clock
        self._deltas: dict[tuple[str, str], TypeDelta] = {}
        self._flushed: dict[tuple[str, str], TypeDelta] = {}  # written so far (for --metrics-port)
        self._busy_slot_seconds = 0.0
        self._slot_seconds = 0.0
        self.busy_total = 0.0
        self.slot_total = 0.0
        self._last_sample = clock()
        self.utilization = 0.0

    @property
    def concurrency(self) -> int:
        return self._occupancy.slots

    def record(self, outcome: Outcome) -> None:
        job = outcome.job
        key = (job.queue, job.job_type)
        delta = self._deltas.get(key)
        if delta is None:
            delta = self._deltas[key] = TypeDelta()
        delta.processed += 1
        if outcome.kind not in (COMPLETED, CANCELLED):
            delta.failed += 1
        delta.duration_ms_sum += outcome.duration_ms
        delta.buckets[bucket_index(outcome.duration_ms)] += 1

    def sample(self) -> None:
        """Integrate busy slots since the last sample (the occupancy seen now stands for the gap)."""
        now = self._clock()
        elapsed = now - self._last_sample
        concurrency = self._occupancy.slots
        busy, slots = min(self._occupancy.running, concurrency) * elapsed, concurrency * elapsed
        self._busy_slot_seconds += busy
        self._slot_seconds += slots
        self.busy_total += busy
        self.slot_total += slots
        self._last_sample = now

    async def run(self) -> None:
        next_flush = self._clock() + self.interval
        while True:
            await asyncio.sleep(self.sample_interval)
            self.sample()
            if self._clock() >= next_flush:
                next_flush = self._clock() + self.interval
                try:
                    await self.flush()
                except DatabaseUnavailable as exc:
                    log.warning("stats flush failed (%s); kept for the next one", exc)

    async def flush(self, timeout: float | None = None) -> None:
        """Write the counters gathered since the last flush (``timeout``: the wait for a connection)."""
        self.sample()
        deltas, self._deltas = self._deltas, {}
        busy, slot_seconds = self._busy_slot_seconds, self._slot_seconds
        utilization = busy / slot_seconds if slot_seconds > 0 else self.utilization
        try:
            async with db.connection(self._pool, timeout=timeout) as conn:
                await db.run(
                    conn,
                    metrics_store.flush_worker_stats(
                        worker_id=self.worker_id, deltas=deltas, utilization=utilization, busy_seconds=busy
                    ),
                )
        except DatabaseUnavailable:
            _merge(self._deltas, deltas)  # kept for the next flush
            raise
        self.utilization = utilization
        _merge(self._flushed, deltas)
        self._busy_slot_seconds = 0.0
        self._slot_seconds = 0.0

    async def close(self) -> None:
        """Last flush, then fold this worker's rows into the retired totals."""
        try:
            await self.flush(timeout=db.SHUTDOWN_WAIT)
            async with db.connection(self._pool, timeout=db.SHUTDOWN_WAIT) as conn:
                await db.run(conn, metrics_store.retire_worker_stats(worker_id=self.worker_id))
        except DatabaseUnavailable as exc:
            log.warning("final stats flush failed (%s); these counts are lost", exc)

    def totals(self) -> list[TypeTotals]:
        """Everything this worker counted since it started (flushed or not), per queue and job type."""
        merged: dict[tuple[str, str], TypeDelta] = {}
        _merge(merged, self._flushed)
        _merge(merged, self._deltas)
        return [
            TypeTotals(queue, job_type, d.processed, d.failed, d.duration_ms_sum, tuple(d.buckets or ()))
            for (queue, job_type), d in sorted(merged.items())
        ]


def _merge(into: dict[tuple[str, str], TypeDelta], deltas: dict[tuple[str, str], TypeDelta]) -> None:
    for key, delta in deltas.items():
        total = into.setdefault(key, TypeDelta())
        total.processed += delta.processed
        total.failed += delta.failed
        total.duration_ms_sum += delta.duration_ms_sum
        total.buckets = [a + b for a, b in zip(total.buckets, delta.buckets)]
