"""Request and response bodies of the REST API. Handlers build these from client results:
database rows never leave the client, and nothing here carries more than the API promises."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from jobqueue.crypto.envelopes import redact
from jobqueue.model.jobs import JobInfo, JobSummary, Priority
from jobqueue.model.queues import QueueSettings
from jobqueue.observability.metrics import OTHER, Snapshot

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
    ("encrypt", "encrypt"),
)


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


class SubmittedBatch(msgspec.Struct):
    jobs: list[SubmittedJob]
    created: int


class AttemptErrorOut(msgspec.Struct):
    attempt: int
    error_type: str
    message: str
    traceback: str | None
    worker_id: str | None
    failed_at: datetime


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


class PriorityLevel(msgspec.Struct):
    """One priority level of a queue, as /metrics counts it (see `QueueList`)."""

    priority: str
    depth: int
    scheduled: int
    retrying: int
    processing: int
    oldest_age_seconds: float


class QueueOut(msgspec.Struct):
    queue: str
    paused: bool
    soft_limit: int | None
    hard_limit: int | None
    job_ttl_seconds: float | None
    idempotency_window_seconds: float | None
    shed_low_retries: bool
    depth: int
    scheduled: int
    retrying: int
    processing: int
    dead: int
    oldest_age_seconds: float
    priorities: list[PriorityLevel]
    unserved: int = 0
    unserved_job_types: dict[str, int] = {}

    @classmethod
    def of(
        cls,
        name: str,
        settings: QueueSettings,
        levels: list[PriorityLevel],
        dead: int,
        unserved: dict[str, int] | None = None,
    ) -> "QueueOut":
        return cls(
            name,
            settings.paused,
            settings.soft_limit,
            settings.hard_limit,
            seconds(settings.job_ttl),
            seconds(settings.idempotency_window),
            settings.shed_low_retries,
            sum(s.depth for s in levels),
            sum(s.scheduled for s in levels),
            sum(s.retrying for s in levels),
            sum(s.processing for s in levels),
            dead,
            max((s.oldest_age_seconds for s in levels), default=0.0),
            levels,
            sum((unserved or {}).values()),
            unserved or {},
        )


class OtherQueues(msgspec.Struct):
    """What the queues not listed by name hold together (``queues`` of them): the figures of
    `QueueOut`, summed."""

    queues: int
    depth: int
    scheduled: int
    retrying: int
    processing: int
    dead: int


class QueueList(msgspec.Struct):
    """Every queue with jobs waiting, running or dead, served by a live worker, or configured by an
    admin — read from the metrics snapshot /metrics serves (`jobqueue.observability.metrics`), not counted per
    request: ``measured_at`` is when it was counted, and it is served for up to
    ``max_age_seconds`` after that. Same figures as /metrics: ``depth`` runnable now (pending, or
    failed and due), ``scheduled`` run_at still ahead (delays, retries not yet due), ``retrying``
    waiting for a retry (state failed, counted in depth or scheduled too), ``processing``,
    ``dead`` dead-lettered; ``unserved`` runnable jobs whose job type no live worker of the queue has
    a handler for (``unserved_job_types``: how many of each) — no worker claims them, they wait; each
    count stops at ``count_cap``. Listed by name: every queue a
    live worker serves or an admin configured, and the ``JOBQUEUE_METRICS_MAX_QUEUES`` largest
    others; ``other`` sums up the rest (null when there is none)."""

    queues: list[QueueOut]
    measured_at: datetime
    max_age_seconds: float
    count_cap: int
    other: OtherQueues | None = None

    @classmethod
    def of(cls, snapshot: Snapshot, max_age_seconds: float) -> "QueueList":
        levels: dict[str, list[PriorityLevel]] = {}
        for q in snapshot.queues:
            figures = levels.setdefault(q.queue, [])
            if q.runnable or q.scheduled or q.retrying or q.processing:
                figures.append(
                    PriorityLevel(
                        Priority(q.priority).label,
                        q.runnable,
                        q.scheduled,
                        q.retrying,
                        q.processing,
                        round(q.oldest_age_seconds, 3),
                    )
                )
        dead: dict[str, int] = {}
        for d in snapshot.dead:
            dead[d.queue] = dead.get(d.queue, 0) + d.dead
        unserved: dict[str, dict[str, int]] = {}
        for u in snapshot.unserved:
            unserved.setdefault(u.queue, {})[u.job_type] = u.runnable
        names = sorted((set(levels) | set(dead) | set(snapshot.settings)) - {OTHER})
        listed = [
            QueueOut.of(
                name,
                snapshot.settings.get(name) or QueueSettings(name),
                levels.get(name, []),
                dead.get(name, 0),
                unserved.get(name),
            )
            for name in names
        ]
        other = None
        if snapshot.other_queues:
            rest = QueueOut.of(OTHER, QueueSettings(OTHER), levels.get(OTHER, []), dead.get(OTHER, 0))
            other = OtherQueues(
                snapshot.other_queues, rest.depth, rest.scheduled, rest.retrying, rest.processing, rest.dead
            )
        return cls(listed, snapshot.measured_at, max_age_seconds, snapshot.cap, other)


class QueueSettingsOut(msgspec.Struct):
    queue: str
    paused: bool
    soft_limit: int | None
    hard_limit: int | None
    job_ttl_seconds: float | None
    idempotency_window_seconds: float | None
    shed_low_retries: bool

    @classmethod
    def of(cls, settings: QueueSettings) -> "QueueSettingsOut":
        return cls(
            settings.queue,
            settings.paused,
            settings.soft_limit,
            settings.hard_limit,
            seconds(settings.job_ttl),
            seconds(settings.idempotency_window),
            settings.shed_low_retries,
        )


class QueueLimits(msgspec.Struct, forbid_unknown_fields=True):
    """Backpressure limits of one queue; null falls back to the API's defaults."""

    soft_limit: Annotated[int, Meta(ge=1, le=INT32)] | None = None
    hard_limit: Annotated[int, Meta(ge=1, le=INT32)] | None = None


class QueueDefaults(msgspec.Struct, forbid_unknown_fields=True):
    """What enqueue applies to this queue's jobs when a submission gives none."""

    job_ttl_seconds: (
        Annotated[
            float,
            Meta(
                le=TEN_YEARS,
                description=(
                    "a job still waiting this long after its run_at is dead-lettered as expired (null: never)"
                ),
            ),
        ]
        | None
    ) = None
    idempotency_window_seconds: (
        Annotated[
            float,
            Meta(le=TEN_YEARS, description=("how long an idempotency key stays held after submission (null: 24 h)")),
        ]
        | None
    ) = None


class QueueShedding(msgspec.Struct, forbid_unknown_fields=True):
    """Load shedding on retry: above the queue's soft limit, retries of low jobs are dead-lettered."""

    shed_low_retries: Annotated[
        bool,
        Meta(
            description=(
                "while the queue's runnable depth is above its soft limit, a retryable failure of a low-priority "
                "job is dead-lettered with dead_reason 'shed' instead of retried"
            )
        ),
    ]


class RetryResult(msgspec.Struct):
    id: uuid.UUID
    outcome: str


class Count(msgspec.Struct):
    count: int


class Health(msgspec.Struct, omit_defaults=True):
    status: str
    revision: str | None = None
