"""/admin: the dead-letter queue — list, retry one, retry all by filter (in batches), purge."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from jobqueue.client import Client
from tests.support.factories import job_row, make_job


def dead(conn, **fields) -> uuid.UUID:
    job_id = make_job(conn, state="dead_letter", attempts=4, **fields)
    conn.execute(
        "INSERT INTO jobqueue.job_results (job_id, outcome, error) VALUES (%s, 'dead_letter', '{}')", (job_id,)
    )
    conn.execute(
        "INSERT INTO jobqueue.job_errors (job_id, attempt, error_type, message) VALUES (%s, 4, 'E', 'last words')",
        (job_id,),
    )
    return job_id


def test_admin_endpoints_need_an_admin_key(http, conn):
    job_id = dead(conn)
    bob = http("bob")
    for response in (
        bob.get("/admin/dlq"),
        bob.post(f"/admin/jobs/{job_id}/retry"),
        bob.post("/admin/dlq/retry-all"),
        bob.delete("/admin/dlq"),
    ):
        assert response.status_code == 403 and response.json()["error"] == "forbidden"
    assert http(None).get("/admin/dlq").status_code == 401
    assert job_row(conn, job_id)["state"] == "dead_letter"


def test_dead_letter_listing_with_filters_and_pages(http, conn):
    ids = [dead(conn, queue="mail" if i % 2 else "img", job_type="send" if i < 4 else "resize") for i in range(6)]
    make_job(conn, state="completed")
    admin = http("admin")
    page = admin.get("/admin/dlq", params={"limit": 4}).json()
    assert [j["id"] for j in page["jobs"]] == [str(i) for i in reversed(ids[2:])]
    rest = admin.get("/admin/dlq", params={"limit": 4, "cursor": page["next_cursor"]}).json()
    assert [j["id"] for j in rest["jobs"]] == [str(ids[1]), str(ids[0])] and rest["next_cursor"] is None
    assert page["jobs"][0]["last_error"] == "last words" and page["jobs"][0]["state"] == "dead_letter"
    mail_send = admin.get("/admin/dlq", params={"queue": "mail", "job_type": "send"}).json()["jobs"]
    assert [j["id"] for j in mail_send] == [str(ids[3]), str(ids[1])]
    # why each died, in the listing and on the job itself (it was in neither)
    conn.execute("UPDATE jobqueue.jobs SET dead_reason = 'permanent_error' WHERE id = %s", (ids[5],))
    assert admin.get("/admin/dlq", params={"limit": 1}).json()["jobs"][0]["dead_reason"] == "permanent_error"
    assert admin.get(f"/jobs/{ids[5]}").json()["dead_reason"] == "permanent_error"


def test_retry_one_dead_job(http, conn):
    job_id = dead(conn, max_attempts=4)
    admin = http("admin")
    response = admin.post(f"/admin/jobs/{job_id}/retry")
    assert response.status_code == 200 and response.json()["outcome"] == "retried"
    row = job_row(conn, job_id)
    assert (row["state"], row["attempts"], row["max_attempts"], row["finished_at"]) == ("pending", 4, 5, None)
    assert conn.execute("SELECT count(*) FROM jobqueue.job_results WHERE job_id = %s", (job_id,)).fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM jobqueue.job_errors WHERE job_id = %s", (job_id,)).fetchone()[0] == 1
    again = admin.post(f"/admin/jobs/{job_id}/retry")
    assert again.status_code == 409 and again.json()["error"] == "not_dead"
    assert admin.post(f"/admin/jobs/{uuid.uuid4()}/retry").status_code == 404


def test_a_dead_job_whose_key_another_job_now_holds_stays_dead(http, conn):
    job_id = dead(conn, idempotency_key="welcome-1")
    conn.execute("UPDATE jobqueue.idempotency_keys SET expires_at = now() - interval '1 second'")  # window over
    conn.execute("SELECT jobqueue.enqueue('x', idempotency_key => 'welcome-1')")  # takes the key
    response = http("admin").post(f"/admin/jobs/{job_id}/retry")
    assert response.status_code == 409 and response.json()["error"] == "idempotency_key_taken"
    assert job_row(conn, job_id)["state"] == "dead_letter"


def test_another_producers_live_job_with_the_same_key_does_not_block_a_retry(http, conn):
    job_id = dead(conn, idempotency_key="welcome-1", producer_id="alice")
    make_job(conn, state="pending", idempotency_key="welcome-1", producer_id="bob")
    response = http("admin").post(f"/admin/jobs/{job_id}/retry")
    assert response.status_code == 200, response.text
    assert job_row(conn, job_id)["state"] == "pending"


def test_retry_all_by_filter_in_batches(http, conn, dsn):
    targets = [dead(conn, queue="mail", job_type="send") for _ in range(7)]
    others = [dead(conn, queue="mail", job_type="other"), dead(conn, queue="img", job_type="send")]
    twins = [dead(conn, queue="mail", job_type="send", idempotency_key="same") for _ in range(2)]
    response = http("admin").post("/admin/dlq/retry-all", params={"queue": "mail", "job_type": "send"})
    assert response.status_code == 200 and response.json() == {"count": 8}
    assert {job_row(conn, j)["state"] for j in targets} == {"pending"}
    assert {job_row(conn, j)["state"] for j in others} == {"dead_letter"}
    assert sorted(job_row(conn, j)["state"] for j in twins) == ["dead_letter", "pending"]
    with Client(dsn, pool_size=1) as client:  # small batches page through everything exactly once
        for job_id in targets:
            conn.execute("UPDATE jobqueue.jobs SET state = 'dead_letter' WHERE id = %s", (job_id,))
        assert client.retry_dead_letters(queue="mail", job_type="send", batch_size=2) == 7


def test_purge_by_filter(http, conn):
    old = datetime.now(timezone.utc) - timedelta(days=30)
    purged = [dead(conn, queue="mail", finished_at=old) for _ in range(3)]
    recent = dead(conn, queue="mail")
    other = dead(conn, queue="img", finished_at=old)
    live = make_job(conn, state="pending", queue="mail")
    admin = http("admin")
    cutoff = (datetime.now(timezone.utc) - timedelta(days=1)).isoformat()
    response = admin.delete("/admin/dlq", params={"queue": "mail", "before": cutoff})
    assert response.status_code == 200 and response.json() == {"count": 3}
    remaining = {r[0] for r in conn.execute("SELECT id FROM jobqueue.jobs").fetchall()}
    assert remaining == {recent, other, live}
    assert (
        conn.execute("SELECT count(*) FROM jobqueue.job_results WHERE job_id = ANY(%s)", (purged,)).fetchone()[0] == 0
    )
    assert conn.execute("SELECT count(*) FROM jobqueue.job_errors WHERE job_id = ANY(%s)", (purged,)).fetchone()[0] == 0
    naive = admin.delete("/admin/dlq", params={"before": "2020-01-01T00:00:00"})
    assert naive.status_code == 422 and naive.json()["field"] == "before"
    assert admin.delete("/admin/dlq").json() == {"count": 2}
    assert {r[0] for r in conn.execute("SELECT id FROM jobqueue.jobs").fetchall()} == {live}


def test_cancel_by_filter(http, conn):
    targets = [make_job(conn, queue="mail", job_type="send") for _ in range(3)]
    running = make_job(conn, queue="mail", job_type="send", state="processing")
    others = [make_job(conn, queue="mail", job_type="render"), make_job(conn, queue="img", job_type="send")]
    admin = http("admin")
    assert http("alice").post("/admin/jobs/cancel", params={"queue": "mail"}).status_code == 403
    response = admin.post("/admin/jobs/cancel", params={"queue": "mail", "job_type": "send"})
    assert response.status_code == 200
    assert response.json() == {"cancelled": 3, "cancel_requested": 1, "complete": True}
    assert {job_row(conn, j)["state"] for j in targets} == {"cancelled"}
    assert (job_row(conn, running)["state"], job_row(conn, running)["cancel_requested"]) == ("processing", True)
    assert {job_row(conn, j)["state"] for j in others} == {"pending"}


def test_cancel_by_filter_refuses_an_empty_filter_and_bad_values(http, conn):
    job_id = make_job(conn, queue="mail")
    admin = http("admin")
    for params, field in (
        ({}, "all"),
        ({"queue": ""}, "queue"),
        ({"state": "completed"}, "state"),
        ({"before": "2030-01-01T00:00:00"}, "before"),  # naive
    ):
        refused = admin.post("/admin/jobs/cancel", params=params)
        assert refused.status_code == 422 and refused.json()["field"] == field, (params, refused.json())
    assert job_row(conn, job_id)["state"] == "pending"
    before = (datetime.now(timezone.utc) + timedelta(seconds=5)).isoformat()
    assert admin.post("/admin/jobs/cancel", params={"before": before}).json()["cancelled"] == 1
    make_job(conn, queue="img")
    assert admin.post("/admin/jobs/cancel", params={"all": "true"}).json()["cancelled"] == 1
