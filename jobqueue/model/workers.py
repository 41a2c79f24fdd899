"""Workers as the registry knows them, and the jobs each runs now."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A row of the worker registry (jobqueue.workers)."""

    id: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    status: str  # running | stopping | stopped | lost
    jobs_processed: int
    jobs_failed: int
    started_at: datetime
    last_heartbeat: datetime
    heartbeat_interval: float
    stuck_handlers: int = 0  # handlers past their deadline still holding a thread
    concurrency_min: int | None = None  # autoscaling (--concurrency MIN:MAX): MIN; concurrency is MAX
    concurrency_target: int | None = None  # autoscaling: the slots it runs now (None: fixed concurrency)
    job_types: list[str] = field(default_factory=list)  # the types its app has handlers for
    app: str | None = None  # its app's name (JobQueue.name; None: registered before 0027)


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job a worker runs now (what the dashboard shows under each worker)."""

    id: uuid.UUID
    queue: str
    job_type: str
    attempt: int
    started_at: datetime | None
