"""The test mode, for your own test suite: run a task's handler on a made-up job, or run every job
that is due in your test database, in the test's process, and look at how each attempt ended.

    from jobqueue.testing import drain_sync, perform_job_sync

    outcome = perform_job_sync(queue, "send_email", {"to": "a@b.c"})
    assert outcome.status == "completed" and outcome.result == {"sent": True}

    send_email.enqueue_sync(to="a@b.c")
    assert drain_sync(queue).completed == 1

- `perform_job` (async; `perform_job_sync` blocking): the handler of ``job_type`` on a `Job` made
  here — no database — with the payload as enqueue would store it (JSON, validated the same way),
  the task's queue, priority, max attempts and timeout unless given. It answers an `AttemptOutcome`:
  a `Retry`, a `PermanentError` or a timeout is reported, never raised (``outcome.error`` holds it).
- `drain` (async; `drain_sync` blocking): claims and runs, one at a time, every job of the app's
  types that is due in ``queues`` (default: every queue holding one), through the worker's own claim
  and ack statements, until none is due — jobs the handlers enqueue meanwhile too — and answers a
  `DrainResult`. ``with_scheduled=True`` also runs jobs scheduled for later and retries waiting
  out their backoff, at once, in the order they were due in (their run_at is moved to now).

Both run an attempt exactly as a worker does (`jobqueue.worker.executor`, through
`jobqueue.worker.inline`): its deadline, a sync handler on a thread, the payload's encrypted fields
opened (with ``keys``, default the settings' key ring), the result size limit, the app's
middleware. A drain leaves out what needs a running worker: heartbeats, LISTEN, circuit breakers'
counts, paused queues and the declarations a worker writes at start (see `jobqueue.worker.inline`).

Where a drain runs (``target``): a DSN; an `AsyncClient` or `Client` (its database and settings);
an open ``psycopg.AsyncConnection`` (``drain`` only), whose transaction it runs in — jobs your test
enqueued there uncommitted are found, and rolling it back undoes the drain too; or nothing: the
database ``queue.connect(...)`` named, else JOBQUEUE_DSN. The database must be migrated (``jobqueue
migrate``). Settings (timeouts, limits, keys) come from ``settings``, else JOBQUEUE_*.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, AsyncIterator, Sequence

import psycopg

from jobqueue.app import JobQueue
from jobqueue.client import AsyncClient, Client
from jobqueue.client.validation import NewJob
from jobqueue.config import Settings
from jobqueue.crypto.envelopes import new_job_id
from jobqueue.crypto.keyring import KeyRing
from jobqueue.db import gateway as db
from jobqueue.model.jobs import Job, Priority
from jobqueue.model.outcomes import CANCELLED, COMPLETED, DEAD_LETTER, RETRY, SNOOZED, AttemptOutcome
from jobqueue.worker.inline import DrainLimitExceeded, InlineRunner

__all__ = [
    "AttemptOutcome",
    "DrainLimitExceeded",
    "DrainResult",
    "drain",
    "drain_sync",
    "perform_job",
    "perform_job_sync",
]

#: The most attempts one drain runs before it stops with `DrainLimitExceeded`.
DEFAULT_DRAIN_LIMIT = 10_000


@dataclass(frozen=True)
class DrainResult:
    """Every attempt a drain ran, in the order it ran them, and how many ended each way."""

    outcomes: list[AttemptOutcome]

    def count(self, status: str) -> int:
        return sum(1 for outcome in self.outcomes if outcome.status == status)

    @property
    def completed(self) -> int:
        return self.count(COMPLETED)

    @property
    def retry(self) -> int:
        return self.count(RETRY)

    @property
    def dead_letter(self) -> int:
        return self.count(DEAD_LETTER)

    @property
    def cancelled(self) -> int:
        return self.count(CANCELLED)

    @property
    def snoozed(self) -> int:
        return self.count(SNOOZED)

    @property
    def by_status(self) -> dict[str, int]:
        return dict(Counter(outcome.status for outcome in self.outcomes))

    def results(self, job_type: str | None = None) -> list[Any]:
        """The results of the completed attempts (of ``job_type`` only, when given), in run order."""
        return [o.result for o in self.outcomes if o.ok and (job_type is None or o.job.job_type == job_type)]

    def __len__(self) -> int:
        return len(self.outcomes)

    def __repr__(self) -> str:
        counts = ", ".join(f"{status}={count}" for status, count in self.by_status.items()) or "nothing ran"
        return f"DrainResult({counts})"


async def perform_job(
    app: JobQueue,
    job_type: str,
    payload: Any = None,
    *,
    attempt: int = 1,
    max_attempts: int | None = None,
    queue: str | None = None,
    priority: str | int | Priority | None = None,
    timeout: float | None = None,
    job_id: uuid.UUID | None = None,
    producer_id: str | None = None,
    cancel_requested: bool = False,
    keys: KeyRing | None = None,
    settings: Settings | None = None,
) -> AttemptOutcome:
    """Run ``job_type``'s handler once on a made-up job (see the module docstring); ``attempt``
    of ``max_attempts`` (default the task's) decides whether a failure is a retry or a dead letter."""
    task = app.tasks.get(job_type)
    if task is None:
        known = ", ".join(sorted(app.tasks)) or "none"
        raise LookupError(f"app {app.name!r} has no task {job_type!r} (its tasks: {known})")
    settings = settings or Settings.from_env()
    built = NewJob.build(
        job_type,
        payload,
        queue=task.queue if queue is None else queue,
        priority=task.priority if priority is None else priority,
        timeout=timeout,
    )
    limit = max_attempts if max_attempts is not None else task.max_attempts
    now = datetime.now(timezone.utc)
    if not 1 <= attempt <= limit:
        raise ValueError(f"attempt must be from 1 to max_attempts ({limit}), got {attempt}")
    job = Job(
        job_id or new_job_id(),
        built.queue,
        job_type,
        json.loads(built.payload_json),
        Priority.parse(built.priority),
        attempt,
        limit,
        None,
        cancel_requested,
        now,
        # as a claim sets it: the job's own timeout, else its task's, else the processing TTL
        timeout if timeout is not None else task.timeout or settings.worker.processing_ttl,
        order_key=(now, 0),
        producer_id=producer_id,
    )
    async with InlineRunner(app, settings.worker, keys=keys or settings.encryption.keys) as runner:
        return (await runner.run(job)).view()


def perform_job_sync(app: JobQueue, job_type: str, payload: Any = None, **options: Any) -> AttemptOutcome:
    """`perform_job`, blocking (it runs its own event loop: from async code, ``await perform_job``)."""
    _no_running_loop("perform_job_sync", "perform_job")
    return asyncio.run(perform_job(app, job_type, payload, **options))


async def drain(
    app: JobQueue,
    target: str | AsyncClient | Client | psycopg.AsyncConnection | None = None,
    *,
    queues: Sequence[str] | None = None,
    with_scheduled: bool = False,
    limit: int = DEFAULT_DRAIN_LIMIT,
    keys: KeyRing | None = None,
    settings: Settings | None = None,
) -> DrainResult:
    """Run every due job of the app's types in ``queues`` until none is due (see the module
    docstring); more than ``limit`` attempts is `DrainLimitExceeded`."""
    if queues is not None:
        queues = [queues] if isinstance(queues, str) else list(queues)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"limit must be a whole number of attempts, at least 1 (got {limit!r})")
    settings = _settings_for(app, target, settings)
    keys = keys or settings.encryption.keys
    app.check_keys(keys)  # as a worker does: tasks that encrypt need a key ring
    async with _pool_for(target, settings) as pool:
        async with InlineRunner(
            app, settings.worker, keys=keys, pool=pool, backpressure=settings.backpressure
        ) as runner:
            ran = await runner.drain(queues, with_scheduled=with_scheduled, limit=limit)
    return DrainResult([done.view() for done in ran])


def drain_sync(app: JobQueue, target: str | AsyncClient | Client | None = None, **options: Any) -> DrainResult:
    """`drain`, blocking (its own event loop: from async code, ``await drain``)."""
    _no_running_loop("drain_sync", "drain")
    if isinstance(target, psycopg.AsyncConnection):
        raise TypeError("drain_sync cannot use an AsyncConnection (it belongs to another event loop): await drain")
    return asyncio.run(drain(app, target, **options))


def _no_running_loop(name: str, async_name: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(f"{name}() runs its own event loop and this code runs in one: use `await {async_name}(...)`")


def _settings_for(app: JobQueue, target: object, settings: Settings | None) -> Settings:
    dsn: str | None
    base: Settings | None
    if isinstance(target, (AsyncClient, Client)):
        dsn, base = target.dsn, settings or target.settings
    elif isinstance(target, str):
        dsn, base = target, settings
    elif isinstance(target, psycopg.AsyncConnection) or (target is None and settings is not None):
        dsn, base = None, settings
    elif target is None:
        dsn, base = app.producers.database("drain")
    else:
        raise TypeError(
            "drain's target is a DSN, an AsyncClient or Client, or a psycopg.AsyncConnection "
            f"(got {type(target).__name__})"
        )
    base = base or Settings.from_env()
    return dataclasses.replace(base, db=dataclasses.replace(base.db, dsn=dsn)) if dsn else base


class _OneConnection:
    """A pool of one: the caller's connection, in whatever transaction it has open."""

    def __init__(self, conn: psycopg.AsyncConnection) -> None:
        self._conn = conn

    @contextlib.asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[psycopg.AsyncConnection]:
        yield self._conn


@contextlib.asynccontextmanager
async def _pool_for(target: object, settings: Settings) -> AsyncIterator[Any]:
    if isinstance(target, psycopg.AsyncConnection):
        yield _OneConnection(target)
        return
    pool = db.async_pool(settings.db.dsn, min_size=1, max_size=2, name="jobqueue-testing", settings=settings.db)
    with db.translated_errors():  # an unreachable database: DatabaseUnavailable, in seconds
        await pool.open(wait=True, timeout=10)
    try:
        yield pool
    finally:
        await pool.close()
