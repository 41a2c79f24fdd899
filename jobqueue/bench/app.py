"""The app the bench's workers run (``jobqueue-worker --app jobqueue.bench.app:queue``): one async
no-op task under a name of its own, so the bench never redefines another app's task defaults
(``jobqueue.task_defaults`` holds one row per job type) and can delete the one row it adds."""

from __future__ import annotations

from jobqueue.app import JobQueue
from jobqueue.model.jobs import Job

JOB_TYPE = "jobqueue-bench-noop"

queue = JobQueue("jobqueue-bench")


@queue.task(JOB_TYPE)
async def noop(job: Job) -> None:
    return None
