"""The system's figures, collected from the database into a `Snapshot`.

One scrape target for everything: what the job table knows (depth, scheduled, waiting for a retry,
processing, dead letters, the oldest runnable job's age — per queue and priority or job type) and
what workers report through `jobqueue.worker_stats` (attempts processed and failed per job type,
the processing-time histogram, utilization, how many workers are alive).

Cheap with millions of rows: every job count walks a partial index over live states (finished
rows are never visited) and stops at ``cap``; the submitted counter is the jobs.seq sequence; the
worker figures are one small row per worker and type. A `Collector` also caches its snapshot for
``ttl`` seconds and lets concurrent callers (several scrapers, every open dashboard) share one
collection in flight.

Rendered for Prometheus by `jobqueue.observability.prometheus` (the metric names are listed there).

Bounded in what producers control: `fold` keeps every declared queue (a live worker serves it,
an admin configured it) and the ``JOBQUEUE_METRICS_MAX_QUEUES`` largest others by name, and sums
the rest into ``queue="(other)"`` — so /metrics, /queues and the dashboard stay small however many
queue names producers invent, and every total still adds up.

`overview(snapshot)` is the same snapshot as JSON for the dashboard, which derives rates and
windowed percentiles from successive snapshots in the browser.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from jobqueue.db import gateway as db
from jobqueue.model.autoscale import Rule, depth_per_worker
from jobqueue.model.circuits import Circuit
from jobqueue.model.errors import DatabaseUnavailable
from jobqueue.model.jobs import Priority
from jobqueue.model.limits import Limit
from jobqueue.model.queues import QueueSettings, Unserved
from jobqueue.store import circuits as circuit_store
from jobqueue.store import limits as limit_store
from jobqueue.store import metrics as metrics_store
from jobqueue.store import queues as queue_store
from jobqueue.store.metrics import DURATION_BUCKETS_MS, DeadCount, QueueCounts, TypeTotals, WorkerRow


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
    paused: frozenset[str] = frozenset()
    circuits: list[Circuit] = field(default_factory=list)
    settings: dict[str, QueueSettings] = field(default_factory=dict)  # every queue an admin configured
    limits: list[Limit] = field(default_factory=list)
    unserved: list[Unserved] = field(default_factory=list)  # runnable jobs no live worker has a handler for
    bounds: tuple[float, ...] = field(default=DURATION_BUCKETS_MS)
    other_queues: int = 0  # queues folded into the OTHER rows (see `fold`)

    @property
    def live_workers(self) -> list[WorkerRow]:
        return [w for w in self.workers if w.alive]


async def collect(
    conn, *, cap: int, stale_seconds: float, now: datetime | None = None, max_queues: int | None = None
) -> Snapshot:
    """One snapshot; with ``max_queues``, `fold`-ed: at most that many undeclared queues by name."""
    started = time.perf_counter()
    queues = await db.run(conn, metrics_store.queue_counts(cap=cap, stale_seconds=stale_seconds, now=now))
    dead = await db.run(conn, metrics_store.dead_letters(cap=cap))
    submitted = await db.run(conn, metrics_store.submitted())
    totals = await db.run(conn, metrics_store.worker_totals())
    workers = await db.run(conn, metrics_store.workers(stale_seconds=stale_seconds, now=now))
    settings = await db.run(conn, queue_store.all_settings())
    circuits = await db.run(conn, circuit_store.list_all())
    limits = await db.run(conn, limit_store.list_all(now=now))
    unserved = await db.run(conn, queue_store.unserved(cap=cap, stale_seconds=stale_seconds))
    snapshot = Snapshot(
        measured_at=now or datetime.now(timezone.utc),
        submitted=submitted,
        queues=queues,
        dead=dead,
        totals=totals,
        workers=workers,
        collect_seconds=time.perf_counter() - started,
        cap=cap,
        paused=frozenset(name for name, queue in settings.items() if queue.paused),
        circuits=circuits,
        settings=settings,
        limits=limits,
        unserved=unserved,
    )
    return snapshot if max_queues is None else fold(snapshot, max_queues)


# --- at most so many queues by name --------------------------------------------------------------

#: The queue (and job type) label of what `fold` sums up.
OTHER = "(other)"


def fold(snapshot: Snapshot, limit: int) -> Snapshot:
    """The snapshot with every declared queue (a live worker serves it, an admin configured it)
    and the ``limit`` largest others (waiting, processing and dead jobs; ties by name) under their
    names, and the rest summed into `OTHER` rows — per priority, ages the oldest of them; dead
    letters likewise, and of at most ``limit`` (queue, job type) pairs, the rest of a listed queue
    under job type `OTHER`. Every total still adds up. A name costs a producer nothing to invent,
    and each would be a row of /queues and the dashboard and series per priority in /metrics
    (three batches of new names once made /metrics 23.7 MB). The workers' attempt counters are
    not folded: workers serve the queues they were told to, and run only their own job types."""
    declared = set(snapshot.settings) | {queue for w in snapshot.live_workers for queue in w.queues}
    size: dict[str, int] = {}
    for q in snapshot.queues:
        size[q.queue] = size.get(q.queue, 0) + q.runnable + q.scheduled + q.processing
    for d in snapshot.dead:
        size[d.queue] = size.get(d.queue, 0) + d.dead
    others = sorted((queue for queue in size if queue not in declared), key=lambda queue: (-size[queue], queue))
    hidden = set(others[limit:])
    if not hidden and len(snapshot.dead) <= limit:
        return snapshot
    return replace(
        snapshot,
        queues=_fold_counts(snapshot.queues, hidden),
        dead=_fold_dead(snapshot.dead, hidden, limit),
        unserved=_fold_unserved(snapshot.unserved, hidden),
        other_queues=len(hidden),
    )


def _fold_counts(counts: list[QueueCounts], hidden: set[str]) -> list[QueueCounts]:
    folded: dict[int, QueueCounts] = {}
    for q in counts:
        if q.queue not in hidden:
            continue
        was = folded.get(q.priority)
        folded[q.priority] = (
            replace(q, queue=OTHER)
            if was is None
            else QueueCounts(
                OTHER,
                q.priority,
                was.runnable + q.runnable,
                was.scheduled + q.scheduled,
                was.retrying + q.retrying,
                was.processing + q.processing,
                max(was.oldest_age_seconds, q.oldest_age_seconds),
                max(was.processing_age_seconds, q.processing_age_seconds),
                max(was.overdue_seconds, q.overdue_seconds),
            )
        )
    return [q for q in counts if q.queue not in hidden] + [folded[level] for level in sorted(folded)]


def _fold_unserved(unserved: list[Unserved], hidden: set[str]) -> list[Unserved]:
    """The unserved jobs of the hidden queues as one (`OTHER`, `OTHER`) row."""
    rest = sum(u.runnable for u in unserved if u.queue in hidden)
    return [u for u in unserved if u.queue not in hidden] + ([Unserved(OTHER, OTHER, rest)] if rest else [])


def _fold_dead(dead: list[DeadCount], hidden: set[str], limit: int) -> list[DeadCount]:
    listed = sorted((d for d in dead if d.queue not in hidden), key=lambda d: (-d.dead, d.queue, d.job_type))
    kept = sorted(listed[:limit], key=lambda d: (d.queue, d.job_type))
    rest: dict[tuple[str, str], int] = {}
    for d in listed[limit:]:
        rest[(d.queue, OTHER)] = rest.get((d.queue, OTHER), 0) + d.dead
    for d in dead:
        if d.queue in hidden:
            rest[(OTHER, OTHER)] = rest.get((OTHER, OTHER), 0) + d.dead
    return kept + [DeadCount(queue, job_type, n) for (queue, job_type), n in sorted(rest.items())]


class Collector:
    """Caches snapshots from ``source`` (the REST API's: `collect` on a connection of its client).

    A snapshot is reused for ``ttl`` seconds (default 2, `JOBQUEUE_METRICS_TTL`) — or ten times
    as long as it took to collect, when that is longer: a large backlog not yet vacuumed makes the
    index walks visit the heap, and collecting must never take more than a tenth of the time.
    Callers arriving during a collection wait for it instead of starting their own, and share its
    failure too: during an outage, K scrapers queued behind one collection get its 503 at once
    rather than waiting K database timeouts one after another.
    """

    FAILURE_TTL = 1.0  # seconds a failed collection answers for, before the next one is tried

    def __init__(self, source: Callable[[], Awaitable[Snapshot]], *, ttl: float = 2.0) -> None:
        self.ttl = ttl
        self._source = source
        self._lock = asyncio.Lock()
        self._cached: Snapshot | None = None
        self._cached_until = 0.0
        self._failure: tuple[float, DatabaseUnavailable] | None = None

    def valid_for(self, snapshot: Snapshot) -> float:
        """Seconds ``snapshot`` is served for after it was measured: how old an answer may be."""
        return max(self.ttl, 10 * snapshot.collect_seconds)

    def _fresh(self) -> Snapshot | None:
        return self._cached if time.monotonic() < self._cached_until else None

    async def snapshot(self) -> Snapshot:
        cached = self._fresh()
        if cached is not None:
            return cached
        async with self._lock:
            cached = self._fresh()
            if cached is not None:
                return cached
            if self._failure is not None and time.monotonic() - self._failure[0] < self.FAILURE_TTL:
                raise self._failure[1]
            try:
                self._cached = await self._source()
            except DatabaseUnavailable as exc:
                self._failure = (time.monotonic(), exc)
                raise
            self._failure = None
            self._cached_until = time.monotonic() + self.valid_for(self._cached)
            return self._cached


def desired_workers(snapshot: Snapshot, *, rule: Rule, low: int, high: int) -> dict[str, int]:
    """Per queue: the live workers serving it, moved one step by the autoscaling rule, within
    low..high. Depth per worker is the queue's runnable depth (0 while paused: workers cannot
    take it) over those workers; utilization is their mean. Stateless: cooldowns are the
    platform's (the HPA behaviour in deploy/k8s/)."""
    runnable: dict[str, int] = {}
    for q in snapshot.queues:
        if q.queue != OTHER:  # not a queue: no worker serves it by that name
            runnable[q.queue] = runnable.get(q.queue, 0) + q.runnable
    live = snapshot.live_workers
    desired = {}
    for queue, depth in sorted(runnable.items()):
        serving = [w for w in live if queue in w.queues]
        utilization = sum(float(w.utilization) for w in serving) / len(serving) if serving else 0.0
        depth = 0 if queue in snapshot.paused else depth
        desired[queue] = rule.next(len(serving), depth_per_worker(depth, len(serving)), utilization, low=low, high=high)
    return desired


def unserved_by_queue(snapshot: Snapshot) -> dict[str, int]:
    """Per queue, the runnable jobs of types no live worker of it serves (every queue with jobs: 0 too)."""
    counts = {q.queue: 0 for q in snapshot.queues}
    for u in snapshot.unserved:
        counts[u.queue] = counts.get(u.queue, 0) + u.runnable
    return counts


# --- the dashboard's JSON ----------------------------------------------------------------------------


def overview(snapshot: Snapshot) -> dict[str, Any]:
    """Totals, per-queue rows, per-type counters, the summed histogram and the workers, as plain JSON."""
    queues: dict[str, dict[str, Any]] = {}

    def queue_row(name: str) -> dict[str, Any]:
        return queues.setdefault(
            name,
            {
                "queue": name,
                "paused": name in snapshot.paused,
                "depth": 0,
                "scheduled": 0,
                "retrying": 0,
                "processing": 0,
                "dead": 0,
                "oldest_age_seconds": 0.0,
                "processing_age_seconds": 0.0,
                "unserved": 0,
                "unserved_job_types": [],
                "depth_by_priority": {p.label: 0 for p in Priority},
                **({"other_queues": snapshot.other_queues} if name == OTHER else {}),
            },
        )

    for q in snapshot.queues:
        row = queue_row(q.queue)
        row["depth"] += q.runnable
        row["scheduled"] += q.scheduled
        row["retrying"] += q.retrying
        row["processing"] += q.processing
        row["depth_by_priority"][Priority(q.priority).label] += q.runnable
        row["oldest_age_seconds"] = max(row["oldest_age_seconds"], round(q.oldest_age_seconds, 3))
        row["processing_age_seconds"] = max(row["processing_age_seconds"], round(q.processing_age_seconds, 3))
    for d in snapshot.dead:
        queue_row(d.queue)["dead"] += d.dead
    for u in snapshot.unserved:
        queue_row(u.queue)["unserved"] += u.runnable
        queue_row(u.queue)["unserved_job_types"].append(u.job_type)
    for name in snapshot.paused:
        queue_row(name)
    dead_by_type = {(d.queue, d.job_type): d.dead for d in snapshot.dead}
    buckets = [0] * (len(snapshot.bounds) + 1)
    for t in snapshot.totals:
        for index, count in enumerate(t.buckets[: len(buckets)]):
            buckets[index] += count
    live = snapshot.live_workers
    return {
        "measured_at": snapshot.measured_at.isoformat(),
        "submitted": snapshot.submitted,
        "processed": sum(t.processed for t in snapshot.totals),
        "failed": sum(t.failed for t in snapshot.totals),
        "depth": sum(r["depth"] for r in queues.values()),
        "scheduled": sum(r["scheduled"] for r in queues.values()),
        "retrying": sum(r["retrying"] for r in queues.values()),
        "processing": sum(r["processing"] for r in queues.values()),
        "dead": sum(d.dead for d in snapshot.dead),
        "count_cap": snapshot.cap,
        "worker_count": len(live),
        "utilization": round(sum(float(w.utilization) for w in live) / len(live), 4) if live else 0.0,
        "bounds_ms": list(snapshot.bounds),
        "buckets": buckets,
        "queues": sorted(queues.values(), key=lambda r: (r["queue"] == OTHER, r["queue"])),  # the folded ones last
        "job_types": [
            {
                "queue": t.queue,
                "job_type": t.job_type,
                "processed": t.processed,
                "failed": t.failed,
                "dead": dead_by_type.get((t.queue, t.job_type), 0),
                "mean_ms": round(t.duration_ms_sum / t.processed, 3) if t.processed else None,
            }
            for t in snapshot.totals
        ],
        "workers": [
            {
                "id": w.id,
                "host": w.host,
                "pid": w.pid,
                "queues": list(w.queues),
                "concurrency": w.concurrency,
                "status": w.status if w.alive or w.status == "stopped" else "lost",
                "alive": w.alive,
                "utilization": round(float(w.utilization), 4),
                "jobs_processed": w.jobs_processed,
                "jobs_failed": w.jobs_failed,
                "stuck_handlers": w.stuck_handlers,
                "started_at": w.started_at.isoformat(),
                "heartbeat_age_seconds": round(max((snapshot.measured_at - w.last_heartbeat).total_seconds(), 0.0), 1),
            }
            for w in snapshot.workers
        ],
        "circuits": [
            {
                "name": c.name,
                "state": c.state,
                "failures": c.failures,
                "threshold": c.threshold,
                "forced_by_admin": c.forced_by_admin,
                "job_types": c.job_types,
                "opened_at": c.opened_at.isoformat() if c.opened_at else None,
            }
            for c in snapshot.circuits
        ],
        "collect_ms": round(snapshot.collect_seconds * 1000, 2),
    }
