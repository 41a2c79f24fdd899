"""A time span a handler gives at run time is held to the enqueue's bound (issue 17, §3):
`Retry(after=3e11)` would have been stored as a run_at after year 9999."""

from __future__ import annotations

from jobqueue import Client, JobQueue, Retry
from jobqueue.model.jobs import JobState
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings

app = JobQueue("time-bounds")


@app.task("retry_in_ten_thousand_years", max_attempts=2)
async def retry_far(job):
    if job.attempt == 1:
        raise Retry(after=3e11)
    return {"attempt": job.attempt}


@app.task("fine")
async def fine(job):
    return {"ok": True}


def test_a_retry_after_past_year_9999_fails_its_attempt_in_the_handler_and_nothing_is_wedged(dsn):
    """Before: the ack computed now() + 3e11 s, PostgreSQL refused it ("timestamp too large (after
    year 10K)"), and the job was dead-lettered with that error instead of being retried."""
    with Client(dsn) as client, WorkerThread(app, test_settings(dsn, concurrency=4)):
        far = client.enqueue("retry_in_ten_thousand_years", {})
        other = client.enqueue("fine", {})
        wait_until(
            lambda: client.get(far).state == JobState.COMPLETED and client.get(other).state == JobState.COMPLETED,
            timeout=20,
        )
        info = client.get(far)
        assert info.attempts == 2 and info.result == {"attempt": 2}
        assert info.errors[0].error_type == "ValueError" and "Retry(after=...) must be" in info.errors[0].message
        assert len(client.list_jobs().jobs) == 2  # every row still reads
