"""Progress: `job.progress()` reaches the job's row a few times a second, never blocks the handler,
survives an outage in memory, refuses bad figures, and the database refuses forged ones."""

from __future__ import annotations

import asyncio
import math
import time

import psycopg
import pytest

from jobqueue import Client
from jobqueue.db import gateway as db
from jobqueue.db.queries import query
from jobqueue.model.errors import ValidationError
from jobqueue.model.jobs import Job
from jobqueue.worker.progress import ProgressReports
from tests.support import ledger_app
from tests.support.factories import claim_params
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings


@pytest.fixture(autouse=True)
def _released():
    ledger_app.release.clear()
    yield
    ledger_app.release.set()


def test_a_running_jobs_progress_is_visible_to_its_producer_and_kept_after_it_ends(dsn):
    with Client(dsn) as client, WorkerThread(ledger_app.queue, test_settings(dsn)):
        job_id = client.enqueue("report", {"steps": 3, "hold": True})
        seen = wait_until(lambda: (p := client.get(job_id).progress) is not None and p.done == 3 and p)
        assert (seen.done, seen.total, seen.message, seen.attempt) == (3, 3, "step 3", 1)
        assert client.get(job_id).state.value == "processing"
        ledger_app.release.set()
        wait_until(lambda: client.get(job_id).state.value == "completed")
        assert client.get(job_id).progress.done == 3


def test_a_tight_loop_of_reports_is_coalesced_into_a_few_writes(dsn):
    with Client(dsn) as client, WorkerThread(ledger_app.queue, test_settings(dsn)) as worker:
        job_id = client.enqueue("report_sync")
        wait_until(lambda: client.get(job_id).state.value == "completed")
        reports = worker.worker.slots.lent.reports
        assert client.get(job_id).progress.message == "done"
    assert 1 <= reports.written <= 4  # 101 reports, written at most every 0.25 s


@pytest.mark.parametrize("bad", ["nan", "inf", "-1", "1e300"])
def test_a_bad_figure_fails_the_handler_with_its_field_and_writes_nothing(dsn, bad):
    with Client(dsn) as client, WorkerThread(ledger_app.queue, test_settings(dsn)):
        job_id = client.enqueue("report", {"steps": 1, "bad": bad}, max_attempts=1)
        wait_until(lambda: client.get(job_id).state.value == "dead_letter")
        info = client.get(job_id)
    assert info.errors[-1].error_type == "ValidationError" and info.errors[-1].message.startswith("done:")
    assert info.progress is None or info.progress.done == 1  # the bad one never landed


@pytest.mark.parametrize(
    "done, total, message, problem",
    [
        (True, None, None, "done"),
        ("3", None, None, "done"),
        (5, 4, None, "done"),
        (1, 0, None, "total"),
        (1, math.nan, None, "total"),
        (1, 2, "x" * 1001, "message"),
        (1, 2, 7, "message"),
    ],
)
def test_every_bad_report_is_refused_before_it_is_kept(done, total, message, problem):
    job = Job(None, "q", "t", {}, 2, 1, 1, None, False, None)  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as refused:
        job.progress(done, total, message)
    assert refused.value.field == problem


def test_forged_figures_sent_straight_to_the_database_are_dropped(conn):
    job_id = conn.execute("SELECT jobqueue.enqueue('t')").fetchone()[0]
    conn.execute(query("job_claim"), claim_params(worker_id="w"))
    for done, total, message in [
        (math.nan, None, None),
        (math.inf, None, None),
        (1e300, None, None),
        (-1, None, None),
        (5, 4, None),
        (1, 2, "m" * 5000),
    ]:
        conn.execute(
            query("job_progress_many"),
            {
                "worker_id": "w",
                "ids": [job_id],
                "attempts": [1],
                "done": [done],
                "totals": [total],
                "messages": [message],
            },
        )
    assert conn.execute("SELECT progress FROM jobqueue.jobs WHERE id = %s", (job_id,)).fetchone()[0] is None
    conn.execute(
        query("job_progress_many"),
        {"worker_id": "another", "ids": [job_id], "attempts": [1], "done": [1], "totals": [2], "messages": [None]},
    )
    assert conn.execute("SELECT progress FROM jobqueue.jobs WHERE id = %s", (job_id,)).fetchone()[0] is None


def test_a_row_someone_holds_locked_never_blocks_the_report_nor_the_handler(dsn):
    with Client(dsn) as client, WorkerThread(ledger_app.queue, test_settings(dsn)):
        job_id = client.enqueue("report", {"steps": 40, "pause": 0.05, "hold": True})
        wait_until(lambda: client.get(job_id).progress is not None)
        with psycopg.connect(dsn) as holder:
            holder.execute("SELECT 1 FROM jobqueue.jobs WHERE id = %s FOR UPDATE", (job_id,))
            before = client.get(job_id).progress.done
            time.sleep(0.6)  # reports go on meanwhile: passed over, not waited for
            assert client.get(job_id).progress.done == before
        wait_until(lambda: client.get(job_id).progress.done == 40, message="the reports after the lock")
        ledger_app.release.set()
        wait_until(lambda: client.get(job_id).state.value == "completed")


def test_during_an_outage_reports_are_kept_latest_only_and_the_handler_goes_on():
    async def scenario() -> tuple[int, bool, tuple]:
        pool = db.async_pool("postgresql://127.0.0.1:9/none", min_size=0, timeout=0.2, connect_timeout=1)
        reports = ProgressReports(pool, "w")
        for done in range(1000):
            reports.report(("job", 1), done, 1000, None)  # returns at once: no database behind it
        written = await reports.write()
        return reports.pending, written, reports._latest[("job", 1)]

    pending, written, latest = asyncio.run(scenario())
    assert (pending, written, latest) == (1, False, (999, 1000, None))


def test_in_the_test_mode_progress_is_checked_and_goes_nowhere_and_a_transaction_says_it_needs_a_worker():
    from jobqueue.testing import perform_job_sync

    reported = perform_job_sync(ledger_app.queue, "report", {"steps": 2, "pause": 0})
    assert reported.status == "completed" and reported.result == {"steps": 2}
    bad = perform_job_sync(ledger_app.queue, "report", {"steps": 1, "pause": 0, "bad": "nan"})
    assert bad.status != "completed" and "done:" in str(bad.error)
    credited = perform_job_sync(ledger_app.queue, "credit_sync", {"amount": 1})
    assert credited.status != "completed" and "a jobqueue worker runs" in str(credited.error)
