"""/limits: every limit for any key; an admin sets or clears one, a running worker obeys within
milliseconds; bad input is a 422 naming the field and writes nothing; /metrics shows running vs limit."""

from __future__ import annotations

from jobqueue.app import JobQueue
from tests.support.factories import job_row, make_job
from tests.support.prometheus import parse, value
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings


def test_an_admin_sets_and_clears_a_limit_over_rest_and_a_running_worker_obeys(http, conn, dsn):
    app = JobQueue()
    app.task("api")(lambda job: None)
    admin = http("admin")
    assert http("alice").put("/limits/job_type/api", json={"concurrency": 1}).status_code == 403
    with WorkerThread(app, test_settings(dsn, poll_interval=30)):
        set_ = admin.put("/limits/job_type/api", json={"concurrency": 1, "rate": "2/s"})
        assert set_.status_code == 200, set_.text
        assert {k: set_.json()[k] for k in ("scope", "name", "concurrency", "rate", "period_seconds", "set_by")} == {
            "scope": "job_type",
            "name": "api",
            "concurrency": 1,
            "rate": 2,
            "period_seconds": 1.0,
            "set_by": "admin",
        }
        held = make_job(conn, job_type="api", state="processing")  # one already running: the slot is taken
        conn.execute("UPDATE jobqueue.jobs SET limited = true WHERE id = %s", (held,))
        waiting = make_job(conn, job_type="api")
        conn.execute("NOTIFY jobqueue_jobs, 'default'")
        listed = admin.get("/limits").json()["limits"]
        assert [(lim["name"], lim["running"]) for lim in listed] == [("api", 1)]
        samples = parse(admin.get("/metrics").text)
        assert value(samples, "jobqueue_limit_running", scope="job_type", limit="api") == 1
        assert value(samples, "jobqueue_limit_concurrency", scope="job_type", limit="api") == 1
        assert value(samples, "jobqueue_limit_rate", scope="job_type", limit="api") == 2
        assert job_row(conn, waiting)["state"] == "pending"
        assert admin.delete("/limits/job_type/api").status_code == 204
        wait_until(lambda: job_row(conn, waiting)["state"] == "completed", message="cleared: claimed at once")
    assert admin.delete("/limits/job_type/api").status_code == 404


def test_bad_limits_are_a_422_naming_the_field_and_write_nothing(http, conn):
    admin = http("admin")
    for path, body, field in (
        ("/limits/job_type/api", {"concurrency": 0}, "concurrency"),
        ("/limits/job_type/api", {"concurrency": -2}, "concurrency"),
        ("/limits/job_type/api", {"rate": "lots"}, "rate"),
        ("/limits/job_type/api", {}, "concurrency"),
        ("/limits/tenant/api", {"concurrency": 1}, "scope"),
    ):
        response = admin.put(path, json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.json().get("field") == field, response.json()
    assert admin.put("/limits/job_type/api", json={"concurrency": 1, "burst": 3}).status_code in (400, 422)
    assert conn.execute("SELECT count(*) FROM jobqueue.job_limits").fetchone()[0] == 0
