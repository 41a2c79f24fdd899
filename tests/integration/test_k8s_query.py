"""The depth query KEDA runs (deploy/k8s/keda.yaml) against a real jobqueue database."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from tests.support.factories import make_job
from tests.support.manifests import documents


def keda_query() -> str:
    (scaled,) = [doc for doc in documents("keda.yaml") if doc["kind"] == "ScaledObject"]
    return scaled["spec"]["triggers"][0]["metadata"]["query"]


def test_it_counts_the_runnable_jobs_of_its_queue_as_backpressure_does(conn):
    for state in ("pending", "failed", "processing", "completed", "dead_letter", "cancelled"):
        make_job(conn, state=state)
    make_job(conn, priority="low")
    make_job(conn, run_at=datetime.now(timezone.utc) + timedelta(hours=1))  # scheduled: not yet runnable
    make_job(conn, queue="other")
    assert conn.execute(keda_query()).fetchone()[0] == 3  # pending, failed (due), low pending
    assert conn.execute("SELECT jobqueue.runnable_depth('default', 10001)").fetchone()[0] == 3


def test_it_stops_counting_where_more_jobs_could_not_ask_for_more_pods(conn):
    for chunk in (10_000, 50):  # one enqueue_many takes at most 10,000 jobs
        conn.execute("SELECT * FROM jobqueue.enqueue_many(%s::jsonb)", (json.dumps([{"job_type": "x"}] * chunk),))
    assert conn.execute(keda_query()).fetchone()[0] == 10_001  # 100 pods x 100 jobs, + 1
    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + keda_query()).fetchall())
    assert "jobs_claim_idx" in plan or "jobs_claim_type_idx" in plan, plan  # a partial index over waiting jobs
