"""Jobs: priorities, states, a job as producers see it and as a handler receives it, and the views
of jobs the REST API and admin tools list."""

from __future__ import annotations

import enum
import math
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol


class Priority(enum.IntEnum):
    CRITICAL = 0
    HIGH = 1
    NORMAL = 2
    LOW = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, value: "Priority | str | int") -> "Priority":
        """Accept the names producers type ('high'), the enum, or the stored 0-3 level."""
        from jobqueue.model.errors import ValidationError

        if isinstance(value, Priority):
            return value
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                pass
        elif isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3:
            return cls(value)
        raise ValidationError("priority", f"must be one of critical, high, normal, low (got {value!r})")


class JobState(str, enum.Enum):
    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"
    DEAD_LETTER = "dead_letter"
    CANCELLED = "cancelled"
    #: held behind an earlier unfinished job of its ordering key: claimable by no worker until that one ends
    WAITING = "waiting"


@dataclass(frozen=True, slots=True)
class AttemptError:
    attempt: int
    error_type: str
    message: str
    traceback: str | None
    worker_id: str | None
    failed_at: datetime


@dataclass(frozen=True, slots=True)
class JobProgress:
    """What a running attempt last reported with `Job.progress` (kept after the job ends)."""

    done: float
    total: float | None
    message: str | None
    at: datetime  # when the database stored it (reports are coalesced: at most a few per second)
    attempt: int

    @classmethod
    def of(cls, stored: dict | None) -> "JobProgress | None":
        if not stored:
            return None
        total = stored.get("total")
        return cls(
            float(stored["done"]),  # jsonb keeps 3.0 as 3
            None if total is None else float(total),
            stored.get("message"),
            datetime.fromisoformat(stored["at"]),
            stored["attempt"],
        )


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job as `client.get()` reports it: row, stored result and every attempt's error."""

    id: uuid.UUID
    queue: str
    job_type: str
    priority: Priority
    state: JobState
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
    traceparent: str | None
    cancel_requested: bool
    locked_by: str | None
    locked_until: datetime | None
    result: Any = None
    final_error: Any = None
    duration_ms: float | None = None
    errors: list[AttemptError] = field(default_factory=list)
    #: the deadline of each attempt set at enqueue (None: the task's timeout, else the worker's)
    timeout: timedelta | None = None
    #: dead-lettered as expired if still waiting then (None: never)
    expires_at: datetime | None = None
    deadline_at: datetime | None = None  # when the running attempt must be finished
    dead_reason: str | None = None  # dead_letter only: attempts_exhausted, permanent_error, expired or shed
    scheduled_for: datetime | None = None  # a cron job's tick (None: not fired by a schedule)
    ordering_key: str | None = None  # its producer's jobs with this key run one at a time, in enqueue order
    progress: JobProgress | None = None  # what its running (or last) attempt reported

    @property
    def last_error(self) -> AttemptError | None:
        return self.errors[-1] if self.errors else None


class CancelOutcome(str, enum.Enum):
    """What `cancel()` did. Only CANCELLED and CANCEL_REQUESTED changed anything."""

    CANCELLED = "cancelled"
    CANCEL_REQUESTED = "cancel_requested"
    ALREADY_CANCELLED = "cancelled_already"
    COMPLETED = "completed"
    DEAD_LETTER = "dead_letter"
    NOT_FOUND = "not_found"

    @property
    def changed(self) -> bool:
        return self in (CancelOutcome.CANCELLED, CancelOutcome.CANCEL_REQUESTED)


@dataclass(frozen=True, slots=True)
class BulkCancel:
    """What a cancel by filter did: waiting jobs cancelled, running jobs asked to stop (as a single
    cancel of a running job does). ``complete`` False: some matching jobs stayed locked by other
    transactions throughout and were left as they are (run it again)."""

    cancelled: int
    cancel_requested: int
    complete: bool = True


#: The largest progress figure taken (done, total): beyond it a float no longer counts units exactly.
MAX_PROGRESS = 1e15
#: The longest progress message, in characters.
MAX_PROGRESS_MESSAGE = 1000


def progress_problem(done: Any, total: Any, message: Any) -> tuple[str, str] | None:
    """Why a progress report is refused, as (field, message), or None: done and total are finite
    numbers from 0 (total: above 0) to MAX_PROGRESS, done at most total; the message a short
    string. The database checks the same (job_progress_many)."""

    def number_problem(value: Any, least: str) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number (got {type(value).__name__})"
        if not math.isfinite(value) or value < 0 or value > MAX_PROGRESS or (least == "above 0" and value == 0):
            return f"must be a finite number {least} and at most {MAX_PROGRESS:g} (got {value!r})"
        return None

    if problem := number_problem(done, "of at least 0"):
        return "done", problem
    if total is not None:
        if problem := number_problem(total, "above 0"):
            return "total", problem
        if done > total:
            return "done", f"must be at most total ({total!r}; got {done!r})"
    if message is not None:
        if not isinstance(message, str):
            return "message", f"must be a string (got {type(message).__name__})"
        if len(message) > MAX_PROGRESS_MESSAGE or "\x00" in message:
            return "message", f"must be at most {MAX_PROGRESS_MESSAGE} characters, without NUL (got {len(message)})"
    return None


class AttemptServices(Protocol):
    """What the worker running an attempt lends its handler (`Job.transaction`, `Job.progress`)."""

    def transaction(self, job: "Job") -> Any: ...

    def progress(self, job: "Job", done: float, total: float | None, message: str | None) -> None: ...


class _Reported:
    """What `Job.progress` returns: awaitable (async handlers write ``await job.progress(…)``) and
    already done (sync handlers call it plainly), as the report is only handed to the worker."""

    __slots__ = ()

    def __await__(self):
        return iter(())


_REPORTED = _Reported()


class Job:
    """What a handler receives: the claimed job, plus a cancel flag the worker keeps current
    (every attribute is in docs/workers.md, "The handler's Job").

    `cancel_requested` turns true when someone cancels the job while it runs (delivered by NOTIFY
    and by the lease heartbeat); cooperative handlers check it or call `raise_if_cancelled()`.
    `timeout` is this attempt's time budget in seconds (its deadline, counted from the claim): the
    worker fails the attempt as a `JobTimeout` when it runs out. `scheduled_for` is the cron tick a
    schedule fired the job for (None for any other job), the same on every attempt.

    In a worker, `transaction()` opens a transaction whose writes commit with the attempt's
    completion (exactly once), and `progress()` reports how far the attempt got
    (jobqueue.worker.transactions, jobqueue.worker.progress).
    """

    __slots__ = (
        "id",
        "queue",
        "job_type",
        "payload",
        "priority",
        "attempt",
        "max_attempts",
        "traceparent",
        "cancel_requested",
        "created_at",
        "timeout",
        "order_key",
        "key",
        "producer_id",
        "scheduled_for",
        "services",
        "open_transaction",
        "deadline",
    )

    def __init__(
        self,
        id: uuid.UUID,
        queue: str,
        job_type: str,
        payload: Any,
        priority: int,
        attempt: int,
        max_attempts: int,
        traceparent: str | None,
        cancel_requested: bool,
        created_at: datetime,
        timeout: float | None = None,
        order_key: tuple | None = None,
        producer_id: str | None = None,
        scheduled_for: datetime | None = None,
    ) -> None:
        self.id = id
        self.queue = queue
        self.job_type = job_type
        self.payload = payload
        self.priority = priority
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.traceparent = traceparent
        self.cancel_requested = cancel_requested
        self.created_at = created_at
        self.timeout = timeout
        self.order_key = order_key  # (run_at, seq): where it stood in its queue (claims resume after it)
        self.producer_id = producer_id  # who submitted it: its encrypted fields are bound to it
        self.scheduled_for = scheduled_for  # a cron job's tick; None for every other job
        #: (id, attempt): this attempt, as the worker tracks, heartbeats and acks it
        self.key: tuple[uuid.UUID, int] = (id, attempt)
        self.services: AttemptServices | None = None  # set by the worker that runs the attempt
        self.open_transaction: Any = None  # the attempt's transaction, from its block's end to its commit
        self.deadline: float | None = None  # the attempt's, on time.monotonic (set by the worker)

    def transaction(self) -> Any:
        """``async with job.transaction() as conn:`` (sync handlers: ``with``): a psycopg
        connection with a transaction open, from the worker's pool. What the handler writes on it
        commits together with the attempt's completion and result, once the handler returns —
        guarded by the attempt, so a job whose lease was lost (another attempt took over), whose
        cancel was requested or whose deadline passed rolls back instead, and a committed job never
        runs again. One per attempt. The worker's `jobqueue.worker.transactions` has the details."""
        if self.services is None:
            raise RuntimeError(
                "job.transaction() is for a handler a jobqueue worker runs (not the test mode's perform_job or "
                "drain: test such a handler with a worker, e.g. tests' WorkerThread)"
            )
        return self.services.transaction(self)

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> _Reported:
        """Report how far this attempt got (``await job.progress(3, 10, "pages")``; sync handlers
        without ``await``): producers see the latest in ``client.get(id).progress``, ``GET
        /jobs/{id}``, ``job.progress`` events and the dashboard. Never waits for the database:
        reports are coalesced and written a few times a second. A bad figure (NaN, infinite,
        negative, above 1e15, done above total) raises `ValidationError` naming it."""
        from jobqueue.model.errors import ValidationError

        if problem := progress_problem(done, total, message):
            raise ValidationError(*problem)
        if self.services is not None:  # None: the test mode (jobqueue.testing), where a report goes nowhere
            self.services.progress(self, float(done), None if total is None else float(total), message)
        return _REPORTED

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    @property
    def run_at(self) -> datetime | None:
        """When this attempt was due: the enqueue's run_at, or a retry's (None: a job not claimed)."""
        return self.order_key[0] if self.order_key else None

    def raise_if_cancelled(self) -> None:
        from jobqueue.model.errors import JobCancelled

        if self.cancel_requested:
            raise JobCancelled(f"job {self.id} was cancelled")

    def __repr__(self) -> str:
        return (
            f"Job(id={self.id}, type={self.job_type!r}, queue={self.queue!r},"
            f" attempt={self.attempt}/{self.max_attempts})"
        )


# --- REST API and admin views ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobSummary:
    """One row of a job listing (newest first), with the last attempt's error if any."""

    id: uuid.UUID
    queue: str
    job_type: str
    priority: Priority
    state: JobState
    attempts: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    producer_id: str | None
    seq: int
    last_error_type: str | None = None
    last_error: str | None = None
    dead_reason: str | None = None  # dead_letter only: attempts_exhausted, permanent_error, expired or shed


@dataclass(frozen=True, slots=True)
class JobPage:
    """A page of a keyset-paginated listing; pass ``next_cursor`` back for the next (older) page."""

    jobs: list[JobSummary]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """A job's state and, once completed, its result (what a repeated submission is answered)."""

    state: JobState
    result: Any = None


class DeleteOutcome(str, enum.Enum):
    """What an admin delete of one job did. Only DELETED changed anything: a job that has started
    (ran an attempt, runs now, or finished) is kept, with its history — cancel it instead."""

    DELETED = "deleted"
    STARTED = "started"
    NOT_FOUND = "not_found"


class RetryOutcome(str, enum.Enum):
    """What an admin retry of one job did. Only RETRIED changed anything."""

    RETRIED = "retried"
    NOT_DEAD = "not_dead"
    KEY_TAKEN = "idempotency_key_taken"
    NOT_FOUND = "not_found"


@dataclass(frozen=True, slots=True)
class ThroughputMinute:
    """One minute of the history: rates per second since the sample of the minute before."""

    minute: datetime
    measured_at: datetime
    submitted_per_s: float
    completed_per_s: float
    failed_per_s: float
