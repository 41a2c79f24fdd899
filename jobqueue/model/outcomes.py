"""`AttemptOutcome`: how one attempt of a job ended, as user code sees it — the middleware around
every attempt (``@queue.middleware``) and the test mode (`jobqueue.testing`) receive it.

It says what the worker asks the database to do with the job next: ``completed`` (with the
handler's ``result``), ``retry`` (after ``retry_in`` seconds), ``dead_letter`` (a `PermanentError`,
a result that cannot be stored, or a failure on the last attempt), ``cancelled`` (the handler
honoured a cancel request) or ``snoozed`` (`CircuitOpen` from a task behind a breaker: back to
pending, the attempt not counted). One case the database decides alone: a queue that sheds low
retries under load dead-letters a ``retry`` of a ``low`` job (dead_reason ``shed``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobqueue.model.jobs import Job

COMPLETED, RETRY, DEAD_LETTER, CANCELLED, SNOOZED = "completed", "retry", "dead_letter", "cancelled", "snoozed"
STATUSES = (COMPLETED, RETRY, DEAD_LETTER, CANCELLED, SNOOZED)


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    job: Job
    #: completed, retry, dead_letter, cancelled or snoozed
    status: str
    #: what the handler returned (completed only; before it is encoded, or encrypted)
    result: Any = None
    #: the exception that ended the attempt: the handler's, a middleware's, a `JobTimeout`, or the
    #: `PermanentError` that refused a result (None when it completed)
    error: BaseException | None = None
    #: seconds until the retry (retry only)
    retry_in: float | None = None
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == COMPLETED

    @property
    def error_type(self) -> str | None:
        return type(self.error).__qualname__ if self.error is not None else None

    def __repr__(self) -> str:
        detail = f"result={self.result!r}" if self.ok else f"error={self.error!r}"
        wait = f", retry_in={self.retry_in:g}" if self.retry_in is not None else ""
        return f"AttemptOutcome({self.status}, {self.job.job_type!r}, attempt {self.job.attempt}, {detail}{wait})"
