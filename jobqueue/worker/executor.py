"""Runs one attempt of a job's handler and turns whatever happened into an `Outcome` for the acks.

Async handlers run on the event loop, sync ones on the worker's `HandlerThreads`. Every attempt
has a deadline (`Job.timeout`, set by the claim: the job's own timeout, else its task's, else the
worker's processing TTL), kept by the worker's `DeadlineWatch`: past it the attempt's task is
cancelled and the attempt fails as a retryable `JobTimeout`. An async handler is cancelled then;
a sync handler's thread cannot be, so it is reported stuck and its late result dropped.

Classification: `PermanentError`, results that are not JSON, hold a NUL character (which jsonb
cannot store) or are larger than ``max_result_bytes`` go straight to the dead-letter queue;
`Retry(after=…)` sets the delay; `JobCancelled` after a cancel request ends the job as cancelled;
an `asyncio.CancelledError` the handler raises itself (not the worker stopping) fails the attempt
like any other error; anything else is retryable with the task's backoff. A job claimed just as
its cancel was requested is not run at all.

Encryption (`jobqueue.crypto.envelopes`): the payload's encrypted fields are decrypted just before the
handler runs, in this process only, each with the associated data of this job (its producer, type
and id) and of the field it sits in: a value sealed for another job or field (`EncryptionMismatch`:
a copied ciphertext), one of the unbound format of before migration 0025 (`EncryptionUnbound`),
one under a key this worker lacks (`EncryptionKeyMissing`, naming the key id) or a damaged one is
dead-lettered at once, the handler never run — no other attempt could open it. A task with
``encrypt_result`` has its result stored encrypted under the current key, bound to the job.

Circuit breakers: a failure (retry or dead) whose exception the task's breaker lists in
``trip_on`` is marked `Outcome.counts_failure`; `CircuitOpen` from a task with a breaker gives the
attempt back (`SNOOZED`: the job returns to pending, the attempt not counted) — from a task without
one it is an ordinary retryable failure. The worker reports both to the breaker before the ack.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from dataclasses import dataclass
from itertools import islice

from jobqueue.app import TaskDef
from jobqueue.crypto.envelopes import Binding, open_payload, seal_result
from jobqueue.crypto.keyring import KeyRing
from jobqueue.model.errors import CircuitOpen, EncryptionError, JobCancelled, JobTimeout, PermanentError, Retry
from jobqueue.model.jobs import Job
from jobqueue.model.payloads import dumps, holds_nul
from jobqueue.model.retry import Backoff
from jobqueue.worker.deadlines import DeadlineWatch
from jobqueue.worker.threads import HandlerThreads

COMPLETED, RETRY, DEAD, CANCELLED = "completed", "retry", "dead", "cancelled"
SNOOZED = "snoozed"  # CircuitOpen: back to pending, the attempt not counted

#: Results above this size are refused (dead-lettered with the reason) rather than sent to
#: PostgreSQL, whose jsonb stops at 255 MB and whose messages stop at 1 GB for a whole ack batch.
DEFAULT_MAX_RESULT_BYTES = 64 * 1024 * 1024


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
    counts_failure: bool = False  # a failure the task's circuit breaker counts (its trip_on lists it)
    written: bool = False  # in the database already: the handler's transaction committed it

    @property
    def size(self) -> int:
        """Roughly what this outcome adds to an ack statement, in bytes."""
        return len(self.result_json or "") + len(self.message) + len(self.traceback or "")


def error_outcome(job: Job, kind: str, started: float, exc: BaseException, retry_in: float = 0.0) -> Outcome:
    return Outcome(
        job=job,
        kind=kind,
        duration_ms=(time.perf_counter() - started) * 1000,
        retry_in=retry_in,
        error_type=type(exc).__qualname__,
        message=_storable(str(exc) or type(exc).__name__),
        traceback=_storable("".join(traceback.format_exception(exc))),
    )


def _storable(text: str) -> str:
    """PostgreSQL text cannot hold NUL: an error message quoting binary data must not stop the ack."""
    return text.replace("\x00", "\\x00")


class HandlerCancelled(Exception):
    """The handler raised `asyncio.CancelledError` although nobody stopped the worker."""


def attempt_timeout(job: Job, task: TaskDef | None) -> float | None:
    """Seconds this attempt may run: its deadline as the claim set it, else the task's timeout."""
    return job.timeout if job.timeout is not None else (task.timeout if task else None)


async def execute(
    job: Job,
    task: TaskDef | None,
    threads: HandlerThreads,
    deadlines: DeadlineWatch,
    *,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    keys: KeyRing | None = None,
) -> Outcome:
    """Runs the attempt in the current task, which the caller has put under ``deadlines``;
    ``keys`` decrypt the payload's encrypted fields (and encrypt the result when the task asks).
    A transaction the handler opened (`Job.transaction`) is settled here, once the outcome is known:
    committed with the completion, or rolled back (jobqueue.worker.transactions)."""
    try:
        outcome = await _execute(job, task, threads, deadlines, max_result_bytes, keys)
    except BaseException:
        if job.open_transaction is not None:
            await asyncio.shield(job.open_transaction.abandon())
        raise
    if job.open_transaction is not None:
        outcome = await job.open_transaction.settle(outcome)
    return outcome


async def _execute(
    job: Job,
    task: TaskDef | None,
    threads: HandlerThreads,
    deadlines: DeadlineWatch,
    max_result_bytes: int,
    keys: KeyRing | None,
) -> Outcome:
    started = time.perf_counter()
    if job.cancel_requested:  # claimed as its cancel committed: no new attempt ever starts
        return error_outcome(job, CANCELLED, started, JobCancelled(f"job {job.id} was cancelled before it started"))
    if task is None:
        exc = LookupError(f"no handler registered for job type {job.job_type!r} on this worker")
        return error_outcome(job, RETRY, started, exc, retry_in=_backoff_for(None, job))
    breaker = task.circuit
    try:
        job.payload = open_payload(job.payload, keys, _binding(job))
    except EncryptionError as exc:
        return error_outcome(job, DEAD, started, exc)

    def failed(kind: str, exc: BaseException, retry_in: float = 0.0) -> Outcome:
        outcome = error_outcome(job, kind, started, exc, retry_in)
        outcome.counts_failure = breaker is not None and breaker.counts(exc)
        return outcome

    try:
        if task.is_async:
            result = await task.handler(job)
        else:
            result = await _in_thread(threads, task, job)
    except PermanentError as exc:
        return failed(DEAD, exc)
    except Retry as exc:
        delay = exc.after if exc.after is not None else _backoff_for(task, job)
        return failed(RETRY, exc, delay)
    except CircuitOpen as exc:
        if breaker is not None:
            return error_outcome(job, SNOOZED, started, exc)
        return failed(
            RETRY,
            RuntimeError(
                f"task {task.name!r} raised CircuitOpen({exc.reason!r}) but has no circuit "
                "breaker: declare one with queue.circuit(...) and name it in "
                "@queue.task(circuit=...)"
            ),
            _backoff_for(task, job),
        )
    except JobCancelled as exc:
        return error_outcome(job, CANCELLED, started, exc)
    except asyncio.CancelledError as exc:
        current = asyncio.current_task()
        if current is None:  # cannot happen inside a task; keeps the narrowing below honest
            raise
        if deadlines.expired(current):
            current.uncancel()
            timeout = attempt_timeout(job, task)
            return failed(RETRY, JobTimeout(f"handler ran past its deadline ({timeout:g} s)"), _backoff_for(task, job))
        if current.cancelling():  # the worker is stopping: the attempt is released
            raise
        cancelled = HandlerCancelled(f"the handler raised asyncio.CancelledError ({exc or 'no message'})")
        cancelled.__cause__ = exc
        return failed(RETRY, cancelled, _backoff_for(task, job))
    except Exception as exc:
        return failed(RETRY, exc, _backoff_for(task, job))
    return _completed(job, result, started, max_result_bytes, keys if task.encrypt_result else None)


def overdue_outcome(job: Job, task: TaskDef | None, grace: float) -> Outcome:
    """The attempt's JobTimeout when its async handler swallowed the cancellation of its deadline
    and is still running ``grace`` seconds later: the worker fails the attempt without it."""
    timeout = attempt_timeout(job, task) or 0.0
    exc = JobTimeout(f"handler ran past its deadline ({timeout:g} s) and ignored its cancellation")
    outcome = error_outcome(job, RETRY, time.perf_counter() - timeout - grace, exc, _backoff_for(task, job))
    outcome.counts_failure = task is not None and task.circuit is not None and task.circuit.counts(exc)
    return outcome


def _binding(job: Job) -> Binding:
    return Binding(job.producer_id, job.job_type, job.id)


async def _in_thread(threads: HandlerThreads, task: TaskDef, job: Job):
    future = threads.submit(task.handler, job)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        threads.mark_stuck(future)  # past the deadline (or stopping): the thread runs on regardless
        raise


def _completed(
    job: Job, result: object, started: float, max_result_bytes: int, seal_with: KeyRing | None = None
) -> Outcome:
    if result is not None and (length := _oversized_string(result, max_result_bytes)):
        return error_outcome(
            job,
            DEAD,
            started,
            PermanentError(
                f"handler result holds a string of {length:,} characters, more than the {max_result_bytes:,} "
                "allowed (JOBQUEUE_MAX_RESULT_BYTES): store large outputs elsewhere and return a reference"
            ),
        )
    try:
        result_json = None if result is None else dumps(result)
    except (TypeError, ValueError) as exc:
        return error_outcome(job, DEAD, started, PermanentError(f"handler result is not JSON: {exc}"))
    if result_json is not None and holds_nul(result_json):
        return error_outcome(
            job,
            DEAD,
            started,
            PermanentError("handler result holds a NUL character, which PostgreSQL's jsonb cannot store"),
        )
    if result_json is not None and seal_with is not None:  # @queue.task(encrypt_result=True)
        result_json = dumps(seal_result(result_json, seal_with, _binding(job)))
    if result_json is not None and len(result_json) > max_result_bytes:
        return error_outcome(
            job,
            DEAD,
            started,
            PermanentError(
                f"handler result is {len(result_json):,} bytes of JSON, more than the {max_result_bytes:,} "
                "allowed (JOBQUEUE_MAX_RESULT_BYTES): store large outputs elsewhere and return a reference"
            ),
        )
    return Outcome(job=job, kind=COMPLETED, duration_ms=(time.perf_counter() - started) * 1000, result_json=result_json)


#: Items of a list or dict result that `_oversized_string` looks at.
SIZE_PROBE_ITEMS = 100


def _oversized_string(value: object, limit: int) -> int:
    """The length of a string (or bytes) longer than ``limit`` that is the result or one of the first
    SIZE_PROBE_ITEMS values of a list or dict result; 0 when there is none. Such a result is refused
    without being encoded: encoding a 256 MB string held the event loop for seconds — on a loaded
    machine longer than a lease, so every job the worker held (the huge one included, at each of
    its attempts) lost its lease and ran again elsewhere. Kept to the top of the result because it
    runs for every job that returns something (about 1 µs for a small dict); a huge string deeper
    down is still refused, once encoded."""
    if isinstance(value, (str, bytes, bytearray)):
        return len(value) if len(value) > limit else 0
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (list, tuple)):
        return 0
    for item in islice(value, SIZE_PROBE_ITEMS):
        if isinstance(item, (str, bytes, bytearray)) and len(item) > limit:
            return len(item)
    return 0


def _backoff_for(task: TaskDef | None, job: Job) -> float:
    return (task.backoff if task else Backoff()).delay(job.attempt)
