"""Ordering keys and progress over REST: ``"ordering_key"`` on POST /jobs and /jobs/batch, per
producer; ``"progress"`` and ``"ordering_key"`` on GET /jobs/{id}; ``job.progress`` on /events."""

from __future__ import annotations

from tests.integration.api.test_events import EventReader
from tests.support import ledger_app
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings


def test_jobs_of_one_key_wait_their_turn_and_another_producers_same_key_does_not(http):
    alice, bob = http("alice"), http("bob")
    first = alice.post("/jobs", json={"job_type": "t", "ordering_key": "customer-42"}).json()["id"]
    batch = alice.post("/jobs/batch", json={"jobs": [{"job_type": "t", "ordering_key": "customer-42"}] * 2})
    assert batch.status_code == 201, batch.text
    copied = bob.post("/jobs", json={"job_type": "t", "ordering_key": "customer-42"}).json()["id"]
    states = [alice.get(f"/jobs/{job['id']}").json()["state"] for job in batch.json()["jobs"]]
    assert alice.get(f"/jobs/{first}").json()["state"] == "pending"
    assert states == ["waiting", "waiting"]
    detail = bob.get(f"/jobs/{copied}").json()
    assert (detail["state"], detail["ordering_key"]) == ("pending", "customer-42")  # bob's key is bob's own


def test_a_bad_ordering_key_is_a_422_naming_it_and_nothing_is_written(http, conn):
    client = http("alice")
    for key, status in (("x" * 10_000, 422), ("   ", 422), (42, 400)):
        response = client.post("/jobs", json={"job_type": "t", "ordering_key": key})
        assert response.status_code in (status, 422), response.text
        assert "ordering_key" in response.text
    response = client.post("/jobs/batch", json={"jobs": [{"job_type": "t"}, {"job_type": "t", "ordering_key": ""}]})
    assert response.status_code == 422 and "jobs[1].ordering_key" in response.text
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 0


def test_progress_shows_on_the_job_and_as_events_on_the_stream(api, keys, http, dsn):
    ledger_app.release.clear()
    reader = EventReader(api.url, keys["alice"], queue="reports")
    try:
        client = http("alice")
        job_id = client.post(
            "/jobs", json={"job_type": "report", "queue": "reports", "payload": {"steps": 3, "hold": True}}
        ).json()["id"]
        with WorkerThread(ledger_app.queue, test_settings(dsn, queues=("reports",))):
            progress = wait_until(
                lambda: (p := client.get(f"/jobs/{job_id}").json()["progress"]) and p["done"] == 3 and p
            )
            assert (progress["total"], progress["message"], progress["attempt"]) == (3, "step 3", 1)
            assert "at" in progress
            names = set()
            wait_until(lambda: names.add(reader.take(1)[0][0]) or "job.progress" in names, message="job.progress")
            ledger_app.release.set()
            wait_until(lambda: client.get(f"/jobs/{job_id}").json()["state"] == "completed")
    finally:
        ledger_app.release.set()
        reader.close()
