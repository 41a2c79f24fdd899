"""A JobQueue with handlers the tests need: recording runs, blocking, failing on demand."""

from __future__ import annotations

import asyncio
import threading
import time

from jobqueue import Backoff, JobQueue, PermanentError, Retry
from jobqueue.model.jobs import Job

queue = JobQueue("tests")

#: (job_id, attempt, job_type, payload) of every handler run in this process, in start order.
runs: list[tuple] = []
_lock = threading.Lock()

fast = Backoff(base=0.05, multiplier=2.0, max=0.2, jitter=0.0)


def _record(job: Job) -> None:
    with _lock:
        runs.append((job.id, job.attempt, job.job_type, job.payload))


@queue.task("record")
async def record(job: Job):
    _record(job)
    return {"ok": True, "n": (job.payload or {}).get("n")}


@queue.task("record_sync")
def record_sync(job: Job):
    _record(job)
    return {"thread": threading.current_thread().name}


@queue.task("slow", timeout=60)
async def slow(job: Job):
    _record(job)
    seconds = float((job.payload or {}).get("seconds", 1.0))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        job.raise_if_cancelled()
        await asyncio.sleep(0.02)
    return {"slept": seconds}


@queue.task("always_fails", max_attempts=3, backoff=fast)
async def always_fails(job: Job):
    _record(job)
    raise ValueError(f"boom on attempt {job.attempt}")


@queue.task("permanent", backoff=fast)
async def permanent(job: Job):
    _record(job)
    raise PermanentError("invalid payload")


@queue.task("retry_after", max_attempts=2)
async def retry_after(job: Job):
    _record(job)
    if job.attempt == 1:
        raise Retry(after=0.3, reason="throttled")
    return {"attempt": job.attempt}


@queue.task("times_out", timeout=0.1, max_attempts=2, backoff=fast)
async def times_out(job: Job):
    _record(job)
    await asyncio.sleep(5)


@queue.task("unserialisable")
async def unserialisable(job: Job):
    return {"when": object()}


@queue.task("nul_result")
async def nul_result(job: Job):
    return {"bytes": "a\x00b"}  # jsonb cannot store NUL


@queue.task("nul_error", max_attempts=1)
async def nul_error(job: Job):
    raise ValueError("could not parse b'\x00\x01'\x00")  # nor can text


@queue.task("cut_connections")
def cut_connections(job: Job):
    """Terminates every other session of its database (but the test's observer) just before it
    returns, so the worker's pooled connections are dead when it tries to write the ack."""
    import psycopg

    with psycopg.connect(job.payload["dsn"], autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND application_name <> 'test-observer'"
        )
    _record(job)
    return {"cut": True}


@queue.task("ignores_cancel_then_fails", max_attempts=3, backoff=fast)
async def ignores_cancel_then_fails(job: Job):
    """Runs until its cancel is requested, then fails with an ordinary (retryable) error."""
    _record(job)
    for _ in range(500):
        if job.cancel_requested:
            break
        await asyncio.sleep(0.01)
    raise ValueError("failed after the cancel request, without honouring it")


@queue.task("ignores_cancel", max_attempts=3, backoff=fast)
async def ignores_cancel(job: Job):
    """Sleeps for payload seconds whatever happens (a handler that never checks for cancel)."""
    _record(job)
    await asyncio.sleep(float((job.payload or {}).get("seconds", 30)))


@queue.task("raises_cancelled", max_attempts=3, backoff=fast)
async def raises_cancelled(job: Job):
    """Attempt 1 raises asyncio.CancelledError itself (as code awaiting a cancelled future does)."""
    _record(job)
    if job.attempt == 1:
        raise asyncio.CancelledError("an inner operation was cancelled")
    return {"attempt": job.attempt}


@queue.task("hangs", max_attempts=2, backoff=fast)
async def hangs(job: Job):
    """Never returns by itself (no task timeout: the worker's processing TTL is its deadline)."""
    _record(job)
    await asyncio.Event().wait()


@queue.task("fails_fast", max_attempts=2, backoff=Backoff(base=0.5, multiplier=1.0, max=0.5, jitter=0.0))
async def fails_fast(job: Job):
    _record(job)
    if job.attempt == 1:
        raise ValueError("first attempt fails")
    return {"attempt": job.attempt}


@queue.task("big_result")
async def big_result(job: Job):
    return {"blob": "x" * int((job.payload or {}).get("bytes", 10_000))}


_forever = threading.Event()  # never set: a sync handler waiting on it blocks for good


@queue.task("blocks_forever", timeout=0.5, max_attempts=1)
def blocks_forever(job: Job):
    _record(job)
    _forever.wait()


@queue.task("gated_flaky", timeout=60, max_attempts=3, backoff=fast)
async def gated_flaky(job: Job):
    """Attempt 1 waits until the file payload["gate"] exists, then fails retryably; later attempts
    succeed (the test decides when the first attempts fail, e.g. once a backlog is in place)."""
    import os

    _record(job)
    if job.attempt > 1:
        return {"attempt": job.attempt}
    while not os.path.exists(job.payload["gate"]):
        await asyncio.sleep(0.02)
    raise TimeoutError("the upstream timed out")


#: set by a test to let the swallows_cancel handlers of this process end (before its loop closes)
swallowers_released = threading.Event()


@queue.task("swallows_cancel", timeout=0.3, max_attempts=1)
async def swallows_cancel(job: Job):
    """Catches every cancellation and carries on: it never ends by itself, whatever the deadline,
    until a test sets ``swallowers_released``."""
    _record(job)
    while not swallowers_released.is_set():
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            pass
