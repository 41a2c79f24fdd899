"""`client.wait(job_id, timeout=…)`: the result, or the job's error, woken by the job's events."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone

import pytest

from jobqueue import AsyncClient, Client, JobFailed, WaitTimeout
from jobqueue.client.waiting import WAIT_RECHECK
from jobqueue.config import DbSettings, Settings
from tests.support import apps
from tests.support.workers import WorkerThread, test_settings


@pytest.fixture(autouse=True)
def _clear_runs():
    apps.runs.clear()
    yield
    apps.runs.clear()


def test_wait_returns_the_result_as_soon_as_the_job_completes(dsn):
    async def scenario():
        async with AsyncClient(dsn) as client:
            job_id = await client.enqueue("slow", {"seconds": 0.3})
            started = time.monotonic()
            result = await client.wait(job_id, timeout=10)
            return result, time.monotonic() - started

    with WorkerThread(apps.queue, test_settings(dsn)):
        result, took = asyncio.run(scenario())
    assert result == {"slept": 0.3}
    assert took < WAIT_RECHECK - 1  # woken by the completion event, not by the periodic re-read


def test_wait_raises_the_error_of_a_dead_lettered_job(dsn):
    async def scenario():
        async with AsyncClient(dsn) as client:
            job_id = await client.enqueue("always_fails")
            with pytest.raises(JobFailed) as failed:
                await client.wait(job_id, timeout=10)
            return job_id, failed.value

    with WorkerThread(apps.queue, test_settings(dsn)):
        job_id, error = asyncio.run(scenario())
    assert error.job_id == job_id and error.state == "dead_letter"
    assert "ValueError: boom on attempt 3" in str(error)
    assert [e.attempt for e in error.info.errors] == [1, 2, 3]


def test_wait_gives_up_after_its_timeout_and_the_job_goes_on(dsn, conn):
    async def scenario():
        async with AsyncClient(dsn) as client:
            job_id = await client.enqueue("record", run_at=datetime.now(timezone.utc) + timedelta(hours=1))
            started = time.monotonic()
            with pytest.raises(WaitTimeout):
                await client.wait(job_id, timeout=0.5)
            return job_id, time.monotonic() - started

    job_id, took = asyncio.run(scenario())
    assert 0.45 < took < 2.0
    assert conn.execute("SELECT state FROM jobqueue.jobs WHERE id = %s", (job_id,)).fetchone() == ("pending",)


def test_wait_on_a_finished_job_answers_at_once_and_so_does_the_sync_client(dsn):
    with Client(dsn) as client:
        job_id = client.enqueue("record", {"n": 7})
        with WorkerThread(apps.queue, test_settings(dsn)):
            assert client.wait(job_id, timeout=10) == {"ok": True, "n": 7}
        started = time.monotonic()
        assert client.wait(job_id, timeout=10) == {"ok": True, "n": 7}
        assert time.monotonic() - started < 2.0
        cancelled = client.enqueue("record", run_at=datetime.now(timezone.utc) + timedelta(hours=1))
        client.cancel(cancelled)
        with pytest.raises(JobFailed, match="cancelled"):
            client.wait(cancelled, timeout=5)


def test_wait_without_listen_polls_and_still_gets_the_result(dsn):
    async def scenario():
        async with AsyncClient(dsn, settings=Settings(db=DbSettings(dsn=dsn, listen=False))) as client:
            job_id = await client.enqueue("record", {"n": 1})
            return await client.wait(job_id, timeout=10)

    with WorkerThread(apps.queue, test_settings(dsn)):
        assert asyncio.run(scenario()) == {"ok": True, "n": 1}


def test_many_waits_share_one_listen_connection_and_survive_its_loss(dsn, conn):
    """Ten concurrent waits, one LISTEN connection; it is terminated while they wait, and every
    wait still gets its result (after the reconnect the jobs are read again)."""

    async def scenario():
        async with AsyncClient(dsn) as client:
            ids = [await client.enqueue("slow", {"seconds": 1.0}) for _ in range(10)]
            waits = [asyncio.create_task(client.wait(job_id, timeout=20)) for job_id in ids]
            await asyncio.sleep(0.3)
            listeners = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN%%'"
            ).fetchone()[0]
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query ILIKE 'LISTEN \"jobqueue_events\"%%'"
            )
            return listeners, await asyncio.gather(*waits)

    with WorkerThread(apps.queue, test_settings(dsn, concurrency=10)):
        listeners, results = asyncio.run(scenario())
    assert results == [{"slept": 1.0}] * 10
    assert listeners == 2  # the worker's own, and the client's one for all ten waits
