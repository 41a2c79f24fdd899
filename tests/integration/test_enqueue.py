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
from jobqueue.model.jobs import JobState, Priority
from tests.support.factories import count_jobs, job_row


def test_sql_enqueue_returns_id_and_stores_fields(conn):
    run_at = datetime.now(timezone.utc) + timedelta(hours=1)
    job_id = conn.execute(
        """SELECT jobqueue.enqueue('send_email', '{"to": "a@b.c"}', priority => 'high', run_at => %s,
                                   queue => 'mail', max_attempts => 7, idempotency_key => 'k-1')""",
        (run_at,),
    ).fetchone()[0]
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


@pytest.mark.parametrize(
    "call, field",
    [
        ("SELECT jobqueue.enqueue('x', 'not json')", "payload"),
        ("SELECT jobqueue.enqueue('x', priority => 'urgent')", "priority"),
        ("SELECT jobqueue.enqueue('', '{}')", "job_type"),
        ("SELECT jobqueue.enqueue('x', delay => '-5 seconds')", "delay"),
        ("SELECT jobqueue.enqueue('x', max_attempts => 0)", "max_attempts"),
        ("SELECT jobqueue.enqueue('x', queue => '')", "queue"),
        (
            'SELECT * FROM jobqueue.enqueue_many(\'[{"job_type": "a"}, {"job_type": "b", "priority": "nope"}]\')',
            "jobs[1].priority",
        ),
        ("SELECT jobqueue.enqueue('x', timeout => '0 seconds')", "timeout"),
        ("SELECT jobqueue.enqueue('x', '{}', timeout => '-1 minute')", "timeout"),  # the text-payload overload
        ("SELECT jobqueue.enqueue('x', timeout => '3651 days')", "timeout"),
        ("SELECT jobqueue.enqueue('x', expire_after => '0')", "expire_after"),
        ("SELECT jobqueue.enqueue('x', expires_at => now())", "expires_at"),  # not after run_at
        ("SELECT jobqueue.enqueue('x', delay => '1 hour', expires_at => now() + interval '30 minutes')", "expires_at"),
        (
            "SELECT jobqueue.enqueue('x', expires_at => now() + interval '1 hour', expire_after => '1 hour')",
            "expire_after",
        ),
        ("SELECT jobqueue.enqueue('x', idempotency_key => 'k', idempotency_window => '-1 hour')", "idempotency_window"),
        (
            "SELECT jobqueue.enqueue('x', idempotency_key => 'k', idempotency_mismatch => 'error')",
            "idempotency_mismatch",
        ),
        (
            'SELECT * FROM jobqueue.enqueue_many(\'[{"job_type": "a"}, {"job_type": "b", "timeout": "soon"}]\')',
            "jobs[1].timeout",
        ),
        (
            'SELECT * FROM jobqueue.enqueue_many(\'[{"job_type": "a", "expires_at": "tomorrow-ish"}]\')',
            "jobs[0].expires_at",
        ),
        (
            'SELECT * FROM jobqueue.enqueue_many(\'[{"job_type": "a", "max_attempts": "many"}]\')',
            "jobs[0].max_attempts",
        ),
        (
            "SELECT * FROM jobqueue.enqueue_many("
            """'[{"job_type": "a"}, {"job_type": "b", "expire_after": "-5 minutes"}]')""",
            "jobs[1].expire_after",
        ),
        (
            'SELECT * FROM jobqueue.enqueue_many(\'[{"job_type": "a", "idempotency_window": "0 seconds"}]\')',
            "jobs[0].idempotency_window",
        ),
    ],
)
def test_sql_bad_input_names_the_field_and_writes_nothing(conn, call, field):
    with pytest.raises(psycopg.errors.InvalidParameterValue) as info:
        conn.execute(call)
    assert info.value.diag.column_name == field
    assert field in info.value.diag.message_primary
    assert count_jobs(conn) == 0
    assert conn.execute("SELECT count(*) FROM jobqueue.idempotency_keys").fetchone()[0] == 0


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(job_type="x", payload={"f": object()}), "payload"),
        (dict(job_type="x", payload={"f": "a\u0000b"}), "payload"),  # jsonb cannot hold NUL
        (dict(job_type="x", priority="urgent"), "priority"),
        (dict(job_type=""), "job_type"),
        (dict(job_type="x", delay=-1), "delay"),
        (
            dict(job_type="x", delay=-86399999913601.0),
            "delay",
        ),  # beyond timedelta: was an OverflowError (a 500 over REST)
        (dict(job_type="x", delay=float("nan")), "delay"),
        (dict(job_type="x", max_attempts=0), "max_attempts"),
        (dict(job_type="x", run_at=datetime(2030, 1, 1)), "run_at"),
        (dict(job_type="x", producer_id=""), "producer_id"),
        (dict(job_type="x", timeout=0), "timeout"),
        (dict(job_type="x", expire_after=-1), "expire_after"),
        (dict(job_type="x", expires_at=datetime(2030, 1, 1)), "expires_at"),
        (dict(job_type="x", expires_at=datetime.now(timezone.utc) - timedelta(seconds=1)), "expires_at"),  # SQL's check
        (dict(job_type="x", delay=3600, expires_at=datetime.now(timezone.utc) + timedelta(minutes=30)), "expires_at"),
        (dict(job_type="x", idempotency_key="k", idempotency_window=timedelta(0)), "idempotency_window"),
        (dict(job_type="x", idempotency_key="k", idempotency_mismatch="maybe"), "idempotency_mismatch"),
    ],
)
def test_python_bad_input_names_the_field_and_writes_nothing(dsn, conn, kwargs, field):
    with Client(dsn) as client:
        with pytest.raises(ValidationError) as info:
            client.enqueue(**kwargs)
    assert info.value.field == field
    assert count_jobs(conn) == 0


def test_timeout_and_expiry_are_stored_as_given(dsn, conn):
    run_at = datetime.now(timezone.utc) + timedelta(hours=1)
    from_sql = conn.execute(
        "SELECT jobqueue.enqueue('x', run_at => %s, timeout => '90 seconds', expire_after => '2 hours')", (run_at,)
    ).fetchone()[0]
    at = datetime.now(timezone.utc) + timedelta(hours=5)
    with Client(dsn) as client:
        from_python = client.enqueue("x", timeout=timedelta(minutes=5), expires_at=at)
        bulk = client.enqueue_many(
            [{"job_type": "x", "timeout": 2.5, "delay": 60, "expire_after": 30}, {"job_type": "x"}]
        )
        info = client.get(from_python)
        plain = client.get(bulk[1])
    row = job_row(conn, from_sql)
    assert (row["timeout"], row["expires_at"]) == (timedelta(seconds=90), run_at + timedelta(hours=2))
    assert (info.timeout, info.expires_at) == (timedelta(minutes=5), at)
    row = job_row(conn, bulk[0])
    assert (row["timeout"], row["expires_at"]) == (timedelta(seconds=2.5), row["run_at"] + timedelta(seconds=30))
    assert (plain.timeout, plain.expires_at) == (None, None)


def test_a_queues_job_ttl_applies_when_the_call_gives_no_expiry(dsn, conn):
    later = datetime.now(timezone.utc) + timedelta(days=1)
    with Client(dsn) as client:
        settings = client.set_queue_defaults("mail", job_ttl=3600, idempotency_window=None)
        assert (settings.job_ttl, settings.idempotency_window) == (timedelta(hours=1), None)
        scheduled = client.enqueue("x", queue="mail", run_at=later)
        own = client.enqueue("x", queue="mail", expire_after=60)
        elsewhere = client.enqueue("x", queue="other")
        bulk = client.enqueue_many([{"job_type": "x", "queue": "mail"}])[0]
        for field, bad in (("job_ttl", 0), ("job_ttl", "1h"), ("idempotency_window", -1)):
            with pytest.raises(ValidationError) as info:
                client.set_queue_defaults("mail", **{"job_ttl": None, "idempotency_window": None, field: bad})
            assert info.value.field == field
        from_sql = conn.execute("SELECT jobqueue.enqueue('x', queue => 'mail')").fetchone()[0]
        client.set_queue_defaults("mail", job_ttl=None, idempotency_window=None)
        unset = client.enqueue("x", queue="mail")

    def expiry_after_run_at(job_id):
        row = job_row(conn, job_id)
        return row["expires_at"] - row["run_at"] if row["expires_at"] else None

    assert job_row(conn, scheduled)["expires_at"] == later + timedelta(hours=1)
    assert expiry_after_run_at(own) == timedelta(seconds=60)
    assert expiry_after_run_at(bulk) == timedelta(hours=1)
    assert expiry_after_run_at(from_sql) == timedelta(hours=1)
    assert expiry_after_run_at(elsewhere) is None and expiry_after_run_at(unset) is None


def test_python_validation_in_sql_reaches_the_caller_with_its_field(dsn, conn):
    # A priority the Python side accepts as int but SQL refuses is impossible; so check a rule
    # only SQL enforces (a bulk element's run_at and delay together).
    with Client(dsn) as client, pytest.raises(ValidationError) as info:
        client.enqueue_many([{"job_type": "a"}, {"job_type": "b", "delay": 5, "run_at": datetime.now(timezone.utc)}])
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


def test_idempotency_key_returns_the_original_job(dsn, conn):
    """A repeat returns the job first submitted with the key — also with another payload (the
    original wins) and inside one batch (the first element wins)."""
    with Client(dsn) as client:
        first = client.enqueue("x", idempotency_key="order-1")
        again = client.enqueue("x", {"other": "payload"}, idempotency_key="order-1")
        in_bulk = client.submit(
            [
                {"job_type": "x", "idempotency_key": "order-1"},
                {"job_type": "x", "idempotency_key": "order-2"},
                {"job_type": "x", "idempotency_key": "order-2", "payload": {"n": 2}},
            ]
        )
    assert again == first
    assert in_bulk[0] == (first, False)
    assert in_bulk[1][1] is True and in_bulk[2] == (in_bulk[1][0], False) and in_bulk[1][0] != first
    assert count_jobs(conn) == 2
    assert job_row(conn, first)["payload"] == {} and job_row(conn, in_bulk[1][0])["payload"] == {}


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
        producer.execute(
            "SELECT * FROM jobqueue.enqueue_many(%s)",
            (json.dumps([{"job_type": "a", "queue": "q1"} for _ in range(100)] + [{"job_type": "a", "queue": "q2"}]),),
        )
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
    rows = conn.execute(
        "SELECT queue, priority, pending, scheduled, processing, failed, dead, "
        "oldest_runnable_age_seconds FROM jobqueue.queue_stats"
    ).fetchall()
    assert [r[:7] for r in rows] == [("q", "high", 2, 1, 1, 1, 1), ("q", "low", 1, 0, 0, 0, 0)]
    assert 590 < rows[0][7] < 700


def test_job_ids_are_time_ordered_uuids_so_the_primary_key_lists_newest_first(conn):
    """UUIDv7 (RFC 9562): version 7, creation order even within one batch, so the listing walks
    jobs_pkey and no separate index on seq is written by every insert, claim and ack."""
    with Client(conn.info.dsn) as client:
        ids = client.enqueue_many([{"job_type": "t", "payload": {"n": n}} for n in range(50)])
        ids += [client.enqueue("t", {"n": 50 + n}) for n in range(5)]
        page = client.list_jobs(limit=55)
    assert all(job_id.version == 7 for job_id in ids)
    assert ids == sorted(ids)
    assert [job.id for job in page.jobs] == ids[::-1]
    assert conn.execute(
        "SELECT count(*) FROM pg_indexes WHERE schemaname = 'jobqueue' AND indexname = 'jobs_list_idx'"
    ).fetchone() == (0,)


def _payloads(listener: psycopg.Connection, channel: str) -> list[str]:
    return sorted(n.payload for n in listener.notifies(timeout=0.5, stop_after=1000) if n.channel == channel)


def test_enqueue_notifies_once_per_queue_and_only_for_jobs_it_wrote(dsn):
    """No trigger on jobqueue.jobs: the enqueue functions send the NOTIFY themselves — one per
    queue and transaction (PostgreSQL folds repeats), none for a job not written (its key held,
    the input refused, the transaction rolled back)."""
    with psycopg.connect(dsn, autocommit=True) as listener, psycopg.connect(dsn, autocommit=True) as producer:
        listener.execute("LISTEN jobqueue_jobs")
        producer.execute("SELECT jobqueue.enqueue('a', queue => 'q1')")
        assert _payloads(listener, "jobqueue_jobs") == ["q1"]
        with producer.transaction():
            producer.execute("SELECT jobqueue.enqueue('a', queue => 'q1')")
            producer.execute("SELECT jobqueue.enqueue('a', queue => 'q2', idempotency_key => 'k')")
            producer.execute(
                "SELECT * FROM jobqueue.enqueue_many(%s)",
                (json.dumps([{"job_type": "a", "queue": "q1"}, {"job_type": "a", "queue": "q3"}] * 3),),
            )
        assert _payloads(listener, "jobqueue_jobs") == ["q1", "q2", "q3"]
        producer.execute("SELECT jobqueue.enqueue('a', queue => 'q4', idempotency_key => 'k')")  # held: the q2 job
        producer.execute(
            "SELECT * FROM jobqueue.enqueue_many(%s)",
            (json.dumps([{"job_type": "a", "queue": "q4", "idempotency_key": "k"}]),),
        )
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            producer.execute(
                "SELECT * FROM jobqueue.enqueue_many(%s)",
                (json.dumps([{"job_type": "a", "queue": "q5"}, {"job_type": "", "queue": "q5"}]),),
            )
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            producer.execute("SELECT jobqueue.enqueue('a', queue => 'q5', max_attempts => 0)")
        with producer.transaction(force_rollback=True):
            producer.execute("SELECT jobqueue.enqueue('a', queue => 'q6')")
        assert _payloads(listener, "jobqueue_jobs") == []
        assert producer.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'jobqueue.jobs'::regclass AND tgtype & 4 = 4"
        ).fetchone() == (0,)  # no INSERT trigger left


def test_sql_enqueue_sends_job_queued_only_for_jobs_it_wrote(dsn, conn):
    from jobqueue.events.hub import decode

    conn.execute("INSERT INTO jobqueue.event_listeners VALUES ('test', now() + interval '1 minute')")
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN jobqueue_events")
        one = conn.execute("SELECT jobqueue.enqueue('a', queue => 'q1', producer_id => 'p')").fetchone()[0]
        keyed = conn.execute("SELECT jobqueue.enqueue('a', queue => 'q2', idempotency_key => 'k')").fetchone()[0]
        rows = conn.execute(
            "SELECT id, created FROM jobqueue.enqueue_many(%s)",
            (json.dumps([{"job_type": "a", "queue": "q2", "idempotency_key": "k"}, {"job_type": "a", "queue": "q3"}]),),
        ).fetchall()
        events = [e for payload in _payloads(listener, "jobqueue_events") for e in decode(payload, 0.0)]
    assert rows[0] == (keyed, False) and rows[1][1] is True
    assert sorted((e.event, e.queue, e.producer_id, e.job_id) for e in events) == sorted(
        [("job.queued", "q1", "p", one), ("job.queued", "q2", None, keyed), ("job.queued", "q3", None, rows[1][0])]
    )


def test_bulk_validation_names_the_first_bad_job_and_writes_nothing(conn):
    """Validated set-based: with several bad jobs, the first one (and its first bad field) is
    named, as the per-job checks did; nothing is written, keys included."""
    jobs = [
        {"job_type": "a", "idempotency_key": "k0"},
        {"job_type": "b", "queue": "q"},
        {"job_type": "c", "max_attempts": 0, "priority": "urgent"},
        {"job_type": ""},
    ]
    with pytest.raises(psycopg.errors.InvalidParameterValue) as info:
        conn.execute("SELECT * FROM jobqueue.enqueue_many(%s)", (json.dumps(jobs),))
    assert info.value.diag.column_name == "jobs[2].max_attempts"
    assert info.value.diag.message_primary == "jobqueue: jobs[2].max_attempts: must be at least 1 (got 0)"
    assert count_jobs(conn) == 0
    assert conn.execute("SELECT count(*) FROM jobqueue.idempotency_keys").fetchone()[0] == 0


def test_ids_made_in_one_statement_sort_in_its_order(conn):
    """uuid_v7(n) carries n in the bits after the variant, so ids made within one microsecond
    still sort by n; every id is a version 7, variant 10 UUID."""
    ids = [row[0] for row in conn.execute("SELECT jobqueue.uuid_v7(n) FROM generate_series(1, 16000) AS n")]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    plain = [row[0] for row in conn.execute("SELECT jobqueue.uuid_v7() FROM generate_series(1, 1000)")]
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in ids[:1000] + plain)
    assert len(set(plain)) == 1000
