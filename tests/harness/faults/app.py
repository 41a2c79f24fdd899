"""The fault campaign's recording app: `jobqueue-worker --app tests.harness.faults.app:queue`.

Every handler run writes one row to ``jobqueue_faults.executions`` (job, attempt, worker pid,
time) and commits it before the handler goes on, so a run counts even when its worker dies right
after it: the campaign counts duplicate executions from these rows, not from the worker's own
word. A write that fails because the database is away is retried with the same token for up to
`RECORD_PATIENCE` seconds (one row per run however often it is retried), so an outage never
turns a run into a handler failure.

Handlers (payload ``{"k": logical job, "ms": work}``):
- ``record`` (async) and ``record_sync`` (a thread of the worker's pool): work ``ms``
  milliseconds, record, return ``{"attempt", "pid"}`` — the attempt a stored result came from.
- poison, for the poison scenario, each recording its run first:
  ``hang`` (async, never returns), ``block`` (sync, blocks its thread forever) — both with a
  2 s task timeout and 2 attempts, so each should end ``dead_letter``; ``huge`` (a result of
  2**28 characters, one more than a jsonb string may hold) and ``not_json`` (a result JSON cannot
  encode) — each should be failed once, not run again. ``JOBQUEUE_FAULTS_HUGE_CHARS`` makes the
  huge result another length (the tests use a very large but storable one, which must complete).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid

from jobqueue.app import JobQueue
from jobqueue.config import Settings
from jobqueue.db import gateway as db
from jobqueue.model.errors import DatabaseUnavailable
from jobqueue.model.jobs import Job
from tests.harness.faults import store as faults_store

queue = JobQueue("faults")

#: How long a handler keeps trying to record its run while the database is unreachable.
RECORD_PATIENCE = 60.0
#: jsonb strings hold at most 2**28 - 1 bytes; the "huge" result is one longer, which PostgreSQL
#: must refuse, unless JOBQUEUE_FAULTS_HUGE_CHARS sets another length (a very large, storable one).
JSONB_STRING_MAX = 2**28 - 1
HUGE_RESULT_CHARS = JSONB_STRING_MAX + 1
POISON_TIMEOUT = 2.0
POISON_ATTEMPTS = 2

_pools: dict[str, object] = {}
_pool_lock = threading.Lock()


def _settings() -> Settings:
    return Settings.from_env()  # the worker's own JOBQUEUE_* environment


async def _async_pool():
    loop_key = f"async-{id(asyncio.get_running_loop())}"
    pool = _pools.get(loop_key)
    if pool is None:
        settings = _settings()
        pool = db.async_pool(
            settings.db.dsn,
            min_size=1,
            max_size=settings.worker.concurrency,
            name="faults-app",
            timeout=2.0,
            connect_timeout=2,
        )
        _pools[loop_key] = pool
        await pool.open(wait=False)
    return pool


def _sync_pool():
    with _pool_lock:
        pool = _pools.get("sync")
        if pool is None:
            settings = _settings()
            pool = db.sync_pool(
                settings.db.dsn, min_size=1, max_size=settings.worker.concurrency, name="faults-app-sync", timeout=2.0
            )
            pool.open(wait=False)
            _pools["sync"] = pool
    return pool


def _record_call(job: Job, fails: bool) -> db.Call[None]:
    return faults_store.record_execution(
        token=uuid.uuid4(), job_id=job.id, attempt=job.attempt, pid=os.getpid(), fails=fails
    )


async def record_run(job: Job, *, fails: bool = False) -> None:
    """Write this run's row and commit it, waiting out an outage (see `RECORD_PATIENCE`)."""
    call = _record_call(job, fails)
    deadline = time.monotonic() + RECORD_PATIENCE
    while True:
        try:
            async with db.connection(await _async_pool()) as conn:
                await db.run(conn, call)
            return
        except DatabaseUnavailable:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def record_run_sync(job: Job, *, fails: bool = False) -> None:
    """`record_run` for sync handlers, on their own thread."""
    call = _record_call(job, fails)
    deadline = time.monotonic() + RECORD_PATIENCE
    while True:
        try:
            with db.connection_sync(_sync_pool()) as conn:
                db.run_sync(conn, call)
            return
        except DatabaseUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _work_seconds(job: Job) -> float:
    return float((job.payload or {}).get("ms", 0)) / 1000


def _answer(job: Job) -> dict:
    return {"attempt": job.attempt, "pid": os.getpid()}


@queue.task("record")
async def record(job: Job) -> dict:
    await asyncio.sleep(_work_seconds(job))
    await record_run(job)
    return _answer(job)


@queue.task("record_sync")
def record_sync(job: Job) -> dict:
    time.sleep(_work_seconds(job))
    record_run_sync(job)
    return _answer(job)


@queue.task("hang", timeout=POISON_TIMEOUT, max_attempts=POISON_ATTEMPTS)
async def hang(job: Job) -> None:
    await record_run(job, fails=True)
    await asyncio.Event().wait()  # nobody ever sets it


@queue.task("block", timeout=POISON_TIMEOUT, max_attempts=POISON_ATTEMPTS)
def block(job: Job) -> None:
    record_run_sync(job, fails=True)
    threading.Event().wait()  # blocks this pool thread for good


@queue.task("huge")
async def huge(job: Job) -> dict:
    await record_run(job)
    chars = int(os.environ.get("JOBQUEUE_FAULTS_HUGE_CHARS") or HUGE_RESULT_CHARS)
    return {"attempt": job.attempt, "blob": "x" * chars}


@queue.task("not_json")
async def not_json(job: Job) -> dict:
    await record_run(job)
    return {"attempt": job.attempt, "when": object()}
