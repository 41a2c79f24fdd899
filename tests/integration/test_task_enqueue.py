"""Task-style enqueue against a real database: ``send_email.enqueue(...)`` writes the job with the
task's queue, priority and max attempts (options win), through the client the app was told of or
the one it opens itself — one per event loop, closed with it — and a worker not serving the task's
queue says so when it starts."""

from __future__ import annotations

import asyncio
import logging

import psycopg
import pytest

from jobqueue import AsyncClient, Client, JobQueue
from jobqueue.model.errors import ValidationError
from tests.support.factories import job_row
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings


def build_app() -> tuple[JobQueue, object, object]:
    app = JobQueue("task-enqueue")

    @app.task("send_email", queue="mail", priority="high", max_attempts=5)
    async def send_email(job):
        return {"sent": job.payload["to"]}

    @app.task("resize")
    def resize(job):
        return job.payload

    return app, send_email, resize


def summary(conn, job_id) -> tuple:
    row = job_row(conn, job_id)
    return row["queue"], row["priority"], row["max_attempts"], row["payload"]


def test_enqueue_applies_the_tasks_defaults_and_options_win(dsn, conn):
    app, send_email, resize = build_app()
    app.connect(dsn)
    try:
        first = send_email.enqueue_sync(to="a@b.c")
        second = asyncio.run(send_email.enqueue({"to": "d@e.f"}))
        third = send_email.with_options(priority="low", queue="bulk", max_attempts=2, delay=3600).enqueue_sync(
            to="g@h.i"
        )
        plain = resize.enqueue_sync([1, 2])
        keyed = send_email.with_options(idempotency_key="welcome-1").enqueue_sync(to="x@y.z")
        assert send_email.with_options(idempotency_key="welcome-1").enqueue_sync(to="x@y.z") == keyed
    finally:
        app.close()
    assert summary(conn, first) == ("mail", 1, 5, {"to": "a@b.c"})
    assert summary(conn, second) == ("mail", 1, 5, {"to": "d@e.f"})
    assert summary(conn, third) == ("bulk", 3, 2, {"to": "g@h.i"}) and job_row(conn, third)["state"] == "pending"
    assert summary(conn, plain) == ("default", 2, 4, [1, 2])
    with Client(dsn) as client:  # by name, a client knows no app: the database's defaults
        by_name = client.enqueue("send_email", {"to": "a@b.c"})
    assert summary(conn, by_name)[:2] == ("default", 2)


def test_bad_options_and_payloads_are_refused_with_their_field_and_nothing_is_written(dsn, conn):
    app, send_email, _ = build_app()
    app.connect(dsn)
    try:
        for options, field in [(dict(delay=float("inf")), "delay"), (dict(max_attempts=0), "max_attempts")]:
            with pytest.raises(ValidationError) as info:
                send_email.with_options(**options).enqueue_sync(to="a@b.c")
            assert info.value.field == field
        with pytest.raises(ValidationError) as info:
            send_email.enqueue_sync(to=object())
        assert info.value.field == "payload"
    finally:
        app.close()
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 0


def test_a_client_given_to_connect_or_to_one_call_is_the_one_used(dsn, conn):
    app, send_email, _ = build_app()

    async def main():
        async with AsyncClient(dsn, producer_id="web") as client:
            app.connect(client=client)
            via_app = await send_email.enqueue(to="a@b.c")
            with Client(dsn, producer_id="script") as other:
                via_call = send_email.with_options(client=other).enqueue_sync(to="d@e.f")
            via_sync = send_email.enqueue_sync(to="g@h.i")  # a Client opened on the same database
            app.close()
            return via_app, via_call, via_sync

    via_app, via_call, via_sync = asyncio.run(main())
    producers = {job_id: job_row(conn, job_id)["producer_id"] for job_id in (via_app, via_call, via_sync)}
    assert producers == {via_app: "web", via_call: "script", via_sync: "web"}


def test_a_task_enqueues_inside_the_callers_transaction(dsn, conn):
    app, send_email, _ = build_app()
    app.connect(dsn)
    try:
        with psycopg.connect(dsn) as tx:
            job_id = send_email.with_options(connection=tx).enqueue_sync(to="a@b.c")
            tx.rollback()
    finally:
        app.close()
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE id = %s", (job_id,)).fetchone()[0] == 0


def test_the_apps_own_async_client_is_per_event_loop_and_closed_with_it(dsn, conn, monkeypatch):
    """JOBQUEUE_DSN alone, read on first use; a test runner's new loop per test gets a new client,
    and the old loop's connections are closed when that loop's run ended (no pool left behind)."""
    monkeypatch.setenv("JOBQUEUE_DSN", dsn)
    app, send_email, _ = build_app()

    def connections() -> int:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]

    async def twice() -> tuple:
        first = await send_email.enqueue(to="a@b.c")
        # concurrent first uses of one loop share one client
        more = await asyncio.gather(*(send_email.enqueue(to=f"{n}@b.c") for n in range(5)))
        return first, more, len(app.producers._async)

    ids_one, more, clients = asyncio.run(twice())
    assert clients == 1
    wait_until(lambda: connections() == 0, timeout=5)  # a backend ends a moment after its client hangs up
    ids_two, _, _ = asyncio.run(twice())
    wait_until(lambda: connections() == 0, timeout=5)
    assert len({ids_one, ids_two, *more}) == 7

    async def closed_by_hand() -> int:
        await send_email.enqueue(to="a@b.c")
        await app.aclose()
        return len(app.producers._async)

    assert asyncio.run(closed_by_hand()) == 0


def test_a_worker_warns_at_start_about_task_queues_it_does_not_serve(dsn, caplog):
    app, _, _ = build_app()
    with caplog.at_level(logging.WARNING, logger="jobqueue.process"):
        with WorkerThread(app, test_settings(dsn, run_maintenance=False)):
            pass
    warned = [r.getMessage() for r in caplog.records if r.name == "jobqueue.process"]
    assert warned == [
        "task send_email put jobs in queue 'mail', which this worker does not serve (--queues default): a worker "
        "whose --queues include it must run them"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jobqueue.process"):
        with WorkerThread(app, test_settings(dsn, run_maintenance=False, queues=("default", "mail"))):
            pass
    assert not [r for r in caplog.records if r.name == "jobqueue.process"]
