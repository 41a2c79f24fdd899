"""Pure logic: backoff, weighted slot draws, settings, SQL loading, enqueue validation."""

from __future__ import annotations

import dataclasses
import json
import random
import re
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from jobqueue.client.validation import NewJob
from jobqueue.config import Settings, WorkerSettings, parse_weights
from jobqueue.db.queries import parse_named_queries, queries
from jobqueue.model.errors import ValidationError
from jobqueue.model.retry import Backoff
from jobqueue.worker.priorities import draw_slots
from tests.support.settings import flat_names, settings_of


def test_backoff_is_exponential_capped_and_jittered_upwards():
    policy = Backoff(base=1.0, multiplier=2.0, max=30.0, jitter=0.1)
    never = random.Random(0)
    delays = [policy.delay(attempt, never) for attempt in range(1, 8)]
    floors = [1, 2, 4, 8, 16, 30, 30]
    for delay, floor in zip(delays, floors):
        assert floor <= delay <= floor * 1.1
    assert Backoff(jitter=0).delay(1) == 1.0
    assert Backoff(base=5, max=3, jitter=0).delay(10) == 3
    assert Backoff(jitter=0).delay(10_000) == 30.0  # no overflow on absurd attempt numbers


def test_backoff_jitter_spreads_retries():
    policy = Backoff(base=10, jitter=0.1)
    draws = {round(policy.delay(1), 6) for _ in range(50)}
    assert len(draws) > 40


@pytest.mark.parametrize("kwargs", [dict(base=-1), dict(multiplier=0.5), dict(jitter=2), dict(max=-1)])
def test_backoff_refuses_nonsense(kwargs):
    with pytest.raises(ValueError):
        Backoff(**kwargs)


def test_weighted_draw_fills_every_slot_and_follows_the_weights():
    rng = random.Random(42)
    totals = Counter()
    for _ in range(2000):
        slots = draw_slots(10, (8, 4, 2, 1), ["a", "b"], rng)
        assert sum(count for _, _, count in slots) == 10
        for queue, level, count in slots:
            assert queue in ("a", "b") and 0 <= level <= 3
            totals[level] += count
    share = {level: totals[level] / 20000 for level in range(4)}
    assert share[0] == pytest.approx(8 / 15, abs=0.02)
    assert share[3] == pytest.approx(1 / 15, abs=0.01)


def test_settings_from_env_and_errors():
    settings = Settings.from_env(
        {
            "JOBQUEUE_DSN": "postgresql://x/y",
            "JOBQUEUE_QUEUES": "a, b,,",
            "JOBQUEUE_CONCURRENCY": "7",
            "JOBQUEUE_PRIORITY_MODE": "weighted",
            "JOBQUEUE_PRIORITY_WEIGHTS": "5,3,2,1",
            "JOBQUEUE_ACK_FLUSH_MS": "2",
        }
    )
    assert settings.db.dsn == "postgresql://x/y" and settings.worker.queues == ("a", "b")
    assert settings.worker.concurrency == 7 and settings.worker.priority_weights == (5, 3, 2, 1)
    assert settings.worker.ack_flush_interval == pytest.approx(0.002)
    with pytest.raises(ValueError, match="JOBQUEUE_CONCURRENCY"):
        Settings.from_env({"JOBQUEUE_CONCURRENCY": "many"})
    with pytest.raises(ValueError, match="priority mode"):
        Settings.from_env({"JOBQUEUE_PRIORITY_MODE": "fair"})
    with pytest.raises(ValueError, match="four positive integers"):
        parse_weights("1,2,3")
    with pytest.raises(ValueError):
        WorkerSettings(concurrency=0)


@pytest.mark.parametrize(
    "env, says",
    [
        ({"JOBQUEUE_DSN": "notadsn"}, "JOBQUEUE_DSN (or --dsn) is not a PostgreSQL connection string"),
        ({"JOBQUEUE_READ_DSN": "host=a port"}, "JOBQUEUE_READ_DSN (or --dsn) is not"),
        ({"JOBQUEUE_QUEUES": "a," + "q" * 300}, "must be at most 255 characters (got 300)"),
        ({"JOBQUEUE_WORKER_METRICS_PORT": "99999"}, "metrics port must be from 1 to 65535"),
        ({"JOBQUEUE_WORKER_METRICS_PORT": "65535", "JOBQUEUE_PROCESSES": "2"}, "from 1 to 65534"),
    ],
)
def test_settings_no_worker_could_use_are_refused_at_startup_naming_them(env, says):
    """A worker started with them used to run and fail later: a traceback from the first
    connection, a queue no job can be enqueued to, a metrics port it could never bind."""
    with pytest.raises(ValueError, match=re.escape(says)):
        Settings.from_env(env)
    assert Settings.from_env(
        {
            "JOBQUEUE_DSN": "host=a,b port=5432,5433 dbname=x target_session_attrs=read-write",
            "JOBQUEUE_QUEUES": "q" * 255,
            "JOBQUEUE_WORKER_METRICS_PORT": "65535",
        }
    )


def test_switches_read_one_way_and_refuse_what_they_do_not_know():
    assert Settings.from_env({"JOBQUEUE_LISTEN": "Off", "JOBQUEUE_API_SHED_LOW": "yes"}).db.listen is False
    assert Settings.from_env({"JOBQUEUE_API_SHED_LOW": "TRUE"}).api.shed_low is True
    defaults = Settings.from_env({"JOBQUEUE_MAINTENANCE": "", "JOBQUEUE_API_SHED_LOW": " "})
    assert defaults.worker.run_maintenance is True and defaults.api.shed_low is False
    with pytest.raises(ValueError, match="JOBQUEUE_MAINTENANCE"):
        Settings.from_env({"JOBQUEUE_MAINTENANCE": "disabled"})  # was silently "on"


def test_the_client_pool_size_comes_from_jobqueue_pool_size():
    from jobqueue.client import AsyncClient, Client

    settings = Settings.from_env({"JOBQUEUE_DSN": "postgresql://x/y", "JOBQUEUE_POOL_SIZE": "3"})
    assert Client(settings=settings)._pool.max_size == 3
    assert AsyncClient(settings=settings)._pool.max_size == 3
    assert Client(settings=settings, pool_size=1)._pool.max_size == 1


def test_the_tests_one_level_names_reach_every_section_field_and_refuse_an_ambiguous_one():
    defaults = Settings()
    every = {
        (s.name, f.name) for s in dataclasses.fields(Settings) for f in dataclasses.fields(getattr(defaults, s.name))
    }
    assert set(flat_names().values()) == every
    made = settings_of(
        dsn="host=a",
        api_soft_limit=5,
        api_port=1,
        metrics_max_queues=3,
        maintenance_xact_age=1.0,
        worker_metrics_port=9000,
        poll_interval=2.0,
    )
    assert (
        made.db.dsn,
        made.backpressure.soft_limit,
        made.api.port,
        made.metrics.max_queues,
        made.maintenance.max_xact_age,
        made.worker.metrics_port,
        made.worker.poll_interval,
    ) == ("host=a", 5, 1, 3, 1.0, 9000, 2.0)
    with pytest.raises(TypeError, match="max_queues"):
        settings_of(max_queues=3)


def test_named_queries_parse_and_refuse_duplicates():
    parsed = parse_named_queries("-- name: a\nSELECT 1;\n\n-- name: b\n-- a comment\nSELECT 2;\n")
    assert parsed == {"a": "SELECT 1", "b": "-- a comment\nSELECT 2"}
    with pytest.raises(ValueError, match="duplicate"):
        parse_named_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;")
    assert "job_claim" in queries() and "leader_attempt_elect" in queries()


def test_new_job_normalises_and_serialises_for_bulk():
    job = NewJob.build("send", {"to": "x"}, priority=1, delay=1.5, queue="mail", idempotency_key="k")
    assert job.priority == "high" and job.delay == timedelta(seconds=1.5)
    element = json.loads(job.as_json_fragment())
    assert element == {
        "job_type": "send",
        "priority": "high",
        "queue": "mail",
        "delay": "0 days 1.500000 seconds",
        "idempotency_key": "k",
        "payload": {"to": "x"},
    }
    at = datetime(2030, 1, 1, tzinfo=timezone.utc)
    job = NewJob.build(
        "send",
        timeout=timedelta(days=2, microseconds=7),
        expires_at=at,
        idempotency_window=90,
        idempotency_mismatch="reject",
    )
    element = json.loads(job.as_json_fragment())
    assert (
        element["timeout"],
        element["expires_at"],
        element["idempotency_window"],
        element["idempotency_mismatch"],
    ) == ("2 days 0.000007 seconds", "2030-01-01T00:00:00+00:00", "0 days 90.000000 seconds", "reject")
    assert "expire_after" not in element


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(job_type=None), "job_type"),
        (dict(job_type="x", priority=7), "priority"),
        (dict(job_type="x", priority=True), "priority"),
        (dict(job_type="x", delay="soon"), "delay"),
        (dict(job_type="x", max_attempts=2.5), "max_attempts"),
        (dict(job_type="x", idempotency_key=""), "idempotency_key"),
        (dict(job_type="x", payload=float("nan")), "payload"),
        (dict(job_type="x", run_at="tomorrow"), "run_at"),
        (dict(job_type="x", timeout=0), "timeout"),
        (dict(job_type="x", timeout=-1), "timeout"),
        (dict(job_type="x", timeout="30"), "timeout"),
        (dict(job_type="x", timeout=float("inf")), "timeout"),
        (dict(job_type="x", timeout=float("nan")), "timeout"),
        (dict(job_type="x", timeout=timedelta(days=3651)), "timeout"),
        (dict(job_type="x", expire_after=0), "expire_after"),
        (dict(job_type="x", expire_after=True), "expire_after"),
        (dict(job_type="x", expires_at="2030-01-01"), "expires_at"),
        (dict(job_type="x", expires_at=datetime(2030, 1, 1)), "expires_at"),
        (dict(job_type="x", expires_at=datetime(2030, 1, 1, tzinfo=timezone.utc), expire_after=5), "expire_after"),
        (
            dict(
                job_type="x",
                run_at=datetime(2030, 1, 2, tzinfo=timezone.utc),
                expires_at=datetime(2030, 1, 1, tzinfo=timezone.utc),
            ),
            "expires_at",
        ),
        (dict(job_type="x", idempotency_window=-5), "idempotency_window"),
        (dict(job_type="x", idempotency_mismatch="error"), "idempotency_mismatch"),
        # PostgreSQL text cannot hold NUL: the database refused these as field "input"
        (dict(job_type="send\x00email"), "job_type"),
        (dict(job_type="x", queue="ma\x00il"), "queue"),
    ],
)
def test_new_job_refuses_bad_fields(kwargs, field):
    with pytest.raises(ValidationError) as info:
        NewJob.build(**kwargs)
    assert info.value.field == field


def test_bulk_element_errors_carry_their_index():
    with pytest.raises(ValidationError) as info:
        NewJob.from_mapping({"job_type": "x", "colour": "red"}, 3, None)
    assert info.value.field == "jobs[3].colour"


def test_import_contracts_hold():
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports")], cwd=root, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache", "jobqueue", "tests", "migrations"],
        cwd=root,
        capture_output=True,
        text=True,
    )


def test_ruff_finds_nothing():
    """Lint rules in [tool.ruff] (pyproject.toml), lines of at most 120 characters included."""
    result = _ruff("check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_tree_is_formatted_by_ruff():
    """One layout for everyone: `ruff format` (run it before committing) leaves every file as it is."""
    result = _ruff("format", "--check")
    assert result.returncode == 0, "run `.venv/bin/ruff format`:\n" + result.stdout + result.stderr


def test_devdb_reports_a_cluster_that_cannot_start_instead_of_a_traceback(tmp_path, capsys):
    """`make run`/`make bench` stop on this exit status (an empty DSN would mean 127.0.0.1:5432)."""
    from tests.harness import devdb

    not_a_directory = tmp_path / "pgdata"
    not_a_directory.write_text("a file where the cluster should be")
    assert devdb.main(["start", "--datadir", str(not_a_directory), "--port", str(devdb.free_port())]) == 1
    error = capsys.readouterr().err
    assert error.startswith("devdb: ") and "server.log" in error


def test_callers_queued_behind_a_failed_metrics_collection_share_its_failure():
    """During an outage K scrapers must not wait K database timeouts one after another."""
    import asyncio

    from jobqueue.model.errors import DatabaseUnavailable
    from jobqueue.observability.metrics import Collector

    calls = []

    async def unreachable():
        calls.append(1)
        await asyncio.sleep(0.05)  # the pool's wait for a connection, shortened
        raise DatabaseUnavailable("database unavailable: connection refused")

    async def scrapes() -> list:
        collector = Collector(unreachable)
        return await asyncio.gather(*(collector.snapshot() for _ in range(5)), return_exceptions=True)

    outcomes = asyncio.run(scrapes())
    assert all(isinstance(outcome, DatabaseUnavailable) for outcome in outcomes)
    assert len(calls) == 1
