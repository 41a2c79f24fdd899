"""No silent operator mistakes with names: a queue or job type nobody ever served or declared is
flagged — a pause of it is refused (`queues pause nosuchqueue` answered ``paused: true``), an
enqueue naming it is accepted with a warning (``sned_email`` went through without a word) — and
"ever served" outlives the worker's registry row."""

from __future__ import annotations

import asyncio

import pytest

from jobqueue import AsyncClient, Client
from jobqueue.db import gateway as db
from jobqueue.model.errors import QueueNotFound
from jobqueue.model.queues import QueueSettings
from jobqueue.store import workers as worker_store
from tests.support.factories import make_job


def register(conn, worker_id: str, queues: list[str], job_types: list[str]) -> None:
    db.run_sync(
        conn,
        worker_store.register(
            worker_id=worker_id, host="h", pid=1, queues=queues, concurrency=1, job_types=job_types, app="shop"
        ),
    )


def test_an_unknown_queue_is_not_paused_and_nothing_is_written(dsn, conn):
    with Client(dsn, pool_size=1) as client:
        with pytest.raises(QueueNotFound) as refused:
            client.pause_queue("nosuchqueue")
        assert "no queue named 'nosuchqueue' is known" in str(refused.value) and "force" in str(refused.value)
        with pytest.raises(QueueNotFound):
            client.resume_queue("nosuchqueue")
        assert conn.execute("SELECT count(*) FROM jobqueue.queue_settings").fetchone() == (0,)
        assert client.pause_queue("nosuchqueue", force=True).paused is True  # before its first worker: on purpose
        assert client.resume_queue("nosuchqueue").paused is False  # now configured: known


@pytest.mark.parametrize(
    "known_by",
    [
        "default",  # the queue every job goes to unless told otherwise
        "served",  # a worker registered for it
        "forgotten",  # ... and its registry row is gone
        "waiting job",
        "finished job",
        "configured",  # an operator set its limits
    ],
)
def test_a_known_queue_is_paused(dsn, conn, known_by):
    queue = "default" if known_by == "default" else "mail"
    if known_by in ("served", "forgotten"):
        register(conn, "w1", ["mail"], ["send"])
        if known_by == "forgotten":
            conn.execute("DELETE FROM jobqueue.workers")
    elif known_by == "waiting job":
        make_job(conn, queue="mail")
    elif known_by == "finished job":
        make_job(conn, queue="mail", state="completed")
    with Client(dsn, pool_size=1) as client:
        if known_by == "configured":
            client.set_queue_limits("mail", soft_limit=5, hard_limit=10)
        assert client.pause_queue(queue).paused is True


def test_an_unknown_queue_is_refused_by_the_async_client_too(dsn):
    async def pause() -> QueueSettings:
        async with AsyncClient(dsn, pool_size=1) as client:
            return await client.pause_queue("nosuchqueue")

    with pytest.raises(QueueNotFound):
        asyncio.run(pause())


def test_warnings_name_what_no_worker_served_and_nothing_declared(dsn, conn):
    register(conn, "w1", ["mail"], ["send_email"])
    conn.execute("INSERT INTO jobqueue.task_defaults (job_type, max_attempts) VALUES ('render', 3)")  # declared
    with Client(dsn, pool_size=1) as client:
        assert client.name_warnings([("mail", "send_email"), ("default", "render")]) == []
        warned = client.name_warnings([("mial", "sned_email"), ("mial", "sned_email"), ("mail", "send_email")])
        assert len(warned) == 2  # each name once
        assert "job type 'sned_email' was never served by a worker nor declared by a task" in warned[0]
        assert "queue 'mial' was never served by a worker nor configured by an operator" in warned[1]
        conn.execute("DELETE FROM jobqueue.workers")  # forgotten a day after it stopped: still served once
        assert client.name_warnings([("mail", "send_email")]) == []
        register(conn, "w2", ["mial"], ["sned_email"])  # served now
        assert client.name_warnings([("mial", "sned_email")]) == []


def test_a_registration_that_changes_a_workers_names_records_the_new_ones(conn):
    register(conn, "w1", ["a"], ["x"])
    register(conn, "w1", ["a", "b"], ["x", "y"])  # the same worker id, registered again (a restart)
    names = conn.execute("SELECT kind, name FROM jobqueue.served_names ORDER BY kind, name").fetchall()
    assert names == [("job_type", "x"), ("job_type", "y"), ("queue", "a"), ("queue", "b")]
