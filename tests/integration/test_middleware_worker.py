"""Middleware in a real worker: it runs around every attempt, sync handlers too, and one that raises
costs the attempt (a retry, recorded with the middleware named) — never the job."""

from __future__ import annotations

import threading

from jobqueue import Backoff, Client, JobQueue
from tests.support.factories import states
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings

fast = Backoff(base=0.05, multiplier=2.0, max=0.1, jitter=0.0)


def build_app():
    app = JobQueue("mw-worker")
    seen: list[tuple] = []
    lock = threading.Lock()

    @app.middleware
    async def telemetry(job):
        outcome = yield
        with lock:
            seen.append((job.job_type, job.attempt, outcome.status, outcome.error_type))

    @app.middleware
    def flaky_exporter(job):
        yield
        if job.payload.get("exporter_fails_on") == job.attempt:
            raise ConnectionError("exporter unreachable")

    @app.task("async_ok", backoff=fast)
    async def async_ok(job):
        return {"attempt": job.attempt}

    @app.task("sync_ok", backoff=fast)
    def sync_ok(job):
        return {"thread": threading.current_thread().name.startswith("jobqueue-handler")}

    return app, seen


def test_middleware_runs_in_the_worker_and_a_failing_one_costs_a_retry_not_the_job(dsn, conn):
    app, seen = build_app()
    with Client(dsn) as client, WorkerThread(app, test_settings(dsn)):
        plain = client.enqueue("sync_ok", {})
        hit = client.enqueue("async_ok", {"exporter_fails_on": 1})
        wait_until(lambda: set(states(conn, [plain, hit]).values()) == {"completed"}, timeout=15)
        assert client.get(hit).result == {"attempt": 2}  # the handler ran again: at-least-once
        assert client.get(plain).result == {"thread": True}
        errors = client.get(hit).errors
    assert [(e.attempt, e.error_type) for e in errors] == [(1, "ConnectionError")]
    assert errors[0].message.startswith("in middleware") and "flaky_exporter" in errors[0].message
    assert "exporter unreachable" in errors[0].message
    assert sorted(seen) == [
        ("async_ok", 1, "retry", "ConnectionError"),  # the outer middleware saw the inner one's failure
        ("async_ok", 2, "completed", None),
        ("sync_ok", 1, "completed", None),
    ]


def test_a_middleware_failing_on_every_attempt_dead_letters_the_job_with_its_history(dsn, conn):
    app, _ = build_app()
    never = JobQueue("mw-always")

    @never.middleware
    def broken(job):
        raise RuntimeError("misconfigured")
        yield  # pragma: no cover

    never.task("async_ok", backoff=fast, max_attempts=2)(app.tasks["async_ok"].handler)
    with Client(dsn) as client, WorkerThread(never, test_settings(dsn)):
        job_id = client.enqueue("async_ok", {})
        wait_until(lambda: states(conn, [job_id])[job_id] == "dead_letter", timeout=15)
        info = client.get(job_id)
    assert info.dead_reason == "attempts_exhausted" and [e.attempt for e in info.errors] == [1, 2]
