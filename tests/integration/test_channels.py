"""Channels are public: any login that may connect may NOTIFY any channel with any payload, as
often as it likes. Each test here is an attack by such a login (``stranger_dsn``: no jobqueue role
at all) on a worker, and checks that the worker acts only on what the database says, and that a
flood costs it next to nothing (docs/security.md, "Channels")."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest

from jobqueue.maintenance.elector import Elector
from jobqueue.maintenance.scheduler import Scheduler
from jobqueue.store import jobs as job_store
from jobqueue.worker.claimer import Claimer
from jobqueue.worker.paused import PausedQueues
from jobqueue.worker.shared_state import SharedStateCopy
from tests.support import apps
from tests.support.factories import job_row
from tests.support.forgery import Flooding, notify
from tests.support.roles import login_as, stranger_dsn  # noqa: F401 (fixtures)
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings

#: What docs/security.md promises a flood may cost a worker at most, per second of it (plus a few
#: for the interval-driven reads and the trailing call of each gap).
WAKES_PER_QUEUE_PER_SECOND = 50  # WAKE_GAP, 20 ms
CONTROL_READS_PER_SECOND = 4  # CONTROL_GAP, 250 ms
CONTROL_BURST = 4  # reads at once before the gap applies
CANCEL_CHECKS_PER_SECOND = 20  # CANCEL_GAP, 50 ms
MAINTENANCE_WAKES_PER_SECOND = 2  # MAINTENANCE_HINT_GAP, 500 ms
MAINTENANCE_BURST = 4
FLOOD_SECONDS = 1.0


@pytest.fixture(autouse=True)
def _clear_runs():
    apps.runs.clear()
    yield
    apps.runs.clear()


def _running(conn, job_id) -> bool:
    row = job_row(conn, job_id)
    return row["state"] == "processing" and any(run_id == job_id for run_id, *_ in apps.runs)


def test_a_forged_cancel_notify_does_not_stop_someone_elses_running_job(dsn, conn, stranger_dsn):  # noqa: F811
    """Before, the worker set the handler's cancel flag from the notification itself: a
    cooperative handler stopped and the job ended cancelled while its row said
    cancel_requested = false."""
    with WorkerThread(apps.queue, test_settings(dsn, lease_seconds=30.0)):
        job_id = conn.execute(
            "SELECT jobqueue.enqueue('slow', '{\"seconds\": 1.0}', producer_id => 'victim')"
        ).fetchone()[0]
        wait_until(lambda: _running(conn, job_id), message="the job running")
        notify(stranger_dsn, "jobqueue_cancel", str(job_id), times=5)
        wait_until(lambda: job_row(conn, job_id)["state"] in ("completed", "cancelled"), timeout=10)
    row = job_row(conn, job_id)
    assert (row["state"], row["cancel_requested"]) == ("completed", False)


def test_a_real_cancel_reaches_the_handler_at_once_even_in_a_flood_of_forged_ones(
    dsn,
    conn,
    stranger_dsn,  # noqa: F811
    monkeypatch,
):
    """The NOTIFY is checked against the row, not dropped: a real cancel still stops the handler
    within milliseconds (measured: ~25 ms before and after, the handler polling every 20 ms), long
    before the heartbeat (every 10 s here) would deliver it — and a flood of forged ones naming the
    same job costs at most one lookup per CANCEL_GAP."""
    checks: list[int] = []
    counted = job_store.cancel_requested_among

    def counting(job_ids):
        checks.append(len(job_ids))
        return counted(job_ids)

    monkeypatch.setattr(job_store, "cancel_requested_among", counting)
    with WorkerThread(apps.queue, test_settings(dsn, lease_seconds=30.0)):
        job_id = conn.execute("SELECT jobqueue.enqueue('slow', '{\"seconds\": 30}')").fetchone()[0]
        wait_until(lambda: _running(conn, job_id), message="the job running")
        with Flooding(
            stranger_dsn,
            [("jobqueue_cancel", str(job_id)), ("jobqueue_cancel", str(uuid.uuid4()))],
            seconds=FLOOD_SECONDS,
        ) as attack:
            time.sleep(FLOOD_SECONDS / 2)
            assert job_row(conn, job_id)["state"] == "processing"  # the forged ones changed nothing
            started = time.monotonic()
            assert conn.execute("SELECT jobqueue.cancel(%s)", (job_id,)).fetchone()[0] == "cancel_requested"
            wait_until(lambda: job_row(conn, job_id)["state"] == "cancelled", timeout=5, interval=0.005)
            took = time.monotonic() - started
    assert attack.sent > 200
    assert took < 1.0, f"the cancel took {took:.3f} s to reach the handler"
    assert len(checks) <= CANCEL_CHECKS_PER_SECOND * FLOOD_SECONDS + 3, checks


def test_a_flood_of_forged_wakeups_makes_few_claims(dsn, conn, stranger_dsn, monkeypatch):  # noqa: F811
    """~1,900 NOTIFY jobqueue_jobs a second from one connection used to make an idle worker claim
    (and look up its next run_at) after every one of them: ~0.6 of a core for it and its
    backends. Coalesced per queue, a flood makes at most one claim per WAKE_GAP; a job enqueued
    in the middle of it is still picked up."""
    claims: list[float] = []
    claim = Claimer.claim

    async def counting(self, *args, **kwargs):
        claims.append(time.monotonic())
        return await claim(self, *args, **kwargs)

    monkeypatch.setattr(Claimer, "claim", counting)
    with WorkerThread(apps.queue, test_settings(dsn, poll_interval=5.0, queues=("default", "other"))):
        time.sleep(0.2)
        claims.clear()
        with Flooding(
            stranger_dsn,
            [("jobqueue_jobs", "default"), ("jobqueue_jobs", "other"), ("jobqueue_jobs", "not-mine")],
            seconds=FLOOD_SECONDS,
        ) as attack:
            time.sleep(FLOOD_SECONDS / 2)
            job_id = conn.execute("SELECT jobqueue.enqueue('record')").fetchone()[0]
        wait_until(lambda: job_row(conn, job_id)["state"] == "completed", timeout=5)
        made = len(claims)
    assert attack.sent > 200  # a flood even on a loaded machine (~5,000 a second on a quiet one)
    assert made <= 2 * WAKES_PER_QUEUE_PER_SECOND * FLOOD_SECONDS + 5, f"{made} claims for {attack.sent} NOTIFYs"


def test_a_flood_on_the_control_channels_makes_few_reads(dsn, conn, stranger_dsn, monkeypatch):  # noqa: F811
    """jobqueue_control used to start one read of the paused queues per notification (as many at
        once as arrived), jobqueue_circuits and jobqueue_limits a read back to back for as long as
        the flood lasted. Each is read CONTROL_BURST times at once and then at most once per CONTROL_GAP
    now, and a real pause during
        the flood still reaches the worker."""
    reads: dict[str, int] = {"paused": 0, "shared": 0}
    refresh_paused, refresh_shared = PausedQueues.refresh, SharedStateCopy.refresh

    async def paused(self):
        reads["paused"] += 1
        await refresh_paused(self)

    async def shared(self):
        reads["shared"] += 1
        await refresh_shared(self)

    monkeypatch.setattr(PausedQueues, "refresh", paused)
    monkeypatch.setattr(SharedStateCopy, "refresh", shared)
    worker = WorkerThread(apps.queue, test_settings(dsn, poll_interval=5.0))
    with worker:
        time.sleep(0.2)
        reads.update(paused=0, shared=0)
        with Flooding(
            stranger_dsn,
            [("jobqueue_control", "x"), ("jobqueue_circuits", "y"), ("jobqueue_limits", "z")],
            seconds=FLOOD_SECONDS,
        ) as attack:
            time.sleep(FLOOD_SECONDS / 2)
            conn.execute("INSERT INTO jobqueue.queue_settings (queue, paused) VALUES ('default', true)")
        wait_until(lambda: worker.worker.paused.names == {"default"}, timeout=5, message="the pause seen")
        counted = dict(reads)
    assert attack.sent > 200  # a flood even on a loaded machine (~5,000 a second on a quiet one)
    assert counted["paused"] <= CONTROL_BURST + CONTROL_READS_PER_SECOND * FLOOD_SECONDS + 3, counted
    assert counted["shared"] <= 2 * (CONTROL_BURST + CONTROL_READS_PER_SECOND * FLOOD_SECONDS + 3), (
        counted
    )  # breakers + limits


def test_a_flood_on_the_leader_and_schedule_channels_makes_few_elections_and_scheduler_runs(
    dsn, conn, stranger_dsn, monkeypatch
):  # noqa: F811
    """A forged resignation (jobqueue_leader, the role's name) made every candidate try to take
    the lead, a write, back to back for as long as the flood lasted; jobqueue_schedules ran the
    scheduler the same way. Each is woken at most once per MAINTENANCE_HINT_GAP now."""
    runs = {"elections": 0, "scheduler": 0}
    attempt, run_once = Elector.attempt, Scheduler.run_once

    async def elect(self):
        runs["elections"] += 1
        return await attempt(self)

    async def schedule(self):
        runs["scheduler"] += 1
        return await run_once(self)

    monkeypatch.setattr(Elector, "attempt", elect)
    monkeypatch.setattr(Scheduler, "run_once", schedule)
    with WorkerThread(apps.queue, test_settings(dsn, poll_interval=5.0)):
        wait_until(lambda: conn.execute("SELECT count(*) FROM jobqueue.leaders").fetchone()[0] == 1, message="a leader")
        time.sleep(0.2)
        runs.update(elections=0, scheduler=0)
        with Flooding(
            stranger_dsn, [("jobqueue_leader", "maintenance"), ("jobqueue_schedules", "s")], seconds=FLOOD_SECONDS
        ) as attack:
            pass
        counted = dict(runs)
    assert attack.sent > 200  # a flood even on a loaded machine (~5,000 a second on a quiet one)
    assert counted["elections"] <= MAINTENANCE_BURST + MAINTENANCE_WAKES_PER_SECOND * FLOOD_SECONDS + 2, counted
    assert counted["scheduler"] <= MAINTENANCE_BURST + MAINTENANCE_WAKES_PER_SECOND * FLOOD_SECONDS + 2, counted


# --- event listener registrations: a producer login calls the function directly -------------------


def _listeners(conn) -> list[tuple[str, float]]:
    return conn.execute(
        "SELECT listener_id, extract(epoch FROM expires_at - now())::float8 "
        "FROM jobqueue.event_listeners ORDER BY listener_id"
    ).fetchall()


def test_a_producer_cannot_switch_job_events_on_for_good(login_as, conn):  # noqa: F811
    """Before, a 31-year TTL kept every job statement building and sending events for 31 years."""
    with psycopg.connect(login_as("producer", producer="p"), autocommit=True) as producer:
        producer.execute("SELECT jobqueue.register_event_listener('mine', 1e9)")
        producer.execute("SELECT jobqueue.register_event_listener('inf', 'Infinity')")
    (_, mine), (_, infinite) = sorted(_listeners(conn), key=lambda row: row[0] != "mine")
    assert 0 < mine <= 120 and 0 < infinite <= 120  # clamped to at most two minutes


@pytest.mark.parametrize(
    "listener_id, ttl, field",
    [
        ("neg", -5.0, "ttl"),
        ("zero", 0.0, "ttl"),
        ("nan", float("nan"), "ttl"),
        ("null", None, "ttl"),
        ("x" * 100_000, 30.0, "listener_id"),
        ("", 30.0, "listener_id"),
        (None, 30.0, "listener_id"),
    ],
)
def test_a_bad_listener_registration_is_refused_and_writes_nothing(login_as, conn, listener_id, ttl, field):  # noqa: F811
    with psycopg.connect(login_as("producer", producer="p"), autocommit=True) as producer:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
            producer.execute("SELECT jobqueue.register_event_listener(%s, %s)", (listener_id, ttl))
    assert refused.value.diag.column_name == field
    assert _listeners(conn) == []


def test_one_login_holds_a_bounded_number_of_listener_registrations(login_as, conn):  # noqa: F811
    with psycopg.connect(login_as("producer", producer="p"), autocommit=True) as producer:
        for i in range(64):
            producer.execute("SELECT jobqueue.register_event_listener(%s, 30)", (f"l{i}",))
        producer.execute("SELECT jobqueue.register_event_listener('l0', 30)")  # refreshing one is fine
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            producer.execute("SELECT jobqueue.register_event_listener('one-more', 30)")
    assert len(_listeners(conn)) == 64


def _register_while_open(open_tx: psycopg.Connection, other: psycopg.Connection, listener_id: str) -> str:
    """Registers ``listener_id`` on ``other`` while ``open_tx`` holds an uncommitted registration,
    committing that one a second later; "registered" or "refused"."""
    outcome: list[str] = []

    def register() -> None:
        try:
            other.execute("SELECT jobqueue.register_event_listener(%s, 30)", (listener_id,))
            outcome.append("registered")
        except psycopg.errors.InvalidParameterValue:
            outcome.append("refused")

    racer = threading.Thread(target=register)
    racer.start()
    racer.join(1.0)
    open_tx.commit()
    racer.join(10)
    return outcome[0] if outcome else "no answer"


def test_two_registrations_at_once_cannot_pass_the_bound_together(login_as, conn):  # noqa: F811
    """Each registration counted the login's committed rows, so two at once both saw 63 and both
    inserted: 65. A login's registrations now queue on one lock, and the second sees the first."""
    login = login_as("producer", producer="p")
    with (
        psycopg.connect(login, autocommit=True) as a,
        psycopg.connect(login) as open_tx,
        psycopg.connect(login, autocommit=True) as c,
    ):
        for i in range(63):
            a.execute("SELECT jobqueue.register_event_listener(%s, 30)", (f"l{i}",))
        open_tx.execute("SELECT jobqueue.register_event_listener('the-64th', 30)")  # not committed yet
        assert _register_while_open(open_tx, c, "the-65th") == "refused"
    assert len(_listeners(conn)) == 64


def test_a_login_that_waited_on_another_logins_registration_of_its_id_is_told(login_as, conn):  # noqa: F811
    """The second login's insert waited on the first's uncommitted row, then updated nothing and
    returned as if registered: its listener would have stopped getting events at the other's
    expiry without a word."""
    with (
        psycopg.connect(login_as("producer", producer="a")) as first,
        psycopg.connect(login_as("producer", producer="b"), autocommit=True) as second,
    ):
        first.execute("SELECT jobqueue.register_event_listener('api-1', 30)")
        assert _register_while_open(first, second, "api-1") == "refused"


def test_a_login_cannot_take_over_or_remove_another_logins_registration(login_as, conn):  # noqa: F811
    first, second = login_as("producer", producer="a"), login_as("producer", producer="b")
    with psycopg.connect(first, autocommit=True) as a, psycopg.connect(second, autocommit=True) as b:
        a.execute("SELECT jobqueue.register_event_listener('api-1', 30)")
        b.execute("SELECT jobqueue.unregister_event_listener('api-1')")
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            b.execute("SELECT jobqueue.register_event_listener('api-1', 30)")
    assert [listener for listener, _ in _listeners(conn)] == ["api-1"]
