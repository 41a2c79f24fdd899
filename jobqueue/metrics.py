"""The system's figures, collected from the database and rendered in Prometheus' text format.

One scrape target for everything: what the job table knows (depth, scheduled, waiting for a retry,
processing, dead letters, the oldest runnable job's age — per queue and priority or job type) and
what workers report through `jobqueue.worker_stats` (attempts processed and failed per job type,
the processing-time histogram, utilization, how many workers are alive).

Cheap with millions of rows: every job count walks a partial index over live states (finished
rows are never visited) and stops at ``cap``; the submitted counter is the jobs.seq sequence; the
worker figures are one small row per worker and type. A `Collector` also caches its snapshot for
``ttl`` seconds and lets concurrent callers (several scrapers, every open dashboard) share one
collection in flight.

Metric names (SPEC's, in Prometheus spelling), all prefixed ``jobqueue_``:
  jobs_submitted_total                       counter  every job ever enqueued (all queues)
  jobs_processed_total{queue,job_type}       counter  attempts finished by workers, any outcome
  jobs_failed_total{queue,job_type}          counter  of those, attempts that failed (retry or dead)
  jobs_in_dlq{queue,job_type}                gauge    dead-lettered jobs
  queue_depth{queue,priority}                gauge    runnable now (pending, or failed and due)
  queue_age_seconds{queue,priority}          gauge    age of the oldest runnable job (0: none)
  jobs_scheduled{queue,priority}             gauge    waiting for a future run_at (delays, retries)
  jobs_retrying{queue,priority}              gauge    in state failed (waiting for a retry)
  jobs_processing{queue,priority}            gauge    held by a worker
  worker_processing_time_ms{queue,job_type}  histogram  handler time per attempt
  worker_utilization{worker}                 gauge    busy share of each live worker's slots
  worker_count                               gauge    live workers (heartbeat within stale_seconds)
  metrics_collect_seconds                    gauge    how long the last collection took
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable

from jobqueue import db
from jobqueue.models import Priority
from jobqueue.store import metrics as metrics_store
from jobqueue.store.metrics import DURATION_BUCKETS_MS, DeadCount, QueueCounts, TypeTotals, WorkerRow

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Snapshot:
    measured_at: datetime
    submitted: int
    queues: list[QueueCounts]
    dead: list[DeadCount]
    totals: list[TypeTotals]
    workers: list[WorkerRow]
    collect_seconds: float
    cap: int = 0
    bounds: tuple[float, ...] = field(default=DURATION_BUCKETS_MS)

    @property
    def live_workers(self) -> list[WorkerRow]:
        return [w for w in self.workers if w.alive]


async def collect(conn, *, cap: int, stale_seconds: float, now: datetime | None = None) -> Snapshot:
    started = time.perf_counter()
    queues = await db.run(conn, metrics_store.queue_counts(cap=cap, stale_seconds=stale_seconds, now=now))
    dead = await db.run(conn, metrics_store.dead_letters(cap=cap))
    submitted = await db.run(conn, metrics_store.submitted())
    totals = await db.run(conn, metrics_store.worker_totals())
    workers = await db.run(conn, metrics_store.workers(stale_seconds=stale_seconds, now=now))
    return Snapshot(measured_at=now or datetime.now(timezone.utc), submitted=submitted, queues=queues, dead=dead,
                    totals=totals, workers=workers, collect_seconds=time.perf_counter() - started, cap=cap)


class Collector:
    """Snapshots from a small pool of its own (a scrape never waits behind producers), cached.

    Options and defaults: ttl 2 s (`JOBQUEUE_METRICS_TTL`), cap 1,000,000 rows per count,
    stale_seconds 60 (a worker silent that long is not counted as alive).
    """

    def __init__(self, dsn: str, *, ttl: float = 2.0, cap: int = 1_000_000, stale_seconds: float = 60.0,
                 pool_timeout: float = 5.0) -> None:
        self.ttl = ttl
        self.cap = cap
        self.stale_seconds = stale_seconds
        self._pool = db.async_pool(dsn, min_size=1, max_size=2, name="jobqueue-metrics", timeout=pool_timeout)
        self._lock = asyncio.Lock()
        self._cached: Snapshot | None = None
        self._cached_at = 0.0

    async def open(self) -> None:
        await self._pool.open()

    async def close(self) -> None:
        await self._pool.close()

    async def snapshot(self) -> Snapshot:
        if self._cached is not None and time.monotonic() - self._cached_at < self.ttl:
            return self._cached
        async with self._lock:  # callers arriving meanwhile get this collection, not one each
            if self._cached is not None and time.monotonic() - self._cached_at < self.ttl:
                return self._cached
            async with db.connection(self._pool) as conn:
                self._cached = await collect(conn, cap=self.cap, stale_seconds=self.stale_seconds)
            self._cached_at = time.monotonic()
            return self._cached


# --- Prometheus text format ----------------------------------------------------------------------

def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: Any) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{name}="{_escape(str(value))}"' for name, value in labels.items()) + "}"


def _number(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    if value == float("inf"):
        return "+Inf"
    return repr(float(value))


class _Text:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, samples: Iterable[tuple[dict, float | int]],
               suffix: str = "") -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            self.lines.append(f"{name}{suffix}{_labels(**labels)} {_number(value)}")

    def histogram(self, name: str, help_text: str, totals: list[TypeTotals], bounds: tuple[float, ...]) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} histogram")
        for t in totals:
            cumulative = 0
            counts = list(t.buckets) + [0] * (len(bounds) + 1 - len(t.buckets))
            for bound, count in zip(bounds, counts):
                cumulative += count
                self.lines.append(f"{name}_bucket{_labels(queue=t.queue, job_type=t.job_type, le=_number(float(bound)))} {cumulative}")
            cumulative += counts[len(bounds)]
            self.lines.append(f"{name}_bucket{_labels(queue=t.queue, job_type=t.job_type, le='+Inf')} {cumulative}")
            self.lines.append(f"{name}_sum{_labels(queue=t.queue, job_type=t.job_type)} {_number(float(t.duration_ms_sum))}")
            self.lines.append(f"{name}_count{_labels(queue=t.queue, job_type=t.job_type)} {cumulative}")


def render(snapshot: Snapshot) -> str:
    text = _Text()
    per_priority = [(dict(queue=q.queue, priority=Priority(q.priority).label), q) for q in snapshot.queues]
    text.family("jobqueue_jobs_submitted_total", "counter",
                "Jobs ever enqueued, all queues (the jobs.seq identity sequence).", [({}, snapshot.submitted)])
    text.family("jobqueue_jobs_processed_total", "counter",
                "Attempts finished by workers, any outcome, as reported by the workers.",
                [(dict(queue=t.queue, job_type=t.job_type), t.processed) for t in snapshot.totals])
    text.family("jobqueue_jobs_failed_total", "counter",
                "Attempts that failed (retryable error, timeout or permanent error).",
                [(dict(queue=t.queue, job_type=t.job_type), t.failed) for t in snapshot.totals])
    text.family("jobqueue_jobs_in_dlq", "gauge", "Dead-lettered jobs.",
                [(dict(queue=d.queue, job_type=d.job_type), d.dead) for d in snapshot.dead])
    text.family("jobqueue_queue_depth", "gauge", "Jobs runnable now (pending, or failed and due for their retry).",
                [(labels, q.runnable) for labels, q in per_priority])
    text.family("jobqueue_queue_age_seconds", "gauge", "Age of the oldest runnable job, by its run_at (0: none).",
                [(labels, round(q.oldest_age_seconds, 3)) for labels, q in per_priority])
    text.family("jobqueue_jobs_scheduled", "gauge", "Jobs waiting for a future run_at (delayed, or a retry not yet due).",
                [(labels, q.scheduled) for labels, q in per_priority])
    text.family("jobqueue_jobs_retrying", "gauge", "Jobs in state failed, waiting for their retry.",
                [(labels, q.retrying) for labels, q in per_priority])
    text.family("jobqueue_jobs_processing", "gauge", "Jobs held by a worker.",
                [(labels, q.processing) for labels, q in per_priority])
    text.histogram("jobqueue_worker_processing_time_ms", "Handler time per attempt, in milliseconds.",
                   snapshot.totals, snapshot.bounds)
    live = snapshot.live_workers
    text.family("jobqueue_worker_utilization", "gauge",
                "Share of a live worker's slots busy over its last stats interval (0..1).",
                [(dict(worker=w.id), round(float(w.utilization), 4)) for w in live])
    text.family("jobqueue_worker_count", "gauge", "Live workers (running or stopping, heartbeat recent).",
                [({}, len(live))])
    text.family("jobqueue_metrics_collect_seconds", "gauge", "Time the last collection from the database took.",
                [({}, round(snapshot.collect_seconds, 6))])
    return "\n".join(text.lines) + "\n"
