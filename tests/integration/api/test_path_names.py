"""Names in URL paths (issue 18): a queue whose name holds ``/`` could not be paused or limited over
REST or from the dashboard (404), and ``a%2F`` (the queue ``a/``) reached the queue ``a``. Every
endpoint that takes a queue, job type, schedule or circuit name in its path takes any name,
percent-encoded as `urllib.parse.quote(name, safe="")` or JavaScript's encodeURIComponent."""

from __future__ import annotations

from urllib.parse import quote

import pytest

NAMES = [
    "team/mail",
    "a/",
    "/lead",
    "a//b",
    "50%",
    "a%2Fb",
    "a%25b",
    "what?",
    "tag#1",
    "with space",
    "ünï/日本語",
    "%",
    "%%2F",
    "+plus",
]


def path(name: str) -> str:
    return quote(name, safe="")


@pytest.fixture
def bystander(conn):
    """The queue ``a``: ``a/`` once resolved to it."""
    conn.execute("INSERT INTO jobqueue.queue_settings (queue) VALUES ('a')")


def _queue_settings(conn, queue: str) -> tuple | None:
    return conn.execute(
        "SELECT paused, soft_limit, hard_limit, shed_low_retries, job_ttl FROM jobqueue.queue_settings "
        "WHERE queue = %s",
        (queue,),
    ).fetchone()


@pytest.mark.parametrize("name", NAMES)
def test_every_queue_endpoint_takes_any_queue_name(http, conn, bystander, name):
    admin = http("admin")
    paused = admin.post(f"/queues/{path(name)}/pause", params={"force": "true"})  # a queue with no worker yet
    assert paused.status_code == 200, paused.text
    assert paused.json()["queue"] == name and paused.json()["paused"] is True
    assert admin.put(f"/queues/{path(name)}/limits", json={"soft_limit": 5, "hard_limit": 9}).status_code == 200
    assert admin.put(f"/queues/{path(name)}/shedding", json={"shed_low_retries": True}).status_code == 200
    assert admin.put(f"/queues/{path(name)}/defaults", json={"job_ttl_seconds": 60}).status_code == 200
    row = _queue_settings(conn, name)
    assert row is not None and row[:4] == (True, 5, 9, True) and row[4].total_seconds() == 60, row
    assert admin.post(f"/queues/{path(name)}/resume").json()["paused"] is False
    assert _queue_settings(conn, name)[0] is False
    assert _queue_settings(conn, "a") == (False, None, None, False, None)  # nobody else's queue changed


@pytest.mark.parametrize("scope", ["queue", "job_type"])
def test_limits_take_any_queue_or_job_type_name(http, conn, scope):
    admin = http("admin")
    for name in NAMES:
        set_ = admin.put(f"/limits/{scope}/{path(name)}", json={"concurrency": 3})
        assert set_.status_code == 200 and set_.json()["name"] == name, (name, set_.text)
    stored = {row[0] for row in conn.execute("SELECT name FROM jobqueue.job_limits WHERE scope = %s", (scope,))}
    assert stored == set(NAMES)
    for name in NAMES:
        assert admin.delete(f"/limits/{scope}/{path(name)}").status_code == 204, name
    assert conn.execute("SELECT count(*) FROM jobqueue.job_limits").fetchone()[0] == 0


def test_schedules_and_circuits_take_any_name(http, conn):
    admin = http("admin")
    for name in NAMES:
        conn.execute(
            "INSERT INTO jobqueue.circuits (name, threshold, window_seconds, reset_after_seconds) "
            "VALUES (%s, 5, 60, 30)",
            (name,),
        )
        opened = admin.post(f"/circuits/{path(name)}/open")
        assert opened.status_code == 200 and opened.json()["name"] == name, (name, opened.text)
        assert admin.post(f"/circuits/{path(name)}/close").json()["state"] == "closed"
        made = admin.put(f"/schedules/{path(name)}", json={"cron": "0 3 * * *", "job_type": "record"})
        assert made.status_code == 200 and made.json()["name"] == name, (name, made.text)
        assert admin.get(f"/schedules/{path(name)}").json()["name"] == name
        assert admin.post(f"/schedules/{path(name)}/pause").json()["enabled"] is False
        assert admin.post(f"/schedules/{path(name)}/resume").json()["enabled"] is True
        assert admin.post(f"/schedules/{path(name)}/run").status_code == 201
        assert admin.delete(f"/schedules/{path(name)}").status_code == 204
    assert conn.execute("SELECT count(*) FROM jobqueue.schedules").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM jobqueue.circuits WHERE forced_by_admin").fetchone()[0] == 0


def test_an_encoded_slash_does_not_change_other_routes(http):
    """Only names decode their escapes: a path with %2F elsewhere is no route, and a job id with
    one is not a job id."""
    admin = http("admin")
    assert admin.get("/admin%2Fdlq").status_code == 404
    assert admin.get("/jobs/%2F").status_code == 404
    assert admin.post("/queues/a%2Fpause").status_code in (404, 405)
