"""/queues: counts per queue and priority from the cached metrics snapshot; pause/resume honoured
by workers; per-queue limits and enqueue defaults."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import httpx

from tests.support import apps
from tests.support.factories import job_row, make_job
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings


def test_queue_stats_per_queue_and_priority(http, conn):
    make_job(conn, queue="mail", priority="high")
    make_job(conn, queue="mail", priority="high", run_at=None)
    make_job(conn, queue="mail", priority="low", state="processing")
    make_job(conn, queue="mail", priority="low", state="dead_letter")
    make_job(conn, queue="mail", priority="low", state="failed")
    conn.execute(
        "UPDATE jobqueue.jobs SET run_at = now() + interval '1 hour' WHERE id = %s",
        (make_job(conn, queue="mail", priority="low"),),
    )
    make_job(conn, queue="img", state="completed")
    body = http("admin").get("/queues").json()
    mail = next(q for q in body["queues"] if q["queue"] == "mail")
    # as /metrics counts: depth = runnable now, the failed job whose retry is due included
    assert (mail["depth"], mail["scheduled"], mail["retrying"], mail["processing"], mail["dead"]) == (3, 1, 1, 1, 1)
    levels = {level["priority"]: level for level in mail["priorities"]}
    assert levels["high"]["depth"] == 2 and levels["low"]["scheduled"] == 1 and set(levels) == {"high", "low"}
    assert mail["paused"] is False and mail["oldest_age_seconds"] >= 0
    assert [q["queue"] for q in body["queues"]] == ["mail"]  # finished jobs are not a queue's load


def test_queues_are_served_from_the_cached_snapshot_and_say_how_old_it_may_be(start_api, keys, conn):
    """No count per request: within the snapshot's TTL every caller gets the same figures, however
    the table changed, with when they were measured and how long they may be served."""
    api = start_api(metrics_ttl=30.0)
    make_job(conn, queue="mail")
    with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {keys['admin']}"}, timeout=10) as admin:
        first = admin.get("/queues").json()
        for _ in range(3):
            make_job(conn, queue="mail")
        again = admin.get("/queues").json()
    assert again == first and first["max_age_seconds"] == 30.0
    assert [(q["queue"], q["depth"]) for q in first["queues"]] == [("mail", 1)]
    measured = datetime.fromisoformat(first["measured_at"])
    assert abs((datetime.now(measured.tzinfo) - measured).total_seconds()) < 30


def test_an_unknown_queue_is_not_paused(http, conn):
    """Before, `pause nosuchqueue` answered paused: true, and no worker would ever be stopped by it."""
    refused = http("admin").post("/queues/nosuchqueue/pause")
    assert refused.status_code == 404 and "no queue named 'nosuchqueue' is known" in refused.json()["message"]
    assert http("admin").post("/queues/nosuchqueue/resume").status_code == 404
    assert conn.execute("SELECT count(*) FROM jobqueue.queue_settings").fetchone() == (0,)


def test_pause_stops_workers_claiming_and_resume_restarts_them(http, conn, dsn):
    admin = http("admin")
    assert http("alice").post("/queues/paused-q/pause").status_code == 403
    with WorkerThread(apps.queue, test_settings(dsn, queues=("paused-q", "open-q"), poll_interval=30)):
        response = admin.post("/queues/paused-q/pause")
        assert response.status_code == 200 and response.json()["paused"] is True
        time.sleep(0.2)  # the worker hears jobqueue_control; nothing else to wait for
        held = http("alice").post("/jobs", json={"job_type": "record", "queue": "paused-q"})
        assert held.status_code == 201  # a paused queue keeps accepting jobs
        free = http("alice").post("/jobs", json={"job_type": "record", "queue": "open-q"}).json()["id"]
        wait_until(lambda: job_row(conn, free)["state"] == "completed", message="the open queue runs")
        time.sleep(0.3)
        assert job_row(conn, held.json()["id"])["state"] == "pending"
        listed = next(q for q in admin.get("/queues").json()["queues"] if q["queue"] == "paused-q")
        assert listed["paused"] is True and listed["depth"] == 1
        started = time.monotonic()
        assert admin.post("/queues/paused-q/resume").json()["paused"] is False
        wait_until(lambda: job_row(conn, held.json()["id"])["state"] == "completed", message="resumed")
        assert time.monotonic() - started < 5  # woken by NOTIFY, not the 30 s poll


def test_a_worker_started_while_the_queue_is_paused_leaves_it_alone(http, conn, dsn):
    forced = http("admin").post("/queues/late-q/pause", params={"force": "true"})  # before its first worker
    assert forced.status_code == 200, forced.text
    job_id = make_job(conn, queue="late-q", job_type="record")
    with WorkerThread(apps.queue, test_settings(dsn, queues=("late-q",))):
        time.sleep(0.5)
        assert job_row(conn, job_id)["state"] == "pending"
        conn.execute("UPDATE jobqueue.queue_settings SET paused = false WHERE queue = 'late-q'")  # psql works too
        wait_until(lambda: job_row(conn, job_id)["state"] == "completed", message="resumed from SQL")


def test_queue_limits_are_set_per_queue(http):
    admin = http("admin")
    response = admin.put("/queues/mail/limits", json={"soft_limit": 10, "hard_limit": 20})
    assert response.status_code == 200 and (response.json()["soft_limit"], response.json()["hard_limit"]) == (10, 20)
    bad = admin.put("/queues/mail/limits", json={"soft_limit": 30, "hard_limit": 20})
    assert bad.status_code == 422 and bad.json()["field"] == "soft_limit"
    zero = admin.put("/queues/mail/limits", json={"soft_limit": 0})
    assert zero.status_code == 422 and zero.json()["field"] == "soft_limit"
    assert http("bob").put("/queues/mail/limits", json={}).status_code == 403


def test_queue_enqueue_defaults_are_set_per_queue_and_applied(http, conn):
    admin = http("admin")
    response = admin.put("/queues/mail/defaults", json={"job_ttl_seconds": 3600, "idempotency_window_seconds": 600})
    assert response.status_code == 200, response.text
    assert (response.json()["job_ttl_seconds"], response.json()["idempotency_window_seconds"]) == (3600, 600)
    listed = admin.put("/queues/mail/limits", json={"soft_limit": 10, "hard_limit": 20}).json()
    assert listed["job_ttl_seconds"] == 3600  # one setting does not reset the other
    job = http("alice").post("/jobs", json={"job_type": "x", "queue": "mail", "idempotency_key": "k"}).json()
    shown = http("alice").get(f"/jobs/{job['id']}").json()
    row = job_row(conn, job["id"])
    assert row["expires_at"] - row["run_at"] == timedelta(hours=1)
    assert datetime.fromisoformat(shown["expires_at"]) == row["expires_at"]
    assert conn.execute("SELECT expires_at - created_at FROM jobqueue.idempotency_keys").fetchone()[0] == timedelta(
        minutes=10
    )
    queue = next(q for q in admin.get("/queues").json()["queues"] if q["queue"] == "mail")
    assert (queue["job_ttl_seconds"], queue["idempotency_window_seconds"]) == (3600, 600)
    for body, field in (
        ({"job_ttl_seconds": 0}, "job_ttl_seconds"),  # named as sent (before: job_ttl, never sent)
        ({"idempotency_window_seconds": -1}, "idempotency_window_seconds"),
        ({"job_ttl": 5}, "job_ttl"),
    ):
        bad = admin.put("/queues/mail/defaults", json=body)
        assert bad.status_code == 422 and bad.json()["field"] == field, bad.text
    assert http("bob").put("/queues/mail/defaults", json={}).status_code == 403
    cleared = admin.put("/queues/mail/defaults", json={}).json()
    assert (cleared["job_ttl_seconds"], cleared["idempotency_window_seconds"], cleared["soft_limit"]) == (
        None,
        None,
        10,
    )


def test_queue_shedding_is_set_per_queue_by_admins(http, conn):
    admin = http("admin")
    admin.put("/queues/mail/limits", json={"soft_limit": 10, "hard_limit": 20})
    response = admin.put("/queues/mail/shedding", json={"shed_low_retries": True})
    assert response.status_code == 200, response.text
    assert (response.json()["shed_low_retries"], response.json()["soft_limit"]) == (True, 10)  # the limits stay
    make_job(conn, queue="mail")
    listed = next(q for q in admin.get("/queues").json()["queues"] if q["queue"] == "mail")
    assert listed["shed_low_retries"] is True
    for body in ({}, {"shed_low_retries": "yes"}, {"shed_low_retries": True, "extra": 1}):
        bad = admin.put("/queues/mail/shedding", json=body)
        assert bad.status_code == 422, bad.text
    assert http("bob").put("/queues/mail/shedding", json={"shed_low_retries": False}).status_code == 403
    assert conn.execute("SELECT shed_low_retries FROM jobqueue.queue_settings WHERE queue = 'mail'").fetchone() == (
        True,
    )
    assert admin.put("/queues/mail/shedding", json={"shed_low_retries": False}).json()["shed_low_retries"] is False
