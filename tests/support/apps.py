"""A JobQueue with handlers the tests need: recording runs, blocking, failing on demand."""

from __future__ import annotations

import asyncio
import threading
import time

from jobqueue import Backoff, JobQueue, PermanentError, Retry
from jobqueue.models import Job

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
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                     "AND pid <> pg_backend_pid() AND application_name <> 'test-observer'")
    _record(job)
    return {"cut": True}
