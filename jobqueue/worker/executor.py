"""Runs one job's handler and turns whatever happened into an `Outcome` for the ack buffer.

Async handlers run on the event loop, sync ones in the worker's thread pool. A task timeout fails
the attempt as retryable (a sync handler's thread cannot be killed: it runs on, and its late
result is dropped). Classification: `PermanentError` and results that are not JSON (or that hold
a NUL character, which jsonb cannot store) go straight to
the dead-letter queue; `Retry(after=…)` sets the delay; `JobCancelled` after a cancel request
ends the job as cancelled; anything else is retryable with the task's backoff.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import traceback
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from jobqueue.app import TaskDef
from jobqueue.errors import JobCancelled, JobTimeout, PermanentError, Retry
from jobqueue.models import Job
from jobqueue.retry import Backoff
from jobqueue.store.jobs import dumps, holds_nul

COMPLETED, RETRY, DEAD, CANCELLED = "completed", "retry", "dead", "cancelled"


@dataclass(slots=True)
class Outcome:
    job: Job
    kind: str
    duration_ms: float
    result_json: str | None = None
    retry_in: float = 0.0
    error_type: str = ""
    message: str = ""
    traceback: str | None = None


def _error_outcome(job: Job, kind: str, started: float, exc: BaseException, retry_in: float = 0.0) -> Outcome:
    return Outcome(
        job=job, kind=kind, duration_ms=(time.perf_counter() - started) * 1000, retry_in=retry_in,
        error_type=type(exc).__qualname__, message=_storable(str(exc) or type(exc).__name__),
        traceback=_storable("".join(traceback.format_exception(exc))),
    )


def _storable(text: str) -> str:
    """PostgreSQL text cannot hold NUL: an error message quoting binary data must not stop the ack."""
    return text.replace("\x00", "\\x00")


async def execute(job: Job, task: TaskDef | None, threads: Executor,
                  stored_result: Callable[[Job], Awaitable[Any]] | None = None) -> Outcome:
    started = time.perf_counter()
    if task is None:
        exc = LookupError(f"no handler registered for job type {job.job_type!r} on this worker")
        return _error_outcome(job, RETRY, started, exc, retry_in=_backoff_for(None, job))
    try:
        if task.use_stored_result and stored_result is not None and job.attempt > 1:
            # Only a redelivery can find a stored result: an admin retry clears it, a first attempt has none.
            previous = await stored_result(job)
            if previous is not None:
                return Outcome(job=job, kind=COMPLETED, duration_ms=0.0, result_json=previous)
        if task.is_async:
            call = task.handler(job)
        else:
            # The handler's thread sees the caller's context (the job's span), as asyncio.to_thread does.
            call = asyncio.get_running_loop().run_in_executor(
                threads, contextvars.copy_context().run, task.handler, job)
        result = await (asyncio.wait_for(call, task.timeout) if task.timeout else call)
    except asyncio.TimeoutError:
        exc = JobTimeout(f"handler ran longer than its {task.timeout} s timeout")
        return _error_outcome(job, RETRY, started, exc, retry_in=_backoff_for(task, job))
    except PermanentError as exc:
        return _error_outcome(job, DEAD, started, exc)
    except Retry as exc:
        delay = exc.after if exc.after is not None else _backoff_for(task, job)
        return _error_outcome(job, RETRY, started, exc, retry_in=delay)
    except JobCancelled as exc:
        return _error_outcome(job, CANCELLED, started, exc)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return _error_outcome(job, RETRY, started, exc, retry_in=_backoff_for(task, job))
    try:
        result_json = None if result is None else dumps(result)
    except (TypeError, ValueError) as exc:
        return _error_outcome(job, DEAD, started, PermanentError(f"handler result is not JSON: {exc}"))
    if result_json is not None and holds_nul(result_json):
        return _error_outcome(job, DEAD, started, PermanentError(
            "handler result holds a NUL character, which PostgreSQL's jsonb cannot store"))
    return Outcome(job=job, kind=COMPLETED, duration_ms=(time.perf_counter() - started) * 1000,
                   result_json=result_json)


def _backoff_for(task: TaskDef | None, job: Job) -> float:
    return (task.backoff if task else Backoff()).delay(job.attempt)
