"""A JobQueue with globally limited tasks for tests with several worker processes. Every handler
records when it started and ended (the database's clock) in ``public.limit_log``, which the test
creates, so overlaps and rates can be checked across processes.

- ``one_at_a_time``: concurrency 1; sleeps ``payload["seconds"]`` (on attempt 1 only, when
  ``payload["first_attempt_only"]``: a job whose first holder is killed finishes fast).
- ``rated``: at most JQ_TEST_RATE (default "4/s") starts.
- ``free``: no limit.
"""

from __future__ import annotations

import os
import time

import psycopg

from jobqueue import JobQueue
from jobqueue.model.jobs import Job

queue = JobQueue("limit-tests")


def _log(job: Job, mark: str) -> None:
    with psycopg.connect(os.environ["JOBQUEUE_DSN"], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO public.limit_log (job_id, job_type, attempt, pid, mark, at) "
            "VALUES (%s, %s, %s, %s, %s, clock_timestamp())",
            (job.id, job.job_type, job.attempt, os.getpid(), mark),
        )


def _run(job: Job) -> dict:
    _log(job, "start")
    payload = job.payload or {}
    if not payload.get("first_attempt_only") or job.attempt == 1:
        time.sleep(float(payload.get("seconds", 0)))
    _log(job, "end")
    return {"pid": os.getpid()}


@queue.task("one_at_a_time", concurrency=1, max_attempts=3)
def one_at_a_time(job: Job) -> dict:
    return _run(job)


@queue.task("rated", rate=os.environ.get("JQ_TEST_RATE", "4/s"))
def rated(job: Job) -> dict:
    return _run(job)


@queue.task("free")
def free(job: Job) -> dict:
    return _run(job)
