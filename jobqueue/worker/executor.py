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

Middleware (``@queue.middleware``, `jobqueue.runtime.middleware`) wraps every attempt whose handler
starts, in the attempt's task and under its deadline, on the event loop (for sync handlers too:
contextvars it sets reach the handler's thread, which runs in a copy of the attempt's context). It
is shown the payload as stored and, for an ``encrypt_result`` task, no result: what is decrypted
for the handler stays with the handler. An exception it raises is the attempt's (see `_wrapped`),
so a failing log or metrics hook costs a retry, never the job. `run_attempt` answers, beside the
`Outcome`, the `AttemptOutcome` middleware and the test mode (`jobqueue.testing`) are shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from dataclasses import dataclass
from itertools import islice
from typing import Any, Sequence

from jobqueue.app import TaskDef
from jobqueue.crypto.envelopes import Binding, open_payload, seal_result
from jobqueue.crypto.keyring import KeyRing
from jobqueue.model.errors import CircuitOpen, EncryptionError, JobCancelled, JobTimeout, PermanentError, Retry
from jobqueue.model.jobs import Job
from jobqueue.model.outcomes import DEAD_LETTER, AttemptOutcome
from jobqueue.model.payloads import dumps, holds_nul
from jobqueue.model.retry import Backoff
from jobqueue.runtime.middleware import Entered, Middleware
from jobqueue.worker.deadlines import DeadlineWatch
from jobqueue.worker.threads import HandlerThreads

log = logging.getLogger("jobqueue.worker")

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
    middleware: Sequence[Middleware] = (),
) -> Outcome:
    """Runs the attempt in the current task, which the caller has put under ``deadlines``;
    ``keys`` decrypt the payload's encrypted fields (and encrypt the result when the task asks);
    ``middleware`` (the app's) wraps it. (`run_attempt` with one coroutine less: the hot path.) A
    transaction the handler opened (`Job.transaction`) is settled as the handler ends, committed
    with the completion or rolled back (`_handle`, jobqueue.worker.transactions)."""
    started = time.perf_counter()
    ran = _not_started(job, task, started)
    if ran is None:
        assert task is not None  # for the type checker: _not_started answers a job without a task
        if middleware:
            ran = await _wrapped(middleware, job, task, threads, deadlines, started, max_result_bytes, keys)
        else:
            ran = await _handle(job, task, threads, deadlines, started, max_result_bytes, keys)
    return ran.outcome


@dataclass(slots=True)
class Ran:
    """An attempt's `Outcome` for the acks, with what user code is shown of it (`view`): the
    handler's result as it returned it, and the exception that ended the attempt."""

    outcome: Outcome
    result: Any = None
    error: BaseException | None = None

    def view(self, *, hide_result: bool = False) -> AttemptOutcome:
        """``hide_result``: leave the result out (an ``encrypt_result`` task's, for middleware)."""
        outcome = self.outcome
        status = _STATUS[outcome.kind]
        if status == RETRY and outcome.job.is_last_attempt:
            status = DEAD_LETTER  # the ack dead-letters a retry with no attempt left
        return AttemptOutcome(
            job=outcome.job,
            status=status,
            result=self.result if outcome.kind == COMPLETED and not hide_result else None,
            error=self.error,
            retry_in=outcome.retry_in if status == RETRY else None,
            duration_ms=outcome.duration_ms,
        )


_STATUS = {COMPLETED: "completed", RETRY: RETRY, DEAD: DEAD_LETTER, CANCELLED: "cancelled", SNOOZED: SNOOZED}


async def run_attempt(
    job: Job,
    task: TaskDef | None,
    threads: HandlerThreads,
    deadlines: DeadlineWatch,
    *,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    keys: KeyRing | None = None,
    middleware: Sequence[Middleware] = (),
) -> Ran:
    """`execute`, answering what the middleware and the test mode are shown too. An attempt that
    never starts its handler — claimed as its cancel committed, or of a type this app has no
    handler for — runs no middleware."""
    started = time.perf_counter()
    ran = _not_started(job, task, started)
    if ran is not None:
        return ran
    assert task is not None  # for the type checker: _not_started answers a job without a task
    if not middleware:
        return await _handle(job, task, threads, deadlines, started, max_result_bytes, keys)
    return await _wrapped(middleware, job, task, threads, deadlines, started, max_result_bytes, keys)


def _not_started(job: Job, task: TaskDef | None, started: float) -> Ran | None:
    """The end of an attempt whose handler never starts; None when it starts."""
    if job.cancel_requested:  # claimed as its cancel committed: no new attempt ever starts
        exc: BaseException = JobCancelled(f"job {job.id} was cancelled before it started")
        return Ran(error_outcome(job, CANCELLED, started, exc), error=exc)
    if task is None:
        exc = LookupError(f"no handler registered for job type {job.job_type!r} on this worker")
        return Ran(error_outcome(job, RETRY, started, exc, retry_in=_backoff_for(None, job)), error=exc)
    return None


async def _handle(
    job: Job,
    task: TaskDef,
    threads: HandlerThreads,
    deadlines: DeadlineWatch,
    started: float,
    max_result_bytes: int,
    keys: KeyRing | None,
) -> Ran:
    try:
        job.payload = open_payload(job.payload, keys, _binding(job))
    except EncryptionError as exc:
        return Ran(error_outcome(job, DEAD, started, exc), error=exc)
    try:
        if task.is_async:
            result = await task.handler(job)
        else:
            result = await _in_thread(threads, task, job)
    except BaseException as exc:
        if job.open_transaction is None:
            return _failed(exc, job, task, started, deadlines)
        try:
            ran = _failed(exc, job, task, started, deadlines)
        except BaseException:  # released (the worker stops): nothing of the attempt commits
            await asyncio.shield(job.open_transaction.abandon())
            raise
        await job.open_transaction.abandon()  # a failed attempt's writes roll back
        return ran
    outcome = _completed(job, result, started, max_result_bytes, keys if task.encrypt_result else None)
    if job.open_transaction is not None:  # the handler's writes commit with this completion, or not at all
        outcome = await job.open_transaction.settle(outcome)
        if outcome.kind != COMPLETED and job.open_transaction.error is not None:
            return Ran(outcome, error=job.open_transaction.error)
    if outcome.kind == COMPLETED:
        return Ran(outcome, result=result)
    return Ran(outcome, error=PermanentError(outcome.message))  # a result that cannot be stored


async def _wrapped(
    middleware: Sequence[Middleware],
    job: Job,
    task: TaskDef,
    threads: HandlerThreads,
    deadlines: DeadlineWatch,
    started: float,
    max_result_bytes: int,
    keys: KeyRing | None,
) -> Ran:
    """The attempt inside its middleware, outermost (first declared) first. An exception one of
    them raises, before or after the handler, is the attempt's: classified as the handler's would
    be (an ordinary one is a retry with the task's backoff, a `PermanentError` a dead letter), its
    message naming the middleware, and shown to the middleware outside it. Middleware sees the
    payload as stored (encrypted fields still sealed); only the handler sees them opened. An
    attempt given back at shutdown closes the middleware it entered (`Middleware.close`)."""
    entered: list[tuple[Middleware, Entered]] = []
    sealed = job.payload
    ran: Ran | None = None
    try:
        for hook in middleware:
            try:
                entered.append((hook, await hook.enter(job)))
            except BaseException as exc:
                ran = _hook_failed(hook, exc, job, task, started, deadlines)
                break
        if ran is None:
            ran = await _handle(job, task, threads, deadlines, started, max_result_bytes, keys)
            job.payload = sealed
        while entered:
            hook, generator = entered.pop()
            try:
                await hook.exit(generator, ran.view(hide_result=task.encrypt_result))
            except BaseException as exc:
                if ran.outcome.written:  # committed with the handler's transaction: that stands
                    log.warning(
                        "job %s: middleware %s failed after its transaction committed: %s", job.id, hook.name, exc
                    )
                    continue
                ran = _hook_failed(hook, exc, job, task, started, deadlines)
    except BaseException:  # the worker is stopping: the attempt is released, nothing to show
        job.payload = sealed
        for hook, generator in reversed(entered):
            with contextlib.suppress(BaseException):
                await hook.close(generator)
        raise
    return ran


def _hook_failed(
    hook: Middleware, exc: BaseException, job: Job, task: TaskDef, started: float, deadlines: DeadlineWatch
) -> Ran:
    ran = _failed(exc, job, task, started, deadlines)
    ran.outcome.message = f"in middleware {hook.name}: {ran.outcome.message}"
    return ran


def _failed(exc: BaseException, job: Job, task: TaskDef, started: float, deadlines: DeadlineWatch) -> Ran:
    """What the handler's (or a middleware's) exception makes of the attempt. The worker's own
    cancellation (it is stopping) and exceptions that are not errors (KeyboardInterrupt) are raised
    again: the attempt is released, not failed."""
    breaker = task.circuit

    def failed(kind: str, error: BaseException, retry_in: float = 0.0) -> Ran:
        outcome = error_outcome(job, kind, started, error, retry_in)
        outcome.counts_failure = breaker is not None and breaker.counts(error)
        return Ran(outcome, error=error)

    if isinstance(exc, PermanentError):
        return failed(DEAD, exc)
    if isinstance(exc, Retry):
        return failed(RETRY, exc, exc.after if exc.after is not None else _backoff_for(task, job))
    if isinstance(exc, CircuitOpen):
        if breaker is not None:
            return Ran(error_outcome(job, SNOOZED, started, exc), error=exc)
        return failed(
            RETRY,
            RuntimeError(
                f"task {task.name!r} raised CircuitOpen({exc.reason!r}) but has no circuit "
                "breaker: declare one with queue.circuit(...) and name it in "
                "@queue.task(circuit=...)"
            ),
            _backoff_for(task, job),
        )
    if isinstance(exc, JobCancelled):
        return Ran(error_outcome(job, CANCELLED, started, exc), error=exc)
    if isinstance(exc, asyncio.CancelledError):
        current = asyncio.current_task()
        if current is None:  # cannot happen inside a task; keeps the narrowing below honest
            raise exc
        if deadlines.expired(current):
            current.uncancel()
            timeout = attempt_timeout(job, task)
            return failed(RETRY, JobTimeout(f"handler ran past its deadline ({timeout:g} s)"), _backoff_for(task, job))
        if current.cancelling():  # the worker is stopping: the attempt is released
            raise exc
        cancelled = HandlerCancelled(f"the handler raised asyncio.CancelledError ({exc or 'no message'})")
        cancelled.__cause__ = exc
        return failed(RETRY, cancelled, _backoff_for(task, job))
    if not isinstance(exc, Exception):
        raise exc
    return failed(RETRY, exc, _backoff_for(task, job))


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
