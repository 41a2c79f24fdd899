"""Enqueue through SQL and Python: one behaviour, transactional, validated, idempotent."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from jobqueue import AsyncClient, Client, ValidationError
from jobqueue.models import JobState, Priority
from tests.support.factories import count_jobs, job_row


def test_sql_enqueue_returns_id_and_stores_fields(conn):
    run_at = datetime.now(timezone.utc) + timedelta(hours=1)
    job_id = conn.execute(
        """SELECT jobqueue.enqueue('send_email', '{"to": "a@b.c"}', priority => 'high', run_at => %s,
                                   queue => 'mail', max_attempts => 7, idempotency_key => 'k-1')""",
        (run_at,)).fetchone()[0]
    row = job_row(conn, job_id)
    assert isinstance(job_id, uuid.UUID)
    assert (row["job_type"], row["queue"], row["priority"], row["state"]) == ("send_email", "mail", 1, "pending")
    assert row["payload"] == {"to": "a@b.c"}
    assert row["max_attempts"] == 7 and row["attempts"] == 0
    assert row["run_at"] == run_at and row["idempotency_key"] == "k-1"


def test_sql_enqueue_rolled_back_leaves_nothing(dsn):
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT jobqueue.enqueue('x', '{}')")
        conn.rollback()
        assert count_jobs(conn) == 0


@pytest.mark.parametrize("call, field", [
    ("SELECT jobqueue.enqueue('x', 'not json')", "payload"),
    ("SELECT jobqueue.enqueue('x', priority => 'urgent')", "priority"),
    ("SELECT jobqueue.enqueue('', '{}')", "job_type"),
    ("SELECT jobqueue.enqueue('x', delay => '-5 seconds')", "delay"),
    ("SELECT jobqueue.enqueue('x', max_attempts => 0)", "max_attempts"),
    ("SELECT jobqueue.enqueue('x', queue => '')", "queue"),
    ("SELECT * FROM jobqueue.enqueue_many('[{\"job_type\": \"a\"}, {\"job_type\": \"b\", \"priority\": \"nope\"}]')",
     "jobs[1].priority"),
])
def test_sql_bad_input_names_the_field_and_writes_nothing(conn, call, field):
    with pytest.raises(psycopg.errors.InvalidParameterValue) as info:
        conn.execute(call)
    assert info.value.diag.column_name == field
    assert field in info.value.diag.message_primary
    assert count_jobs(conn) == 0


@pytest.mark.parametrize("kwargs, field", [
    (dict(job_type="x", payload={"f": object()}), "payload"),
    (dict(job_type="x", payload={"f": "a\u0000b"}), "payload"),  # jsonb cannot hold NUL
    (dict(job_type="x", priority="urgent"), "priority"),
    (dict(job_type=""), "job_type"),
    (dict(job_type="x", delay=-1), "delay"),
    (dict(job_type="x", max_attempts=0), "max_attempts"),
    (dict(job_type="x", run_at=datetime(2030, 1, 1)), "run_at"),
    (dict(job_type="x", producer_id=""), "producer_id"),
])
def test_python_bad_input_names_the_field_and_writes_nothing(dsn, conn, kwargs, field):
    with Client(dsn) as client:
        with pytest.raises(ValidationError) as info:
            client.enqueue(**kwargs)
    assert info.value.field == field
    assert count_jobs(conn) == 0


def test_python_validation_in_sql_reaches_the_caller_with_its_field(dsn, conn):
    # A priority the Python side accepts as int but SQL refuses is impossible; so check a rule
    # only SQL enforces (a bulk element's run_at and delay together).
    with Client(dsn) as client, pytest.raises(ValidationError) as info:
        client.enqueue_many([{"job_type": "a"},
                             {"job_type": "b", "delay": 5, "run_at": datetime.now(timezone.utc)}])
    assert info.value.field == "jobs[1].run_at"
    assert count_jobs(conn) == 0


def test_python_enqueue_and_get(dsn):
    with Client(dsn, producer_id="svc-a") as client:
        job_id = client.enqueue("echo", {"n": 1}, priority="critical", queue="q1", delay=30)
        info = client.get(job_id)
    assert info.state is JobState.PENDING and info.priority is Priority.CRITICAL
    assert info.payload == {"n": 1} and info.producer_id == "svc-a" and info.queue == "q1"
    assert info.run_at > datetime.now(timezone.utc) + timedelta(seconds=20)


def test_enqueue_many_is_one_statement_in_order(dsn, conn):
    with Client(dsn) as client:
        ids = client.enqueue_many([{"job_type": "a", "payload": {"i": i}, "priority": "low"} for i in range(50)])
    rows = conn.execute("SELECT id, payload->>'i' FROM jobqueue.jobs ORDER BY seq").fetchall()
    assert [r[0] for r in rows] == ids
    assert [int(r[1]) for r in rows] == list(range(50))


def test_connection_joins_the_callers_transaction(dsn):
    with Client(dsn) as client, psycopg.connect(dsn) as own:
        job_id = client.enqueue("x", connection=own)
        with psycopg.connect(dsn) as other:
            assert count_jobs(other) == 0  # not visible before our commit
        own.rollback()
        assert count_jobs(own) == 0
        job_id = client.enqueue("x", connection=own)
        own.commit()
        assert client.get(job_id).state is JobState.PENDING


def test_async_client_connection_and_many(dsn):
    async def main():
        async with AsyncClient(dsn) as client:
            async with await psycopg.AsyncConnection.connect(dsn) as own:
                ids = await client.enqueue_many([{"job_type": "a"}, {"job_type": "b"}], connection=own)
                await own.rollback()
            assert len(ids) == 2
            with pytest.raises(Exception):
                await client.get(ids[0])
            return await client.enqueue("c")

    job_id = asyncio.run(main())
    with Client(dsn) as client:
        assert client.get(job_id).job_type == "c"


def test_idempotency_key_returns_the_live_job(dsn, conn):
    with Client(dsn) as client:
        first = client.enqueue("x", idempotency_key="order-1")
        again = client.enqueue("x", {"other": "payload"}, idempotency_key="order-1")
        in_bulk = client.enqueue_many([{"job_type": "x", "idempotency_key": "order-1"},
                                       {"job_type": "x", "idempotency_key": "order-2"},
                                       {"job_type": "x", "idempotency_key": "order-2"}])
    assert again == first
    assert in_bulk[0] == first and in_bulk[1] == in_bulk[2] != first
    assert count_jobs(conn) == 2
    conn.execute("UPDATE jobqueue.jobs SET state = 'completed' WHERE id = %s", (first,))
    with Client(dsn) as client:
        assert client.enqueue("x", idempotency_key="order-1") != first  # a finished job frees its key


def test_idempotency_keys_are_scoped_by_producer(dsn, conn):
    """One producer's key never answers another's submission: each gets its own job."""
    with Client(dsn, producer_id="alice") as alice, Client(dsn, producer_id="bob") as bob:
        mine = alice.enqueue("x", idempotency_key="order-1")
        theirs = bob.enqueue("x", idempotency_key="order-1")
        assert alice.enqueue("x", idempotency_key="order-1") == mine
        assert bob.submit([{"job_type": "x", "idempotency_key": "order-1"}]) == [(theirs, False)]
    plain = conn.execute("SELECT jobqueue.enqueue('x', idempotency_key => 'order-1')").fetchone()[0]
    assert len({mine, theirs, plain}) == 3  # SQL without a producer id is a scope of its own
    assert conn.execute("SELECT jobqueue.enqueue('x', idempotency_key => 'order-1')").fetchone()[0] == plain
    assert count_jobs(conn) == 3


def test_concurrent_producers_with_one_key_create_one_job(dsn, conn):
    ids: list[uuid.UUID] = []
    barrier = threading.Barrier(8)

    def produce():
        with psycopg.connect(dsn) as own:
            barrier.wait()
            job_id = own.execute("SELECT jobqueue.enqueue('pay', '{}', idempotency_key => 'race')").fetchone()[0]
            own.commit()
            ids.append(job_id)

    threads = [threading.Thread(target=produce) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 8 and len(set(ids)) == 1
    assert count_jobs(conn) == 1


def test_idempotent_insert_survives_a_holder_that_rolls_back(dsn, conn):
    """The first producer holds the key in an open transaction and rolls back: the second creates it."""
    holder = psycopg.connect(dsn)
    holder.execute("SELECT jobqueue.enqueue('pay', '{}', idempotency_key => 'rb')")
    result: list[uuid.UUID] = []

    def second():
        with psycopg.connect(dsn, autocommit=True) as other:
            result.append(other.execute("SELECT jobqueue.enqueue('pay', '{}', idempotency_key => 'rb')").fetchone()[0])

    thread = threading.Thread(target=second)
    thread.start()
    thread.join(0.3)
    assert thread.is_alive()  # waits on the holder's uncommitted row
    holder.rollback()
    holder.close()
    thread.join(5)
    assert len(result) == 1
    assert conn.execute("SELECT id FROM jobqueue.jobs").fetchall() == [(result[0],)]


def test_task_defaults_apply_to_sql_enqueue(conn):
    conn.execute("INSERT INTO jobqueue.task_defaults (job_type, max_attempts) VALUES ('mail', 9)")
    job_id = conn.execute("SELECT jobqueue.enqueue('mail')").fetchone()[0]
    other = conn.execute("SELECT jobqueue.enqueue('other')").fetchone()[0]
    explicit = conn.execute("SELECT jobqueue.enqueue('mail', max_attempts => 2)").fetchone()[0]
    assert job_row(conn, job_id)["max_attempts"] == 9
    assert job_row(conn, other)["max_attempts"] == 4
    assert job_row(conn, explicit)["max_attempts"] == 2


def test_bulk_enqueue_sends_one_notification_per_queue(dsn):
    with psycopg.connect(dsn, autocommit=True) as listener, psycopg.connect(dsn, autocommit=True) as producer:
        listener.execute("LISTEN jobqueue_jobs")
        producer.execute("SELECT * FROM jobqueue.enqueue_many(%s)", (json.dumps(
            [{"job_type": "a", "queue": "q1"} for _ in range(100)] + [{"job_type": "a", "queue": "q2"}]),))
        received = list(listener.notifies(timeout=0.5))
    assert sorted(n.payload for n in received) == ["q1", "q2"]


def test_queue_stats_view_counts_each_state_per_queue_and_priority(conn):
    from tests.support.factories import make_job

    future = datetime.now(timezone.utc) + timedelta(hours=1)
    old = datetime.now(timezone.utc) - timedelta(minutes=10)
    make_job(conn, queue="q", priority="high", run_at=old)
    make_job(conn, queue="q", priority="high")
    make_job(conn, queue="q", priority="high", run_at=future)
    make_job(conn, queue="q", priority="high", state="processing")
    make_job(conn, queue="q", priority="high", state="failed", run_at=future)
    make_job(conn, queue="q", priority="high", state="dead_letter")
    make_job(conn, queue="q", priority="low")
    make_job(conn, queue="q", priority="low", state="completed")
    rows = conn.execute("SELECT queue, priority, pending, scheduled, processing, failed, dead, "
                        "oldest_runnable_age_seconds FROM jobqueue.queue_stats").fetchall()
    assert [r[:7] for r in rows] == [("q", "high", 2, 1, 1, 1, 1), ("q", "low", 1, 0, 0, 0, 0)]
    assert 590 < rows[0][7] < 700
