"""The test mode against a real database (`jobqueue.testing.drain`): it runs what is due through the
worker's claim and ack statements — order, retries, dead letters, scheduled jobs brought forward,
another app's jobs left alone, limits on how much it runs, a caller's open transaction — and what it
answers matches what the database then holds."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from jobqueue import AsyncClient, Backoff, CircuitOpen, Client, JobQueue, PermanentError, Retry
from jobqueue.crypto.keyring import KeyRing, new_key_line
from jobqueue.model.errors import NotConnected, ValidationError
from jobqueue.testing import DrainLimitExceeded, drain, drain_sync, perform_job_sync
from tests.support.factories import job_row, make_job, states
from tests.support.settings import settings_of

fast = Backoff(base=30, multiplier=2.0, max=60, jitter=0.0)  # retries far enough ahead to wait


def build_app(name: str = "drain-tests") -> tuple[JobQueue, list]:
    app = JobQueue(name)
    runs: list = []

    @app.task("record", backoff=fast)
    async def record(job):
        runs.append((job.job_type, job.payload.get("n"), job.attempt))
        return {"n": job.payload.get("n")}

    @app.task("fan_out")
    def fan_out(job):
        runs.append(("fan_out", job.payload["count"], job.attempt))
        with Client(job.payload["dsn"]) as client:  # a handler that enqueues more work
            for n in range(job.payload["count"]):
                client.enqueue("record", {"n": n}, priority="high")

    @app.task("flaky", max_attempts=3, backoff=fast)
    async def flaky(job):
        runs.append(("flaky", None, job.attempt))
        if job.attempt < 3:
            raise Retry(after=3600)
        return "third time"

    @app.task("refuse")
    async def refuse(job):
        raise PermanentError("bad payload")

    return app, runs


def test_drain_runs_what_is_due_in_priority_then_submission_order_and_acks_it(dsn, conn):
    app, runs = build_app()
    ids = [
        make_job(conn, job_type="record", priority=p, payload={"n": n}) for n, p in enumerate(["low", "high", "low"])
    ]
    dead = make_job(conn, job_type="refuse")
    later = make_job(conn, job_type="record", payload={"n": 9}, run_at=datetime.now(timezone.utc) + timedelta(hours=1))
    result = drain_sync(app, dsn)
    assert [r[1] for r in runs] == [1, 0, 2]  # high first, then the lows in submission order
    assert (result.completed, result.dead_letter, result.retry, len(result)) == (3, 1, 0, 4)
    assert result.results("record") == [{"n": 1}, {"n": 0}, {"n": 2}]
    assert states(conn, ids + [dead, later]) == {**{i: "completed" for i in ids}, dead: "dead_letter", later: "pending"}
    row = job_row(conn, ids[0])
    assert row["locked_by"].startswith("inline:") and row["attempts"] == 1
    assert conn.execute("SELECT result FROM jobqueue.job_results WHERE job_id = %s", (ids[0],)).fetchone()[0] == {
        "n": 0
    }
    assert "DrainResult(completed=3, dead_letter=1)" == repr(result)
    assert len(drain_sync(app, dsn)) == 0  # nothing is due any more


def test_retries_wait_unless_with_scheduled_which_runs_them_and_scheduled_jobs_in_due_order(dsn, conn):
    app, runs = build_app()
    flaky = make_job(conn, job_type="flaky", max_attempts=3)
    soon = make_job(conn, job_type="record", payload={"n": 2}, run_at=datetime.now(timezone.utc) + timedelta(days=2))
    sooner = make_job(conn, job_type="record", payload={"n": 1}, run_at=datetime.now(timezone.utc) + timedelta(days=1))
    first = drain_sync(app, dsn)
    assert (first.retry, first.completed) == (1, 0) and states(conn, [flaky])[flaky] == "failed"
    assert first.outcomes[0].retry_in == 3600
    everything = drain_sync(app, dsn, with_scheduled=True)
    assert [(o.job.job_type, o.job.attempt, o.status) for o in everything.outcomes] == [
        ("flaky", 2, "retry"),
        ("flaky", 3, "completed"),
        ("record", 1, "completed"),  # the job due in a day, then the one due in two
        ("record", 1, "completed"),
    ]
    assert [r[1] for r in runs if r[0] == "record"] == [1, 2]
    assert set(states(conn, [flaky, soon, sooner]).values()) == {"completed"}


def test_jobs_a_handler_enqueues_run_in_the_same_drain_and_the_limit_stops_an_endless_one(dsn, conn):
    app, runs = build_app()
    make_job(conn, job_type="fan_out", payload={"count": 3, "dsn": dsn})
    result = drain_sync(app, dsn)
    assert result.completed == 4 and [r[1] for r in runs[1:]] == [0, 1, 2]

    endless = JobQueue("endless")

    @endless.task("again")
    async def again(job):
        async with AsyncClient(job.payload["dsn"]) as client:
            await client.enqueue("again", job.payload)

    make_job(conn, job_type="again", payload={"dsn": dsn})
    with pytest.raises(DrainLimitExceeded, match="drain ran 5 attempts"):
        drain_sync(endless, dsn, limit=5)
    waiting = conn.execute(
        "SELECT state, attempts FROM jobqueue.jobs WHERE job_type = 'again' AND state <> 'completed'"
    ).fetchall()
    assert waiting == [("pending", 0)]  # the one it claimed past the limit went back uncounted
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="limit must be"):
            drain_sync(endless, dsn, limit=bad)


def test_a_drain_takes_only_its_apps_job_types_and_the_queues_it_is_given(dsn, conn):
    app, runs = build_app()
    other = JobQueue("other-app")

    @other.task("theirs")
    async def theirs(job):
        return "theirs"

    mine = make_job(conn, job_type="record", queue="mail", payload={"n": 1})
    elsewhere = make_job(conn, job_type="record", queue="billing", payload={"n": 2})
    foreign = make_job(conn, job_type="theirs", queue="mail")
    assert drain_sync(app, dsn, queues=["mail"]).completed == 1
    assert states(conn, [mine, elsewhere, foreign]) == {mine: "completed", elsewhere: "pending", foreign: "pending"}
    assert drain_sync(app, dsn).completed == 1  # every queue by default: billing now
    assert states(conn, [foreign])[foreign] == "pending"  # another app's job is never claimed
    assert drain_sync(other, dsn, queues="mail").results() == ["theirs"]


def test_drain_runs_inside_a_callers_transaction_and_a_rollback_undoes_it(dsn, conn):
    app, runs = build_app()

    async def main():
        async with await psycopg.AsyncConnection.connect(dsn) as tx:  # not autocommit: one open transaction
            async with AsyncClient(dsn) as client:
                job_id = await client.enqueue("record", {"n": 5}, connection=tx)
            assert states(conn, [job_id]) == {}  # uncommitted: no other connection sees it
            result = await drain(app, tx)
            row = await (await tx.execute("SELECT state FROM jobqueue.jobs WHERE id = %s", (job_id,))).fetchone()
            await tx.rollback()
            return result, row[0], job_id

    result, inside, job_id = asyncio.run(main())
    assert result.completed == 1 and inside == "completed" and runs == [("record", 5, 1)]
    assert states(conn, [job_id]) == {}  # rolled back: the job and its run are gone


def test_a_snoozed_type_is_not_claimed_again_in_the_same_drain(dsn, conn):
    app = JobQueue("snooze")
    app.circuit("api")
    calls = []

    @app.task("call_api", circuit="api")
    async def call_api(job):
        calls.append(job.id)
        raise CircuitOpen("api down")

    ids = [make_job(conn, job_type="call_api") for _ in range(3)]
    result = drain_sync(app, dsn)
    assert result.snoozed == 1 and len(calls) == 1
    assert {s for s in states(conn, ids).values()} == {"pending"}  # given back, attempt not counted
    assert [job_row(conn, i)["attempts"] for i in ids] == [0, 0, 0]


def test_encrypted_payloads_are_opened_for_the_handler_and_a_drain_without_keys_refuses_to_start(dsn, conn):
    ring = KeyRing.parse(new_key_line("k1"), "test")
    app = JobQueue("crypt-drain")
    seen = []

    @app.task("charge", encrypted=["card"])
    async def charge(job):
        seen.append(job.payload["card"])
        return "ok"

    settings = settings_of(dsn=dsn, encryption_keys=ring)
    app.connect(settings=settings)
    charge.enqueue_sync(card="4111", amount=5)  # task-style enqueue seals the declared field itself
    app.close()
    stored = conn.execute("SELECT payload FROM jobqueue.jobs").fetchone()[0]
    assert stored["card"]["kid"] == "k1" and stored["amount"] == 5
    with pytest.raises(ValueError, match="no encryption keys"):
        drain_sync(app, dsn, settings=settings_of(dsn=dsn))
    assert drain_sync(app, dsn, settings=settings).completed == 1 and seen == ["4111"]


def test_drain_finds_its_database_from_connect_or_the_environment_and_refuses_without_one(dsn, conn, monkeypatch):
    app, _ = build_app()
    make_job(conn, job_type="record", payload={"n": 1})
    with pytest.raises(NotConnected, match="drain has no database"):
        drain_sync(app)
    with pytest.raises(TypeError, match="drain's target"):
        drain_sync(app, 42)
    monkeypatch.setenv("JOBQUEUE_DSN", dsn)
    assert drain_sync(app).completed == 1
    monkeypatch.delenv("JOBQUEUE_DSN")
    make_job(conn, job_type="record", payload={"n": 2})
    app.connect(dsn)
    assert drain_sync(app).completed == 1
    make_job(conn, job_type="record", payload={"n": 3})
    with Client(dsn) as client:
        assert drain_sync(app, client).completed == 1


def test_perform_job_takes_the_tasks_defaults_and_refuses_what_enqueue_would(dsn):
    app, _ = build_app()

    @app.task("describe", queue="mail", priority="high", max_attempts=7, timeout=12)
    async def describe(job):
        return [job.queue, job.priority, job.max_attempts, job.timeout, job.payload, job.scheduled_for]

    assert perform_job_sync(app, "describe", {"when": (1, 2)}).result == ["mail", 1, 7, 12, {"when": [1, 2]}, None]
    assert perform_job_sync(app, "describe", queue="other", priority="low", timeout=3).result[:4] == [
        "other",
        3,
        7,
        3,
    ]
    assert perform_job_sync(app, "describe", priority=0).result[1] == 0  # critical, not the task's default
    with pytest.raises(ValidationError) as info:
        perform_job_sync(app, "describe", queue="")
    assert info.value.field == "queue"
    with pytest.raises(ValidationError) as info:
        perform_job_sync(app, "describe", {"at": datetime.now()})
    assert info.value.field == "payload"
    with pytest.raises(ValidationError):
        perform_job_sync(app, "describe", timeout=float("nan"))
    with pytest.raises(LookupError, match="no task 'nope'"):
        perform_job_sync(app, "nope")
    with pytest.raises(ValueError, match="attempt must be from 1 to max_attempts"):
        perform_job_sync(app, "describe", attempt=8)
    assert json.dumps(perform_job_sync(app, "describe").result)  # nothing in it that JSON cannot hold
