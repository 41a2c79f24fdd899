"""A JobQueue whose tasks call a dependency behind a circuit breaker; the dependency is down while
the file named by the job's ``down`` payload field exists (so tests can fail and heal it across
worker processes). The breaker's reset_after is 1.5 s, or JQ_TEST_CIRCUIT_RESET_AFTER seconds."""

from __future__ import annotations

import os

from jobqueue import Backoff, CircuitOpen, JobQueue
from jobqueue.model.jobs import Job

queue = JobQueue("circuit-tests")

fast = Backoff(base=0.05, multiplier=2.0, max=0.2, jitter=0.0)

queue.circuit(
    "flaky-api",
    threshold=3,
    window=30,
    reset_after=float(os.environ.get("JQ_TEST_CIRCUIT_RESET_AFTER", "1.5")),
    trip_on=(ConnectionError,),
)


def _down(job: Job) -> bool:
    return os.path.exists((job.payload or {}).get("down", ""))


@queue.task("call_api", circuit="flaky-api", max_attempts=5, backoff=fast)
async def call_api(job: Job):
    if _down(job):
        raise ConnectionError("flaky-api refused the connection")
    if (job.payload or {}).get("bug"):
        raise ValueError("a bug of ours, not the dependency's")
    return {"ok": True}


@queue.task("call_api_checked", circuit="flaky-api", max_attempts=2, backoff=fast)
async def call_api_checked(job: Job):
    """Checks the dependency's health first and says so, instead of failing against it."""
    if _down(job):
        raise CircuitOpen("flaky-api health check failed")
    return {"ok": True}


@queue.task("local_work", backoff=fast)
async def local_work(job: Job):
    return {"ok": True}


@queue.task("open_without_breaker", max_attempts=1)
async def open_without_breaker(job: Job):
    raise CircuitOpen("this task has no breaker")
