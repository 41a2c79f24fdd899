"""Calls behind /metrics and the dashboard, and the worker's stats flush (sql/queries/metrics.sql).

`DURATION_BUCKETS_MS` mirrors `jobqueue.duration_bucket_bounds()` in the schema (a test keeps
them equal): workers count attempts into these buckets, the collector renders them as the
`jobqueue_worker_processing_time_ms` histogram.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime
from typing import Sequence

from jobqueue.db.gateway import Call, no_result

DURATION_BUCKETS_MS: tuple[float, ...] = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
RETIRED_WORKER = "(retired)"


@dataclass(frozen=True, slots=True)
class QueueCounts:
    queue: str
    priority: int
    runnable: int
    scheduled: int
    retrying: int
    processing: int
    oldest_age_seconds: float
    processing_age_seconds: float = 0.0  # how long the oldest running attempt has run (0: none)
    overdue_seconds: float = 0.0  # how far the most overdue running attempt is past its deadline


@dataclass(frozen=True, slots=True)
class DeadCount:
    queue: str
    job_type: str
    dead: int


@dataclass(frozen=True, slots=True)
class TypeTotals:
    """Attempts finished per queue and job type, over all workers (`buckets[i]`: not cumulative)."""

    queue: str
    job_type: str
    processed: int
    failed: int
    duration_ms_sum: float
    buckets: tuple[int, ...]
    shed: int = 0  # low-priority retries dead-lettered as shed (the fleet's figure only)


@dataclass(frozen=True, slots=True)
class WorkerRow:
    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    status: str
    jobs_processed: int
    jobs_failed: int
    utilization: float
    busy_seconds: float
    started_at: datetime
    last_heartbeat: datetime
    stuck_handlers: int
    alive: bool


@dataclass(slots=True)
class TypeDelta:
    """What one worker counted for one (queue, job type) since its last flush."""

    processed: int = 0
    failed: int = 0
    duration_ms_sum: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS_MS) + 1))


def _decode_queue_counts(rows: list[tuple]) -> list[QueueCounts]:
    counts = []
    for (
        queue,
        priority,
        runnable,
        scheduled,
        retrying,
        processing,
        oldest_started_at,
        overdue_seconds,
        oldest_run_at,
        measured_at,
    ) in rows:
        age = max((measured_at - oldest_run_at).total_seconds(), 0.0) if oldest_run_at is not None else 0.0
        running_for = (
            max((measured_at - oldest_started_at).total_seconds(), 0.0) if oldest_started_at is not None else 0.0
        )
        counts.append(
            QueueCounts(
                queue, priority, runnable, scheduled, retrying, processing, age, running_for, overdue_seconds or 0.0
            )
        )
    return counts


def queue_counts(*, cap: int, stale_seconds: float, now: datetime | None = None) -> Call[list[QueueCounts]]:
    return Call("metrics_queue_counts", {"cap": cap, "stale_seconds": stale_seconds, "now": now}, _decode_queue_counts)


def dead_letters(*, cap: int) -> Call[list[DeadCount]]:
    return Call("metrics_dead_letters", {"cap": cap}, lambda rows: [DeadCount(*r) for r in rows])


def submitted() -> Call[int]:
    return Call("metrics_submitted", {}, lambda rows: int(rows[0][0]))


def worker_totals() -> Call[list[TypeTotals]]:
    return Call(
        "metrics_worker_totals",
        {},
        lambda rows: [
            TypeTotals(q, t, int(p), int(f), float(s or 0.0), tuple(int(b) for b in (buckets or ())), int(shed or 0))
            for q, t, p, f, s, buckets, shed in rows
        ],
    )


def workers(*, stale_seconds: float, limit: int = 200, now: datetime | None = None) -> Call[list[WorkerRow]]:
    return Call(
        "metrics_workers",
        {"stale_seconds": stale_seconds, "limit": limit, "now": now},
        lambda rows: [WorkerRow(r[0], r[1], r[2], tuple(r[3] or ()), *r[4:]) for r in rows],
    )


def bucket_bounds() -> Call[tuple[float, ...]]:
    return Call("metrics_bucket_bounds", {}, lambda rows: tuple(rows[0][0]))


def flush_worker_stats(
    *,
    worker_id: str,
    deltas: dict[tuple[str, str], TypeDelta],
    utilization: float,
    busy_seconds: float,
    now: datetime | None = None,
) -> Call[None]:
    rows = [
        {
            "queue": queue,
            "job_type": job_type,
            "processed": d.processed,
            "failed": d.failed,
            "duration_ms_sum": d.duration_ms_sum,
            "buckets": d.buckets or [],
        }
        for (queue, job_type), d in deltas.items()
    ]
    return Call(
        "worker_stats_flush",
        {
            "worker_id": worker_id,
            "rows": json.dumps(rows),
            "utilization": utilization,
            "busy_seconds": busy_seconds,
            "now": now,
        },
        no_result,
    )


#: Rows of a worker silent this long are a crashed worker's: folded into '(retired)'.
STALE_STATS_SECONDS = 3600.0


def retire_worker_stats(
    *, worker_id: str | None, older_than_seconds: float = STALE_STATS_SECONDS, now: datetime | None = None
) -> Call[None]:
    return Call(
        "worker_stats_retire", {"worker_id": worker_id, "older_than_seconds": older_than_seconds, "now": now}, no_result
    )


def bucket_index(duration_ms: float, bounds: Sequence[float] = DURATION_BUCKETS_MS) -> int:
    """Index of the first bucket whose bound is >= duration (len(bounds): the overflow bucket)."""
    return bisect_left(bounds, duration_ms)
