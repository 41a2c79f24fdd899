"""`jobqueue bench` end to end with tiny counts, as a real process against a real database: every
figure of issue 10 beside the raw baseline, counts of the work that noise cannot blur, and nothing
of the bench left behind — also when it is interrupted or finds another bench's schema."""

from __future__ import annotations

import argparse
import json
import math
import signal
import subprocess
import sys
import time

import psycopg
import pytest

from jobqueue.bench import common, report
from jobqueue.client import Client
from jobqueue.config import DbSettings, Settings
from tests.support.waiting import wait_until

TINY = ["--jobs", "400", "--single", "40", "--chunk", "100", "--pickup-samples", "10", "--concurrency", "50"]


def bench(dsn: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from jobqueue.cli import main; sys.exit(main())",
            "bench",
            *args,
            "--dsn",
            dsn,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def leftovers(conn: psycopg.Connection) -> dict[str, int]:
    """Everything the bench could have created, counted (a fresh database holds none of it)."""
    one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
    return {
        "raw schema": one("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'jobqueue_bench%'"),
        "jobs": one("SELECT count(*) FROM jobqueue.jobs"),
        "results": one("SELECT count(*) FROM jobqueue.job_results"),
        "errors": one("SELECT count(*) FROM jobqueue.job_errors"),
        "idempotency keys": one("SELECT count(*) FROM jobqueue.idempotency_keys"),
        "queue settings": one("SELECT count(*) FROM jobqueue.queue_settings"),
        "retention": one("SELECT count(*) FROM jobqueue.queue_retention"),
        "workers": one("SELECT count(*) FROM jobqueue.workers"),
        "worker stats": one("SELECT count(*) FROM jobqueue.worker_stats"),
        "task defaults": one("SELECT count(*) FROM jobqueue.task_defaults"),
        "api keys": one("SELECT count(*) FROM jobqueue.api_keys"),
    }


def others_connected(conn: psycopg.Connection) -> int:
    return conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchone()[0]


def clean(conn: psycopg.Connection) -> None:
    assert set(leftovers(conn).values()) == {0}, leftovers(conn)
    wait_until(lambda: others_connected(conn) == 0, timeout=10, message="every bench process to disconnect")


def measured(specs: list[report.Spec], skip: tuple[str, ...]) -> list[report.Spec]:
    return [spec for spec in specs if not spec.key.startswith(skip)]


@pytest.mark.slow
def test_every_figure_beside_its_baseline_with_medians_and_nothing_left(dsn, conn):
    result = bench(dsn, "--runs", "2", *TINY, "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    summary = document["summary"]
    specs = [spec for _title, section in report.DEFAULT_SECTIONS for spec in section]
    for spec in measured(specs, ("rest.", "backlog.")):
        entry = summary[spec.key]
        if spec.unit == "yes":
            assert entry["jobqueue"]["all"] and entry["raw"]["all"] and entry["met"], spec.key
            continue
        if spec.key.endswith("btree_insertions_per_job") and entry["jobqueue"] is None:
            assert "index entries inserted are not counted" in " ".join(document["notes"])
            continue
        assert entry["jobqueue"]["runs"] == entry["raw"]["runs"] == entry["ratio"]["runs"] == 2, spec.key
        if spec.key in ("pickup.p50_ms", "pickup.p99_ms"):
            # counted from the call's return, which the producer reads after the commit: on a
            # loaded box the worker's claim can start first, so a small negative value is honest
            assert entry["jobqueue"]["median"] > -5 and entry["raw"]["median"] > -5, spec.key
        else:
            assert entry["jobqueue"]["median"] > 0 and entry["raw"]["median"] > 0, spec.key
        assert entry["jobqueue"]["min"] <= entry["jobqueue"]["median"] <= entry["jobqueue"]["max"]
        assert math.isclose(
            entry["ratio"]["median"],
            _median([run["figures"][spec.key][0] / run["figures"][spec.key][1] for run in document["runs"]]),
        )
        assert (entry["met"] is None) == (spec.target is None), spec.key
    for spec in measured(specs, ("enqueue_one.", "bulk.", "drain.", "load.", "pickup.")):
        assert summary[spec.key]["jobqueue"] is None  # REST and backlog are asked for separately

    # Counts of the work itself: the raw queue writes exactly one row version per job to load it,
    # two (claim, ack) to drain it, and jobqueue at least as much.
    for run in document["runs"]:
        life = run["details"]["life"]
        assert life["raw"]["load"]["heap_versions_per_job"] == 1
        assert life["raw"]["drain"]["heap_versions_per_job"] == 2
        assert life["jobqueue"]["load"]["heap_versions_per_job"] >= 1
        assert life["jobqueue"]["drain"]["heap_versions_per_job"] >= 2
        if life["raw"]["drain"]["btree_insertions_per_job"] is not None:  # primary key twice, partial index no more
            assert life["raw"]["drain"]["btree_insertions_per_job"] == pytest.approx(2, abs=0.05)
            assert life["raw"]["load"]["btree_insertions_per_job"] == pytest.approx(2, abs=0.05)
        assert life["jobqueue"]["drain"]["done"] == life["raw"]["drain"]["done"] == 400
        assert all(side["samples"] == 10 and side["missed"] == 0 for side in run["details"]["pickup"].values())
        assert run["details"]["bulk"]["rest_batch_jobs_per_s"] > 0

    text = report.render(document)  # what the bench prints without --json
    for spec in specs:
        assert spec.label in text, spec.label
    assert "add --rest" in text and "--backlog 1000000" in text and "load average" in text
    clean(conn)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


@pytest.mark.slow
def test_backlog_under_a_held_snapshot_drains_prunes_and_reports_sizes(dsn, conn):
    result = bench(dsn, "--runs", "1", "--backlog", "3000", "--hold-xmin", "--concurrency", "50", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    summary = document["summary"]
    for spec in measured([spec for _t, section in report.BACKLOG_SECTIONS for spec in section], ("enqueue_one.",)):
        entry = summary[spec.key]
        assert entry["jobqueue"] is not None and entry["raw"] is not None, spec.key
    for side in ("jobqueue", "raw"):
        details = document["runs"][0]["details"][side]
        assert details["pruned"] == 3000  # jobqueue's Pruner (retention 0 for the bench queue), raw's DELETE
        assert details["drain"]["done"] == 3000 and details["drain"]["exactly_once"]
        assert details["tenths"]["first_tenth_per_s"] > 0 and details["tenths"]["last_tenth_per_s"] > 0
        assert details["sizes"]["loaded"]["heap_mb"] > 0 and details["sizes"]["loaded"]["index_mb"] > 0
        assert details["sizes"]["drained"]["heap_mb"] > details["sizes"]["loaded"]["heap_mb"]  # claims and acks
        assert isinstance(details["autovacuum_runs"], int)
        assert details["sizes"]["maintained"]["heap_mb"] == details["sizes"]["pruned"]["heap_mb"]
        assert details["sizes"]["maintained"]["index_mb"] <= details["sizes"]["pruned"]["index_mb"]
    assert document["runs"][0]["details"]["raw"]["rebuilt"] == 0  # the raw queue has no reindexer
    assert any("held snapshot" in note for note in document["notes"])
    assert "snapshot held" in result.stderr
    clean(conn)


def test_another_benchs_schema_is_refused_and_left_alone(dsn, conn):
    conn.execute("CREATE SCHEMA jobqueue_bench_raw")
    conn.execute("CREATE TABLE jobqueue_bench_raw.keep (n integer)")
    conn.execute("INSERT INTO jobqueue_bench_raw.keep VALUES (42)")
    result = bench(dsn, "--runs", "1", *TINY, timeout=60)
    assert result.returncode == 2
    assert "jobqueue_bench_raw already exists" in result.stderr and "Traceback" not in result.stderr
    assert conn.execute("SELECT n FROM jobqueue_bench_raw.keep").fetchall() == [(42,)]
    conn.execute("DROP SCHEMA jobqueue_bench_raw CASCADE")
    clean(conn)


@pytest.mark.slow
def test_an_interrupted_bench_stops_its_workers_and_cleans_up(dsn, conn):
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from jobqueue.cli import main; sys.exit(main())",
            "bench",
            "--runs",
            "1",
            *TINY,
            "--pickup-samples",
            "100000",
            "--dsn",
            dsn,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        for line in process.stderr:  # interrupt it in its pick-up phase, with a worker running
            if "pick-up" in line or time.monotonic() > deadline:
                break
        wait_until(
            lambda: conn.execute("SELECT count(*) FROM jobqueue.workers WHERE status = 'running'").fetchone()[0] == 1,
            timeout=30,
            message="the pick-up worker",
        )
        names = {
            name
            for (name,) in conn.execute(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
        }
        assert "jobqueue-bench" in names and all(name.startswith("jobqueue-") for name in names), names
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    finally:
        if process.poll() is None:
            process.kill()
    assert "interrupted" in process.stderr.read()
    clean(conn)


def test_the_benchs_own_connections_are_named_and_have_no_timeouts(dsn):
    """A VACUUM or a delete of a million rows, or a snapshot held through a drain, must not be cut
    by the timeouts every other jobqueue connection carries."""
    bench_run = common.open_bench(Settings(db=DbSettings(dsn=dsn)), argparse.Namespace(), "bench")
    try:
        shown = {
            name: bench_run.conn.execute(f"SHOW {name}").fetchone()[0]
            for name in ("application_name", "statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")
        }
    finally:
        bench_run.conn.close()
    assert shown == {
        "application_name": "jobqueue-bench",
        "statement_timeout": "0",
        "lock_timeout": "0",
        "idle_in_transaction_session_timeout": "0",
    }
    assert bench_run.queue.startswith("bench-") and bench_run.server_major >= 12


def test_bench_enqueue_measures_every_mode_and_deletes_its_jobs_with_their_keys(dsn, conn):
    with Client(dsn) as client:
        other = client.enqueue("noop", queue="not-the-bench", idempotency_key="someone-elses")
    result = bench(dsn, "enqueue", "--runs", "1", "--single", "5", "--batches", "1", "--batch-size", "10", timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("jobqueue bench enqueue on ") and "queue bench-enq-" in lines[0]
    for path in ("single", "bulk"):
        for mode in ("no key", "new key", "held key"):
            assert any(line.startswith(f"{path},") and f" {mode}" in line and "jobs/s" in line for line in lines), (
                path,
                mode,
                result.stdout,
            )
    assert conn.execute("SELECT queue FROM jobqueue.jobs").fetchall() == [("not-the-bench",)]
    assert conn.execute("SELECT key, job_id FROM jobqueue.idempotency_keys").fetchall() == [("someone-elses", other)]
    conn.execute("DELETE FROM jobqueue.idempotency_keys")
    conn.execute("DELETE FROM jobqueue.jobs")
    clean(conn)
