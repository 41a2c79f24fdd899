"""What the REST API answers when the database gives up on a request rather than failing outright:
a lock wait past JOBQUEUE_LOCK_TIMEOUT and a read-only server (a standby during a failover) are
503 with Retry-After, a role without the privilege is a 403 saying so, and /events without a
LISTEN connection is a 503 that says why — never a 500."""

from __future__ import annotations

import time

import httpx
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from tests.support.factories import make_job
from tests.support.roles import reader_dsn  # noqa: F401 (a fixture)


def client_for(server, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=10.0)


def test_a_request_blocked_on_a_lock_answers_503_within_the_lock_timeout(start_api, keys, dsn, conn):
    job_id = make_job(conn, producer_id="alice")
    server = start_api(lock_timeout=0.3)
    with client_for(server, keys["alice"]) as client, psycopg.connect(dsn) as holder:
        assert client.get(f"/jobs/{job_id}").status_code == 200
        holder.execute("LOCK TABLE jobqueue.jobs IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        response = client.get(f"/jobs/{job_id}")
        took = time.monotonic() - started
        holder.rollback()
        assert response.status_code == 503, response.text
        assert response.json()["error"] == "database_unavailable" and "Retry-After" in response.headers
        assert took < 2.0
        assert client.get(f"/jobs/{job_id}").status_code == 200


def test_a_read_only_database_answers_503(start_api, keys, dsn, conn):
    dbname = conninfo_to_dict(dsn)["dbname"]
    conn.execute(sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(sql.Identifier(dbname)))
    with client_for(start_api(), keys["alice"]) as client:
        response = client.post("/jobs", json={"job_type": "x"})
        assert response.status_code == 503, response.text
        assert response.json()["error"] == "database_unavailable" and "Retry-After" in response.headers
        assert client.get("/jobs").status_code == 200  # reads still work on a standby
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 0


def test_a_role_without_the_privilege_answers_403_with_a_clear_body(reader_dsn, start_api, keys):  # noqa: F811
    # reader_dsn first: fixtures are torn down in reverse, so the API is stopped before the role is dropped
    with client_for(start_api(dsn=reader_dsn), keys["alice"]) as client:
        assert client.get("/jobs").status_code == 200
        for response in (
            client.post("/jobs", json={"job_type": "x"}),
            client.post("/jobs/batch", json={"jobs": [{"job_type": "x"}, {"job_type": "y"}]}),
        ):
            assert response.status_code == 403, response.text
            body = response.json()
            assert body["error"] == "permission_denied"
            assert "permission denied for function enqueue" in body["message"] and "GRANT" in body["message"]


def test_events_without_a_listen_connection_answer_503_saying_why(start_api, keys):
    with client_for(start_api(listen=False), keys["alice"]) as client:
        response = client.get("/events")
        assert response.status_code == 503, response.text
        assert response.json()["error"] == "events_unavailable"
        assert "JOBQUEUE_DIRECT_DSN" in response.json()["message"]
        assert client.post("/jobs", json={"job_type": "x"}).status_code == 201
