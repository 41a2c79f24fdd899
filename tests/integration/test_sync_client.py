"""The sync `Client`'s methods that only `AsyncClient` had (outcomes, queue_settings,
running_jobs, throughput_history), the pooled `connection()` both gained, and `submit(admit=…)`,
each against the database and compared with what the async client answers."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timedelta, timezone

import pytest

from jobqueue.client import AsyncClient, Client
from jobqueue.model.jobs import JobOutcome, JobState
from jobqueue.model.queues import QueueSettings
from tests.support.factories import count_jobs, finish_job, make_job


def async_answer(dsn: str, method: str, *args, **kwargs):
    """What AsyncClient's ``method`` answers, for comparison."""

    async def ask():
        async with AsyncClient(dsn, pool_size=1) as client:
            return await getattr(client, method)(*args, **kwargs)

    return asyncio.run(ask())


def test_outcomes_reads_states_and_results_in_one_call(dsn, conn):
    done, waiting = make_job(conn), make_job(conn)
    finish_job(conn, done, "completed", {"n": 1})
    with Client(dsn, pool_size=1) as client:
        outcomes = client.outcomes([done, waiting])
    assert outcomes == {done: JobOutcome(JobState.COMPLETED, {"n": 1}), waiting: JobOutcome(JobState.PENDING)}
    assert outcomes == async_answer(dsn, "outcomes", [done, waiting])


def test_queue_settings_lists_each_configured_queue(dsn):
    with Client(dsn, pool_size=1) as client:
        assert client.queue_settings() == {}
        client.pause_queue("mail", force=True)
        client.set_queue_limits("bulk", soft_limit=5, hard_limit=10)
        settings = client.queue_settings()
    assert settings == {
        "mail": QueueSettings("mail", paused=True),
        "bulk": QueueSettings("bulk", soft_limit=5, hard_limit=10),
    }
    assert settings == async_answer(dsn, "queue_settings")


def test_running_jobs_groups_processing_jobs_by_worker(dsn, conn):
    first = make_job(conn, state="processing", locked_by="w1", queue="a", job_type="x")
    make_job(conn, state="processing", locked_by="w1")
    make_job(conn, state="processing", locked_by="w2")
    make_job(conn)  # pending: not running
    with Client(dsn, pool_size=1) as client:
        running = client.running_jobs(per_worker=1)
    assert {worker: (count, len(jobs)) for worker, (count, jobs) in running.items()} == {"w1": (2, 1), "w2": (1, 1)}
    (job,) = running["w1"][1]
    assert (job.id, job.queue, job.job_type, job.attempt) == (first, "a", "x", 1)
    assert running == async_answer(dsn, "running_jobs", per_worker=1)


def test_throughput_history_turns_samples_into_rates(dsn, conn):
    now = datetime.now(timezone.utc).replace(second=0, microsecond=0)
    for minutes_ago, submitted in ((2, 100), (1, 220)):
        at = now - timedelta(minutes=minutes_ago)
        conn.execute("INSERT INTO jobqueue.throughput_history VALUES (%s, %s, %s, 0, 0)", (at, at, submitted))
    with Client(dsn, pool_size=1) as client:
        (point,) = client.throughput_history(minutes=60)
        assert client.throughput_history(minutes=0) == []
    assert (point.minute, point.submitted_per_s, point.completed_per_s) == (now - timedelta(minutes=1), 2.0, 0.0)
    assert [point] == async_answer(dsn, "throughput_history", minutes=60)


class Abandoned(Exception):
    pass


@pytest.mark.parametrize("commit", [True, False])
def test_a_pooled_connection_carries_an_enqueue_in_a_transaction_of_ones_own(dsn, conn, commit):
    with Client(dsn, pool_size=2) as client:  # enqueue reads the tasks' encrypted fields on another
        with client.connection() as own:
            with contextlib.suppress(Abandoned), own.transaction():
                job_id = client.enqueue("x", queue="own", connection=own)
                assert count_jobs(conn, "own") == 0  # not committed yet
                if not commit:
                    raise Abandoned
            assert own.autocommit  # given back to the pool as it was lent
        assert count_jobs(conn, "own") == (1 if commit else 0)
        if commit:
            assert client.get(job_id).state is JobState.PENDING


def test_admit_sees_the_validated_jobs_and_may_refuse_before_anything_is_written(dsn, conn):
    seen: list[tuple[str, str, str]] = []

    def admit(jobs) -> None:
        seen.extend((job.job_type, job.queue, job.priority) for job in jobs)
        if any(job.queue == "closed" for job in jobs):
            raise PermissionError("closed")

    with Client(dsn, pool_size=1) as client:
        created = client.submit([{"job_type": "a", "priority": 1}, {"job_type": "b", "queue": "q"}], admit=admit)
        with pytest.raises(PermissionError):
            client.submit([{"job_type": "c"}, {"job_type": "d", "queue": "closed"}], admit=admit)
    assert [was_created for _, was_created in created] == [True, True]
    assert seen == [
        ("a", "default", "high"),
        ("b", "q", "normal"),
        ("c", "default", "normal"),
        ("d", "closed", "normal"),
    ]
    assert count_jobs(conn) == 2
