"""JOBQUEUE_READ_DSN: status reads go to the replica; a key that just wrote reads the primary; a
job the replica does not know is looked up on the primary; a replica that is down is skipped.

The "replica" here is a second database with different rows, so every answer says which side
served it (the real streaming standby of `make ha` is exercised in the HA acceptance test)."""

from __future__ import annotations

import httpx
import psycopg
import pytest

from jobqueue.client import Client
from tests.harness.devdb import free_port
from tests.integration.api.conftest import ApiServer, api_settings
from tests.support.prometheus import parse, value


@pytest.fixture
def replica_dsn(pg_server):
    name = pg_server.create_database()
    yield pg_server.dsn_for(name)
    pg_server.drop_database(name)


def _keys(dsn: str, replica_dsn: str) -> dict[str, str]:
    """The same keys on both sides (a real replica has the primary's key rows)."""
    with Client(dsn, pool_size=1) as client:
        keys = {"alice": client.create_api_key("alice")[0], "admin": client.create_api_key("ops", role="admin")[0]}
    with psycopg.connect(dsn) as source, psycopg.connect(replica_dsn) as target:
        rows = source.execute(
            "SELECT id, key_hash, key_prefix, producer_id, role, created_at FROM jobqueue.api_keys"
        ).fetchall()
        with target.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO jobqueue.api_keys (id, key_hash, key_prefix, producer_id, role, created_at) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                rows,
            )
    return keys


def _only_on(dsn: str, producer: str) -> str:
    with Client(dsn, pool_size=1, producer_id=producer) as client:
        return str(client.enqueue("x"))


def test_reads_go_to_the_replica_and_a_writer_reads_its_own_writes(dsn, replica_dsn):
    keys = _keys(dsn, replica_dsn)
    on_replica = _only_on(replica_dsn, "alice")
    on_primary = _only_on(dsn, "alice")
    server = ApiServer(api_settings(dsn, read_dsn=replica_dsn, read_after_write=60.0, metrics_public=True)).start()
    try:
        admin = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {keys['admin']}"})
        alice = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {keys['alice']}"})
        with admin, alice:
            assert [job["id"] for job in admin.get("/jobs").json()["jobs"]] == [on_replica]  # the replica's rows
            assert admin.get(f"/jobs/{on_primary}").status_code == 200  # unknown there: the primary answers
            assert admin.get("/jobs/00000000-0000-0000-0000-000000000000").status_code == 404
            assert value(parse(httpx.get(server.url + "/metrics").text), "jobqueue_jobs_submitted_total") == 1

            created = alice.post("/jobs", json={"job_type": "y"}).json()["id"]
            listed = {job["id"] for job in alice.get("/jobs").json()["jobs"]}
            assert listed == {on_primary, created}  # alice wrote: her reads stay on the primary
            assert alice.get(f"/jobs/{created}").json()["state"] == "pending"
            assert [job["id"] for job in admin.get("/jobs").json()["jobs"]] == [on_replica]  # admin did not write
    finally:
        server.stop()


def test_a_replica_that_is_down_is_skipped_for_the_primary(dsn):
    with Client(dsn, pool_size=1) as client:
        admin_key = client.create_api_key("ops", role="admin")[0]
    on_primary = _only_on(dsn, "alice")
    unreachable = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
    server = ApiServer(api_settings(dsn, read_dsn=unreachable)).start()
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {admin_key}"}, timeout=20) as admin:
            for _ in range(3):
                response = admin.get("/jobs")
                assert response.status_code == 200, response.text
                assert [job["id"] for job in response.json()["jobs"]] == [on_primary]
            assert admin.get("/queues").status_code == 200 and admin.get("/workers").status_code == 200
    finally:
        server.stop()
