"""Queues as admins configure and operators watch them: settings, counts per priority, unserved jobs,
and the names this database knows (a misspelled queue or job type on enqueue is flagged)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Iterable

from jobqueue.model.jobs import Priority


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """One row of ``jobqueue.queue_settings``: paused flag, backpressure limits (None: the API's
    defaults), what enqueue applies when a call gives none — ``job_ttl`` (expiry after run_at;
    None: jobs never expire) and ``idempotency_window`` (None: 24 hours) — and ``shed_low_retries``."""

    queue: str
    paused: bool = False
    soft_limit: int | None = None
    hard_limit: int | None = None
    job_ttl: timedelta | None = None
    idempotency_window: timedelta | None = None
    shed_low_retries: bool = False  # load shedding: low retries dead-lettered (shed) above the soft limit


@dataclass(frozen=True, slots=True)
class PriorityStats:
    """Counts of one queue and priority level (the `jobqueue.queue_stats` view)."""

    priority: Priority
    pending: int
    scheduled: int
    processing: int
    failed: int
    dead: int
    oldest_age_seconds: float


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    settings: QueueSettings
    levels: list[PriorityStats]


@dataclass(frozen=True, slots=True)
class Unserved:
    """Runnable jobs of one queue and job type that no live worker of the queue has a handler for:
    no worker claims them, so they wait, no attempt used (`/queues`, /metrics, the dashboard, and
    `jobqueue jobs list` show them)."""

    queue: str
    job_type: str
    runnable: int  # counted up to the cap per priority level


@dataclass(frozen=True, slots=True)
class KnownNames:
    """The queues and job types this database knows (a worker served them, a task declared them, an
    operator configured them): an enqueue naming anything else is likely a misspelling."""

    queues: frozenset[str]
    job_types: frozenset[str]

    def warnings(self, jobs: Iterable[tuple[str, str]]) -> list[str]:
        """One line per unknown name among (queue, job type) pairs, each named once, in order.
        The jobs are accepted all the same: a producer may deploy before its workers."""
        found: dict[str, None] = {}
        for queue, job_type in jobs:
            if job_type not in self.job_types:
                found[
                    f"job type {job_type!r} was never served by a worker nor declared by a task (a misspelling?); "
                    "the job was accepted and waits for a worker that runs it"
                ] = None
            if queue not in self.queues:
                found[
                    f"queue {queue!r} was never served by a worker nor configured by an operator (a misspelling?); "
                    "the job was accepted and waits for a worker of that queue"
                ] = None
        return list(found)
