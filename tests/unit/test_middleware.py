"""Middleware around every attempt (``@queue.middleware``), without a database: the order it runs
in, what it is shown, and what its own failures do to the attempt — the attempt's failure, never a
lost job. Run through the test mode's `perform_job`, which runs the worker's executor."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from jobqueue import JobQueue, PermanentError, Retry
from jobqueue.crypto.keyring import KeyRing, new_key_line
from jobqueue.model.jobs import Job
from jobqueue.testing import perform_job, perform_job_sync
from jobqueue.worker.deadlines import DeadlineWatch
from jobqueue.worker.executor import execute
from jobqueue.worker.threads import HandlerThreads

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")


def app_with_log() -> tuple[JobQueue, list]:
    app = JobQueue("mw-tests")
    log: list = []

    @app.middleware
    def outer(job):
        log.append(("outer before", job.job_type, job.attempt))
        outcome = yield
        log.append(("outer after", outcome.status))

    @app.middleware
    async def inner(job):
        log.append(("inner before", threading.current_thread().name))
        outcome = yield
        log.append(("inner after", outcome.status, outcome.result, type(outcome.error).__name__))

    @app.task("async_ok")
    async def async_ok(job):
        log.append(("handler", job.payload))
        return {"n": job.payload["n"] + 1}

    @app.task("sync_fails")
    def sync_fails(job):
        log.append(("handler", threading.current_thread().name))
        raise ValueError("broken")

    return app, log


def test_middleware_wraps_async_and_sync_handlers_outermost_first_and_sees_the_outcome():
    app, log = app_with_log()
    outcome = perform_job_sync(app, "async_ok", {"n": 1})
    assert outcome.ok and outcome.result == {"n": 2}
    main = threading.current_thread().name
    assert log == [
        ("outer before", "async_ok", 1),
        ("inner before", main),
        ("handler", {"n": 1}),
        ("inner after", "completed", {"n": 2}, "NoneType"),
        ("outer after", "completed"),
    ]
    log.clear()
    outcome = perform_job_sync(app, "sync_fails", attempt=2)
    assert outcome.status == "retry" and isinstance(outcome.error, ValueError) and outcome.retry_in > 0
    # the hooks run on the event loop (this thread); the sync handler on a handler thread
    assert log[2][0] == "handler" and log[2][1].startswith("jobqueue-inline")
    assert log[3] == ("inner after", "retry", None, "ValueError") and log[4] == ("outer after", "retry")
    log.clear()
    assert perform_job_sync(app, "sync_fails", attempt=4).status == "dead_letter"  # the last attempt
    assert log[-1] == ("outer after", "dead_letter")


def test_a_middleware_that_raises_before_the_handler_fails_the_attempt_as_a_retry_and_the_handler_never_runs():
    app = JobQueue("mw-raise-before")
    ran, seen = [], []

    @app.middleware
    def outer(job):
        outcome = yield
        seen.append(outcome)

    @app.middleware
    def broken(job):
        raise ConnectionError("metrics backend down")
        yield  # pragma: no cover

    @app.task("t")
    async def handler(job):
        ran.append(job)

    outcome = perform_job_sync(app, "t")
    assert not ran and outcome.status == "retry" and isinstance(outcome.error, ConnectionError)
    assert seen == [outcome]  # the middleware outside the failing one is shown the failure


def test_a_middleware_that_raises_after_a_completed_handler_turns_it_into_a_retry_with_its_error():
    app = JobQueue("mw-raise-after")
    seen = []

    @app.middleware
    async def outer(job):
        outcome = yield
        seen.append(outcome.status)

    @app.middleware
    def commit(job):
        yield
        raise RuntimeError("could not commit the unit of work")

    @app.task("t")
    def handler(job):
        return "done"

    outcome = perform_job_sync(app, "t")
    assert outcome.status == "retry" and "could not commit" in str(outcome.error)
    assert seen == ["retry"]


@pytest.mark.parametrize(
    "error, status",
    [(PermanentError("refused by policy"), "dead_letter"), (Retry(after=7), "retry"), (KeyError("x"), "retry")],
)
def test_a_middleware_error_is_classified_as_a_handler_error_would_be(error, status):
    app = JobQueue("mw-classify")

    @app.middleware
    def gate(job):
        raise error
        yield  # pragma: no cover

    @app.task("t")
    async def handler(job):
        return 1

    outcome = perform_job_sync(app, "t")
    assert outcome.status == status and outcome.error is error
    if isinstance(error, Retry):
        assert outcome.retry_in == 7


def test_the_recorded_error_names_the_middleware():
    """What operators read in the job's error history says where it came from."""
    from jobqueue.worker.executor import run_attempt

    app = JobQueue("mw-message")

    @app.middleware
    def audit(job):
        yield
        raise ValueError("audit log full")

    @app.task("t")
    async def handler(job):
        return 1

    async def main():
        watch = DeadlineWatch()
        ran = await run_attempt(_job("t"), app.tasks["t"], HandlerThreads(1, 1), watch, middleware=app.middlewares)
        return ran.outcome

    outcome = asyncio.run(main())
    assert outcome.kind == "retry" and outcome.error_type == "ValueError"
    assert outcome.message.startswith("in middleware test_the_recorded_error_names_the_middleware.<locals>.audit:")
    assert "audit log full" in outcome.message and "raise ValueError" in outcome.traceback


def test_a_middleware_must_yield_exactly_once_and_a_plain_function_is_refused_at_import():
    app = JobQueue("mw-shape")
    with pytest.raises(TypeError, match="must be a generator function"):
        app.middleware(lambda job: None)

    @app.middleware
    def twice(job):
        yield
        yield

    @app.task("t")
    async def handler(job):
        return 1

    outcome = perform_job_sync(app, "t")
    assert outcome.status == "retry" and "yielded more than once" in str(outcome.error)

    other = JobQueue("mw-shape-2")

    @other.middleware
    def never(job):
        if job.attempt > 100:
            yield

    other.task("t")(handler)
    outcome = perform_job_sync(other, "t")
    assert outcome.status == "retry" and "returned before its `yield`" in str(outcome.error)


def test_context_set_by_middleware_reaches_async_and_sync_handlers():
    app = JobQueue("mw-context")
    seen = []

    @app.middleware
    def bind(job):
        token = REQUEST_ID.set(job.payload["request_id"])
        try:
            yield
        finally:
            REQUEST_ID.reset(token)

    @app.task("a")
    async def in_loop(job):
        seen.append(REQUEST_ID.get())

    @app.task("s")
    def in_thread(job):
        seen.append(REQUEST_ID.get())

    perform_job_sync(app, "a", {"request_id": "r-1"})
    perform_job_sync(app, "s", {"request_id": "r-2"})
    assert seen == ["r-1", "r-2"] and REQUEST_ID.get() == "none"


def test_a_middleware_that_hangs_is_held_to_the_attempts_deadline():
    app = JobQueue("mw-deadline")

    @app.middleware
    async def slow(job):
        outcome = yield
        await asyncio.sleep(30)
        yield outcome  # pragma: no cover

    @app.task("t", timeout=0.2)
    async def handler(job):
        return 1

    started = time.monotonic()
    outcome = perform_job_sync(app, "t")
    assert outcome.status == "retry" and type(outcome.error).__name__ == "JobTimeout"
    assert time.monotonic() - started < 5


def test_a_released_attempt_closes_the_middleware_it_entered():
    """At shutdown the attempt is given back (no outcome): each middleware's finally still runs."""
    app = JobQueue("mw-release")
    closed = []
    started = asyncio.Event()

    @app.middleware
    def guard(job):
        try:
            yield
        finally:
            closed.append(job.id)

    @app.task("t")
    async def handler(job):
        started.set()
        await asyncio.sleep(30)

    async def main():
        job = _job("t")
        running = asyncio.create_task(
            execute(job, app.tasks["t"], HandlerThreads(1, 1), DeadlineWatch(), middleware=app.middlewares)
        )
        await started.wait()
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        return job

    job = asyncio.run(main())
    assert closed == [job.id]


def test_middleware_never_sees_what_is_decrypted_for_the_handler():
    """An encrypted field is opened for the handler alone: middleware (which logs, reports to error
    trackers) sees it sealed, before and after, and no result of an encrypt_result task."""
    from jobqueue.crypto.envelopes import Binding, Sealer

    ring = KeyRing.parse(new_key_line("k1"), "test")
    app = JobQueue("mw-sealed")
    seen = []

    @app.middleware
    def spy(job):
        seen.append(("before", job.payload["ssn"]))
        outcome = yield
        seen.append(("after", outcome.job.payload["ssn"], outcome.result))

    @app.task("charge", encrypted=["ssn"], encrypt_result=True)
    async def charge(job):
        seen.append(("handler", job.payload["ssn"]))
        return {"last4": job.payload["ssn"][-4:]}

    job = _job("charge")
    sealer = Sealer(ring)
    job.payload = sealer.seal({"ssn": "078-05-1120"}, ["ssn"], Binding(None, "charge", job.id))

    async def main():
        from jobqueue.worker.executor import run_attempt

        return await run_attempt(
            job, app.tasks["charge"], HandlerThreads(1, 1), DeadlineWatch(), keys=ring, middleware=app.middlewares
        )

    ran = asyncio.run(main())
    assert ran.outcome.kind == "completed" and ran.result == {"last4": "1120"}
    assert seen[1] == ("handler", "078-05-1120")
    before, after = seen[0], seen[2]
    assert isinstance(before[1], dict) and before[1]["kid"] == "k1"
    assert after[1] == before[1] and after[2] is None


def test_perform_job_is_async_too_and_the_sync_flavour_refuses_a_running_loop():
    app, _ = app_with_log()

    async def main():
        outcome = await perform_job(app, "async_ok", {"n": 41})
        with pytest.raises(RuntimeError, match="use `await perform_job"):
            perform_job_sync(app, "async_ok", {"n": 1})
        return outcome

    assert asyncio.run(main()).result == {"n": 42}


def _job(job_type: str) -> Job:
    from datetime import datetime, timezone

    from jobqueue.crypto.envelopes import new_job_id

    return Job(new_job_id(), "default", job_type, {}, 2, 1, 4, None, False, datetime.now(timezone.utc))
