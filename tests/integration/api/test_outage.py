"""A database outage: 503 with Retry-After (never 500, never 201 for an uncommitted job), quickly,
and the API recovers by itself when the database is back."""

from __future__ import annotations

import time

import httpx
import psycopg
import pytest

from jobqueue.client import Client
from tests.integration.api.conftest import ApiServer, api_settings
from tests.support.waiting import wait_until


def submit(client: httpx.Client, n: int) -> httpx.Response:
    return client.post("/jobs", json={"job_type": "x", "payload": {"n": n}})


def committed(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {str(r[0]) for r in conn.execute("SELECT id FROM jobqueue.jobs").fetchall()}


def test_terminated_connections_give_503_or_201_never_500_and_the_api_recovers(api, http, dsn, conn):
    client = http("alice")
    created = {submit(client, 0).json()["id"]}
    conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    statuses = []
    for n in range(1, 30):
        response = submit(client, n)
        statuses.append(response.status_code)
        if response.status_code == 201:
            created.add(response.json()["id"])
        else:
            assert response.status_code == 503 and response.json()["error"] == "database_unavailable"
            assert int(response.headers["Retry-After"]) >= 1
    assert statuses[-1] == 201 and set(statuses) <= {201, 503}
    assert committed(dsn) == created


@pytest.mark.slow
def test_database_down_503_quickly_then_recovers_by_itself(own_cluster):
    with Client(own_cluster, pool_size=1) as admin:
        key = admin.create_api_key("alice")[0]
    server = ApiServer(api_settings(own_cluster)).start()
    cluster = own_cluster.cluster
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=10) as client:
            created = {submit(client, 0).json()["id"]}
            cluster.stop()
            try:
                for n in range(1, 4):
                    started = time.monotonic()
                    response = submit(client, n)
                    assert response.status_code == 503, response.text
                    assert time.monotonic() - started < 3.5  # pool wait 1 s, connect timeout 2 s
                    assert response.json()["error"] == "database_unavailable" and "Retry-After" in response.headers
                assert client.get("/readyz").status_code == 503
                assert client.get("/healthz").status_code == 200
                assert client.get("/jobs").status_code == 503
                assert client.get("/events").status_code == 503  # cannot LISTEN: said at once, not an empty stream
                started = time.monotonic()
                assert client.get("/metrics").status_code == 503  # scrapers get an answer, not a 500
                assert client.get("/dashboard/overview").status_code == 503
                assert time.monotonic() - started < 7  # the second shares the first's failure
            finally:
                cluster.start()
            wait_until(
                lambda: client.get("/readyz").status_code == 200,
                timeout=30,
                interval=0.2,
                message="readiness after the restart",
            )
            response = wait_until(
                lambda: (r := submit(client, 99)).status_code == 201 and r,
                timeout=30,
                interval=0.2,
                message="a 201 after the restart",
            )
            created.add(response.json()["id"])
            assert committed(own_cluster) == created
    finally:
        server.stop()
