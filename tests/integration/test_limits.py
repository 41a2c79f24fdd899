"""Global limits in the database: what a limited claim takes (concurrency, rate, queue limits,
other types flowing), that every way out of processing gives the slot back, that a worker which
has not heard of a limit claims nothing, and the operator's commands with bad input."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from jobqueue import Client
from jobqueue.app import JobQueue
from jobqueue.config import WorkerSettings
from jobqueue.db import gateway as db
from jobqueue.model.errors import LimitNotFound, ValidationError
from jobqueue.model.limits import LimitSpec
from jobqueue.store import jobs as job_store
from jobqueue.store import limits as limit_store
from jobqueue.worker.claimer import Claimer
from jobqueue.worker.limit_watch import LimitWatch
from tests.support.factories import make_job

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)


def claims(dsn: str, rounds: list[tuple[list[str], int]], app: JobQueue | None = None) -> list[list[str]]:
    """Run limited claims (queues, free slots) one after the other; the job types each took."""

    async def main():
        pool = db.async_pool(dsn, min_size=1, max_size=2)
        await pool.open(wait=True)
        try:
            watch = LimitWatch(pool, app or JobQueue(), rounds[0][0], interval=10)
            claimer = Claimer(
                pool,
                "w",
                WorkerSettings(),
                job_store.Deadlines(),
                limits=watch,
                served=None if app is None else list(app.tasks),
            )
            await watch.refresh()
            taken = []
            for queues, free in rounds:
                taken.append(sorted(job.job_type for job in await claimer.claim(queues, free)))
            return taken
        finally:
            await pool.close()

    return asyncio.run(main())


def set_limit(conn, scope: str, name: str, **settings) -> None:
    db.run_sync(conn, limit_store.set_limit(LimitSpec.build(scope, name, **settings)))


def test_a_concurrency_limit_caps_its_type_while_the_other_types_of_the_queue_keep_flowing(dsn, conn):
    set_limit(conn, "job_type", "api", concurrency=2)
    for _ in range(5):
        make_job(conn, job_type="api", priority="high")  # in front of the others
    for _ in range(3):
        make_job(conn, job_type="local")
    first, second = claims(dsn, [(["default"], 10), (["default"], 10)])
    assert first == ["api", "api", "local", "local", "local"]
    assert second == []
    running = conn.execute(
        "SELECT count(*) FROM jobqueue.jobs WHERE state = 'processing' AND limited AND job_type = 'api'"
    ).fetchone()[0]
    assert running == 2
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE limited AND job_type = 'local'").fetchone()[0] == 0


@pytest.mark.parametrize("way_out", ["complete", "fail", "dead", "cancel", "release", "reclaim", "delete"])
def test_every_way_out_of_processing_gives_the_slot_back(dsn, conn, way_out):
    set_limit(conn, "job_type", "api", concurrency=1)
    for _ in range(2):
        make_job(conn, job_type="api", max_attempts=1 if way_out == "dead" else 3)
    assert claims(dsn, [(["default"], 5)]) == [["api"]]
    job_id, attempt = conn.execute("SELECT id, attempts FROM jobqueue.jobs WHERE state = 'processing'").fetchone()
    if way_out == "complete":
        db.run_sync(
            conn,
            job_store.complete_many(worker_id="w", ids=[job_id], attempts=[attempt], results=[None], durations=[1.0]),
        )
    elif way_out in ("fail", "dead"):
        db.run_sync(
            conn,
            job_store.fail_many(
                worker_id="w",
                ids=[job_id],
                attempts=[attempt],
                actions=["retry"],
                retry_in=[3600.0],
                error_types=["E"],
                messages=["m"],
                tracebacks=[None],
                default_limits=(50000, 100000),
            ),
        )
    elif way_out == "cancel":  # a running job's cancel is honoured by its handler: the fail path, 'cancel'
        conn.execute("UPDATE jobqueue.jobs SET cancel_requested = true WHERE id = %s", (job_id,))
        db.run_sync(
            conn,
            job_store.fail_many(
                worker_id="w",
                ids=[job_id],
                attempts=[attempt],
                actions=["cancel"],
                retry_in=[0.0],
                error_types=["E"],
                messages=["m"],
                tracebacks=[None],
                default_limits=(50000, 100000),
            ),
        )
    elif way_out == "release":
        db.run_sync(conn, job_store.release_many(worker_id="w", attempts=[(job_id, attempt)]))
    elif way_out == "reclaim":  # the worker died: its lease runs out and the sweeper puts the job back
        conn.execute("UPDATE jobqueue.jobs SET locked_until = now() - interval '1 second' WHERE id = %s", (job_id,))
        assert [r[0] for r in db.run_sync(conn, job_store.reclaim_expired())] == [job_id]
    else:
        conn.execute("DELETE FROM jobqueue.jobs WHERE id = %s", (job_id,))
    state = conn.execute("SELECT state FROM jobqueue.jobs WHERE id = %s", (job_id,)).fetchone()
    assert state is None or state[0] != "processing"
    assert claims(dsn, [(["default"], 5)]) == [["api"]]


def test_a_rate_limit_never_lets_more_than_rate_start_in_any_window(conn):
    """The sliding log, with an injected clock: 3 per 1 s, asked for 10 slots every 0.25 s."""
    set_limit(conn, "job_type", "api", rate="3/s")
    starts: list[float] = []
    for step in range(16):
        second = step * 0.25
        at = T0 + timedelta(seconds=second)
        with conn.transaction():
            [allowance] = db.run_sync(conn, limit_store.allowances(["default"], now=at))
            took = allowance.allowance
            if took:
                db.run_sync(conn, limit_store.record_starts({("job_type", "api"): took}, now=at))
        starts += [second] * took
        if took == 0:
            assert allowance.free_in is not None and 0 < allowance.free_in <= 1.0
    assert len(starts) == 12  # 3 at 0, 1, 2, 3 s: each window of 1 s holds 3
    for first in starts:
        assert sum(first <= s < first + 1.0 for s in starts) <= 3
    behind = T0 + timedelta(seconds=3.5)  # a claim whose transaction began before the last start waits
    with conn.transaction():
        [allowance] = db.run_sync(conn, limit_store.allowances(["default"], now=behind - timedelta(seconds=1)))
        assert allowance.allowance == 0


def test_a_limit_row_another_claim_holds_gives_nothing_and_does_not_wait(dsn, conn):
    set_limit(conn, "job_type", "api", concurrency=5)
    make_job(conn, job_type="api")
    make_job(conn, job_type="local")
    with psycopg.connect(dsn) as holder:
        db.run_sync(holder, limit_store.allowances(["default"]))  # its transaction stays open
        assert claims(dsn, [(["default"], 5)]) == [["local"]]
        holder.rollback()
    assert claims(dsn, [(["default"], 5)]) == [["api"]]


def test_a_queue_limit_caps_all_its_types_together_and_other_queues_flow(dsn, conn):
    set_limit(conn, "queue", "exports", concurrency=2)
    for job_type in ("a", "b", "c"):
        make_job(conn, job_type=job_type, queue="exports")
    make_job(conn, job_type="a", queue="default")
    [taken] = claims(dsn, [(["exports", "default"], 10)])
    assert len(taken) == 3
    assert (
        conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE queue = 'exports' AND state = 'processing'").fetchone()[
            0
        ]
        == 2
    )
    make_job(conn, job_type="a", queue="default")  # a worker of another queue is not held to it at all
    assert len(db.run_sync(conn, job_store.claim(worker_id="w", queues=["default"], limit=5, lease_seconds=30))) == 1


def test_a_worker_that_has_not_heard_of_a_limit_claims_nothing_once_one_exists(conn):
    make_job(conn, job_type="api")
    set_limit(conn, "job_type", "other", concurrency=1)
    assert db.run_sync(conn, job_store.claim(worker_id="w", queues=["default"], limit=5, lease_seconds=30)) == []
    assert db.run_sync(conn, job_store.claim_weighted(worker_id="w", slots=[("default", 2, 5)], lease_seconds=30)) == []
    db.run_sync(conn, limit_store.clear("job_type", "other"))
    assert len(db.run_sync(conn, job_store.claim(worker_id="w", queues=["default"], limit=5, lease_seconds=30))) == 1


def test_workers_write_the_code_limits_and_leave_an_operators_alone(dsn, conn):
    app = JobQueue()
    app.task("api", concurrency=3, rate="10/m")(lambda job: None)
    app.task("local")(lambda job: None)
    app.queue_limit("default", concurrency=7)
    watch = LimitWatch(None, app, ["default"], interval=10)
    db.run_sync(conn, watch.sync())
    with Client(dsn) as client:
        limits = {(lim.scope, lim.name): lim for lim in client.limits()}
        assert (limits[("job_type", "api")].concurrency, limits[("job_type", "api")].rate_text) == (3, "10/m")
        assert limits[("queue", "default")].set_by == "code"
        client.set_limit("job_type", "local", concurrency=1)  # an operator's
        later = JobQueue()  # the code drops its limits
        later.task("api")(lambda job: None)
        later.task("local")(lambda job: None)
        db.run_sync(conn, LimitWatch(None, later, ["default"], interval=10).sync())
        assert [(lim.scope, lim.name, lim.set_by) for lim in client.limits()] == [("job_type", "local", "admin")]


def test_another_apps_same_named_task_neither_removes_nor_redefines_a_declared_limit(dsn, conn):
    """Issue 17 §5: a worker of another app with a task named like a limited one deleted the limit
    (its code "no longer declared" it), and its own declaration redefined it. Each app's are its
    own now; an operator's change survives every app's worker start."""
    shop = JobQueue("shop")
    shop.task("send_sms", rate="100/m")(lambda job: None)
    shop.task("export", concurrency=2)(lambda job: None)
    shop.queue_limit("default", concurrency=50)
    assert db.run_sync(conn, LimitWatch(None, shop, ["default"], interval=10).sync()) == []
    conn.execute(
        "INSERT INTO jobqueue.workers (id, host, pid, queues, concurrency, app) "
        "VALUES ('shop-1', 'h', 1, '{default}', 1, 'shop')"
    )
    billing = JobQueue("billing")
    billing.task("send_sms")(lambda job: None)  # declares no limit on it
    billing.task("export", concurrency=9)(lambda job: None)  # declares another one
    overruled = db.run_sync(conn, LimitWatch(None, billing, ["default"], interval=10).sync())
    assert overruled == [("limit", "job_type export", "shop")]
    with Client(dsn) as client:
        limits = {(lim.scope, lim.name): (lim.concurrency, lim.rate_text, lim.declared_by) for lim in client.limits()}
        assert limits == {
            ("job_type", "send_sms"): (None, "100/m", "shop"),
            ("job_type", "export"): (2, None, "shop"),
            ("queue", "default"): (50, None, "shop"),
        }
        client.set_limit("job_type", "send_sms", rate="5/s")  # an operator's, kept by every start
        for app in (billing, shop):
            db.run_sync(conn, LimitWatch(None, app, ["default"], interval=10).sync())
        assert next(lim for lim in client.limits() if lim.name == "send_sms").rate_text == "5/s"
        shop_later = JobQueue("shop")  # the shop's next version drops its export limit: that is its own to drop
        shop_later.task("export")(lambda job: None)
        shop_later.queue_limit("default", concurrency=50)
        db.run_sync(conn, LimitWatch(None, shop_later, ["default"], interval=10).sync())
        assert {(lim.scope, lim.name) for lim in client.limits()} == {("job_type", "send_sms"), ("queue", "default")}


def test_a_worker_start_says_which_declarations_another_live_app_keeps(dsn, conn, caplog):
    shop = JobQueue("shop")
    shop.task("export", concurrency=2)(lambda job: None)
    db.run_sync(conn, LimitWatch(None, shop, ["default"], interval=10).sync())
    conn.execute(
        "INSERT INTO jobqueue.workers (id, host, pid, queues, concurrency, app) "
        "VALUES ('shop-1', 'h', 1, '{default}', 1, 'shop')"
    )
    billing = JobQueue("billing")
    billing.task("export", concurrency=9)(lambda job: None)

    async def main():
        async with await db.connect(dsn) as aconn:
            await LimitWatch(None, billing, ["default"], interval=10).declare(aconn, billing.name)

    with caplog.at_level("WARNING", logger="jobqueue.worker.limits"):
        asyncio.run(main())
    assert [r.getMessage() for r in caplog.records] == [
        "limit 'job_type export' is declared otherwise by app 'shop', whose workers are running: it keeps that "
        "app's settings, not those of app 'billing' (give it another name, or declare it alike)"
    ]


def test_an_operators_limit_counts_the_jobs_already_running(dsn, conn):
    running = make_job(conn, job_type="api", state="processing")
    make_job(conn, job_type="api")
    with Client(dsn) as client:
        limit = client.set_limit("job_type", "api", concurrency=1)
        assert (limit.running, limit.set_by) == (1, "admin")
    assert claims(dsn, [(["default"], 5)]) == [[]]
    conn.execute("UPDATE jobqueue.jobs SET state = 'completed', locked_until = NULL WHERE id = %s", (running,))
    assert claims(dsn, [(["default"], 5)]) == [["api"]]


@pytest.mark.parametrize(
    "settings, field",
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": -1}, "concurrency"),
        ({"concurrency": "2"}, "concurrency"),
        ({"rate": "ten per second"}, "rate"),
        ({"rate": "0/s"}, "rate"),
        ({"rate": "5/0s"}, "rate"),
        ({"rate": "100001/s"}, "rate"),
        ({}, "concurrency"),
    ],
)
def test_bad_limits_are_refused_with_the_field_and_write_nothing(dsn, conn, settings, field):
    with Client(dsn) as client:
        with pytest.raises(ValidationError) as refused:
            client.set_limit("job_type", "api", **settings)
        assert refused.value.field == field
        with pytest.raises(ValidationError):
            client.set_limit("tenant", "api", concurrency=1)
        with pytest.raises(LimitNotFound):
            client.clear_limit("job_type", "api")
    assert conn.execute("SELECT count(*) FROM jobqueue.job_limits").fetchone()[0] == 0


def test_a_limited_type_takes_its_turn_in_queue_order_and_no_more_than_the_free_slots(dsn, conn):
    """Room 1 for `api`, 3 free slots: the others are claimed first; an `api` job in front of them
    takes the last one's slot (it goes back, attempt not counted), one behind them waits."""
    set_limit(conn, "job_type", "api", concurrency=1)
    first = make_job(conn, job_type="api", priority="high")
    others = [make_job(conn, job_type="local") for _ in range(3)]
    behind = make_job(conn, job_type="api", priority="low")
    [taken] = claims(dsn, [(["default"], 3)])
    assert taken == ["api", "local", "local"]
    states = dict(conn.execute("SELECT id, state || ':' || attempts FROM jobqueue.jobs").fetchall())
    assert [states[first], states[others[2]], states[behind]] == ["processing:1", "pending:0", "pending:0"]
    conn.execute("UPDATE jobqueue.jobs SET state = 'completed', locked_until = NULL WHERE id = %s", (first,))
    [taken] = claims(dsn, [(["default"], 3)])
    assert taken == ["api", "local"]  # now the one behind: the others' claim came back short, nothing is behind it
