"""Circuit breakers without a database: definitions, how an attempt's outcome is classified for
its breaker, and a worker's blocked set and probe timing under an injected clock."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timezone

import pytest

from jobqueue.app import JobQueue
from jobqueue.model.errors import CircuitOpen, JobTimeout, ValidationError
from jobqueue.model.jobs import Job
from jobqueue.store.circuits import Blocking
from jobqueue.worker.breakers import Breakers
from jobqueue.worker.deadlines import DeadlineWatch
from jobqueue.worker.executor import DEAD, RETRY, SNOOZED, execute
from jobqueue.worker.threads import HandlerThreads


def test_a_bad_breaker_definition_is_refused_at_import_naming_the_setting():
    app = JobQueue()
    for options, field in (
        (dict(threshold=0), "threshold"),
        (dict(threshold=2.5), "threshold"),
        (dict(window=0), "window"),
        (dict(reset_after=-1), "reset_after"),
        (dict(reset_after=True), "reset_after"),
        (dict(trip_on=(ValueError, "x")), "trip_on"),
        (dict(trip_on=()), "trip_on"),
    ):
        with pytest.raises(ValidationError) as refused:
            app.circuit("api", **options)
        assert refused.value.field == field
    with pytest.raises(ValidationError):
        app.circuit("")
    with pytest.raises(ValueError, match="not declared"):
        app.task("t", circuit="api")
    assert app.circuits == {} and app.tasks == {}  # nothing half-registered
    spec = app.circuit("api", trip_on=ConnectionError)
    assert spec.trip_on == (ConnectionError,)
    with pytest.raises(ValueError, match="declared twice"):
        app.circuit("api")


def _job(job_type: str) -> Job:
    return Job(uuid.uuid4(), "default", job_type, {}, 2, 1, 3, None, False, datetime.now(timezone.utc))


def _app() -> JobQueue:
    app = JobQueue()
    app.circuit("api", trip_on=(ConnectionError, JobTimeout))

    @app.task("refused", circuit="api")
    async def refused(job):
        raise ConnectionError("refused")

    @app.task("bug", circuit="api")
    async def bug(job):
        raise ValueError("ours")

    @app.task("checked", circuit="api")
    async def checked(job):
        raise CircuitOpen("health check failed")

    @app.task("slow", circuit="api", timeout=0.05)
    async def slow(job):
        await asyncio.sleep(5)

    @app.task("plain")
    async def plain(job):
        raise CircuitOpen("no breaker here")

    return app


@pytest.mark.parametrize(
    "job_type, kind, counts",
    [
        ("refused", RETRY, True),  # listed in trip_on: counted, and an ordinary failed attempt
        ("bug", RETRY, False),  # not listed: a failure of the job only
        ("checked", SNOOZED, False),  # CircuitOpen: the attempt is given back (the breaker opens on its own)
        ("slow", RETRY, True),  # a timeout counts when trip_on lists JobTimeout
        ("plain", RETRY, False),  # CircuitOpen from a task without a breaker: an error saying so
    ],
)
def test_an_attempt_is_classified_for_its_breaker(job_type, kind, counts):
    app = _app()
    task = app.tasks[job_type]

    async def attempt():
        watch = DeadlineWatch()
        watcher = asyncio.create_task(watch.run())
        running = asyncio.create_task(execute(_job(job_type), task, HandlerThreads(1, 1), watch))
        watch.watch(running, task.timeout)
        try:
            return await running
        finally:
            watcher.cancel()

    outcome = asyncio.run(attempt())
    assert (outcome.kind, outcome.counts_failure) == (kind, counts)
    if job_type == "plain":
        assert "has no circuit breaker" in outcome.message
    assert outcome.kind != DEAD


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _breakers(clock: FakeClock, woken: list[int]) -> Breakers:
    app = JobQueue()
    app.circuit("api")
    app.task("mine", circuit="api")(lambda job: None)
    return Breakers(None, app, interval=10, retry_probe_after=5, on_unblocked=lambda: woken.append(1), monotonic=clock)


def _row(state: str, probe_in: float | None, types=("mine", "theirs"), forced: bool = False) -> Blocking:
    return Blocking("api", state, forced, None, probe_in, tuple(types))


def test_the_blocked_set_follows_the_circuits_and_a_close_wakes_the_claim_loop():
    clock, woken = FakeClock(), []
    breakers = _breakers(clock, woken)
    breakers._apply([_row("open", 30.0), Blocking("other", "open", True, None, None, ("x",))], clock())
    assert breakers.blocked == ["mine", "theirs", "x"] and woken == []
    breakers._apply([_row("open", 30.0)], clock())
    assert breakers.blocked == ["mine", "theirs"] and woken == [1]  # x may be claimed again: look now
    breakers._apply([], clock())
    assert breakers.blocked == [] and len(woken) == 2 and breakers.next_probe_in() is None


def test_a_probe_falls_due_after_reset_after_and_a_failed_try_waits_before_the_next():
    clock, woken = FakeClock(), []
    breakers = _breakers(clock, woken)
    breakers._apply([_row("open", 30.0)], clock())
    assert breakers.next_probe_in() == 30.0
    clock.now += 31
    assert breakers.next_probe_in() == 0.0

    async def no_job(conn, queues, types):
        return []

    async def try_probe(row, queues, types, claim):  # as if the database had no job for it
        assert types == ["mine"]  # only the types this worker has handlers for
        return None

    breakers._try_probe = try_probe  # type: ignore[method-assign]
    assert asyncio.run(breakers.probe(["default"], 4, no_job)) == []
    assert breakers.next_probe_in() == 5.0  # retry_probe_after
    breakers._apply([_row("open", 0.0)], clock())  # a refresh does not bring the failed try forward
    assert breakers.next_probe_in() == 5.0
    breakers._apply([_row("half_open", None)], clock())  # someone else's probe runs
    assert breakers.next_probe_in() is None
    breakers._apply([_row("open", None, forced=True)], clock())  # held open by an operator
    assert breakers.next_probe_in() is None
    breakers._apply([_row("open", 0.0, types=("theirs",))], clock())  # nothing this worker could run
    assert breakers.next_probe_in() is None


def test_a_probe_outcome_the_breaker_does_not_know_is_refused_before_any_statement():
    from jobqueue.store import circuits as circuit_store

    with pytest.raises(ValueError, match="probe outcome"):
        circuit_store.probe_finished("api", uuid.uuid4(), "maybe")
