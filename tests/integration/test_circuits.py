"""Circuit breakers in the database: the transition statements with an injected clock, their races
among workers, the claim skipping blocked job types, and the admin commands."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from jobqueue import Client
from jobqueue.app import JobQueue
from jobqueue.db import gateway as db
from jobqueue.db.queries import queries
from jobqueue.model.errors import CircuitNotFound, ValidationError
from jobqueue.store import circuits as circuit_store
from jobqueue.store import jobs as job_store
from tests.integration.test_schema import SMALL_TABLES, seq_scanned
from tests.support import circuit_app
from tests.support.factories import claim_params, make_job

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def sync(conn, app: JobQueue = circuit_app.queue) -> None:
    db.run_sync(conn, circuit_store.sync(list(app.circuits.values()), app.circuit_by_type(), app=app.name))


def circuit(conn, name: str = "flaky-api"):
    [row] = db.run_sync(conn, circuit_store.list_all(name))
    return row


def fail(conn, seconds: float, name: str = "flaky-api") -> str | None:
    return db.run_sync(conn, circuit_store.record_failure(name, now=at(seconds)))


def test_workers_write_the_breakers_and_their_job_types_without_resetting_a_running_one(conn):
    sync(conn)
    row = circuit(conn)
    assert (row.state, row.threshold, row.window_seconds, row.reset_after_seconds) == ("closed", 3, 30.0, 1.5)
    assert row.job_types == ["call_api", "call_api_checked"]
    for second in range(3):
        fail(conn, second)
    changed = JobQueue(circuit_app.queue.name)  # the same app, its next version
    changed.circuit("flaky-api", threshold=10, window=5, reset_after=60)
    changed.task("call_api", circuit="flaky-api")(lambda job: None)
    changed.task("call_api_checked")(lambda job: None)  # moved out of the breaker
    sync(conn, changed)
    row = circuit(conn)
    assert (row.state, row.failures, row.threshold, row.reset_after_seconds) == ("open", 3, 10, 60.0)
    assert row.job_types == ["call_api"]


def _live_worker(conn, app: str, worker_id: str = "w-live") -> None:
    conn.execute(
        "INSERT INTO jobqueue.workers (id, host, pid, queues, concurrency, app, job_types) "
        "VALUES (%s, 'h', 1, '{default}', 1, %s, '{}')",
        (worker_id, app),
    )


def test_another_apps_same_named_task_neither_removes_nor_redefines_a_breaker(conn):
    """Issue 17 §5: a worker of another app with a task named like one behind this app's breaker
    took the task out of it (and redefined the breaker's settings): now each app's are its own."""
    sync(conn)
    _live_worker(conn, circuit_app.queue.name)
    neighbour = JobQueue("neighbour")
    neighbour.circuit("flaky-api", threshold=99, window=5, reset_after=60)  # same name, other settings
    neighbour.task("call_api")(lambda job: None)  # no breaker
    neighbour.task("call_api_checked", circuit="flaky-api")(lambda job: None)
    overruled = db.run_sync(
        conn, circuit_store.sync(list(neighbour.circuits.values()), neighbour.circuit_by_type(), app="neighbour")
    )
    assert overruled == [("circuit", "flaky-api", circuit_app.queue.name)]  # the worker logs it
    row = circuit(conn)
    assert (row.threshold, row.window_seconds, row.reset_after_seconds, row.declared_by) == (
        3,
        30.0,
        1.5,
        circuit_app.queue.name,
    )
    assert row.job_types == ["call_api", "call_api_checked"]
    # the neighbour's own membership is its own: it leaves it, and the shop's stays
    neighbour_later = JobQueue("neighbour")
    neighbour_later.task("call_api_checked")(lambda job: None)
    db.run_sync(conn, circuit_store.sync([], neighbour_later.circuit_by_type(), app="neighbour"))
    assert circuit(conn).job_types == ["call_api", "call_api_checked"]
    assert (
        conn.execute("SELECT count(*) FROM jobqueue.circuit_job_types WHERE declared_by = 'neighbour'").fetchone()[0]
        == 0
    )


def test_a_breaker_whose_app_has_no_live_worker_is_taken_over_by_the_next_that_declares_it(conn):
    """A renamed app, or one gone for good: its declaration does not hold another's hostage."""
    sync(conn)
    conn.execute(
        "INSERT INTO jobqueue.workers (id, host, pid, queues, concurrency, app, status) "
        "VALUES ('gone', 'h', 1, '{default}', 1, %s, 'stopped')",
        (circuit_app.queue.name,),
    )
    renamed = JobQueue("renamed")
    renamed.circuit("flaky-api", threshold=7, window=30, reset_after=1.5)
    renamed.task("call_api", circuit="flaky-api")(lambda job: None)
    assert (
        db.run_sync(conn, circuit_store.sync(list(renamed.circuits.values()), renamed.circuit_by_type(), app="renamed"))
        == []
    )
    row = circuit(conn)
    assert (row.threshold, row.declared_by) == (7, "renamed")


def test_a_job_type_in_breakers_of_two_apps_waits_while_either_is_open(conn):
    sync(conn)
    other = JobQueue("other-app")
    other.circuit("other-api", threshold=1)
    other.task("call_api", circuit="other-api")(lambda job: None)
    db.run_sync(conn, circuit_store.sync(list(other.circuits.values()), other.circuit_by_type(), app="other-app"))
    db.run_sync(conn, circuit_store.trip("other-api", now=at(0)))
    blocking = db.run_sync(conn, circuit_store.blocking(now=at(1)))
    assert [(b.name, b.job_types) for b in blocking] == [("other-api", ("call_api",))]


def test_threshold_failures_within_the_window_open_it_and_older_ones_do_not_count(conn):
    sync(conn)
    assert [fail(conn, s) for s in (0, 10, 29)] == ["closed", "closed", "open"]
    row = circuit(conn)
    assert (row.failures, row.opened_at, row.window_started_at) == (3, at(29), at(0))
    assert fail(conn, 30) is None  # open: nothing is counted
    db.run_sync(conn, circuit_store.force("flaky-api", "close"))
    assert [fail(conn, s) for s in (100, 110, 131, 140)] == ["closed", "closed", "closed", "closed"]
    row = circuit(conn)  # the window of 100 ended at 130: 131 began a new one
    assert (row.state, row.failures, row.window_started_at) == ("closed", 2, at(131))


def test_failures_from_many_workers_at_once_are_all_counted_and_open_it_once(dsn, conn):
    sync(conn)
    conn.execute("UPDATE jobqueue.circuits SET threshold = 40")
    states: list[str | None] = []
    lock = threading.Lock()

    def worker() -> None:
        with psycopg.connect(dsn, autocommit=True) as own:
            for _ in range(10):
                state = db.run_sync(own, circuit_store.record_failure("flaky-api", now=at(1)))
                with lock:
                    states.append(state)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert states.count("open") == 1  # exactly one statement opened it
    assert states.count("closed") == 39 and states.count(None) == 20  # the rest found it open
    assert circuit(conn).failures == 40


def test_a_handler_tripping_it_opens_it_at_once_and_an_open_one_keeps_its_reset_time(conn):
    sync(conn)
    assert db.run_sync(conn, circuit_store.trip("flaky-api", now=at(5))) == "open"
    assert db.run_sync(conn, circuit_store.trip("flaky-api", now=at(9))) is None
    assert circuit(conn).opened_at == at(5)


def _blocking(conn, seconds: float):
    return {row.name: row for row in db.run_sync(conn, circuit_store.blocking(now=at(seconds)))}


def _probe_claim(conn, worker_id: str, seconds: float, stale: uuid.UUID | None = None):
    """What `Breakers._try_probe` does, on a connection of its own: begin, claim one, record it."""
    with conn.transaction():
        types = db.run_sync(conn, circuit_store.probe_begin("flaky-api", stale_probe=stale, now=at(seconds)))
        if types is None:
            return None
        jobs = db.run_sync(
            conn, job_store.claim(worker_id=worker_id, queues=["default"], limit=1, lease_seconds=30, only=types)
        )
        assert jobs, "the tests give every probe a job"
        db.run_sync(conn, circuit_store.probe_claimed("flaky-api", jobs[0].id))
        return jobs[0]


def test_after_reset_after_exactly_one_worker_wins_the_probe(dsn, conn):
    sync(conn)
    jobs = [make_job(conn, job_type="call_api") for _ in range(3)]
    db.run_sync(conn, circuit_store.trip("flaky-api", now=at(0)))
    assert _blocking(conn, 1)["flaky-api"].probe_in == pytest.approx(0.5)
    assert db.run_sync(conn, circuit_store.probe_begin("flaky-api", now=at(1))) is None  # too early
    with psycopg.connect(dsn, autocommit=True) as first, psycopg.connect(dsn, autocommit=True) as second:
        first.execute("BEGIN")
        assert db.run_sync(first, circuit_store.probe_begin("flaky-api", now=at(2))) == ["call_api", "call_api_checked"]
        result: list = []
        racer = threading.Thread(target=lambda: result.append(_probe_claim(second, "B", 2)))
        racer.start()
        racer.join(0.5)
        assert racer.is_alive()  # waits for the winner's row lock
        [probe] = db.run_sync(
            first, job_store.claim(worker_id="A", queues=["default"], limit=1, lease_seconds=30, only=["call_api"])
        )
        db.run_sync(first, circuit_store.probe_claimed("flaky-api", probe.id))
        first.execute("COMMIT")
        racer.join(10)
    assert result == [None]  # the loser changed nothing and claimed nothing
    row = circuit(conn)
    assert (row.state, row.probe_job_id) == ("half_open", probe.id) and probe.id == jobs[0]
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'processing'").fetchone()[0] == 1
    assert _blocking(conn, 3)["flaky-api"].probe_in is None  # its probe runs: nobody else may start one


def test_a_probe_job_no_longer_running_lets_the_next_probe_take_over_but_only_once(dsn, conn):
    sync(conn)
    for _ in range(2):
        make_job(conn, job_type="call_api")
    db.run_sync(conn, circuit_store.trip("flaky-api", now=at(0)))
    first = _probe_claim(conn, "A", 2)
    db.run_sync(conn, job_store.release_many(worker_id="A", attempts=[first.key]))  # its worker stopped
    stale = _blocking(conn, 3)["flaky-api"]
    assert (stale.probe_in, stale.probe_job_id) == (0, first.id)
    assert _probe_claim(conn, "B", 3, stale=uuid.uuid4()) is None  # not the probe it saw: someone took over
    second = _probe_claim(conn, "B", 3, stale=first.id)
    assert second is not None and circuit(conn).probe_job_id == second.id
    assert _probe_claim(conn, "C", 3, stale=first.id) is None


@pytest.mark.parametrize(
    "outcome, state, opened_at",
    [("success", "closed", None), ("failure", "open", at(7)), ("inconclusive", "open", at(0))],
)
def test_the_probe_outcome_closes_reopens_or_lets_the_next_probe_come(conn, outcome, state, opened_at):
    sync(conn)
    make_job(conn, job_type="call_api")
    for _ in range(3):
        fail(conn, 0)
    probe = _probe_claim(conn, "A", 2)
    wrong = db.run_sync(conn, circuit_store.probe_finished("flaky-api", uuid.uuid4(), outcome, now=at(7)))
    assert wrong is None and circuit(conn).state == "half_open"  # only its probe speaks for it
    assert db.run_sync(conn, circuit_store.probe_finished("flaky-api", probe.id, outcome, now=at(7))) == state
    row = circuit(conn)
    assert (row.state, row.opened_at, row.probe_job_id) == (state, opened_at, None)
    assert row.failures == (0 if outcome == "success" else 3)
    if outcome == "inconclusive":
        assert _blocking(conn, 7)["flaky-api"].probe_in == 0


def test_the_claim_skips_blocked_types_and_the_rest_of_the_queue_keeps_flowing(conn):
    blocked = [make_job(conn, job_type="call_api") for _ in range(5)]
    other = [make_job(conn, job_type="local_work") for _ in range(3)]
    for queues in (["default"], ["default", "other"]):
        conn.execute("BEGIN")
        taken = db.run_sync(
            conn,
            job_store.claim(
                worker_id="w", queues=queues, limit=10, lease_seconds=30, blocked=["call_api", "call_api_checked"]
            ),
        )
        conn.execute("ROLLBACK")
        assert [job.id for job in taken] == other
    conn.execute("BEGIN")
    slots = [("default", 2, 10)]
    taken = db.run_sync(
        conn, job_store.claim_weighted(worker_id="w", slots=slots, lease_seconds=30, blocked=["call_api"])
    )
    conn.execute("ROLLBACK")
    assert [job.id for job in taken] == other
    only = db.run_sync(
        conn, job_store.claim(worker_id="w", queues=["default"], limit=10, lease_seconds=30, only=["call_api"])
    )
    assert [job.id for job in only] == blocked


def test_an_operator_holds_it_open_without_probes_and_closes_it(dsn, conn):
    sync(conn)
    with Client(dsn) as client:
        held = client.open_circuit("flaky-api")
        assert (held.state, held.forced_by_admin) == ("open", True)
        assert _blocking(conn, 3600)["flaky-api"].probe_in is None
        assert db.run_sync(conn, circuit_store.probe_begin("flaky-api", now=at(3600))) is None
        fail(conn, 1)
        closed = client.close_circuit("flaky-api")
        assert (closed.state, closed.forced_by_admin, closed.failures, closed.opened_at) == ("closed", False, 0, None)
        with pytest.raises(CircuitNotFound):
            client.open_circuit("nobody-declared-this")
        with pytest.raises(ValidationError) as invalid:
            client.close_circuit(" ")
        assert invalid.value.field == "name"
        assert [c.name for c in client.circuits()] == ["flaky-api"]
    assert conn.execute("SELECT count(*) FROM jobqueue.circuits").fetchone()[0] == 1  # nothing was written


def test_every_change_of_state_notifies_the_workers(dsn, conn):
    sync(conn)
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN jobqueue_circuits")
        fail(conn, 0)  # counted, still closed: no notification
        assert list(listener.notifies(timeout=0.3)) == []
        db.run_sync(conn, circuit_store.trip("flaky-api", now=at(1)))
        db.run_sync(conn, circuit_store.force("flaky-api", "close"))
        got = [n.payload for n in listener.notifies(timeout=1, stop_after=2)]
    assert got == ["flaky-api", "flaky-api"]


# --- a worker with breakers -------------------------------------------------------------------


def _states(conn, job_type: str) -> dict[str, int]:
    return dict(
        conn.execute(
            "SELECT state, count(*) FROM jobqueue.jobs WHERE job_type = %s GROUP BY state", (job_type,)
        ).fetchall()
    )


def _enqueue(client: Client, job_type: str, n: int, down) -> list[uuid.UUID]:
    return client.enqueue_many([{"job_type": job_type, "payload": {"down": str(down)}} for _ in range(n)])


def test_a_worker_stops_claiming_a_failing_dependency_keeps_other_work_flowing_and_a_probe_closes_it(
    dsn, conn, tmp_path
):
    from tests.support.waiting import wait_until
    from tests.support.workers import WorkerThread, test_settings

    down = tmp_path / "down"
    down.touch()
    with Client(dsn) as client, WorkerThread(circuit_app.queue, test_settings(dsn, concurrency=1)):
        failing = _enqueue(client, "call_api", 10, down)

        def untouched_once_open() -> tuple[int] | None:
            # read together with the state, before a probe after the 1.5 s reset can start one more
            state, untouched = conn.execute(
                "SELECT (SELECT state FROM jobqueue.circuits WHERE name = 'flaky-api'), "
                "count(*) FILTER (WHERE attempts = 0) FROM jobqueue.jobs WHERE id = ANY(%s)",
                (failing,),
            ).fetchone()
            return (untouched,) if state == "open" else None

        (untouched,) = wait_until(untouched_once_open, timeout=20, message="the breaker open")
        # A few may have started while the failures that opened it were being written (acks are
        # batched); once it is open nothing more starts until the probe after the 1.5 s reset: the
        # worker claims again only after the report that opened it, and its re-read, are done.
        assert untouched >= 3
        time.sleep(0.5)
        still = untouched_once_open()
        assert still is not None and still[0] == untouched
        local = _enqueue(client, "local_work", 5, down)
        wait_until(lambda: _states(conn, "local_work") == {"completed": 5}, timeout=20)
        down.unlink()  # the dependency is back: the next probe succeeds and closes the breaker
        wait_until(lambda: _states(conn, "call_api") == {"completed": 10}, timeout=30)
    assert circuit(conn).state == "closed"
    assert (
        conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE id = ANY(%s) AND attempts = 1", (local,)).fetchone()[0]
        == 5
    )


def test_circuit_open_from_a_handler_opens_it_for_everyone_and_gives_the_attempt_back(dsn, conn, tmp_path):
    from tests.support.waiting import wait_until
    from tests.support.workers import WorkerThread, test_settings

    down = tmp_path / "down"
    down.touch()
    with Client(dsn) as client, WorkerThread(circuit_app.queue, test_settings(dsn, concurrency=1)):
        [job_id] = _enqueue(client, "call_api_checked", 1, down)
        wait_until(lambda: circuit(conn).state == "open", timeout=20)
        wait_until(lambda: _states(conn, "call_api_checked") == {"pending": 1}, timeout=10)
        row = conn.execute("SELECT attempts, locked_by FROM jobqueue.jobs WHERE id = %s", (job_id,)).fetchone()
        assert row == (0, None)  # no attempt used (max_attempts is 2: probes must not exhaust it either)
        assert conn.execute("SELECT count(*) FROM jobqueue.job_errors").fetchone()[0] == 0
        down.unlink()
        wait_until(lambda: _states(conn, "call_api_checked") == {"completed": 1}, timeout=20)
        [[failed]] = conn.execute("SELECT jobqueue.enqueue('open_without_breaker')").fetchall()
        wait_until(lambda: _states(conn, "open_without_breaker") == {"dead_letter": 1}, timeout=20)
    assert circuit(conn).state == "closed"
    error = conn.execute("SELECT message FROM jobqueue.job_errors WHERE job_id = %s", (failed,)).fetchone()[0]
    assert "has no circuit breaker" in error


def test_with_blocked_types_the_claims_still_probe_the_claim_index(dsn):
    """The blocked types are a filter on what the index scan hands on: the plans stay the same."""
    with psycopg.connect(dsn) as conn:
        conn.execute("""INSERT INTO jobqueue.jobs (job_type, priority, state, finished_at)
                        SELECT CASE WHEN g % 3 = 0 THEN 'call_api' ELSE 'x' END, (g % 4),
                               CASE WHEN g % 10 = 0 THEN 'pending' ELSE 'completed' END, now()
                        FROM generate_series(1, 20000) g""")
        conn.execute("ANALYZE jobqueue.jobs")
        params = claim_params(limit=100, blocked=["call_api", "call_api_checked"])
        plans = [
            conn.execute("EXPLAIN (FORMAT JSON) " + queries()[name], dict(params, **extra)).fetchone()[0]
            for name, extra in (
                ("job_claim", {"queues": ["default"]}),
                ("job_claim", {"queues": ["default", "other"]}),
                ("job_claim_weighted", {"queues": ["default"], "priorities": [2], "quotas": [10]}),
            )
        ]
        conn.rollback()
    for plan in plans:
        assert "jobs_claim_idx" in str(plan) and seq_scanned(plan) <= SMALL_TABLES


# --- one worker's Breakers against the database, with an injected clock --------------------------


def _run_breakers(dsn: str, body):
    """Run ``body(breakers, claimer)`` with a Breakers and a Claimer on a pool of their own."""
    import asyncio

    from jobqueue.config import WorkerSettings
    from jobqueue.runtime.clock import ManualClock
    from jobqueue.worker.breakers import Breakers
    from jobqueue.worker.claimer import Claimer

    async def main():
        pool = db.async_pool(dsn, min_size=1, max_size=2)
        await pool.open(wait=True)
        try:
            clock = ManualClock(T0)
            breakers = Breakers(pool, circuit_app.queue, interval=10, retry_probe_after=0, clock=clock)
            claimer = Claimer(pool, "w", WorkerSettings(), job_store.Deadlines(), served=list(circuit_app.queue.tasks))
            return await body(breakers, claimer, clock)
        finally:
            await pool.close()

    return asyncio.run(main())


def test_a_probe_without_a_job_to_run_leaves_the_breaker_open_and_one_with_a_job_makes_it_half_open(dsn, conn):
    sync(conn)
    db.run_sync(conn, circuit_store.trip("flaky-api", now=at(0)))

    async def body(breakers, claimer, clock):
        clock.set(at(1))
        await breakers.refresh()
        assert breakers.blocked == ["call_api", "call_api_checked"] and breakers.next_probe_in() > 0
        assert await breakers.probe(["default"], 4, claimer.claim_probe) == []  # not due yet
        clock.set(at(2))
        await breakers.refresh()
        assert breakers.next_probe_in() == 0
        assert await breakers.probe(["default"], 4, claimer.claim_probe) == []
        assert circuit(conn).state == "open"  # rolled back: nothing to probe with
        job_id = make_job(conn, job_type="call_api_checked")
        waiting = make_job(conn, job_type="call_api")
        local = make_job(conn, job_type="local_work")
        [probe] = await breakers.probe(["default"], 4, claimer.claim_probe)  # one job only, however many slots
        assert (probe.id, circuit(conn).state, circuit(conn).probe_job_id) == (job_id, "half_open", job_id)
        await breakers.refresh()
        assert breakers.next_probe_in() is None  # its probe runs
        assert [job.id for job in await claimer.claim(["default"], 10, breakers.blocked)] == [local]
        return waiting

    waiting = _run_breakers(dsn, body)
    assert conn.execute("SELECT state FROM jobqueue.jobs WHERE id = %s", (waiting,)).fetchone()[0] == "pending"


def test_a_breaker_table_the_worker_cannot_read_or_write_keeps_its_last_view_and_the_ack_goes_on(dsn, conn, caplog):
    from jobqueue.worker.executor import RETRY, Outcome

    sync(conn)
    db.run_sync(conn, circuit_store.trip("flaky-api", now=at(0)))
    job_id = make_job(conn, job_type="call_api")
    [job] = db.run_sync(
        conn, job_store.claim(worker_id="w", queues=["default"], limit=1, lease_seconds=30, only=["call_api"])
    )

    async def body(breakers, claimer, clock):
        await breakers.refresh()
        conn.execute("REVOKE ALL ON jobqueue.circuits FROM PUBLIC")
        conn.execute("ALTER TABLE jobqueue.circuits RENAME TO circuits_elsewhere")
        await breakers.refresh()
        assert breakers.blocked == ["call_api", "call_api_checked"]  # the last known view
        outcome = Outcome(job=job, kind=RETRY, duration_ms=1.0, counts_failure=True)
        await breakers.report(job, circuit_app.queue.tasks["call_api"], outcome)  # does not raise
        assert breakers.reporting == set()

    _run_breakers(dsn, body)
    assert job.id == job_id
    assert "reading the circuit breakers failed" in caplog.text
    assert "could not record job" in caplog.text
