"""What a producer key must not learn about other producers (issue 18, "Leaks"): their job ids
through listing cursors, whether an id is another producer's job through GET /jobs/{id}'s cost,
and their queues, workers, circuits and limits through the figures endpoints. Each test performs
the attack."""

from __future__ import annotations

import base64
import json
import secrets
import uuid

import psycopg
import pytest

from jobqueue.db.queries import queries
from tests.support.factories import make_job


def _bulk_jobs(conn, producer: str, count: int) -> list[uuid.UUID]:
    rows = conn.execute(
        "SELECT id FROM jobqueue.enqueue_many(%s)",
        (json.dumps([{"job_type": "bulk", "producer_id": producer}] * count),),
    ).fetchall()
    return [row[0] for row in rows]


def _leaked_ids(cursor: str, ids: list[uuid.UUID]) -> list[uuid.UUID]:
    """The ids the cursor shows in any spelling: text, hex, or base64 of the 16 bytes."""
    shown = cursor.lower()
    padded = cursor + "=" * (-len(cursor) % 4)
    raw = b""
    for decode in (base64.urlsafe_b64decode, base64.b64decode):
        try:
            raw += decode(padded)
        except ValueError:
            pass
    return [i for i in ids if str(i) in shown or i.hex in shown or i.bytes in raw]


def test_a_listing_cursor_never_shows_another_producers_job_id(http, conn):
    """Alice's one job lies behind 6,000 of bob's: her first page runs out of its scan budget (5,000)
    on one of bob's jobs, whose id used to be her next_cursor."""
    mine = make_job(conn, producer_id="alice")
    theirs = _bulk_jobs(conn, "bob", 6000)
    alice = http("alice")
    page = alice.get("/jobs", params={"limit": 10}).json()
    assert page["jobs"] == [] and page["next_cursor"]
    assert _leaked_ids(page["next_cursor"], theirs) == []
    with pytest.raises(ValueError):
        uuid.UUID(page["next_cursor"])
    seen = []
    while page["next_cursor"]:
        assert _leaked_ids(page["next_cursor"], theirs) == []
        page = alice.get("/jobs", params={"limit": 10, "cursor": page["next_cursor"]}).json()
        seen += [job["id"] for job in page["jobs"]]
    assert seen == [str(mine)]  # the cursor still says where the next page starts


def test_a_cursor_is_the_keys_own_and_cannot_be_forged(http, conn):
    make_job(conn, producer_id="alice")
    _bulk_jobs(conn, "bob", 5100)
    cursor = http("alice").get("/jobs").json()["next_cursor"]
    assert cursor
    forged = cursor[:-2] + ("AA" if not cursor.endswith("AA") else "BB")
    for who, value in (("bob", cursor), ("alice", forged), ("alice", str(uuid.uuid4())), ("admin", cursor)):
        response = http(who).get("/jobs", params={"cursor": value})
        assert response.status_code == 422 and response.json()["field"] == "cursor", (who, value, response.text)
    # An admin's cursors (every producer's jobs) work on the dead-letter listing too.
    make_job(conn, state="dead_letter")
    for _ in range(3):
        make_job(conn, state="dead_letter", producer_id="bob")
    admin = http("admin")
    page, dead = admin.get("/admin/dlq", params={"limit": 3}).json(), []
    dead += page["jobs"]
    while page["next_cursor"]:
        page = admin.get("/admin/dlq", params={"limit": 3, "cursor": page["next_cursor"]}).json()
        dead += page["jobs"]
    assert len(dead) == 4


def _blocks_read(conn: psycopg.Connection, statement: str, params: dict) -> int:
    """Buffers the statement reads, counted by the server for this transaction (heap, indexes,
    TOAST) of every jobqueue relation: what the query costs, free of the machine's noise."""
    count = (
        "SELECT coalesce(sum(pg_stat_get_xact_blocks_fetched(c.oid)), 0) FROM pg_class c "
        "WHERE c.relnamespace IN ('jobqueue'::regnamespace, 'pg_toast'::regnamespace)"
    )
    with conn.transaction():
        before = conn.execute(count).fetchone()[0]
        conn.execute(statement, params).fetchall()
        return conn.execute(count).fetchone()[0] - before


def test_another_producers_job_costs_what_a_missing_one_costs(http, conn, dsn):
    """GET /jobs/{id} read the whole row before the API checked its producer: a 1 MB foreign job
    took 12 ms, a missing one 3 ms. The producer is checked in the query now: a foreign job's
    payload, result and errors are never read."""
    payload = {"blob": secrets.token_hex(500_000)}  # 1 MB that does not compress
    foreign = make_job(conn, producer_id="alice", payload=payload)
    conn.execute(
        "INSERT INTO jobqueue.job_errors (job_id, attempt, error_type, message) VALUES (%s, 1, 'E', 'm')", (foreign,)
    )
    small = make_job(conn, producer_id="alice")
    missing = uuid.uuid4()
    statement = queries()["job_get"]
    with psycopg.connect(dsn, autocommit=True) as reader:
        for warm in (foreign, small, missing):  # plans and caches warm
            _blocks_read(reader, statement, {"id": warm, "producer_id": "bob"})
        costs = {
            name: _blocks_read(reader, statement, {"id": job_id, "producer_id": "bob"})
            for name, job_id in (("foreign", foreign), ("small", small), ("missing", missing))
        }
        own = _blocks_read(reader, statement, {"id": foreign, "producer_id": "alice"})
    assert own > 100, own  # the measure sees a 1 MB read
    # At most the heap page that holds the row's producer: the same for a 1 MB job and a small one.
    assert costs["foreign"] == costs["small"] <= costs["missing"] + 1, costs
    bob = http("bob")
    answers = [bob.get(f"/jobs/{job_id}") for job_id in (foreign, missing)]
    assert [a.status_code for a in answers] == [404, 404]
    assert [a.json()["message"].replace(str(j), "ID") for a, j in zip(answers, (foreign, missing))] == [
        answers[1].json()["message"].replace(str(missing), "ID")
    ] * 2
    assert http("alice").get(f"/jobs/{foreign}").json()["payload"] == payload


BOBS = ("payroll", "pay_salaries", "bank-api", "payroll-host-7")


@pytest.fixture
def others_system(conn):
    """Bob's queue with a job, a worker serving it, a circuit and a limit on his job type."""
    make_job(conn, producer_id="bob", queue="payroll", job_type="pay_salaries")
    make_job(conn, producer_id="alice", queue="mine", job_type="mine_job")
    conn.execute(
        "INSERT INTO jobqueue.workers (id, host, pid, queues, concurrency, job_types) "
        "VALUES ('w1', 'payroll-host-7', 4242, '{payroll}', 4, '{pay_salaries}')"
    )
    conn.execute(
        "INSERT INTO jobqueue.circuits (name, threshold, window_seconds, reset_after_seconds) "
        "VALUES ('bank-api', 5, 60, 30)"
    )
    conn.execute("INSERT INTO jobqueue.circuit_job_types (job_type, circuit) VALUES ('pay_salaries', 'bank-api')")
    conn.execute("INSERT INTO jobqueue.job_limits (scope, name, concurrency) VALUES ('job_type', 'pay_salaries', 2)")


@pytest.mark.parametrize("path", ["/workers", "/circuits", "/limits", "/queues"])
def test_a_producer_key_reads_no_other_producers_workers_queues_circuits_or_limits(http, others_system, path):
    """A producer key read /workers (hosts, PIDs, job types), every queue and its depth, the
    breakers and limits: what /metrics is locked for. Admin keys only (/queues: see below)."""
    refused = http("alice").get(path)
    assert refused.status_code == 403, refused.text
    assert not any(name in refused.text for name in BOBS)
    assert "admin" in refused.json()["message"]
    allowed = http("admin").get(path)
    assert allowed.status_code == 200 and any(name in allowed.text for name in BOBS), allowed.text


def test_a_producer_key_with_a_queue_allow_list_sees_those_queues_only(dsn, api, others_system):
    import httpx

    from jobqueue.client import Client

    with Client(dsn, pool_size=1) as client:
        key = client.create_api_key("alice", queues=["mine", "spare"])[0]
    with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {key}"}, timeout=10) as alice:
        listing = alice.get("/queues")
        assert listing.status_code == 200, listing.text
        assert [q["queue"] for q in listing.json()["queues"]] == ["mine"]
        assert "payroll" not in listing.text
        for path in ("/workers", "/circuits", "/limits"):
            assert alice.get(path).status_code == 403
