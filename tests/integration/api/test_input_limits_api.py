"""REST's side of the input limits (migration 0017): the answers SQL and Python give
(tests/integration/test_input_limits.py) as 422 naming the field, and backpressure that inventing
queue names does not dodge."""

from __future__ import annotations

import secrets

import httpx

from jobqueue.client import Client
from tests.support.factories import count_jobs, job_row

HUGE = secrets.token_hex(5000)  # 10,000 characters that do not compress


def client_for(server, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"})


def test_names_over_their_limit_are_422_naming_the_field_and_write_nothing(http, dsn, api, conn):
    alice = http("alice")
    for body, field in (
        ({"job_type": HUGE}, "job_type"),
        ({"job_type": "x", "queue": HUGE}, "queue"),
        ({"job_type": "x", "idempotency_key": "k" * 256}, "idempotency_key"),
    ):
        response = alice.post("/jobs", json=body)
        assert response.status_code == 422, response.text
        assert response.json()["field"] == field
        assert response.json()["message"].startswith("must be at most 255 characters")
    batch = alice.post("/jobs/batch", json={"jobs": [{"job_type": "a"}] * 3 + [{"job_type": "b", "queue": HUGE}]})
    assert batch.status_code == 422 and batch.json()["field"] == "jobs[3].queue"
    # A key limited to some queues gets the same 422, not a 403 that echoes 10,000 characters back.
    with Client(dsn, pool_size=1) as client:
        key = client.create_api_key("carol", queues=["mail"])[0]
    with client_for(api, key) as carol:
        refused = carol.post("/jobs", json={"job_type": "x", "queue": HUGE})
        assert (refused.status_code, refused.json()["field"]) == (422, "queue")
        assert carol.post("/jobs", json={"job_type": "x", "queue": "other"}).status_code == 403
    assert count_jobs(conn) == 0


def test_run_at_in_1970_means_now_and_a_naive_one_is_refused(http, conn):
    alice = http("alice")
    response = alice.post("/jobs", json={"job_type": "x", "run_at": "1970-01-01T00:00:00Z"})
    assert response.status_code == 201, response.text
    row = job_row(conn, response.json()["id"])
    assert row["run_at"] == row["created_at"]
    naive = alice.post("/jobs/batch", json={"jobs": [{"job_type": "x", "run_at": "2030-01-31T09:00:00"}]})
    assert (naive.status_code, naive.json()["field"]) == (422, "jobs[0].run_at")
    assert count_jobs(conn) == 1
    # year 10000 in UTC was stored, and every listing meeting it answered 422 "timestamp too large"
    beyond = alice.post("/jobs", json={"job_type": "x", "run_at": "9999-12-31T23:59:59-14:00"})
    assert (beyond.status_code, beyond.json()["field"]) == (422, "run_at"), beyond.text
    assert "must be at most 3650 days" in beyond.json()["message"]
    assert count_jobs(conn) == 1 and alice.get("/jobs").status_code == 200


def test_a_producer_flooding_invented_queue_names_is_stopped(start_api, keys, conn):
    """Each of 1,000 new queues is far below its own limits; all of them together are not."""
    server = start_api(
        api_total_soft_limit=500,
        api_total_hard_limit=500,
        api_rate_limit=1000.0,
        api_rate_burst=10_000,
        api_depth_refresh=60.0,
    )
    with client_for(server, keys["alice"]) as alice:
        statuses = []
        for batch in range(10):
            jobs = [{"job_type": "x", "queue": f"invented-{batch}-{i}"} for i in range(100)]
            response = alice.post("/jobs/batch", json={"jobs": jobs})
            statuses.append(response.status_code)
        assert statuses == [201] * 5 + [503] * 5
        assert response.json()["error"] == "total_full" and "Retry-After" in response.headers
    assert count_jobs(conn) == 500


def test_above_the_total_soft_limit_each_producer_is_rate_limited_whatever_the_queue(start_api, keys, conn):
    server = start_api(
        api_total_soft_limit=20,
        api_total_hard_limit=10_000,
        api_rate_limit=0.01,
        api_rate_burst=3,
        api_depth_refresh=60.0,
    )
    with client_for(server, keys["alice"]) as alice, client_for(server, keys["bob"]) as bob:

        def submit(client: httpx.Client, n: int) -> int:
            return client.post("/jobs", json={"job_type": "x", "queue": f"q-{n}"}).status_code

        assert [submit(alice, n) for n in range(20)] == [201] * 20
        assert [submit(alice, n) for n in range(20, 24)] == [201, 201, 201, 429]  # its burst, then 429
        refused = alice.post("/jobs", json={"job_type": "x", "queue": "yet-another"})
        assert refused.status_code == 429 and "total soft limit" in refused.json()["message"]
        assert [submit(bob, n) for n in range(30, 34)] == [201, 201, 201, 429]  # bob has a bucket of his own
    assert count_jobs(conn) == 26


def test_a_payload_over_1_mib_as_stored_is_422_even_under_the_body_limit(http, conn):
    """The bound is the database's (migration 0023): 250,000 zeros are 500 KB of JSON text and
    about 3 MB of jsonb."""
    zeros = {"n": [0] * 250_000}
    alice = http("alice")
    response = alice.post("/jobs", json={"job_type": "x", "payload": zeros})
    assert response.status_code == 422 and response.json()["field"] == "payload", response.text
    batch = alice.post("/jobs/batch", json={"jobs": [{"job_type": "x"}, {"job_type": "x", "payload": zeros}]})
    assert batch.status_code == 422 and batch.json()["field"] == "jobs[1].payload"
    assert count_jobs(conn) == 0
