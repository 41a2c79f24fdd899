"""GET /jobs/{id}, /result, POST /cancel, the listing; auth and producer isolation."""

from __future__ import annotations

import uuid

from jobqueue.client import Client
from tests.support import apps
from tests.support.factories import job_row, make_job
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings


def submit(client, **fields) -> str:
    response = client.post("/jobs", json={"job_type": "record", **fields})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def state_of(client, job_id: str) -> str:
    return client.get(f"/jobs/{job_id}").json()["state"]


def test_a_job_through_its_life_status_and_result(http, dsn):
    client = http("alice")
    job_id = submit(client, payload={"n": 7}, queue="api-life")
    detail = client.get(f"/jobs/{job_id}").json()
    assert (detail["state"], detail["attempts"], detail["priority"], detail["payload"]) == (
        "pending",
        0,
        "normal",
        {"n": 7},
    )
    pending = client.get(f"/jobs/{job_id}/result")
    assert pending.status_code == 404 and pending.json()["state"] == "pending"
    with WorkerThread(apps.queue, test_settings(dsn, queues=("api-life",))):
        wait_until(lambda: state_of(client, job_id) == "completed", message="completion")
    result = client.get(f"/jobs/{job_id}/result")
    assert result.status_code == 200
    assert result.json()["result"] == {"ok": True, "n": 7} and result.json()["state"] == "completed"
    detail = client.get(f"/jobs/{job_id}").json()
    assert detail["attempts"] == 1 and detail["started_at"] and detail["finished_at"] and detail["errors"] == []


def test_a_dead_job_shows_its_error_history(http, dsn):
    client = http("alice")
    job_id = submit(client, job_type="always_fails", queue="api-dead", max_attempts=3)
    with WorkerThread(apps.queue, test_settings(dsn, queues=("api-dead",))):
        wait_until(lambda: state_of(client, job_id) == "dead_letter", message="dead letter")
    detail = client.get(f"/jobs/{job_id}").json()
    assert [e["attempt"] for e in detail["errors"]] == [1, 2, 3]
    assert detail["last_error"]["message"] == "boom on attempt 3" and detail["last_error"]["error_type"] == "ValueError"
    result = client.get(f"/jobs/{job_id}/result")
    assert result.status_code == 404 and result.json()["state"] == "dead_letter"


def test_cancel_pending_running_and_finished(http, conn, dsn):
    client = http("alice")
    pending = submit(client, queue="api-cancel-idle")
    response = client.post(f"/jobs/{pending}/cancel")
    assert (response.status_code, response.json()["outcome"]) == (200, "cancelled")
    assert job_row(conn, pending)["state"] == "cancelled"

    again = client.post(f"/jobs/{pending}/cancel")
    assert again.status_code == 409 and "already cancelled" in again.json()["message"]

    completed = make_job(conn, state="completed", producer_id="alice")
    refused = client.post(f"/jobs/{completed}/cancel")
    assert refused.status_code == 409 and refused.json()["state"] == "completed"
    assert "completed" in refused.json()["message"]

    dead = make_job(conn, state="dead_letter", producer_id="alice")
    refused = client.post(f"/jobs/{dead}/cancel")
    assert refused.status_code == 409 and refused.json()["state"] == "dead_letter"
    assert "dead-letter queue" in refused.json()["message"]
    assert job_row(conn, dead)["state"] == "dead_letter"

    running = submit(client, job_type="slow", payload={"seconds": 30}, queue="api-cancel")
    with WorkerThread(apps.queue, test_settings(dsn, queues=("api-cancel",))):
        wait_until(lambda: state_of(client, running) == "processing", message="running")
        requested = client.post(f"/jobs/{running}/cancel")
        assert (requested.status_code, requested.json()["outcome"]) == (202, "cancel_requested")
        wait_until(lambda: state_of(client, running) == "cancelled", message="cooperative cancel")


def test_unknown_jobs_are_404(http):
    client = http("alice")
    missing = uuid.uuid4()
    for response in (
        client.get(f"/jobs/{missing}"),
        client.get(f"/jobs/{missing}/result"),
        client.post(f"/jobs/{missing}/cancel"),
    ):
        assert response.status_code == 404 and response.json()["error"] == "not_found"
    assert client.get("/jobs/not-a-uuid").status_code in (404, 422)


def test_a_producer_sees_and_cancels_only_its_own_jobs(http, conn):
    alice, bob, admin = http("alice"), http("bob"), http("admin")
    job_id = submit(alice)
    for response in (bob.get(f"/jobs/{job_id}"), bob.get(f"/jobs/{job_id}/result"), bob.post(f"/jobs/{job_id}/cancel")):
        assert response.status_code == 404
    assert job_row(conn, job_id)["state"] == "pending"
    assert [j["id"] for j in bob.get("/jobs").json()["jobs"]] == []
    assert bob.get("/jobs", params={"producer_id": "alice"}).json()["jobs"] == []  # ignored for producers
    assert admin.get(f"/jobs/{job_id}").json()["producer_id"] == "alice"
    assert [j["id"] for j in admin.get("/jobs", params={"producer_id": "alice"}).json()["jobs"]] == [job_id]
    assert admin.post(f"/jobs/{job_id}/cancel").status_code == 200


def test_listing_is_newest_first_with_keyset_pages_and_filters(http, conn):
    client = http("alice")
    ids = [submit(client, queue="a" if i % 2 else "b", priority="high" if i < 3 else "low") for i in range(7)]
    make_job(conn, state="dead_letter", queue="a", producer_id="alice")
    page = client.get("/jobs", params={"limit": 3, "state": "pending"}).json()
    seen = [j["id"] for j in page["jobs"]]
    while page["next_cursor"]:
        page = client.get("/jobs", params={"limit": 3, "state": "pending", "cursor": page["next_cursor"]}).json()
        seen += [j["id"] for j in page["jobs"]]
    assert seen == list(reversed(ids))
    queue_a = client.get("/jobs", params={"queue": "a", "state": "pending"}).json()["jobs"]
    assert [j["id"] for j in queue_a] == [ids[5], ids[3], ids[1]]
    high = client.get("/jobs", params={"priority": "high"}).json()["jobs"]
    assert [j["id"] for j in high] == [ids[2], ids[1], ids[0]]
    assert client.get("/jobs", params={"job_type": "nothing"}).json() == {"jobs": [], "next_cursor": None}
    assert len(client.get("/jobs", params={"state": "dead_letter"}).json()["jobs"]) == 1


def test_bad_listing_parameters_are_422_naming_them(http):
    client = http("alice")
    for params, field in [
        ({"state": "sleeping"}, "state"),
        ({"priority": "urgent"}, "priority"),
        ({"cursor": "abc"}, "cursor"),
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"limit": "many"}, "limit"),
    ]:
        response = client.get("/jobs", params=params)
        assert response.status_code == 422 and response.json()["field"] == field, (params, response.text)


def test_requests_without_a_valid_key_are_401(http, dsn, conn):
    anonymous = http(None)
    assert anonymous.post("/jobs", json={"job_type": "x"}).status_code == 401
    assert anonymous.get("/jobs", headers={"Authorization": "Bearer jq_not-a-key"}).status_code == 401
    assert anonymous.get("/jobs", headers={"Authorization": "Basic abc"}).status_code == 401
    assert anonymous.get("/healthz").status_code == 200 and anonymous.get("/schema/openapi.json").status_code == 200
    with Client(dsn, pool_size=1) as admin_client:
        key, info = admin_client.create_api_key("carol")
        client = http(None)
        client.headers["Authorization"] = f"Bearer {key}"
        assert client.get("/jobs").status_code == 200
        admin_client.revoke_api_key(info.id)
        assert client.get("/jobs").status_code == 401  # key cache is off in these tests
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 0
    assert (
        conn.execute(
            "SELECT count(*) FROM jobqueue.api_keys WHERE key_hash = sha256(%s::bytea)", (key.encode(),)
        ).fetchone()[0]
        == 1
    )  # stored hashed, never in clear


def test_readyz_says_whether_the_schema_is_migrated(http, conn):
    assert http(None).get("/readyz").json()["status"] == "ready"
    conn.execute("UPDATE public.jobqueue_alembic_version SET version_num = '0002_schedules'")
    response = http(None).get("/readyz")
    assert response.status_code == 503 and response.json()["error"] == "not_migrated"
    assert response.headers["Retry-After"] == "2"


def test_cancel_over_rest_of_a_running_job_is_honoured_when_its_attempt_fails(dsn, conn, http):
    """No new attempt starts once cancel is requested, whichever interface asked."""
    apps.runs.clear()
    with WorkerThread(apps.queue, test_settings(dsn)):
        submitted = http("alice").post("/jobs", json={"job_type": "ignores_cancel_then_fails"})
        job_id = submitted.json()["id"]
        wait_until(lambda: len(apps.runs) == 1)
        cancelled = http("alice").post(f"/jobs/{job_id}/cancel")
        assert cancelled.status_code == 202 and cancelled.json()["outcome"] == "cancel_requested"
        wait_until(lambda: http("alice").get(f"/jobs/{job_id}").json()["state"] == "cancelled", timeout=10)
    assert len(apps.runs) == 1
    assert http("alice").get(f"/jobs/{job_id}").json()["attempts"] == 1


def test_the_schema_pages_work_offline(http):
    """/schema and /schema/swagger loaded their scripts from a CDN and stayed blank offline: every
    script and stylesheet they reference is served by the API itself, without a key."""
    import re

    anonymous = http(None)
    for page in ("/schema", "/schema/swagger"):
        response = anonymous.get(page)
        assert response.status_code == 200
        assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", response.text)
        assert len(assets) == 6 and all(asset.startswith("/schema/") for asset in assets), assets
        for asset in assets:  # Swagger UI's files, and the start-up script (the page has no inline script)
            served = anonymous.get(asset)
            assert served.status_code == 200 and len(served.content) > 200, asset
