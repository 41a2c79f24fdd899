"""jobqueue: a PostgreSQL-only background-job system.

Producers: `AsyncClient` / `Client` (or `SELECT jobqueue.enqueue(...)` in SQL).
Workers: define handlers on a `JobQueue` and run `jobqueue-worker --app module:queue`.
"""

from jobqueue.app import JobQueue, TaskDef
from jobqueue.client import AsyncClient, Client
from jobqueue.config import Settings
from jobqueue.model.circuits import Circuit, CircuitSpec
from jobqueue.model.errors import (
    CircuitNotFound,
    CircuitOpen,
    Conflict,
    DatabaseUnavailable,
    IdempotencyMismatch,
    JobCancelled,
    JobFailed,
    JobNotFound,
    JobQueueError,
    JobTimeout,
    LimitNotFound,
    NotMigrated,
    PermanentError,
    Retry,
    ValidationError,
    WaitTimeout,
)
from jobqueue.model.jobs import CancelOutcome, Job, JobInfo, JobState, Priority
from jobqueue.model.limits import Limit, LimitSpec
from jobqueue.model.retry import Backoff

__all__ = [
    "AsyncClient", "Backoff", "CancelOutcome", "Circuit", "CircuitNotFound", "CircuitOpen", "CircuitSpec", "Client",
    "Conflict", "DatabaseUnavailable", "IdempotencyMismatch",
    "Job", "JobCancelled", "Limit", "LimitNotFound", "LimitSpec", "JobFailed", "JobInfo", "JobNotFound", "JobQueue", "JobQueueError", "JobState", "JobTimeout", "NotMigrated",
    "PermanentError", "Priority", "Retry", "Settings", "TaskDef", "ValidationError", "WaitTimeout",
]
