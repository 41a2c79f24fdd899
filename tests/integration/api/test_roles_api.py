"""The REST API and a worker each under their own least-privilege role (docs/security.md "Roles"),
and an API whose role lacks a privilege answering 403 with a clear body, never 500."""

from __future__ import annotations

import httpx
import psycopg

from tests.support import apps
from tests.support.factories import job_row, make_job
from tests.support.roles import login_as  # noqa: F401 (a fixture)
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings


def client_for(server, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=10.0)


def test_the_api_and_a_worker_run_under_their_own_roles(login_as, start_api, keys, conn):  # noqa: F811
    # login_as first: fixtures are torn down in reverse, so the API stops before its role is dropped
    api_dsn, worker_dsn, sql_producer = login_as("api"), login_as("worker"), login_as("producer")
    server = start_api(dsn=api_dsn)
    with (
        client_for(server, keys["alice"]) as alice,
        client_for(server, keys["bob"]) as bob,
        client_for(server, keys["admin"]) as admin,
    ):
        created = alice.post("/jobs", json={"job_type": "record", "payload": {"n": 7}})
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        with WorkerThread(apps.queue, test_settings(worker_dsn)):
            wait_until(
                lambda: alice.get(f"/jobs/{job_id}").json()["state"] == "completed",
                timeout=15,
                message="the job completed",
            )
        assert alice.get(f"/jobs/{job_id}/result").json()["result"] == {"ok": True, "n": 7}
        assert bob.get(f"/jobs/{job_id}").status_code == 404
        for path in ("/admin/dlq", "/queues", "/workers", "/schedules", "/circuits", "/dashboard/overview"):
            assert admin.get(path).status_code == 200, (path, admin.get(path).text)
        dead = make_job(conn, state="dead_letter", producer_id="alice")
        retried = admin.post(f"/admin/jobs/{dead}/retry")
        assert retried.status_code == 200, retried.text
        assert job_row(conn, dead)["state"] == "pending"
    with psycopg.connect(sql_producer) as pc:  # alice's job is not the SQL producer's
        assert pc.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 0


def test_an_api_running_as_a_producer_role_answers_403_not_500(login_as, start_api, keys):  # noqa: F811
    server = start_api(dsn=login_as("producer"))
    with client_for(server, keys["alice"]) as alice:
        response = alice.post("/jobs", json={"job_type": "x"})
    assert response.status_code == 403, response.text
    assert response.json()["error"] == "permission_denied"
    assert "permission denied for table api_keys" in response.json()["message"]
