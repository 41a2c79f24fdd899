"""The pruner: retention boundaries per state and queue, live jobs untouched, bounded batches,
results, errors and idempotency keys deleted with their jobs, expired keys pruned, and plans that
do not read live rows or the whole key table."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timedelta, timezone

import psycopg

from jobqueue.db.queries import queries
from jobqueue.maintenance.pruner import DAY, Pruner, PrunerOptions
from jobqueue.runtime.clock import ManualClock
from jobqueue.store import retention as retention_store
from tests.support.factories import make_job
from tests.support.maintenance import insert_schedule, pools

UTC = timezone.utc
NOW = datetime(2024, 6, 1, 12, tzinfo=UTC)


def prune(dsn: str, **options) -> int:
    async def main() -> int:
        async with pools(dsn) as (pool,):
            return (await Pruner(pool, PrunerOptions(**options), clock=ManualClock(NOW)).run_once()).jobs

    return asyncio.run(main())


def ids(conn) -> set:
    return {r[0] for r in conn.execute("SELECT id FROM jobqueue.jobs").fetchall()}


def aged(conn, state: str, days: float, *, queue: str = "default", seconds: float = 0) -> object:
    return make_job(conn, state=state, queue=queue, finished_at=NOW - timedelta(days=days, seconds=seconds))


def test_each_finished_state_is_kept_exactly_its_retention(dsn, conn):
    keep, drop = set(), set()
    for state, days in (("completed", 30), ("cancelled", 7), ("dead_letter", 90)):
        keep.add(aged(conn, state, days))  # exactly at the boundary: kept
        keep.add(aged(conn, state, days, seconds=-60))  # a minute younger: kept
        drop.add(aged(conn, state, days, seconds=1))  # a second older: gone
        drop.add(aged(conn, state, days * 3))
    assert prune(dsn) == len(drop)
    assert ids(conn) == keep


def test_live_jobs_are_never_pruned_however_old(dsn, conn):
    year_ago = NOW - timedelta(days=365)
    live = {
        make_job(conn, state=state, run_at=year_ago, finished_at=year_ago if state == "failed" else None)
        for state in ("pending", "processing", "failed")
    }
    conn.execute("UPDATE jobqueue.jobs SET created_at = %s, updated_at = %s", (year_ago, year_ago))
    assert prune(dsn, retention={"completed": 0, "cancelled": 0, "dead_letter": 0}) == 0
    assert ids(conn) == live


def test_results_and_errors_go_with_their_job(dsn, conn):
    old, recent = aged(conn, "dead_letter", 100), aged(conn, "dead_letter", 1)
    for job_id in (old, recent):
        conn.execute(
            "INSERT INTO jobqueue.job_results (job_id, outcome, error) VALUES (%s, 'dead_letter', '{}')", (job_id,)
        )
        conn.execute(
            "INSERT INTO jobqueue.job_errors (job_id, attempt, error_type, message) VALUES "
            "(%s, 1, 'E', 'm'), (%s, 2, 'E', 'm')",
            (job_id, job_id),
        )
    assert prune(dsn) == 1
    for table in ("job_results", "job_errors"):
        assert {r[0] for r in conn.execute(f"SELECT job_id FROM jobqueue.{table}").fetchall()} == {recent}


def test_per_queue_retention_overrides_the_defaults(dsn, conn):
    conn.execute("""INSERT INTO jobqueue.queue_retention (queue, completed, dead_letter)
                    VALUES ('audit', '365 days', NULL), ('chatty', '1 hour', '1 day')""")
    kept = {
        aged(conn, "completed", 100, queue="audit"),
        aged(conn, "dead_letter", 80, queue="audit"),
        aged(conn, "completed", 0.01, queue="chatty"),
        aged(conn, "completed", 20),
    }
    gone = {
        aged(conn, "completed", 400, queue="audit"),
        aged(conn, "dead_letter", 95, queue="audit"),
        aged(conn, "completed", 1, queue="chatty"),
        aged(conn, "dead_letter", 2, queue="chatty"),
        aged(conn, "cancelled", 8, queue="chatty"),
        aged(conn, "completed", 31),
    }
    assert prune(dsn) == len(gone)
    assert ids(conn) == kept


def record_batches(monkeypatch, name: str) -> list[int]:
    """What each batch of ``retention_store.<name>`` deleted, in order, as the pruner runs it."""
    batches: list[int] = []
    original = getattr(retention_store, name)

    def recording(**params):
        call = original(**params)
        return dataclasses.replace(call, decode=lambda rows: batches.append(call.decode(rows)) or batches[-1])

    monkeypatch.setattr(retention_store, name, recording)
    return batches


def test_a_backlog_goes_in_bounded_batches(dsn, conn, monkeypatch):
    conn.execute(
        """INSERT INTO jobqueue.jobs (job_type, queue, state, finished_at)
                    SELECT 'x', 'q' || (g %% 3), 'completed', %s FROM generate_series(1, 2500) g""",
        (NOW - timedelta(days=40),),
    )
    batches = record_batches(monkeypatch, "prune_jobs")
    assert prune(dsn, batch_size=400) == 2500
    assert ids(conn) == set()
    assert max(batches) == 400 and sum(batches) == 2500 and len(batches) >= 7


def test_old_fire_history_is_pruned_per_schedule(dsn, conn):
    schedule = insert_schedule(conn, "s", "* * * * *")
    for days in (1, 6, 8, 30):
        conn.execute(
            "INSERT INTO jobqueue.schedule_fires (schedule_id, fire_at, job_id) VALUES (%s, %s, gen_random_uuid())",
            (schedule, NOW - timedelta(days=days)),
        )
    prune(dsn, fire_history=7 * DAY)
    left = conn.execute("SELECT fire_at FROM jobqueue.schedule_fires ORDER BY fire_at").fetchall()
    assert [NOW - r[0] for r in left] == [timedelta(days=6), timedelta(days=1)]


def test_the_prune_reads_old_finished_rows_only(dsn):
    """EXPLAIN ANALYZE over 100k live, 40k recent and 20k old finished jobs: one batch reads its
    1000 old rows from jobs_finished_idx, in order, and deletes them by primary key."""
    with psycopg.connect(dsn) as conn:
        conn.execute("""INSERT INTO jobqueue.jobs (job_type, queue, state, finished_at)
                        SELECT 'x', 'q' || (g % 4),
                               CASE WHEN g <= 100000 THEN 'pending' ELSE 'completed' END,
                               CASE WHEN g <= 100000 THEN NULL
                                    WHEN g <= 140000 THEN now()
                                    ELSE now() - interval '60 days' - g * interval '1 second' END
                        FROM generate_series(1, 160000) g""")
        conn.execute("ANALYZE jobqueue.jobs")
        params = {"state": "completed", "keep_seconds": 30 * DAY, "limit": 1000, "now": None}
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + queries()["retention_prune_jobs"], params).fetchone()[0]
        conn.rollback()
    on_jobs = [node for node in walk(plan[0]["Plan"]) if node.get("Relation Name") == "jobs"]
    assert on_jobs and all(node["Node Type"] != "Seq Scan" for node in on_jobs)
    indexes = {node["Index Name"] for node in walk(plan[0]["Plan"]) if node.get("Index Name", "").startswith("jobs")}
    assert indexes == {"jobs_finished_idx", "jobs_pkey"}
    assert max(node["Actual Rows"] * node["Actual Loops"] for node in on_jobs) <= 1000
    deleted = next(
        node
        for node in walk(plan[0]["Plan"])
        if node.get("Operation") == "Delete" and node.get("Relation Name") == "jobs"
    )
    assert deleted["Actual Rows"] == 1000


def walk(node: dict):
    yield node
    for child in node.get("Plans", []):
        yield from walk(child)


def keys(conn) -> dict:
    return {r[0]: r[1] for r in conn.execute("SELECT key, job_id FROM jobqueue.idempotency_keys")}


def test_idempotency_keys_whose_window_closed_are_pruned_in_batches(dsn, conn, monkeypatch):
    """Expired key rows are dead weight (the key is free already); open ones stay, whatever their job."""
    open_keys = {f"open-{i}": make_job(conn, state="completed", idempotency_key=f"open-{i}") for i in range(3)}
    for i in range(5):
        make_job(conn, state="pending", idempotency_key=f"closed-{i}")
    conn.execute(
        "UPDATE jobqueue.idempotency_keys SET expires_at = %s WHERE key LIKE 'closed-%%'", (NOW - timedelta(seconds=1),)
    )
    batches = record_batches(monkeypatch, "prune_idempotency_keys")
    prune(dsn, batch_size=2)
    assert keys(conn) == open_keys
    assert batches == [2, 2, 1]
    assert len(ids(conn)) == 8  # no job goes with an expired key


def test_a_pruned_job_takes_the_key_it_holds_along(dsn, conn):
    """A key never outlives its job: a retention shorter than the window frees the key with the job."""
    conn.execute("INSERT INTO jobqueue.queue_retention (queue, completed) VALUES ('chatty', '1 hour')")
    gone = make_job(conn, state="completed", queue="chatty", idempotency_key="a", finished_at=NOW - timedelta(hours=2))
    kept = make_job(conn, state="completed", queue="chatty", idempotency_key="b", finished_at=NOW)
    # "c" is held by a newer job: pruning an older job with the same key leaves it alone
    old_c = make_job(conn, state="completed", queue="chatty", finished_at=NOW - timedelta(hours=2))
    conn.execute("UPDATE jobqueue.jobs SET idempotency_key = 'c' WHERE id = %s", (old_c,))
    holder_c = make_job(conn, state="pending", idempotency_key="c")
    assert prune(dsn) == 2
    assert ids(conn) == {kept, holder_c} and gone not in ids(conn)
    assert keys(conn) == {"b": kept, "c": holder_c}


def test_pruning_keys_with_their_jobs_probes_the_key_table_by_primary_key(dsn):
    """200k open keys, 1,000 old finished jobs holding keys: the batch deletes their key rows by
    (producer, key) — never a scan of the whole key table."""
    with psycopg.connect(dsn) as conn:
        conn.execute("""INSERT INTO jobqueue.jobs (job_type, state, finished_at, idempotency_key, producer_id)
                        SELECT 'x', 'completed', CASE WHEN g <= 1000 THEN now() - interval '60 days' ELSE now() END,
                               'k' || g, 'p' || (g % 7)
                        FROM generate_series(1, 200000) g""")
        conn.execute("""INSERT INTO jobqueue.idempotency_keys (producer, key, job_id, expires_at)
                        SELECT producer_id, idempotency_key, id, now() + interval '1 day' FROM jobqueue.jobs""")
        conn.execute("ANALYZE jobqueue.jobs")
        conn.execute("ANALYZE jobqueue.idempotency_keys")
        params = {"state": "completed", "keep_seconds": 30 * DAY, "limit": 1000, "now": None}
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + queries()["retention_prune_jobs"], params).fetchone()[0]
        left = conn.execute("SELECT count(*) FROM jobqueue.idempotency_keys").fetchone()[0]
        conn.rollback()
    on_keys = [node for node in walk(plan[0]["Plan"]) if node.get("Relation Name") == "idempotency_keys"]
    assert on_keys and all(node["Node Type"] != "Seq Scan" for node in on_keys)
    assert {node.get("Index Name") for node in on_keys} - {None} == {"idempotency_keys_pkey"}
    assert left == 199000
