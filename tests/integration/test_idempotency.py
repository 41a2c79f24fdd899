"""Idempotency keys through SQL and Python: held for a window after submission whatever the job's
state, per producer, race-safe; a repeat that differs returns the original or, opted in, fails."""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from jobqueue import Client, Conflict, IdempotencyMismatch
from jobqueue.model.jobs import RetryOutcome
from tests.support.factories import count_jobs, finish_job, job_row


def sql_enqueue(conn, key: str, payload: str = "{}", **named) -> uuid.UUID:
    extra = "".join(f", {name} => %({name})s" for name in named)
    return conn.execute(
        f"SELECT jobqueue.enqueue('pay', %(payload)s::jsonb, idempotency_key => %(key)s{extra})",
        {"payload": payload, "key": key, **named},
    ).fetchone()[0]


def key_row(conn, key: str, producer: str = "") -> dict | None:
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return cur.execute(
            "SELECT * FROM jobqueue.idempotency_keys WHERE producer = %s AND key = %s", (producer, key)
        ).fetchone()


def close_window(conn, key: str, producer: str = "") -> None:
    """What the passing of time does to a key: its window ends (no test sleeps through one)."""
    conn.execute(
        "UPDATE jobqueue.idempotency_keys SET expires_at = now() - interval '1 second' "
        "WHERE producer = %s AND key = %s",
        (producer, key),
    )


@pytest.mark.parametrize("state", ["completed", "dead_letter", "cancelled"])
def test_a_key_is_held_after_its_job_finished(dsn, conn, state):
    """The case the window is for: the first submission committed and finished, the client never
    heard (503 on commit) and retries with the same key — it gets that job, no second one."""
    first = sql_enqueue(conn, "pay-1")
    finish_job(conn, first, state, result={"paid": True})
    assert sql_enqueue(conn, "pay-1") == first
    with Client(dsn) as client:
        assert client.enqueue("pay", idempotency_key="pay-1") == first
        assert client.submit([{"job_type": "pay", "idempotency_key": "pay-1"}]) == [(first, False)]
    assert count_jobs(conn) == 1
    assert job_row(conn, first)["state"] == state


def test_a_key_is_free_after_its_window(dsn, conn):
    with Client(dsn) as client:
        first = client.enqueue("pay", idempotency_key="pay-1", idempotency_window=timedelta(seconds=30))
        held = key_row(conn, "pay-1")
        assert (held["job_id"], held["expires_at"] - held["created_at"]) == (first, timedelta(seconds=30))
        finish_job(conn, first, "completed")
        assert client.enqueue("pay", idempotency_key="pay-1") == first
        close_window(conn, "pay-1")
        second = client.enqueue("pay", idempotency_key="pay-1")
        assert second != first
        assert client.enqueue("pay", idempotency_key="pay-1") == second
    assert key_row(conn, "pay-1")["job_id"] == second
    assert count_jobs(conn) == 2


def test_a_window_closes_even_while_its_job_waits(conn):
    """The window counts from submission (or run_at), not from the job's end: documented."""
    first = sql_enqueue(conn, "k", idempotency_window="1 minute")
    close_window(conn, "k")
    assert sql_enqueue(conn, "k") != first
    assert job_row(conn, first)["state"] == "pending" and count_jobs(conn) == 2


def test_the_window_is_24_hours_or_the_queues_or_the_calls_and_counts_from_a_later_run_at(dsn, conn):
    def window(key: str) -> timedelta:
        return conn.execute(
            "SELECT expires_at - created_at FROM jobqueue.idempotency_keys WHERE key = %s", (key,)
        ).fetchone()[0]

    with Client(dsn) as client:
        settings = client.set_queue_defaults("short", job_ttl=None, idempotency_window=3600)
        assert settings.idempotency_window == timedelta(hours=1) and settings.job_ttl is None
        client.enqueue("x", idempotency_key="plain")
        client.enqueue("x", idempotency_key="queue", queue="short")
        client.enqueue("x", idempotency_key="call", queue="short", idempotency_window=600)
        client.enqueue("x", idempotency_key="later", delay=timedelta(days=2))
        client.enqueue_many(
            [{"job_type": "x", "idempotency_key": "bulk", "queue": "short", "idempotency_window": timedelta(minutes=5)}]
        )
    assert window("plain") == timedelta(hours=24)
    assert window("queue") == timedelta(hours=1)
    assert window("call") == timedelta(minutes=10)
    assert window("later") == timedelta(days=3)  # held until 24 h after its run_at
    assert window("bulk") == timedelta(minutes=5)


def test_keys_are_held_per_producer_after_completion_too(dsn, conn):
    with Client(dsn, producer_id="alice") as alice, Client(dsn, producer_id="bob") as bob:
        mine = alice.enqueue("pay", idempotency_key="order-1")
        finish_job(conn, mine, "completed")
        assert alice.enqueue("pay", idempotency_key="order-1") == mine
        theirs = bob.enqueue("pay", idempotency_key="order-1")
    plain = sql_enqueue(conn, "order-1")
    assert len({mine, theirs, plain}) == 3
    assert {(r[0], r[1]) for r in conn.execute("SELECT producer, job_id FROM jobqueue.idempotency_keys")} == {
        ("alice", mine),
        ("bob", theirs),
        ("", plain),
    }


def _race(dsn: str, producers: int, key: str) -> list[uuid.UUID]:
    ids: list[uuid.UUID] = []
    barrier = threading.Barrier(producers)

    def produce():
        with psycopg.connect(dsn) as own:
            barrier.wait()
            ids.append(sql_enqueue(own, key))
            own.commit()

    threads = [threading.Thread(target=produce) for _ in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return ids


def test_concurrent_producers_racing_for_a_key_whose_window_closed_create_one_job(dsn, conn):
    old = sql_enqueue(conn, "race")
    finish_job(conn, old, "completed")
    close_window(conn, "race")
    ids = _race(dsn, 8, "race")
    assert len(ids) == 8 and len(set(ids)) == 1 and ids[0] != old
    assert key_row(conn, "race")["job_id"] == ids[0]
    assert count_jobs(conn) == 2


def _waiting_producer(dsn: str, key: str) -> tuple[threading.Thread, list[uuid.UUID]]:
    result: list[uuid.UUID] = []

    def second():
        with psycopg.connect(dsn, autocommit=True) as other:
            result.append(sql_enqueue(other, key))

    thread = threading.Thread(target=second)
    thread.start()
    thread.join(0.3)
    assert thread.is_alive()  # waits for the holder's transaction
    return thread, result


def test_a_producer_waiting_on_a_holder_that_commits_gets_the_holders_job(dsn, conn):
    with psycopg.connect(dsn) as holder:
        mine = sql_enqueue(holder, "k")
        thread, result = _waiting_producer(dsn, "k")
        holder.commit()
    thread.join(5)
    assert result == [mine] and count_jobs(conn) == 1


def test_a_holder_that_rolls_back_a_takeover_of_an_expired_key_leaves_it_to_the_next(dsn, conn):
    """The holder deleted the expired key and inserted its own, then rolled back: the waiting
    producer deletes the expired key itself and creates the job."""
    old = sql_enqueue(conn, "k")
    finish_job(conn, old, "completed")
    close_window(conn, "k")
    holder = psycopg.connect(dsn)
    sql_enqueue(holder, "k")
    thread, result = _waiting_producer(dsn, "k")
    holder.rollback()
    holder.close()
    thread.join(5)
    assert len(result) == 1 and result[0] != old
    assert key_row(conn, "k")["job_id"] == result[0]
    assert {r[0] for r in conn.execute("SELECT id FROM jobqueue.jobs")} == {old, result[0]}


def test_a_different_repeat_returns_the_original_unless_it_asks_to_be_rejected(dsn, conn):
    first = sql_enqueue(conn, "k", '{"amount": 10}')
    finish_job(conn, first, "completed")
    assert sql_enqueue(conn, "k", '{"amount": 99}') == first  # default: the original wins
    assert sql_enqueue(conn, "k", '{"amount": 10}', priority="high", idempotency_mismatch="reject") == first
    assert sql_enqueue(conn, "k", '{ "amount":10 }', idempotency_mismatch="reject") == first  # same document
    for payload, named in (('{"amount": 99}', {}), ('{"amount": 10}', {"queue": "other"})):
        with pytest.raises(psycopg.errors.UniqueViolation) as info:
            sql_enqueue(conn, "k", payload, idempotency_mismatch="reject", **named)
        diag = info.value.diag
        assert (diag.sqlstate, diag.constraint_name, diag.column_name) == (
            "23505",
            "idempotency_keys_pkey",
            "idempotency_key",
        )
        assert diag.message_detail == str(first) and str(first) in diag.message_primary
    with Client(dsn) as client:
        with pytest.raises(IdempotencyMismatch) as mismatch:
            client.enqueue("refund", {"amount": 10}, idempotency_key="k", idempotency_mismatch="reject")
        assert isinstance(mismatch.value, Conflict)
        assert (mismatch.value.job_id, mismatch.value.field) == (first, "idempotency_key")
        with pytest.raises(IdempotencyMismatch) as in_batch:  # all or nothing: the new job is not written
            client.enqueue_many(
                [
                    {"job_type": "pay", "idempotency_key": "new"},
                    {
                        "job_type": "pay",
                        "payload": {"amount": 1},
                        "idempotency_key": "k",
                        "idempotency_mismatch": "reject",
                    },
                ]
            )
        assert "jobs[1]" in str(in_batch.value)
        with pytest.raises(IdempotencyMismatch):  # two elements of one batch disagreeing
            client.enqueue_many(
                [
                    {"job_type": "pay", "idempotency_key": "twin", "payload": {"n": 1}},
                    {
                        "job_type": "pay",
                        "idempotency_key": "twin",
                        "payload": {"n": 2},
                        "idempotency_mismatch": "reject",
                    },
                ]
            )
    assert count_jobs(conn) == 1
    assert conn.execute("SELECT count(*) FROM jobqueue.idempotency_keys").fetchone()[0] == 1


def test_keys_taken_before_this_revision_are_held_too(empty_dsn):
    """Migration 0006 copies the keys of existing jobs: the live holder's (held at least a window
    from now), else the newest; jobs whose window already closed hold nothing."""
    from jobqueue.store import migrate

    migrate.upgrade(empty_dsn, "0005_idempotency_per_producer")
    now = datetime.now(timezone.utc)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:

        def job(key, state, created_ago, producer=None):
            return conn.execute(
                "INSERT INTO jobqueue.jobs (job_type, idempotency_key, producer_id, state, created_at, run_at) "
                "VALUES ('pay', %s, %s, %s, %s, %s) RETURNING id",
                (key, producer, state, now - created_ago, now - created_ago),
            ).fetchone()[0]

        done_recently = job("a", "completed", timedelta(hours=2))
        job("a", "completed", timedelta(hours=5))
        job("old", "completed", timedelta(days=3))
        stuck = job("b", "failed", timedelta(days=3))
        job("b", "completed", timedelta(hours=1))
        alices = job("a", "completed", timedelta(hours=1), producer="alice")
        migrate.upgrade(empty_dsn)
        rows = {
            (r[0], r[1]): (r[2], r[3])
            for r in conn.execute("SELECT producer, key, job_id, expires_at FROM jobqueue.idempotency_keys")
        }
        assert set(rows) == {("", "a"), ("", "b"), ("alice", "a")}
        assert rows[("", "a")][0] == done_recently and rows[("alice", "a")][0] == alices
        assert rows[("", "b")][0] == stuck and rows[("", "b")][1] > now + timedelta(hours=23)
        assert conn.execute("SELECT jobqueue.enqueue('pay', idempotency_key => 'a')").fetchone()[0] == done_recently
        assert conn.execute("SELECT jobqueue.enqueue('pay', idempotency_key => 'old')").fetchone()[0] is not None
        assert conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 7


def test_an_admin_retry_is_refused_only_when_another_job_holds_the_key(dsn, conn):
    with Client(dsn) as client:
        first = client.enqueue("pay", idempotency_key="k")
        finish_job(conn, first, "dead_letter")
        assert client.retry_dead(first) is RetryOutcome.RETRIED  # it holds its own key
        finish_job(conn, first, "dead_letter")
        close_window(conn, "k")
        second = client.enqueue("pay", idempotency_key="k")
        assert client.retry_dead(first) is RetryOutcome.KEY_TAKEN
        assert client.retry_dead_letters() == 0
        close_window(conn, "k")  # the second's window closed too: nobody holds the key
        assert client.retry_dead(first) is RetryOutcome.RETRIED
    assert {job_row(conn, first)["state"], job_row(conn, second)["state"]} == {"pending"}


def test_purging_a_dead_job_frees_its_key(dsn, conn):
    first = sql_enqueue(conn, "k")
    finish_job(conn, first, "dead_letter")
    with Client(dsn) as client:
        assert client.purge_dead_letters() == 1
    assert key_row(conn, "k") is None
    assert sql_enqueue(conn, "k") != first


def test_batches_sharing_keys_in_opposite_orders_do_not_deadlock(dsn, conn):
    """Keys are taken in (producer, key) order whatever the batch's order: a batch [b, a] waits on
    a before it holds b, so a holder of a that then takes b goes through."""
    bulk = "SELECT id FROM jobqueue.enqueue_many(%s::jsonb)"
    with psycopg.connect(dsn) as holder:
        a = holder.execute(bulk, ('[{"job_type": "pay", "idempotency_key": "a"}]',)).fetchone()[0]
        result: list = []

        def second():
            with psycopg.connect(dsn, autocommit=True) as other:
                result.extend(
                    r[0]
                    for r in other.execute(
                        bulk,
                        ('[{"job_type": "pay", "idempotency_key": "b"}, {"job_type": "pay", "idempotency_key": "a"}]',),
                    )
                )

        thread = threading.Thread(target=second)
        thread.start()
        thread.join(0.3)
        assert thread.is_alive()
        b = holder.execute(bulk, ('[{"job_type": "pay", "idempotency_key": "b"}]',)).fetchone()[0]
        holder.commit()
    thread.join(5)
    assert result == [b, a] and count_jobs(conn) == 2
