"""/schedules (admin) and /workers over real HTTP: the same rows and checks as Python, CLI and SQL."""

from __future__ import annotations

from tests.support import apps
from tests.support.maintenance import insert_schedule
from tests.support.workers import WorkerThread, test_settings

NIGHTLY = {
    "name": "nightly",
    "cron": "30 2 * * *",
    "job_type": "report",
    "timezone": "Europe/Berlin",
    "payload": {"kind": "daily"},
    "priority": "high",
    "misfire_policy": "fire_all",
    "misfire_limit": 5,
}


def test_schedules_need_an_admin_key(http):
    assert http("alice").get("/schedules").status_code == 403
    assert http("alice").post("/schedules", json=NIGHTLY).status_code == 403
    assert http(None).get("/schedules").status_code == 401


def test_create_read_list_pause_resume_run_delete(http, conn):
    admin = http("admin")
    created = admin.post("/schedules", json=NIGHTLY)
    assert created.status_code == 201, created.text
    body = created.json()
    assert {k: body[k] for k in NIGHTLY} == NIGHTLY
    assert body["enabled"] is True and body["source"] == "api" and body["next_fire_at"]
    assert admin.post("/schedules", json=NIGHTLY).status_code == 409

    assert admin.get("/schedules/nightly").json() == body
    insert_schedule(conn, "from-sql", "0 * * * *")  # plain SQL rows are the same rows
    assert [s["name"] for s in admin.get("/schedules").json()["schedules"]] == ["from-sql", "nightly"]

    assert admin.post("/schedules/nightly/pause").json()["enabled"] is False
    resumed = admin.post("/schedules/nightly/resume").json()
    assert resumed["enabled"] is True and resumed["next_fire_at"] is None  # the scheduler replans from now

    ran = admin.post("/schedules/nightly/run")
    assert ran.status_code == 201
    job = admin.get(f"/jobs/{ran.json()['job_id']}").json()
    assert (job["job_type"], job["payload"], job["priority"]) == ("report", {"kind": "daily"}, "high")

    assert admin.delete("/schedules/nightly").status_code == 204
    for method, path in (
        ("GET", "/schedules/nightly"),
        ("DELETE", "/schedules/nightly"),
        ("POST", "/schedules/nightly/pause"),
        ("POST", "/schedules/nightly/run"),
    ):
        response = admin.request(method, path)
        assert response.status_code == 404
        assert response.json() == {"error": "not_found", "message": "no schedule named 'nightly'"}


def test_put_creates_or_redefines_keeping_a_pause(http):
    admin = http("admin")
    definition = {"cron": "*/5 * * * *", "job_type": "sync"}
    assert admin.put("/schedules/sync", json=definition).json()["cron"] == "*/5 * * * *"
    admin.post("/schedules/sync/pause")
    redefined = admin.put("/schedules/sync", json={**definition, "cron": "*/10 * * * *", "payload": {"v": 2}}).json()
    assert (redefined["cron"], redefined["payload"], redefined["enabled"]) == ("*/10 * * * *", {"v": 2}, False)


def test_invalid_schedules_are_422_naming_the_field(http, conn):
    admin = http("admin")
    for change, field in (
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * *"}, "cron"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"priority": "urgent"}, "priority"),
        ({"misfire_policy": "later"}, "misfire_policy"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"job_type": ""}, "job_type"),
        ({"colour": "blue"}, "colour"),
    ):
        response = admin.post("/schedules", json={**NIGHTLY, **change})
        assert response.status_code == 422, (change, response.text)
        assert response.json()["field"] == field, (change, response.json())
    assert admin.put("/schedules/x", json={"cron": "bogus", "job_type": "t"}).json()["field"] == "cron"
    assert conn.execute("SELECT count(*) FROM jobqueue.schedules").fetchone()[0] == 0


def test_workers_lists_the_registry(http, dsn):
    with WorkerThread(apps.queue, test_settings(dsn, queues=("default", "mail"), run_maintenance=False)) as worker:
        workers = http("admin").get("/workers").json()["workers"]
    assert [w["id"] for w in workers] == [worker.worker.worker_id]
    assert workers[0]["status"] == "running" and workers[0]["queues"] == ["default", "mail"]
    assert set(workers[0]) >= {"host", "pid", "concurrency", "jobs_processed", "last_heartbeat", "started_at"}
    assert workers[0]["job_types"] == sorted(apps.queue.tasks)  # what it can run, so a shared queue's gaps show
    assert "record" in workers[0]["job_types"]
