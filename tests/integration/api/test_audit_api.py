"""``GET /admin/audit`` and the dashboard's audit page: an admin key reads every entry, a producer
key its own only (never an operator's, never another producer's, not even through a cursor);
pages follow sealed cursors; bad filters are a 422 naming the field. Behind PgBouncer in
transaction mode the key an action was done for stays with that action's transaction: the next
one on the same server connection is recorded as its own login."""

from __future__ import annotations

from datetime import datetime

import httpx
import pytest

from jobqueue.api.security import PAGE_POLICY
from jobqueue.client import Client
from jobqueue.config import Settings
from jobqueue.model.audit import Actor
from tests.integration.api.conftest import ApiServer, api_settings
from tests.support.audit import entries_after, last_seq
from tests.support.factories import make_job
from tests.support.pgbouncer import PgBouncer


def listed(client: httpx.Client, **params) -> list[dict]:
    """Every entry, following the cursors."""
    entries, cursor = [], None
    while True:
        response = client.get("/admin/audit", params={**params, **({"cursor": cursor} if cursor else {})})
        assert response.status_code == 200, response.text
        entries += response.json()["entries"]
        cursor = response.json()["next_cursor"]
        if cursor is None:
            return entries


def test_an_admin_reads_every_entry_and_a_producer_key_its_own(http, conn, dsn):
    alice, bob, admin = http("alice"), http("bob"), http("admin")
    mine = [make_job(conn, producer_id="alice") for _ in range(3)]
    theirs = make_job(conn, producer_id="bob")
    for job in mine:
        assert alice.post(f"/jobs/{job}/cancel").status_code == 200
    assert bob.post(f"/jobs/{theirs}/cancel").status_code == 200
    assert admin.post("/queues/reports/pause", params={"force": "true"}).status_code == 200
    with Client(dsn, pool_size=1) as client:
        client.pause_queue("from-python", force=True)

    seen = listed(alice, limit=1)  # one per page: three pages, each cursor sealed for alice
    assert [e["target"] for e in seen] == [str(job) for job in reversed(mine)]
    assert {(e["actor"], e["producer_id"], e["application_name"]) for e in seen} == {("alice", "alice", "jobqueue-api")}
    everything = listed(admin, limit=2)
    assert [e["target"] for e in everything[:3]] == ["from-python", "reports", str(theirs)]
    assert everything[1]["actor"] == "ops" and everything[1]["producer_id"] is None
    assert [e["seq"] for e in everything] == sorted((e["seq"] for e in everything), reverse=True)
    # an admin's cursor is no use to a producer key, nor a job listing's to the audit log
    admin_cursor = admin.get("/admin/audit", params={"limit": 1}).json()["next_cursor"]
    refused = alice.get("/admin/audit", params={"cursor": admin_cursor})
    assert refused.status_code == 422 and refused.json()["field"] == "cursor"
    make_job(conn, producer_id="alice")
    jobs_cursor = alice.get("/jobs", params={"limit": 1}).json()["next_cursor"]
    assert alice.get("/admin/audit", params={"cursor": jobs_cursor}).status_code == 422
    assert http(None).get("/admin/audit").status_code == 401


def test_filters_and_what_they_refuse(http, conn):
    admin = http("admin")
    for name in ("a", "b"):
        assert admin.post(f"/queues/{name}/pause", params={"force": "true"}).status_code == 200
        assert admin.put(f"/queues/{name}/limits", json={"soft_limit": 5}).status_code == 200
    assert [e["action"] for e in listed(admin, action="queue", target="a")] == ["queue.limits", "queue.pause"]
    assert [e["target"] for e in listed(admin, action="queue.pause")] == ["b", "a"]
    assert listed(admin, actor="nobody") == []
    later = datetime.now().astimezone().isoformat()
    assert listed(admin, since=later) == []
    for params, field in (
        ({"action": "queue.explode"}, "action"),
        ({"action": "' OR 1=1 --"}, "action"),
        ({"since": "2026-01-01T00:00:00"}, "since"),  # no offset: which time is it?
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"actor": ""}, "actor"),
    ):
        response = admin.get("/admin/audit", params=params)
        assert response.status_code in (400, 422), (params, response.text)
        assert field in response.text, (params, response.text)


def test_the_dashboard_has_an_audit_page_that_writes_entries_as_text(http, api):
    page = httpx.get(f"{api.url}/dashboard/audit")
    assert page.status_code == 200 and page.headers["content-security-policy"] == PAGE_POLICY
    assert '<script src="/dashboard/audit/static/audit.js">' in page.text
    script = httpx.get(f"{api.url}/dashboard/audit/static/audit.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert "innerHTML" not in script.text and "textContent" in script.text  # names producers chose are text
    assert httpx.get(f"{api.url}/dashboard/audit/static/../dashboard.js").status_code == 404
    assert 'href="/dashboard/audit"' in httpx.get(f"{api.url}/dashboard").text


def test_behind_pgbouncer_the_keys_claim_ends_with_its_transaction(pg_server, dsn, conn, keys):
    bouncer = PgBouncer(pg_server.admin_dsn, pool_size=1)  # one server connection: every client shares it
    try:
        through = bouncer.dsn_for(dsn)
        settings: Settings = api_settings(through, pgbouncer=True, listen=False)
        server = ApiServer(settings).start()
        try:
            with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {keys['admin']}"}) as admin:
                before = last_seq(conn)
                assert admin.post("/queues/via-bouncer/pause", params={"force": "true"}).status_code == 200
                with Client(settings=settings, pool_size=1) as client:  # the same server connection next
                    client.pause_queue("after-it", force=True)
        finally:
            server.stop()
    finally:
        bouncer.close()
    by_api, by_login = entries_after(conn, before)
    assert (by_api["target"], by_api["actor"], by_api["api_key_id"] is not None) == ("via-bouncer", "ops", True)
    assert (by_login["target"], by_login["api_key_id"], by_login["application_name"]) == (
        "after-it",
        None,
        "jobqueue-client",
    )
    assert by_login["actor"] == by_login["db_role"]


@pytest.mark.parametrize("client_addr", [None, "::1", "10.1.2.3"])
def test_the_claim_the_api_sends_is_what_the_entry_says(client_addr, conn, keys, dsn):
    with Client(dsn, pool_size=1) as client:
        key = [k for k in client.api_keys() if k.producer_id == "alice"][0]
    actor = Actor.of_key(key, client_addr)
    with conn.transaction():
        conn.execute("SELECT set_config('jobqueue.actor', %s, true)", (actor.claim(),))
        conn.execute("SELECT jobqueue.audit('queue.pause', 'x')")
    [entry] = entries_after(conn, last_seq(conn) - 1)
    assert (entry["actor"], entry["api_key_id"], entry["producer_id"], entry["client_addr"]) == (
        "alice",
        key.id,
        "alice",
        client_addr,
    )
