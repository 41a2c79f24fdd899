"""What the dashboard's actions need from the REST API: the admin delete of a job that has not
started (with its idempotency key), the Scheduled and Retrying listings, what each worker runs
(/dashboard/running) and the throughput history (/dashboard/history) — both behind the same guard
as /dashboard/overview."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from jobqueue.client import Client
from jobqueue.model.errors import ValidationError
from jobqueue.model.jobs import DeleteOutcome, JobState
from tests.support.factories import count_jobs, job_row, make_job
from tests.support.waiting import wait_until

SOON = timedelta(hours=1)


def key_rows(conn, key: str) -> list:
    return conn.execute("SELECT job_id FROM jobqueue.idempotency_keys WHERE key = %s", (key,)).fetchall()


def test_delete_a_job_that_has_not_started_frees_its_idempotency_key(http, conn, dsn):
    with Client(dsn, pool_size=1) as client:
        job_id = client.enqueue("send", idempotency_key="welcome-7")
        scheduled = client.enqueue("send", run_at=datetime.now(timezone.utc) + SOON)
        admin = http("admin")
        assert admin.delete(f"/admin/jobs/{job_id}").status_code == 204
        assert admin.delete(f"/admin/jobs/{scheduled}").status_code == 204
        assert count_jobs(conn) == 0 and key_rows(conn, "welcome-7") == []
        again = client.enqueue("send", idempotency_key="welcome-7")  # the key is free: a new job
    assert again != job_id and key_rows(conn, "welcome-7") == [(again,)]
    gone = admin.delete(f"/admin/jobs/{job_id}")
    assert gone.status_code == 404 and gone.json()["error"] == "not_found"


def test_a_started_job_is_never_deleted(http, conn):
    admin = http("admin")
    started = {
        "processing": make_job(conn, state="processing"),
        "failed": make_job(conn, state="failed", run_at=datetime.now(timezone.utc) + SOON),
        "completed": make_job(conn, state="completed"),
        "dead_letter": make_job(conn, state="dead_letter"),
        "cancelled": make_job(conn, state="cancelled"),
        "pending": make_job(conn, state="pending", attempts=1, idempotency_key="ran-once"),  # reclaimed after a crash
    }
    for state, job_id in started.items():
        response = admin.delete(f"/admin/jobs/{job_id}")
        assert response.status_code == 409, (state, response.text)
        assert response.json()["error"] == "started" and response.json()["state"] == state
        assert job_row(conn, job_id)["state"] == state
    assert key_rows(conn, "ran-once") == [(started["pending"],)]


def test_only_an_admin_deletes(http, conn):
    job_id = make_job(conn, producer_id="alice")
    response = http("alice").delete(f"/admin/jobs/{job_id}")
    assert response.status_code == 403 and response.json()["error"] == "forbidden"
    assert http(None).delete(f"/admin/jobs/{job_id}").status_code == 401
    assert job_row(conn, job_id)["state"] == "pending"


def test_scheduled_and_retrying_listings(http, conn):
    later = datetime.now(timezone.utc) + SOON
    due = make_job(conn)
    delayed = make_job(conn, run_at=later)
    retrying = make_job(conn, state="failed", run_at=later)
    admin = http("admin")

    def listed(**params) -> list[str]:
        response = admin.get("/jobs", params=params)
        assert response.status_code == 200, response.text
        return [job["id"] for job in response.json()["jobs"]]

    assert listed(state="pending", scheduled="true") == [str(delayed)]
    assert listed(state="pending", scheduled="false") == [str(due)]
    assert listed(state="failed") == [str(retrying)]
    assert listed(scheduled="true") == [str(retrying), str(delayed)]
    bad = admin.get("/jobs", params={"scheduled": "soon"})
    assert bad.status_code == 422 and bad.json()["field"] == "scheduled"


def test_running_lists_each_workers_jobs_with_its_full_count(http, conn):
    held = [make_job(conn, state="processing", locked_by="w-big", job_type=f"t{i}") for i in range(12)]
    (small,) = [make_job(conn, state="processing", locked_by="w-small")]
    make_job(conn)  # pending: held by nobody
    admin = http("admin")
    body = admin.get("/dashboard/running").json()
    assert set(body["workers"]) == {"w-big", "w-small"} and body["per_worker"] == 10
    big = body["workers"]["w-big"]
    assert big["running"] == 12 and [j["id"] for j in big["jobs"]] == [str(j) for j in held[:10]]
    assert body["workers"]["w-small"] == {
        "running": 1,
        "jobs": [{"id": str(small), "queue": "default", "job_type": "noop", "attempt": 1, "started_at": None}],
    }


def test_history_and_running_need_what_the_overview_needs(http, conn):
    for path in ("/dashboard/running", "/dashboard/history"):
        assert http(None).get(path).status_code == 401
        assert http("alice").get(path).status_code == 403
        assert http("admin").get(path).status_code == 200
    bad = http("admin").get("/dashboard/history", params={"minutes": 0})
    assert bad.status_code == 422


def test_history_serves_the_leaders_samples_as_rates(http, conn):
    now = datetime.now(timezone.utc).replace(second=0, microsecond=0)
    for minutes_ago, submitted in ((2, 100), (1, 220)):
        at = now - timedelta(minutes=minutes_ago)
        conn.execute("INSERT INTO jobqueue.throughput_history VALUES (%s, %s, %s, 0, 0)", (at, at, submitted))
    (point,) = http("admin").get("/dashboard/history").json()["minutes"]
    assert point["minute"] == (now - timedelta(minutes=1)).isoformat()
    assert point["submitted_per_s"] == 2.0 and point["completed_per_s"] == 0 and point["failed_per_s"] == 0


def test_a_job_claimed_while_the_delete_waits_is_kept(dsn, conn):
    """The delete locks the row first: when a worker's claim holds it, the delete waits for the
    claim's commit and then sees a processing job (started), never deleting one a worker runs."""
    job_id = make_job(conn)
    outcome: list = []
    with psycopg.connect(dsn) as claimer, Client(dsn, pool_size=1) as client:
        claimer.execute(
            "UPDATE jobqueue.jobs SET state = 'processing', attempts = 1, locked_by = 'w1', "
            "locked_until = now() + interval '30 seconds' WHERE id = %s",
            (job_id,),
        )
        deleting = threading.Thread(target=lambda: outcome.append(client.delete_waiting(job_id)))
        deleting.start()
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()"
                ).fetchone()[0]
                == 1
            ),
            message="the delete waits for the claim's row lock",
        )
        claimer.commit()
        deleting.join(10)
    assert outcome == [(DeleteOutcome.STARTED, JobState.PROCESSING)]
    assert job_row(conn, job_id)["state"] == "processing"


def test_the_scheduled_filter_is_a_boolean(dsn):
    with Client(dsn, pool_size=1) as client, pytest.raises(ValidationError) as refused:
        client.list_jobs(scheduled="soon")
    assert refused.value.field == "scheduled"
