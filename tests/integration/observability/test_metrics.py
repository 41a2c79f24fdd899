"""/metrics' figures from the database: job counts over the live partial indexes, the submitted
counter, worker totals; rendered in Prometheus' text format."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import psycopg

from jobqueue.db import gateway as db
from jobqueue.db.queries import queries
from jobqueue.observability import metrics, prometheus
from jobqueue.store import metrics as metrics_store
from tests.support.factories import make_job
from tests.support.prometheus import parse, total, value


def _collect(dsn: str, **options) -> metrics.Snapshot:
    async def main():
        conn = await db.connect(dsn)
        try:
            return await metrics.collect(conn, cap=options.get("cap", 1000), stale_seconds=60)
        finally:
            await conn.close()

    return asyncio.run(main())


def test_bucket_bounds_in_python_match_the_schema(conn):
    assert db.run_sync(conn, metrics_store.bucket_bounds()) == tuple(
        float(b) for b in metrics_store.DURATION_BUCKETS_MS
    )


def test_job_counts_per_queue_and_priority(conn, dsn):
    past, future = datetime.now(timezone.utc) - timedelta(seconds=90), datetime.now(timezone.utc) + timedelta(hours=1)
    for _ in range(3):
        make_job(conn, queue="mail", priority="high", run_at=past)
    make_job(conn, queue="mail", priority="high")  # runnable, younger
    make_job(conn, queue="mail", priority="low", run_at=future)  # scheduled
    make_job(conn, queue="mail", priority="low", state="failed", run_at=future)  # retry not due yet
    make_job(conn, queue="mail", priority="low", state="failed", run_at=past)  # retry due: runnable
    make_job(conn, queue="mail", priority="normal", state="processing")
    make_job(conn, queue="mail", job_type="send", state="dead_letter")
    make_job(conn, queue="mail", job_type="send", state="dead_letter")
    make_job(conn, queue="other", job_type="x", state="dead_letter")
    for state in ("completed", "cancelled"):
        make_job(conn, queue="mail", state=state)  # finished: not counted

    snapshot = _collect(dsn)
    rows = {(q.queue, q.priority): q for q in snapshot.queues}
    high, low, normal = rows[("mail", 1)], rows[("mail", 3)], rows[("mail", 2)]
    assert (high.runnable, high.scheduled, high.retrying, high.processing) == (4, 0, 0, 0)
    assert 89 <= high.oldest_age_seconds <= 120
    assert (low.runnable, low.scheduled, low.retrying) == (1, 2, 2)
    assert normal.processing == 1 and normal.runnable == 0
    assert {(d.queue, d.job_type, d.dead) for d in snapshot.dead} == {("mail", "send", 2), ("other", "x", 1)}
    assert snapshot.submitted == 13

    samples = parse(prometheus.render(snapshot))
    assert value(samples, "jobqueue_queue_depth", queue="mail", priority="high") == 4
    assert value(samples, "jobqueue_queue_depth", queue="mail", priority="critical") == 0
    assert value(samples, "jobqueue_jobs_scheduled", queue="mail", priority="low") == 2
    assert value(samples, "jobqueue_jobs_retrying", queue="mail", priority="low") == 2
    assert value(samples, "jobqueue_jobs_processing", queue="mail", priority="normal") == 1
    assert value(samples, "jobqueue_jobs_in_dlq", queue="mail", job_type="send") == 2
    assert total(samples, "jobqueue_jobs_in_dlq") == 3
    assert value(samples, "jobqueue_jobs_submitted_total") == 13
    assert value(samples, "jobqueue_worker_count") == 0
    assert value(samples, "jobqueue_queue_age_seconds", queue="mail", priority="high") >= 89


def test_counts_stop_at_the_cap(conn, dsn):
    conn.execute("INSERT INTO jobqueue.jobs (job_type) SELECT 'x' FROM generate_series(1, 50)")
    snapshot = _collect(dsn, cap=20)
    assert {(q.priority, q.runnable) for q in snapshot.queues if q.queue == "default"} >= {(2, 20)}


def test_submitted_counter_follows_the_sequence(conn, dsn):
    assert _collect(dsn).submitted == 0
    conn.execute("SELECT jobqueue.enqueue('a')")
    conn.execute('SELECT * FROM jobqueue.enqueue_many(\'[{"job_type": "b"}, {"job_type": "c"}]\')')
    assert _collect(dsn).submitted == 3


def test_label_values_are_escaped():
    snapshot = metrics.Snapshot(
        measured_at=datetime.now(timezone.utc),
        submitted=0,
        queues=[],
        dead=[metrics_store.DeadCount('we"ird\\queue\n', "t", 1)],
        totals=[],
        workers=[],
        collect_seconds=0.0,
    )
    samples = parse(prometheus.render(snapshot))
    assert value(samples, "jobqueue_jobs_in_dlq", queue='we"ird\\queue\n', job_type="t") == 1


def _scans(conn, name: str, params: dict) -> set[tuple[str, str, str]]:
    """(node type, relation, index) of every scan in the query's plan."""
    found: set[tuple[str, str, str]] = set()

    def walk(node: dict) -> None:
        if "Relation Name" in node or "Index Name" in node:
            found.add((node["Node Type"], node.get("Relation Name", "jobs"), node.get("Index Name", "")))
        for child in node.get("Plans", []):
            walk(child)

    walk(conn.execute("EXPLAIN (FORMAT JSON) " + queries()[name], params).fetchone()[0][0]["Plan"])
    return found


def test_collection_never_scans_the_job_table(dsn):
    """Finished rows dominate a real table; the metric queries (and backpressure's count of waiting
    jobs) must reach only the live partial indexes."""
    with psycopg.connect(dsn) as conn:
        conn.execute("""INSERT INTO jobqueue.jobs (job_type, queue, priority, state, finished_at, attempts)
                        SELECT 't' || (g % 3), 'q' || (g % 4), g % 4,
                               CASE WHEN g % 50 = 0 THEN 'pending' WHEN g % 97 = 0 THEN 'dead_letter'
                                    WHEN g % 89 = 0 THEN 'failed' ELSE 'completed' END, now(), 1
                        FROM generate_series(1, 60000) g""")
        conn.execute("ANALYZE jobqueue.jobs")
        counts = _scans(conn, "metrics_queue_counts", {"cap": 1000, "stale_seconds": 60, "now": None})
        dead = _scans(conn, "metrics_dead_letters", {"cap": 1000})
        waiting = _scans(conn, "queue_waiting_counts", {"cap": 1000, "stale_seconds": 60})  # backpressure, the gates
        conn.rollback()
    # a queue's prefix of either partial index over waiting jobs (both lead with the queue)
    assert {index for _, relation, index in waiting if relation == "jobs"} - {""} in (
        {"jobs_claim_idx"},
        {"jobs_claim_type_idx"},
        {"jobs_claim_idx", "jobs_claim_type_idx"},
    ), waiting
    job_scans = {(kind, index) for kind, relation, index in counts | dead | waiting if relation == "jobs"}
    assert ("Seq Scan", "") not in job_scans, job_scans
    # Partial indexes over live states, or over dead letters (jobs_finished_idx leads with state).
    assert {index for _, index in job_scans} - {""} <= {
        "jobs_claim_idx",
        "jobs_claim_type_idx",
        "jobs_lease_idx",
        "jobs_retry_wait_idx",
        "jobs_dead_letter_idx",
        "jobs_finished_idx",
    }, job_scans
    assert {"jobs_claim_idx", "jobs_retry_wait_idx"} <= {index for _, index in job_scans}
