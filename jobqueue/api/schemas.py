"""Request and response bodies of the REST API (the queue endpoints' are in `jobqueue.api.queue_schemas`).
Handlers build these from client results:
database rows never leave the client, and nothing here carries more than the API promises."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from jobqueue.crypto.envelopes import redact
from jobqueue.model.jobs import JobInfo, JobProgress, JobSummary

INT32 = 2**31 - 1
TEN_YEARS = 10 * 366 * 24 * 3600.0


def seconds(span: timedelta | None) -> float | None:
    return None if span is None else span.total_seconds()


class ErrorBody(msgspec.Struct, omit_defaults=True):
    error: str
    message: str
    field: str | None = None
    state: str | None = None


class JobSubmission(msgspec.Struct, forbid_unknown_fields=True):
    """One job to submit. Validated exactly like `client.enqueue` and `jobqueue.enqueue()` in SQL."""

    job_type: Annotated[str, Meta(description="names the handler; 1 to 255 characters, not blank")]
    payload: Annotated[Any, Meta(description="any JSON value (default {})")] = None
    priority: Annotated[str | int, Meta(description="critical, high, normal (default) or low")] = "normal"
    queue: Annotated[str, Meta(description="1 to 255 characters, not blank (default: default)")] = "default"
    run_at: Annotated[
        datetime | None,
        Meta(description=("timezone-aware start time (not with delay_seconds); one in the past means now")),
    ] = None
    delay_seconds: Annotated[float, Meta(le=TEN_YEARS, description="start after this many seconds")] | None = None
    max_attempts: Annotated[int, Meta(le=INT32, description="tries in all (default: the task's, else 4)")] | None = None
    idempotency_key: Annotated[
        str | None,
        Meta(
            description="within its window, submitting this key again returns the job first submitted with it "
            "(200), whatever that job's state; at most 255 characters"
        ),
    ] = None
    idempotency_window_seconds: (
        Annotated[
            float,
            Meta(
                le=TEN_YEARS,
                description=(
                    "how long the key is held after submission (or after run_at when later); default: the queue's, "
                    "else 24 h"
                ),
            ),
        ]
        | None
    ) = None
    idempotency_mismatch: Annotated[
        str | None,
        Meta(
            description=(
                "return (default): a repeat of the key gets the original job even if job_type, queue or payload "
                "differ; reject: such a repeat is 409 idempotency_mismatch"
            )
        ),
    ] = None
    ordering_key: Annotated[
        str | None,
        Meta(
            description=(
                "jobs of this producer with the same key run one at a time, in submission order; a retrying job "
                "holds its key until it completes, dead-letters or is cancelled; at most 255 characters"
            )
        ),
    ] = None
    timeout_seconds: (
        Annotated[
            float,
            Meta(
                le=TEN_YEARS,
                description=(
                    "deadline of each attempt (default: the task's timeout, else the worker's processing TTL)"
                ),
            ),
        ]
        | None
    ) = None
    expires_at: Annotated[
        datetime | None,
        Meta(
            description=(
                "timezone-aware; a job still waiting then is dead-lettered as expired (not with "
                "expire_after_seconds; default: the queue's job TTL after run_at, else never)"
            )
        ),
    ] = None
    expire_after_seconds: (
        Annotated[float, Meta(le=TEN_YEARS, description=("expires this many seconds after its run_at"))] | None
    ) = None
    encrypt: Annotated[
        list[str] | None,
        Meta(
            description=(
                'dotted payload fields to encrypt before the job is stored (e.g. ["card.number", "ssn"]), at most '
                '100; the task\'s own encrypted fields are encrypted too. Encrypted values read back as "[encrypted]"'
            )
        ),
    ] = None

    def enqueue_fields(self, *, producer_id: str, traceparent: str | None) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "job_type": self.job_type,
            "payload": self.payload,
            "priority": self.priority,
            "queue": self.queue,
            "producer_id": producer_id,
        }
        if traceparent is not None:
            fields["traceparent"] = traceparent
        for option, name in _OPTIONS:  # per job of a batch: the options it gives, looked up by name
            value = getattr(self, option)
            if value is not None:
                fields[name] = value
        return fields


#: `JobSubmission`'s optional fields and the enqueue field each one is.
_OPTIONS = (
    ("run_at", "run_at"),
    ("delay_seconds", "delay"),
    ("max_attempts", "max_attempts"),
    ("idempotency_key", "idempotency_key"),
    ("timeout_seconds", "timeout"),
    ("expires_at", "expires_at"),
    ("expire_after_seconds", "expire_after"),
    ("idempotency_window_seconds", "idempotency_window"),
    ("idempotency_mismatch", "idempotency_mismatch"),
    ("ordering_key", "ordering_key"),
    ("encrypt", "encrypt"),
)


#: The enqueue's name of each option whose REST name differs (``delay`` is sent as ``delay_seconds``).
_SENT_AS = {name: option for option, name in _OPTIONS if name != option}
_ENQUEUE_NAMES = re.compile(r"\b(" + "|".join(map(re.escape, _SENT_AS)) + r")\b")


def as_sent(text: str) -> str:
    """A field path or message with the enqueue's option names put back as the request named them:
    ``jobs[2].delay`` → ``jobs[2].delay_seconds`` (before, a 422 named a field the caller never sent)."""
    return _ENQUEUE_NAMES.sub(lambda found: _SENT_AS[found.group(1)], text)


class BatchSubmission(msgspec.Struct, forbid_unknown_fields=True):
    jobs: list[JobSubmission]


class JobLinks(msgspec.Struct):
    self_: str = msgspec.field(name="self")
    result: str = ""
    cancel: str = ""

    @classmethod
    def of(cls, job_id: uuid.UUID) -> "JobLinks":
        path = f"/jobs/{job_id}"  # one UUID formatting, not three: a batch answers a thousand
        return cls(path, path + "/result", path + "/cancel")


class SubmittedJob(msgspec.Struct):
    id: uuid.UUID
    state: str
    created: bool
    links: JobLinks
    #: a repeat (created false) of a completed job: its result
    result: Any = None
    #: a queue or job type no worker ever served and nothing declared (a misspelling?); left out when none
    warnings: list[str] | msgspec.UnsetType = msgspec.UNSET


class SubmittedBatch(msgspec.Struct):
    jobs: list[SubmittedJob]
    created: int
    #: as a single submission's, for every job of the batch; left out when none
    warnings: list[str] | msgspec.UnsetType = msgspec.UNSET


class AttemptErrorOut(msgspec.Struct):
    attempt: int
    error_type: str
    message: str
    traceback: str | None
    worker_id: str | None
    failed_at: datetime


class ProgressOut(msgspec.Struct):
    """What the running (or last) attempt reported: done out of total (None: unknown), a message."""

    done: float
    total: float | None
    message: str | None
    at: datetime
    attempt: int

    @classmethod
    def of(cls, progress: JobProgress | None) -> "ProgressOut | None":
        if progress is None:
            return None
        return cls(progress.done, progress.total, progress.message, progress.at, progress.attempt)


class JobDetail(msgspec.Struct):
    id: uuid.UUID
    queue: str
    job_type: str
    priority: str
    state: str
    attempts: int
    max_attempts: int
    payload: Any
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    idempotency_key: str | None
    producer_id: str | None
    cancel_requested: bool
    result: Any
    last_error: AttemptErrorOut | None
    final_error: Any
    duration_ms: float | None
    errors: list[AttemptErrorOut]
    links: JobLinks
    timeout_seconds: float | None
    expires_at: datetime | None
    dead_reason: str | None  # dead_letter only: attempts_exhausted, permanent_error, expired or shed
    ordering_key: str | None = None
    progress: ProgressOut | None = None

    @classmethod
    def of(cls, info: JobInfo, *, tracebacks: bool = True) -> "JobDetail":
        """``tracebacks``: whether the reader may see the handlers' tracebacks (admins); producers
        get each error's type and message, not the code paths of the workers that ran them."""
        errors = [
            AttemptErrorOut(
                e.attempt, e.error_type, e.message, e.traceback if tracebacks else None, e.worker_id, e.failed_at
            )
            for e in info.errors
        ]
        final_error = info.final_error
        if not tracebacks and isinstance(final_error, dict) and "traceback" in final_error:
            final_error = {**final_error, "traceback": None}
        return cls(
            info.id,
            info.queue,
            info.job_type,
            info.priority.label,
            info.state.value,
            info.attempts,
            info.max_attempts,
            redact(info.payload),
            info.run_at,
            info.created_at,
            info.updated_at,
            info.started_at,
            info.finished_at,
            info.idempotency_key,
            info.producer_id,
            info.cancel_requested,
            redact(info.result),
            errors[-1] if errors else None,
            final_error,
            info.duration_ms,
            errors,
            JobLinks.of(info.id),
            seconds(info.timeout),
            info.expires_at,
            info.dead_reason,
            info.ordering_key,
            ProgressOut.of(info.progress),
        )


class JobResult(msgspec.Struct):
    job_id: uuid.UUID
    state: str
    result: Any
    duration_ms: float | None
    finished_at: datetime | None


class JobListItem(msgspec.Struct):
    id: uuid.UUID
    queue: str
    job_type: str
    priority: str
    state: str
    attempts: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    producer_id: str | None
    last_error_type: str | None
    last_error: str | None
    dead_reason: str | None  # dead_letter only: attempts_exhausted, permanent_error, expired or shed
    links: JobLinks

    @classmethod
    def of(cls, job: JobSummary) -> "JobListItem":
        return cls(
            job.id,
            job.queue,
            job.job_type,
            job.priority.label,
            job.state.value,
            job.attempts,
            job.max_attempts,
            job.run_at,
            job.created_at,
            job.updated_at,
            job.finished_at,
            job.producer_id,
            job.last_error_type,
            job.last_error,
            job.dead_reason,
            JobLinks.of(job.id),
        )


class JobList(msgspec.Struct):
    jobs: list[JobListItem]
    next_cursor: str | None


class CancelResult(msgspec.Struct):
    id: uuid.UUID
    outcome: str


class RetryResult(msgspec.Struct):
    id: uuid.UUID
    outcome: str


class Count(msgspec.Struct):
    count: int


class BulkCancelResult(msgspec.Struct):
    """``complete`` false: some matching jobs stayed locked by other transactions and were left."""

    cancelled: int
    cancel_requested: int
    complete: bool


class Health(msgspec.Struct, omit_defaults=True):
    status: str
    revision: str | None = None
