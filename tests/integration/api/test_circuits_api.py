"""/circuits: every breaker's state for any key; an admin holds one open or closes it, and the
workers obey within milliseconds; /metrics shows the state."""

from __future__ import annotations

import time

from jobqueue.db import gateway as db
from jobqueue.store import circuits as circuit_store
from tests.support import circuit_app
from tests.support.factories import job_row, make_job
from tests.support.prometheus import parse, value
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings


def test_an_admin_holds_a_breaker_open_over_rest_and_workers_obey_until_it_is_closed(http, conn, dsn):
    admin = http("admin")
    with WorkerThread(circuit_app.queue, test_settings(dsn, poll_interval=30)):  # the worker declares it
        listed = admin.get("/circuits").json()["circuits"]
        assert [(c["name"], c["state"], c["job_types"]) for c in listed] == [
            ("flaky-api", "closed", ["call_api", "call_api_checked"])
        ]
        assert http("alice").post("/circuits/flaky-api/open").status_code == 403
        held = admin.post("/circuits/flaky-api/open")
        assert held.status_code == 200
        assert (held.json()["state"], held.json()["forced_by_admin"]) == ("open", True)
        time.sleep(0.3)  # the worker hears jobqueue_circuits; nothing else to wait for
        blocked = make_job(conn, job_type="call_api", payload={"down": ""})
        free = make_job(conn, job_type="local_work")
        conn.execute("NOTIFY jobqueue_jobs, 'default'")
        wait_until(lambda: job_row(conn, free)["state"] == "completed", message="other work flows")
        time.sleep(2)  # past reset_after (1.5 s): an operator's hold gets no probe
        assert (job_row(conn, blocked)["state"], job_row(conn, blocked)["attempts"]) == ("pending", 0)
        metrics = parse(http("admin").get("/metrics").text)
        assert value(metrics, "jobqueue_circuit_state", circuit="flaky-api") == 2
        started = time.monotonic()
        closed = admin.post("/circuits/flaky-api/close").json()
        assert (closed["state"], closed["forced_by_admin"], closed["failures"]) == ("closed", False, 0)
        wait_until(lambda: job_row(conn, blocked)["state"] == "completed", message="closed: claimed again")
        assert time.monotonic() - started < 5  # woken by NOTIFY, not the 30 s poll


def test_an_unknown_breaker_is_a_404_and_nothing_is_written(http, conn):
    for action in ("open", "close"):
        response = http("admin").post(f"/circuits/nobody/{action}")
        assert response.status_code == 404 and response.json()["error"] == "not_found"
        assert "nobody" in response.json()["message"]
    assert conn.execute("SELECT count(*) FROM jobqueue.circuits").fetchone()[0] == 0


def test_metrics_show_each_breakers_state_and_failures(http, conn):
    app = circuit_app.queue
    db.run_sync(conn, circuit_store.sync(list(app.circuits.values()), app.circuit_by_type(), app=app.name))
    db.run_sync(conn, circuit_store.record_failure("flaky-api"))
    samples = parse(http("admin").get("/metrics").text)
    assert value(samples, "jobqueue_circuit_state", circuit="flaky-api") == 0
    assert value(samples, "jobqueue_circuit_failures", circuit="flaky-api") == 1
    overview = http("admin").get("/dashboard/overview").json()
    assert [(c["name"], c["state"], c["failures"]) for c in overview["circuits"]] == [("flaky-api", "closed", 1)]
