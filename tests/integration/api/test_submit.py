"""POST /jobs and /jobs/batch: created, idempotent, validated exactly like Python and SQL."""

from __future__ import annotations

import random
import threading
import time
from datetime import datetime, timedelta, timezone

import httpx
import psycopg
import pytest

from jobqueue.client import Client
from jobqueue.model.errors import ValidationError
from tests.support.factories import count_jobs, finish_job, job_row
from tests.support.waiting import wait_until


def test_submit_creates_a_pending_job_with_links(http, conn):
    response = http("alice").post(
        "/jobs",
        json={
            "job_type": "send_email",
            "payload": {"to": "a@b.c"},
            "priority": "high",
            "queue": "mail",
            "max_attempts": 5,
        },
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["state"] == "pending" and body["created"] is True
    assert body["links"] == {
        "self": f"/jobs/{body['id']}",
        "result": f"/jobs/{body['id']}/result",
        "cancel": f"/jobs/{body['id']}/cancel",
    }
    row = job_row(conn, body["id"])
    assert (
        row["job_type"],
        row["payload"],
        row["priority"],
        row["queue"],
        row["max_attempts"],
        row["producer_id"],
    ) == ("send_email", {"to": "a@b.c"}, 1, "mail", 5, "alice")


def test_submit_with_delay_or_run_at_schedules(http, conn):
    client = http("alice")
    delayed = client.post("/jobs", json={"job_type": "x", "delay_seconds": 60}).json()
    at = datetime.now(timezone.utc) + timedelta(hours=1)
    scheduled = client.post("/jobs", json={"job_type": "x", "run_at": at.isoformat()}).json()
    now = datetime.now(timezone.utc)
    assert timedelta(seconds=50) < job_row(conn, delayed["id"])["run_at"] - now < timedelta(seconds=61)
    assert abs(job_row(conn, scheduled["id"])["run_at"] - at) < timedelta(milliseconds=1)


def test_the_traceparent_header_is_stored_with_the_job(http, conn):
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    body = http("alice").post("/jobs", json={"job_type": "x"}, headers={"traceparent": traceparent}).json()
    assert job_row(conn, body["id"])["traceparent"] == traceparent


@pytest.mark.parametrize(
    "traceparent",
    [
        "00-" + "a" * 1_000_000,
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
        "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
    ],
    ids=["1MB", "no-flags", "upper-case"],
)
def test_an_invalid_traceparent_header_is_422_naming_it_and_writes_nothing(http, conn, traceparent):
    """The attack of issue 18: a small batch under a 1 MB header stored the header in every job."""
    client = http("alice")
    for path, body in (("/jobs", {"job_type": "x"}), ("/jobs/batch", {"jobs": [{"job_type": "x"}] * 20})):
        response = client.post(path, json=body, headers={"traceparent": traceparent})
        assert response.status_code == 422, response.text[:300]
        error = response.json()
        assert error["field"] == "traceparent" and "W3C traceparent" in error["message"], error
        assert len(response.content) < 1000
    assert count_jobs(conn) == 0


def test_two_traceparent_headers_are_422(http, conn):
    valid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    response = http("alice").post(
        "/jobs",
        json={"job_type": "x"},
        headers=[("traceparent", valid), ("traceparent", valid.replace("0af7", "1af7"))],
    )
    assert response.status_code == 422 and response.json()["field"] == "traceparent"
    assert count_jobs(conn) == 0


def test_a_batchs_traceparent_header_is_stored_with_each_of_its_jobs(http, conn):
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    body = (
        http("alice")
        .post("/jobs/batch", json={"jobs": [{"job_type": "x"}] * 3}, headers={"traceparent": traceparent})
        .json()
    )
    assert {job_row(conn, job["id"])["traceparent"] for job in body["jobs"]} == {traceparent}


def test_same_idempotency_key_returns_the_existing_job(http, conn):
    client = http("alice")
    first = client.post("/jobs", json={"job_type": "x", "idempotency_key": "order-1"})
    second = client.post("/jobs", json={"job_type": "x", "idempotency_key": "order-1", "payload": {"other": 1}})
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json()["id"] == first.json()["id"] and second.json()["created"] is False
    assert count_jobs(conn) == 1


@pytest.mark.parametrize("state, result", [("completed", {"paid": True}), ("dead_letter", None), ("cancelled", None)])
def test_a_repeat_after_the_job_finished_answers_200_with_its_state_and_result(http, conn, state, result):
    """A client retrying a 503-on-commit whose first submission had committed and run gets that
    job — its current state, and its result once completed — never a second job."""
    client = http("alice")
    first = client.post("/jobs", json={"job_type": "pay", "idempotency_key": "pay-1", "payload": {"amount": 5}})
    assert first.status_code == 201 and first.json()["result"] is None
    finish_job(conn, first.json()["id"], state, result=result)
    again = client.post("/jobs", json={"job_type": "pay", "idempotency_key": "pay-1", "payload": {"amount": 5}})
    assert again.status_code == 200, again.text
    assert again.json() | {"links": None, "warnings": None} == {
        "id": first.json()["id"],
        "state": state,
        "created": False,
        "result": result,
        "links": None,
        "warnings": None,  # 'pay' has no worker here: the repeat is warned like the first (tested elsewhere)
    }
    batch = client.post("/jobs/batch", json={"jobs": [{"job_type": "pay", "idempotency_key": "pay-1"}]})
    assert batch.status_code == 200 and batch.json()["jobs"][0]["result"] == result
    assert count_jobs(conn) == 1


def test_a_key_is_free_after_its_window_and_a_mismatch_can_be_refused(http, conn):
    client = http("alice")
    first = client.post(
        "/jobs",
        json={"job_type": "pay", "idempotency_key": "k", "payload": {"amount": 5}, "idempotency_window_seconds": 60},
    ).json()
    differs = {"job_type": "pay", "idempotency_key": "k", "payload": {"amount": 6}}
    assert client.post("/jobs", json=differs).json()["id"] == first["id"]  # the original wins
    refused = client.post("/jobs", json=differs | {"idempotency_mismatch": "reject"})
    assert refused.status_code == 409, refused.text
    assert (refused.json()["error"], refused.json()["field"]) == ("idempotency_mismatch", "idempotency_key")
    assert first["id"] in refused.json()["message"]
    conn.execute("UPDATE jobqueue.idempotency_keys SET expires_at = now() - interval '1 second'")
    second = client.post("/jobs", json=differs | {"idempotency_mismatch": "reject"})
    assert second.status_code == 201 and second.json()["id"] != first["id"]
    assert count_jobs(conn) == 2


def test_timeout_and_expiry_fields_are_stored_and_shown(http, conn):
    client = http("alice")
    at = datetime.now(timezone.utc) + timedelta(hours=3)
    given = client.post("/jobs", json={"job_type": "x", "timeout_seconds": 90.5, "expires_at": at.isoformat()}).json()
    relative = client.post(
        "/jobs/batch", json={"jobs": [{"job_type": "x", "delay_seconds": 60, "expire_after_seconds": 120}]}
    ).json()["jobs"][0]
    shown = client.get(f"/jobs/{given['id']}").json()
    assert shown["timeout_seconds"] == 90.5 and datetime.fromisoformat(shown["expires_at"]) == at
    row = job_row(conn, given["id"])
    assert (row["timeout"], row["expires_at"]) == (timedelta(seconds=90.5), at)
    row = job_row(conn, relative["id"])
    assert row["timeout"] is None and row["expires_at"] - row["run_at"] == timedelta(seconds=120)
    plain = client.get(f"/jobs/{client.post('/jobs', json={'job_type': 'x'}).json()['id']}").json()
    assert (plain["timeout_seconds"], plain["expires_at"]) == (None, None)


def test_two_producers_using_the_same_idempotency_key_each_get_their_own_job(http, conn):
    alice, bob = http("alice"), http("bob")
    mine = alice.post("/jobs", json={"job_type": "x", "idempotency_key": "order-1"})
    theirs = bob.post("/jobs", json={"job_type": "x", "idempotency_key": "order-1"})
    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert mine.json()["id"] != theirs.json()["id"]
    assert bob.get(f"/jobs/{theirs.json()['id']}").status_code == 200
    again = bob.post("/jobs", json={"job_type": "x", "idempotency_key": "order-1"})
    assert (again.status_code, again.json()["id"]) == (200, theirs.json()["id"])
    assert count_jobs(conn) == 2


def test_idempotent_submit_under_concurrent_requests_creates_one_job(http, conn):
    clients = [http("alice") for _ in range(12)]
    barrier = threading.Barrier(len(clients))
    responses = [None] * len(clients)

    def submit(i: int) -> None:
        barrier.wait()
        responses[i] = clients[i].post("/jobs", json={"job_type": "x", "idempotency_key": "race"})

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * (len(clients) - 1) + [201]
    assert len({r.json()["id"] for r in responses}) == 1
    assert count_jobs(conn) == 1


INVALID = [
    ({"payload": {}}, "job_type"),
    ({"job_type": ""}, "job_type"),
    ({"job_type": 5}, "job_type"),
    ({"job_type": "x", "priority": "urgent"}, "priority"),
    ({"job_type": "x", "queue": " "}, "queue"),
    ({"job_type": "x", "max_attempts": 0}, "max_attempts"),
    ({"job_type": "x", "max_attempts": 2**40}, "max_attempts"),
    ({"job_type": "x", "delay_seconds": -1}, "delay_seconds"),
    ({"job_type": "x", "run_at": "2030-01-01T00:00:00"}, "run_at"),
    ({"job_type": "x", "run_at": "2030-01-01T00:00:00Z", "delay_seconds": 5}, "run_at"),
    ({"job_type": "x", "idempotency_key": ""}, "idempotency_key"),
    ({"job_type": "x", "producer_id": "mallory"}, "producer_id"),
    ({"job_type": "x\u0000y"}, "job_type"),  # refused by name before the database would say "input"
    ({"job_type": "x", "payload": {"note": "a\u0000b"}}, "payload"),
    (
        {"job_type": "x", "idempotency_key": random.Random(7).randbytes(4000).hex()},
        "idempotency_key",
    ),  # over 255 characters
    ({"job_type": "x", "timeout_seconds": 0}, "timeout_seconds"),
    ({"job_type": "x", "timeout_seconds": -1}, "timeout_seconds"),
    ({"job_type": "x", "timeout_seconds": 1e12}, "timeout_seconds"),
    ({"job_type": "x", "expire_after_seconds": 0}, "expire_after_seconds"),
    ({"job_type": "x", "expires_at": "2030-01-01T00:00:00"}, "expires_at"),
    ({"job_type": "x", "expires_at": "2020-01-01T00:00:00Z"}, "expires_at"),
    (
        {
            "job_type": "x",
            "delay_seconds": 600,
            "expires_at": (datetime.now(timezone.utc) + timedelta(seconds=300)).isoformat(),
        },
        "expires_at",
    ),
    ({"job_type": "x", "expires_at": "2030-01-01T00:00:00Z", "expire_after_seconds": 5}, "expire_after_seconds"),
    ({"job_type": "x", "idempotency_key": "k", "idempotency_window_seconds": -1}, "idempotency_window_seconds"),
    ({"job_type": "x", "idempotency_key": "k", "idempotency_mismatch": "error"}, "idempotency_mismatch"),
    ({"job_type": "x", "idempotency_key": "k", "idempotency_mismatch": 1}, "idempotency_mismatch"),
]


def test_invalid_submissions_are_422_naming_the_field_and_write_nothing(http, conn):
    client = http("alice")  # one server for every case: each case is one request
    for body, field in INVALID:
        response = client.post("/jobs", json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["field"] == field, (body, response.json())
        assert response.json()["message"]
    assert count_jobs(conn) == 0


def test_a_body_that_is_not_json_is_refused(http, conn):
    response = http("alice").post("/jobs", content=b"{not json", headers={"content-type": "application/json"})
    assert 400 <= response.status_code < 500
    assert count_jobs(conn) == 0


def test_a_body_over_the_size_limit_is_413(start_api, keys, conn):
    import httpx

    server = start_api(api_max_body_bytes=2048)
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {keys['alice']}"}) as client:
        response = client.post("/jobs", json={"job_type": "x", "payload": {"blob": "x" * 4096}})
        assert response.status_code == 413
        assert response.json()["error"] == "payload_too_large"
        message = response.json()["message"]  # before: "Request Entity Too Large", no limit named
        assert "JOBQUEUE_API_MAX_BODY_BYTES" in message and "2048 bytes" in message
        assert client.post("/jobs", json={"job_type": "x", "payload": {"blob": "small"}}).status_code == 201
    assert count_jobs(conn) == 1


def test_batch_submit_is_all_or_nothing(http, conn):
    client = http("alice")
    ok = client.post("/jobs/batch", json={"jobs": [{"job_type": "a"}, {"job_type": "b", "queue": "q2"}]})
    assert ok.status_code == 201, ok.text
    assert ok.json()["created"] == 2 and [j["created"] for j in ok.json()["jobs"]] == [True, True]
    bad = client.post("/jobs/batch", json={"jobs": [{"job_type": "c"}, {"job_type": "d", "priority": "nope"}]})
    assert bad.status_code == 422 and bad.json()["field"] == "jobs[1].priority"
    unknown = client.post("/jobs/batch", json={"jobs": [{"job_type": "c"}, {"job_type": "d", "colour": "red"}]})
    assert unknown.status_code == 422 and unknown.json()["field"].endswith("colour")
    assert count_jobs(conn) == 2


def test_batch_size_is_limited(start_api, keys, conn):
    import httpx

    server = start_api(api_max_batch=3)
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {keys['alice']}"}) as client:
        too_many = client.post("/jobs/batch", json={"jobs": [{"job_type": "x"}] * 4})
        empty = client.post("/jobs/batch", json={"jobs": []})
        assert (too_many.status_code, too_many.json()["field"]) == (422, "jobs")
        assert (empty.status_code, empty.json()["field"]) == (422, "jobs")
        assert client.post("/jobs/batch", json={"jobs": [{"job_type": "x"}] * 3}).status_code == 201
    assert count_jobs(conn) == 3


def test_a_batch_repeating_live_idempotency_keys_creates_nothing_and_answers_200(http, conn):
    client = http("alice")
    first = client.post(
        "/jobs/batch",
        json={"jobs": [{"job_type": "a", "idempotency_key": "k1"}, {"job_type": "a", "idempotency_key": "k2"}]},
    ).json()
    again = client.post(
        "/jobs/batch",
        json={"jobs": [{"job_type": "a", "idempotency_key": "k1"}, {"job_type": "a", "idempotency_key": "k2"}]},
    )
    assert again.status_code == 200 and again.json()["created"] == 0
    assert [j["id"] for j in again.json()["jobs"]] == [j["id"] for j in first["jobs"]]
    assert count_jobs(conn) == 2


def test_a_field_the_database_refuses_inside_a_batch_is_422_and_writes_nothing(http, conn):
    response = http("alice").post("/jobs/batch", json={"jobs": [{"job_type": "a"}, {"job_type": "b\u0000c"}]})
    assert response.status_code == 422 and response.json()["field"] == "jobs[1].job_type", response.text
    assert count_jobs(conn) == 0


def test_requests_waiting_for_the_submit_lane_commit_together_and_fail_alone(start_api, keys, dsn, conn):
    """With the one submit lane held (its statement waits on another transaction's row, and is
    not counted as stalled for 30 s), later requests queue and go as one statement; the one the
    database refuses gets its own 422."""
    import httpx

    server = start_api(api_submit_stall=30.0)
    holder = psycopg.connect(dsn)
    holder.execute("SELECT jobqueue.enqueue('x', '{}', idempotency_key => 'gate', producer_id => 'alice')")
    bodies = [{"job_type": "x", "idempotency_key": "gate"}] + [{"job_type": "x", "payload": {"n": n}} for n in range(4)]
    bodies.insert(3, {"job_type": "x\u0000y"})
    responses: list = [None] * len(bodies)

    def post(i: int) -> None:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {keys['alice']}"}) as client:
            responses[i] = client.post("/jobs", json=bodies[i])

    threads = [threading.Thread(target=post, args=(0,))]
    threads[0].start()
    wait_until(
        lambda: (
            conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).fetchone()[0]
            == 1
        ),
        message="lane held",
    )
    threads += [threading.Thread(target=post, args=(i,)) for i in range(1, len(bodies))]
    for thread in threads[1:]:
        thread.start()
    time.sleep(0.3)
    holder.rollback()
    holder.close()
    for thread in threads:
        thread.join(10)
    assert [r.status_code for r in responses] == [201, 201, 201, 422, 201, 201]
    assert responses[3].json()["field"] == "job_type"
    stored = {row[0] for row in conn.execute("SELECT payload->>'n' FROM jobqueue.jobs")}
    assert stored == {None, "0", "1", "2", "3"}


def test_a_key_with_allow_lists_submits_only_there_and_a_refusal_writes_nothing(api, dsn, conn):
    with Client(dsn, pool_size=1) as client:
        key, info = client.create_api_key("billing", queues=["invoices"], job_types=["render", "send"])
        assert info.queues == ["invoices"] and info.job_types == ["render", "send"]
        with pytest.raises(ValidationError) as admin_limited:
            client.create_api_key("ops", role="admin", queues=["x"])
        assert admin_limited.value.field == "queues"
        for bad in ([], [""], "invoices"):
            with pytest.raises(ValidationError):
                client.create_api_key("billing", queues=bad)
    with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {key}"}) as http:
        assert http.post("/jobs", json={"job_type": "render", "queue": "invoices"}).status_code == 201
        elsewhere = http.post("/jobs", json={"job_type": "render", "queue": "made-up"})
        assert elsewhere.status_code == 403, elsewhere.text
        assert elsewhere.json()["error"] == "not_allowed" and elsewhere.json()["field"] == "queue"
        other_type = http.post("/jobs", json={"job_type": "wipe", "queue": "invoices"})
        assert other_type.status_code == 403 and other_type.json()["field"] == "job_type"
        batch = http.post(
            "/jobs/batch",
            json={"jobs": [{"job_type": "send", "queue": "invoices"}, {"job_type": "send", "queue": "default"}]},
        )
        assert batch.status_code == 403 and batch.json()["field"] == "jobs[1].queue", batch.text
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 1


def test_a_refused_option_is_named_as_the_request_sent_it(http, conn):
    """``delay_seconds: -5`` was reported as field ``delay``, a name the caller never sent."""
    client = http("alice")
    for body, field, says in (
        ({"job_type": "x", "delay_seconds": -5}, "delay_seconds", "got -5"),
        ({"job_type": "x", "timeout_seconds": 0}, "timeout_seconds", ""),
        ({"job_type": "x", "expire_after_seconds": -1}, "expire_after_seconds", ""),
        ({"job_type": "x", "idempotency_key": "k", "idempotency_window_seconds": 0}, "idempotency_window_seconds", ""),
        ({"job_type": "x", "delay_seconds": 5, "run_at": "2030-01-01T00:00:00Z"}, "run_at", "delay_seconds"),
    ):
        refused = client.post("/jobs", json=body)
        assert refused.status_code == 422 and refused.json()["field"] == field, (body, refused.json())
        assert says in refused.json()["message"] and "delay," not in refused.json()["message"], refused.json()
    batch = client.post("/jobs/batch", json={"jobs": [{"job_type": "x"}, {"job_type": "x", "delay_seconds": -5}]})
    assert batch.status_code == 422 and batch.json()["field"] == "jobs[1].delay_seconds"
    assert count_jobs(conn) == 0
