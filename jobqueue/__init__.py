"""jobqueue: a PostgreSQL-only background-job system.

Producers: `AsyncClient` / `Client` (or `SELECT jobqueue.enqueue(...)` in SQL).
Workers: define handlers on a `JobQueue` and run `jobqueue-worker --app module:queue`.

The public names are imported when first used (PEP 562 ``__getattr__``), not by ``import
jobqueue``: every `jobqueue` command imports this package, ``--help`` too, and the client alone
brings psycopg, croniter and cryptography. ``from jobqueue import Client`` works as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
        NotConnected,
        NotMigrated,
        PermanentError,
        Retry,
        ValidationError,
        WaitTimeout,
    )
    from jobqueue.model.jobs import CancelOutcome, Job, JobInfo, JobState, Priority
    from jobqueue.model.limits import Limit, LimitSpec
    from jobqueue.model.outcomes import AttemptOutcome
    from jobqueue.model.retry import Backoff
    from jobqueue.tasks import Task

#: The module each public name comes from (the imports above, for type checkers, say the same).
_HOMES: dict[str, tuple[str, ...]] = {
    "jobqueue.app": ("JobQueue", "TaskDef"),
    "jobqueue.model.circuits": ("Circuit", "CircuitSpec"),
    "jobqueue.client": ("AsyncClient", "Client"),
    "jobqueue.config": ("Settings",),
    "jobqueue.model.errors": (
        "CircuitNotFound",
        "CircuitOpen",
        "Conflict",
        "DatabaseUnavailable",
        "IdempotencyMismatch",
        "JobCancelled",
        "JobFailed",
        "JobNotFound",
        "JobQueueError",
        "JobTimeout",
        "LimitNotFound",
        "NotConnected",
        "NotMigrated",
        "PermanentError",
        "Retry",
        "ValidationError",
        "WaitTimeout",
    ),
    "jobqueue.model.limits": ("Limit", "LimitSpec"),
    "jobqueue.model.jobs": ("CancelOutcome", "Job", "JobInfo", "JobState", "Priority"),
    "jobqueue.model.outcomes": ("AttemptOutcome",),
    "jobqueue.model.retry": ("Backoff",),
    "jobqueue.tasks": ("Task",),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "AsyncClient",
    "AttemptOutcome",
    "Backoff",
    "CancelOutcome",
    "Circuit",
    "CircuitNotFound",
    "CircuitOpen",
    "CircuitSpec",
    "Client",
    "Conflict",
    "DatabaseUnavailable",
    "IdempotencyMismatch",
    "Job",
    "JobCancelled",
    "Limit",
    "LimitNotFound",
    "LimitSpec",
    "JobFailed",
    "JobInfo",
    "JobNotFound",
    "JobQueue",
    "JobQueueError",
    "JobState",
    "JobTimeout",
    "NotConnected",
    "NotMigrated",
    "PermanentError",
    "Priority",
    "Retry",
    "Settings",
    "Task",
    "TaskDef",
    "ValidationError",
    "WaitTimeout",
]


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'jobqueue' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later uses are plain attribute lookups
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
