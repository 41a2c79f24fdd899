"""Jobs nobody serves are visible as such (issue 17, §5): runnable jobs whose type no live worker of
their queue has a handler for are never claimed, so they wait, no attempt used — and /queues, the
dashboard's overview, /metrics and the client count them, per queue and job type."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from jobqueue import Client
from jobqueue.api.queue_schemas import QueueList
from jobqueue.db import gateway as db
from jobqueue.db.queries import queries
from jobqueue.model.queues import Unserved
from jobqueue.observability import metrics, prometheus
from jobqueue.store import queues as queue_store
from tests.support.factories import make_job
from tests.support.prometheus import parse, value


def _worker(
    conn,
    worker_id: str,
    queues: list[str],
    job_types: list[str],
    *,
    status: str = "running",
    heartbeat_age: float = 0.0,
) -> None:
    conn.execute(
        "INSERT INTO jobqueue.workers (id, host, pid, queues, concurrency, status, last_heartbeat, job_types) "
        "VALUES (%s, 'h', 1, %s, 1, %s, now() - make_interval(secs => %s), %s)",
        (worker_id, queues, status, heartbeat_age, job_types),
    )


def _collect(dsn: str, max_queues: int | None = None) -> metrics.Snapshot:
    async def main():
        conn = await db.connect(dsn)
        try:
            return await metrics.collect(conn, cap=1000, stale_seconds=60, max_queues=max_queues)
        finally:
            await conn.close()

    return asyncio.run(main())


def test_runnable_jobs_of_types_no_live_worker_of_their_queue_serves_are_counted(dsn, conn):
    for job_type, queue, n in (
        ("greet", "default", 3),
        ("report", "default", 2),
        ("report", "mail", 4),
        ("gone", "default", 1),
    ):
        for _ in range(n):
            make_job(conn, job_type=job_type, queue=queue)
    make_job(conn, job_type="later", run_at=datetime.now(timezone.utc) + timedelta(hours=1))  # not runnable yet
    make_job(conn, job_type="done", state="completed")
    make_job(conn, job_type="greet", state="failed")  # waiting for its retry, due: runnable
    _worker(conn, "w1", ["default"], ["report"])  # serves report in default, not in mail
    _worker(conn, "w2", ["default"], ["gone"], status="stopped")  # not live
    _worker(conn, "w3", ["default"], ["gone"], heartbeat_age=120)  # silent past worker_stale_seconds
    with Client(dsn) as client:
        found = client.unserved_jobs()
    assert found == [Unserved("default", "gone", 1), Unserved("default", "greet", 4), Unserved("mail", "report", 4)]
    snapshot = _collect(dsn)
    figures = parse(prometheus.render(snapshot))
    assert value(figures, "jobqueue_jobs_unserved", queue="default") == 5
    assert value(figures, "jobqueue_jobs_unserved", queue="mail") == 4
    listed = {q.queue: q for q in QueueList.of(snapshot, 2.0).queues}
    assert (listed["default"].unserved, listed["default"].unserved_job_types) == (5, {"gone": 1, "greet": 4})
    rows = {row["queue"]: row for row in metrics.overview(snapshot)["queues"]}
    assert rows["mail"]["unserved"] == 4 and rows["mail"]["unserved_job_types"] == ["report"]
    _worker(conn, "w4", ["default", "mail"], ["greet", "gone", "report"])
    with Client(dsn) as client:
        assert client.unserved_jobs() == []


def _reads(node: dict) -> set[str]:
    """The indexes a plan reads, and "Seq Scan on jobs" if it reads the job table whole."""
    found = {node["Index Name"]} if "Index Name" in node else set()
    if node.get("Node Type") == "Seq Scan" and node.get("Relation Name") == "jobs":
        found.add("Seq Scan on jobs")
    for child in node.get("Plans", []):
        found |= _reads(child)
    return found


def test_the_count_reads_only_the_type_index_and_stops_at_its_caps(conn):
    """Finished rows cost nothing (a partial index over waiting jobs), one descent per (queue, job
    type), each unserved pair counted up to the cap, at most max_pairs pairs looked at."""
    conn.execute(
        "INSERT INTO jobqueue.jobs (job_type, queue) SELECT 't' || (g % 20), 'q' || (g % 3) "
        "FROM generate_series(1, 3000) g"
    )
    conn.execute(
        "INSERT INTO jobqueue.jobs (job_type, state, finished_at) SELECT 'x', 'completed', now() "
        "FROM generate_series(1, 20000)"
    )
    conn.execute("ANALYZE jobqueue.jobs")
    plan = conn.execute(
        "EXPLAIN (FORMAT JSON) " + queries()["queue_unserved"], {"cap": 10, "stale_seconds": 60, "max_pairs": 1000}
    ).fetchone()[0][0]["Plan"]
    assert _reads(plan) == {"jobs_claim_type_idx"}, _reads(plan)
    capped = db.run_sync(conn, queue_store.unserved(cap=10, stale_seconds=60, max_pairs=5))
    assert len(capped) == 5 and all(u.runnable == 10 for u in capped)  # 5 pairs, each up to 10 per level


def test_unserved_jobs_of_queues_folded_into_other_are_counted_there(dsn, conn):
    """A producer inventing queue names makes no series per name here either (`metrics.fold`)."""
    for n in range(5):
        for _ in range(n + 1):
            make_job(conn, job_type="nobody", queue=f"q{n}")
    snapshot = _collect(dsn, max_queues=2)
    figures = parse(prometheus.render(snapshot))
    assert {queue: value(figures, "jobqueue_jobs_unserved", queue=queue) for queue in ("q4", "q3", metrics.OTHER)} == {
        "q4": 5,
        "q3": 4,
        metrics.OTHER: 6,
    }
    assert value(figures, "jobqueue_jobs_unserved", queue="q0") is None
