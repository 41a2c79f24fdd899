"""Ordering keys in the database: one job of a producer's key at a time, in enqueue order, whatever
path enqueues it, and no interleaving of enqueues and ends that could let two run at once."""

from __future__ import annotations

import json
import threading
import uuid

import psycopg
import pytest

from jobqueue.db.queries import query
from tests.integration.test_schema import seq_scanned
from tests.support.factories import claim_params

CLAIM = query("job_claim")


def enqueue(conn, key: str | None, *, producer: str | None = None, **fields) -> uuid.UUID:
    return conn.execute(
        "SELECT jobqueue.enqueue(job_type => 't', payload => %s::jsonb, ordering_key => %s, producer_id => %s,"
        " priority => %s, delay => %s::interval, idempotency_key => %s)",
        (
            json.dumps(fields.get("payload", {})),
            key,
            producer,
            fields.get("priority", "normal"),
            fields.get("delay"),
            fields.get("idempotency_key"),
        ),
    ).fetchone()[0]


def claim(conn, limit: int = 10, worker: str = "w") -> list[uuid.UUID]:
    return [row[0] for row in conn.execute(CLAIM, claim_params(limit=limit, worker_id=worker)).fetchall()]


def complete(conn, job_id: uuid.UUID) -> None:
    conn.execute("UPDATE jobqueue.jobs SET state = 'completed', finished_at = now() WHERE id = %s", (job_id,))


def state(conn, job_id: uuid.UUID) -> str:
    return conn.execute("SELECT state FROM jobqueue.jobs WHERE id = %s", (job_id,)).fetchone()[0]


def test_jobs_of_one_key_run_one_at_a_time_in_enqueue_order_and_other_keys_in_parallel(conn):
    a = [enqueue(conn, "customer-42") for _ in range(3)]
    b = enqueue(conn, "customer-7")
    free = enqueue(conn, None)
    assert [state(conn, i) for i in a] == ["pending", "waiting", "waiting"]
    assert set(claim(conn)) == {a[0], b, free}
    assert claim(conn) == []  # a[1] waits for a[0], which runs
    complete(conn, a[0])
    assert state(conn, a[1]) == "pending"
    assert claim(conn) == [a[1]]
    complete(conn, a[1])
    assert claim(conn) == [a[2]]


def test_within_a_key_enqueue_order_wins_over_priority_and_a_delayed_head_holds_the_key(conn):
    first = enqueue(conn, "k", priority="low", delay="1 hour")
    urgent = enqueue(conn, "k", priority="critical")
    assert claim(conn) == []  # the delayed low job is the key's head: the critical one waits behind it
    conn.execute("UPDATE jobqueue.jobs SET run_at = now() WHERE id = %s", (first,))
    assert claim(conn) == [first]
    complete(conn, first)
    assert claim(conn) == [urgent]


def test_a_retrying_job_holds_its_key_until_it_dead_letters_or_is_cancelled(conn):
    head, nxt, last = (enqueue(conn, "k") for _ in range(3))
    assert claim(conn) == [head]
    conn.execute(
        "UPDATE jobqueue.jobs SET state = 'failed', run_at = now() + interval '1 hour', locked_by = NULL WHERE id = %s",
        (head,),
    )
    assert claim(conn) == []  # failed, waiting for its retry: still the head
    conn.execute("UPDATE jobqueue.jobs SET state = 'dead_letter', finished_at = now() WHERE id = %s", (head,))
    assert state(conn, nxt) == "pending"
    assert conn.execute("SELECT jobqueue.cancel(%s)", (nxt,)).fetchone()[0] == "cancelled"
    assert state(conn, last) == "pending"  # the operator's way to unblock a key: cancel its head


def test_cancelling_a_waiting_job_leaves_the_head_alone_and_deleting_the_head_releases_the_next(conn):
    head, middle, last = (enqueue(conn, "k") for _ in range(3))
    assert conn.execute("SELECT jobqueue.cancel(%s)", (middle,)).fetchone()[0] == "cancelled"
    assert [state(conn, i) for i in (head, last)] == ["pending", "waiting"]
    conn.execute("DELETE FROM jobqueue.jobs WHERE id = %s", (head,))
    assert state(conn, last) == "pending"


def test_a_dead_letter_retried_while_its_key_went_on_waits_for_the_keys_running_job(conn):
    head, nxt = enqueue(conn, "k"), enqueue(conn, "k")
    claim(conn)
    conn.execute("UPDATE jobqueue.jobs SET state = 'dead_letter', finished_at = now() WHERE id = %s", (head,))
    assert claim(conn) == [nxt]
    conn.execute("UPDATE jobqueue.jobs SET state = 'pending', finished_at = NULL WHERE id = %s", (head,))
    assert state(conn, head) == "waiting"
    complete(conn, nxt)
    assert state(conn, head) == "pending"


def test_keys_are_per_producer_so_a_copied_key_neither_blocks_nor_joins_another_producers(conn):
    mine = [enqueue(conn, "customer-42", producer="shop") for _ in range(2)]
    copied = enqueue(conn, "customer-42", producer="intruder")
    none = enqueue(conn, "customer-42")
    assert state(conn, mine[1]) == "waiting"
    assert state(conn, copied) == "pending" and state(conn, none) == "pending"
    assert set(claim(conn)) == {mine[0], copied, none}


def test_enqueue_many_orders_a_batch_by_its_order_and_behind_the_keys_unfinished_jobs(conn):
    before = enqueue(conn, "k")
    jobs = [{"job_type": "t", "ordering_key": key} for key in ("k", "j", "j", None)]
    ids = [r[0] for r in conn.execute("SELECT id FROM jobqueue.enqueue_many(%s::jsonb)", (json.dumps(jobs),))]
    assert [state(conn, i) for i in ids] == ["waiting", "pending", "waiting", "pending"]
    assert state(conn, before) == "pending"


def test_a_repeated_idempotent_submission_is_not_a_second_job_of_its_key(conn):
    first = enqueue(conn, "k", idempotency_key="once")
    assert enqueue(conn, "k", idempotency_key="once") == first
    complete(conn, first)
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE ordering_key = 'k'").fetchone()[0] == 1


@pytest.mark.parametrize(
    "key, message",
    [("x" * 10_000, "must be at most 255 characters \\(got 10000\\)"), ("  ", "must not be blank")],
    ids=["10KB", "blank"],
)
def test_a_bad_ordering_key_is_refused_with_its_field_and_nothing_is_written(conn, key, message):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=f"ordering_key: {message}"):
        enqueue(conn, key)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=rf"jobs\[1\]\.ordering_key: {message}"):
        conn.execute(
            "SELECT jobqueue.enqueue_many(%s::jsonb)",
            (json.dumps([{"job_type": "t"}, {"job_type": "t", "ordering_key": key}]),),
        )
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 0


def test_a_keyed_enqueue_outside_read_committed_is_refused(dsn):
    with psycopg.connect(dsn) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="READ COMMITTED"):
            enqueue(conn, "k")


def test_an_enqueue_racing_the_end_of_its_keys_head_is_never_left_waiting_nor_run_alongside(dsn):
    """The race the lock closes: a producer enqueues while the head's end is uncommitted. Without
    the lock its look would see the head still running and make the job wait, and the head's end,
    not seeing the new job, would release nothing: a key stuck for ever. Forced here: the end holds
    its transaction open while the enqueue runs, then commits."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        head = enqueue(conn, "k")
        assert claim(conn) == [head]
    ender = psycopg.connect(dsn)
    producer = psycopg.connect(dsn, autocommit=True)
    try:
        complete(ender, head)  # the head's end, uncommitted: it holds the key's lock
        added: list[uuid.UUID] = []
        enqueuing = threading.Thread(target=lambda: added.append(enqueue(producer, "k")))
        enqueuing.start()
        enqueuing.join(0.5)
        assert enqueuing.is_alive(), "the enqueue must wait for the end of the head it would wait for"
        ender.commit()
        enqueuing.join(10)
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert state(conn, added[0]) == "pending"
    finally:
        ender.close()
        producer.close()


def test_the_end_of_a_head_racing_an_uncommitted_enqueue_releases_it_once_it_commits(dsn):
    """The other order: the producer's transaction holds the key (its job made waiting behind the
    running head) when the head ends; the end waits for it and then releases the job."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        head = enqueue(conn, "k")
        assert claim(conn) == [head]
    producer = psycopg.connect(dsn)
    ender = psycopg.connect(dsn, autocommit=True)
    try:
        later = enqueue(producer, "k")  # uncommitted: waiting behind the running head
        ending = threading.Thread(target=complete, args=(ender, head))
        ending.start()
        ending.join(0.5)
        assert ending.is_alive(), "the head's end must wait for the producer that holds its key"
        producer.commit()
        ending.join(10)
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert state(conn, later) == "pending"
    finally:
        producer.close()
        ender.close()


def test_two_workers_claiming_at_once_never_take_two_jobs_of_one_key(dsn):
    """Claims in parallel (a barrier lines them up): the key's later jobs are not in the claim index
    at all, so no interleaving of claims can take two."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for key in range(20):
            for _ in range(5):
                enqueue(conn, f"k{key}")
    barrier = threading.Barrier(4)
    taken: list[list[uuid.UUID]] = []

    def claimer(name: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            barrier.wait()
            for _ in range(5):
                taken.append(claim(conn, limit=7, worker=name))

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    with psycopg.connect(dsn, autocommit=True) as conn:
        running = conn.execute(
            "SELECT ordering_key, count(*) FROM jobqueue.jobs WHERE state = 'processing' GROUP BY 1"
        ).fetchall()
    assert sum(len(t) for t in taken) == 20
    assert all(count == 1 for _, count in running) and len(running) == 20


def test_the_ordering_keys_view_names_each_blocked_keys_head(conn):
    head = enqueue(conn, "k", producer="shop")
    enqueue(conn, "k", producer="shop")
    row = conn.execute(
        "SELECT producer_id, head_id, head_state, unfinished FROM jobqueue.ordering_keys WHERE ordering_key = 'k'"
    ).fetchone()
    assert row == ("shop", head, "pending", 2)


def test_a_keys_waiting_backlog_costs_the_claim_nothing_it_is_not_in_the_claim_index(conn):
    """20,000 jobs of one key waiting behind their head, beside a few free jobs: the claim probes
    the claim index and the primary key only, and reads a handful of pages."""
    head = enqueue(conn, "busy")
    conn.execute("""INSERT INTO jobqueue.jobs (job_type, ordering_key, state)
                    SELECT 't', 'busy', 'waiting' FROM generate_series(1, 20000)""")
    for _ in range(5):
        enqueue(conn, None)
    conn.execute("ANALYZE jobqueue.jobs")
    plan = conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + CLAIM, claim_params(limit=10, served=["t"])
    ).fetchone()[0][0]
    text = json.dumps(plan)
    assert "jobs_claim_idx" in text and "jobs_pkey" in text
    assert "jobs" not in seq_scanned(plan)
    assert plan["Plan"]["Shared Hit Blocks"] + plan["Plan"].get("Shared Read Blocks", 0) < 200
    assert state(conn, head) == "processing" and claim(conn) == []


def test_a_worker_killed_with_a_key_held_keeps_the_key_until_its_job_runs_again_and_ends(conn):
    """The head's worker dies: its lease runs out, the sweeper puts the head back (pending, still
    the key's head), and the next job waits until that head, run again, ends."""
    head, nxt = enqueue(conn, "k"), enqueue(conn, "k")
    assert claim(conn, worker="dead") == [head]
    later = conn.execute("SELECT now() + interval '1 hour'").fetchone()[0]
    reclaimed = conn.execute(query("job_reclaim_expired"), {"limit": 10, "now": later}).fetchall()
    assert [r[0] for r in reclaimed] == [head] and state(conn, head) == "pending"
    assert claim(conn, worker="rescuer") == [head]  # the head again, not the next one
    complete(conn, head)
    assert claim(conn) == [nxt]


def test_a_waiting_job_past_its_expiry_is_dead_lettered_once_it_reaches_the_head(conn):
    head = enqueue(conn, "k")
    doomed = conn.execute(
        "SELECT jobqueue.enqueue('t', ordering_key => 'k', expire_after => interval '1 second')"
    ).fetchone()[0]
    last = enqueue(conn, "k")
    complete(conn, head)
    later = conn.execute("SELECT now() + interval '1 hour'").fetchone()[0]
    conn.execute(query("job_expire_waiting"), {"limit": 10, "now": later})
    assert state(conn, doomed) == "dead_letter" and state(conn, last) == "pending"


def test_an_operator_deletes_a_waiting_job_or_retries_a_dead_head_through_the_client(dsn, conn):
    from jobqueue import Client
    from jobqueue.model.jobs import DeleteOutcome, RetryOutcome

    head, middle, last = (enqueue(conn, "k") for _ in range(3))
    with Client(dsn) as client:
        assert client.delete_waiting(middle)[0] is DeleteOutcome.DELETED
        claim(conn)
        conn.execute("UPDATE jobqueue.jobs SET state = 'dead_letter', finished_at = now() WHERE id = %s", (head,))
        assert state(conn, last) == "pending"
        assert client.retry_dead(head) is RetryOutcome.RETRIED
    assert state(conn, head) == "waiting"  # behind the key's head (last), which it will precede no more
    assert claim(conn) == [last]


def test_two_apps_sharing_a_database_share_a_key_only_within_one_producer(conn):
    """App A's worker serves 'a', app B's serves 'b'. With producer ids of their own, the same key
    string is two keys and both run at once; enqueued without producer ids, they share it: B's job
    waits for A's (as documented: give each app its producer id)."""

    def claim_as(app: str) -> list[uuid.UUID]:
        rows = conn.execute(CLAIM, claim_params(worker_id=app, served=[app])).fetchall()
        return [row[0] for row in rows]

    def enqueue_for(app: str, producer: str | None) -> uuid.UUID:
        return conn.execute(
            "SELECT jobqueue.enqueue(%s, ordering_key => 'order-7', producer_id => %s)", (app, producer)
        ).fetchone()[0]

    a, b = enqueue_for("a", "app-a"), enqueue_for("b", "app-b")
    assert claim_as("a") == [a] and claim_as("b") == [b]
    shared_a, shared_b = enqueue_for("a", None), enqueue_for("b", None)
    assert state(conn, shared_b) == "waiting" and claim_as("b") == []
    assert claim_as("a") == [shared_a]
    complete(conn, shared_a)
    assert claim_as("b") == [shared_b]
