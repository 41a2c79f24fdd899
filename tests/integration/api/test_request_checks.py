"""Malformed requests get one clear answer everywhere, and producers do not read operators' data:
repeated or empty query parameters, ids that are not UUIDs, bodies built to be deep, tracebacks."""

from __future__ import annotations

import json


def test_a_query_parameter_given_twice_is_refused_not_silently_the_last(http):
    for path in ("/jobs?queue=a&queue=b", "/jobs?limit=5&limit=500", "/events?queue=a&queue=b"):
        response = http("alice").get(path)
        assert response.status_code == 422, (path, response.text)
        assert response.json()["field"] in ("queue", "limit")
        assert "more than once" in response.json()["message"]


def test_an_empty_query_parameter_is_refused_the_same_way_on_every_endpoint(http):
    for path in ("/jobs?queue=", "/events?queue=", "/admin/dlq?job_type="):
        response = http("admin").get(path)
        assert response.status_code == 422, (path, response.text)
        assert response.json() == {
            "error": "invalid",
            "field": path.rsplit("?", 1)[1].rstrip("="),
            "message": "must be a non-empty string when given",
        }


def test_a_path_id_that_is_not_a_uuid_says_so(http):
    for path in ("/jobs/not-a-uuid", "/jobs/42/result", "/admin/jobs/x/retry"):
        response = http("admin").get(path) if "retry" not in path else http("admin").post(path)
        assert response.status_code == 404, (path, response.text)
        assert "is not a job id: job ids are UUIDs" in response.json()["message"]
    unknown = http("alice").get("/no/such/endpoint")
    assert unknown.status_code == 404 and "no endpoint at /no/such/endpoint" in unknown.json()["message"]


def test_bodies_nested_beyond_the_cap_are_refused_and_write_nothing(http, conn):
    deep = "[" * 1000 + "]" * 1000  # past the decoder's recursion: was a 500
    response = http("alice").post(
        "/jobs", content='{"job_type": "x", "payload": ' + deep + "}", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422 and response.json()["error"] == "invalid", response.text
    nested: object = {}
    for _ in range(150):  # decodes, but deeper than a payload may be
        nested = {"a": nested}
    response = http("alice").post("/jobs", json={"job_type": "x", "payload": nested})
    assert response.status_code == 422 and response.json()["field"] == "payload", response.text
    batch = http("alice").post("/jobs/batch", json={"jobs": [{"job_type": "x"}, {"job_type": "x", "payload": nested}]})
    assert batch.status_code == 422 and batch.json()["field"] == "jobs[1].payload", batch.text
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 0
    shallow = json.loads("[" * 99 + "]" * 99)
    assert http("alice").post("/jobs", json={"job_type": "x", "payload": shallow}).status_code == 201


def test_producers_see_error_types_and_messages_admins_see_tracebacks(http, conn):
    job_id = http("alice").post("/jobs", json={"job_type": "x"}).json()["id"]
    conn.execute("UPDATE jobqueue.jobs SET state = 'failed', attempts = 1 WHERE id = %s", (job_id,))
    conn.execute(
        "INSERT INTO jobqueue.job_errors (job_id, attempt, error_type, message, traceback) "
        "VALUES (%s, 1, 'KeyError', 'card', 'Traceback (most recent call last):\n  File \"/srv/app.py\"')",
        (job_id,),
    )
    as_producer = http("alice").get(f"/jobs/{job_id}").json()
    assert as_producer["last_error"]["error_type"] == "KeyError" and as_producer["last_error"]["message"] == "card"
    assert as_producer["last_error"]["traceback"] is None
    assert all(error["traceback"] is None for error in as_producer["errors"])
    as_admin = http("admin").get(f"/jobs/{job_id}").json()
    assert as_admin["last_error"]["traceback"].startswith("Traceback")
