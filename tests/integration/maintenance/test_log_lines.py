"""What the maintenance loop writes in the log, against a real database (issue 20): a line says
what the service did (``scheduler: 1`` said nothing), and a service that ran with nothing to do, or
whose run changed nothing, writes no INFO line (the gatekeeper wrote ``gatekeeper: -1`` every
second while nothing was submitted)."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone

from jobqueue.maintenance.gatekeeper import Gatekeeper, GatekeeperOptions
from jobqueue.maintenance.scheduler import Scheduler
from jobqueue.maintenance.sweeper import Sweeper, SweeperOptions
from tests.support.factories import make_job
from tests.support.maintenance import insert_schedule, pools


def _info(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "jobqueue.maintenance" and r.levelno >= logging.INFO]


async def _loop(service, runs_until, timeout: float = 10.0) -> None:
    """The service's own loop (`Service.run`, as leader) until ``runs_until()`` holds."""
    task = asyncio.create_task(service.run(lambda: True))
    try:
        async with asyncio.timeout(timeout):
            while not runs_until():
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class Counting:
    """Wraps a service's run_once to count its runs (the loop is the service's own)."""

    def __init__(self, service) -> None:
        self.runs = 0
        self.service = service
        original = service.run_once

        async def counted():
            result = await original()
            self.runs += 1
            return result

        service.run_once = counted


def test_an_idle_gatekeeper_writes_no_info_line_and_a_closed_gate_is_said_in_words(dsn, conn, caplog):
    async def scenario() -> tuple[list[str], list[str], list[str]]:
        async with pools(dsn) as (pool,):
            # counts every 0.05 s (max_age): most runs count and change nothing
            options = GatekeeperOptions(interval=0.005, hard_limit=10, max_age=0.05, valid_for=60)
            gate = Gatekeeper(pool, options)
            counting = Counting(gate)
            await _loop(gate, lambda: counting.runs >= 30)  # nothing submitted: no count, no change
            idle = _info(caplog)
            caplog.clear()
            conn.execute("INSERT INTO jobqueue.jobs (job_type, queue) SELECT 'x', 'mail' FROM generate_series(1, 10)")
            start = counting.runs
            await _loop(gate, lambda: counting.runs >= start + 30)  # the gate closes, then holds
            closing = _info(caplog)
            caplog.clear()
            conn.execute("DELETE FROM jobqueue.jobs")
            start = counting.runs
            await _loop(gate, lambda: counting.runs >= start + 30)
            return idle, closing, _info(caplog)

    with caplog.at_level(logging.DEBUG, logger="jobqueue"):
        idle, closing, opening = asyncio.run(scenario())
    assert idle == [], idle
    assert closing == ["gatekeeper: counted the waiting jobs: 1 gate(s) closed, 1 closed in all"], closing
    assert opening == ["gatekeeper: counted the waiting jobs: 1 gate(s) opened again, 0 closed in all"], opening
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and r.name == "jobqueue.maintenance"]
    assert debug and all(m.startswith("gatekeeper: ") and "-1" not in m for m in debug), debug[:3]


def test_the_scheduler_says_how_many_cron_jobs_it_enqueued(dsn, conn, caplog):
    now = datetime.now(timezone.utc)
    insert_schedule(conn, "every-second", "* * * * * *", next_fire_at=now - timedelta(seconds=0.5))

    async def scenario() -> None:
        async with pools(dsn) as (pool,):
            scheduler = Scheduler(pool, fired_by="test")
            await _loop(scheduler, lambda: any("enqueued" in m for m in _info(caplog)))

    with caplog.at_level(logging.INFO, logger="jobqueue"):
        asyncio.run(scenario())
    line = next(m for m in _info(caplog) if "enqueued" in m)
    assert line.startswith("scheduler: enqueued ") and line.endswith("cron job(s) for 1 due schedule(s)"), line


def test_the_sweeper_says_what_it_took_back(dsn, conn, caplog):
    make_job(conn, state="processing", locked_until=datetime.now(timezone.utc) - timedelta(seconds=10))

    async def scenario() -> None:
        async with pools(dsn) as (pool,):
            sweeper = Sweeper(pool, SweeperOptions(interval=0.01))
            await _loop(sweeper, lambda: bool(_info(caplog)))

    with caplog.at_level(logging.INFO, logger="jobqueue"):
        asyncio.run(scenario())
    assert _info(caplog)[0] == "sweeper: 1 job(s) whose lease expired taken back (a dead or hung worker's)"
