"""Migrations: up, down and up again; the reference schema; the claim and ack plans use their indexes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import psycopg

from jobqueue.db.queries import queries
from jobqueue.store import migrate
from jobqueue.store.jobs import Deadlines
from tests.support.factories import claim_params
from tests.support.schema import SCHEMA_FILE, dump


def tables(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'jobqueue'"
            ).fetchall()
        }


def test_migrations_up_down_up(empty_dsn):
    assert migrate.current_revision(empty_dsn) is None
    migrate.upgrade(empty_dsn)
    assert migrate.is_up_to_date(empty_dsn)
    first = tables(empty_dsn)
    assert {"jobs", "job_results", "job_errors", "workers", "leaders", "task_defaults"} <= first
    migrate.downgrade(empty_dsn, "base")
    assert tables(empty_dsn) == set() and migrate.current_revision(empty_dsn) is None
    migrate.upgrade(empty_dsn)
    assert tables(empty_dsn) == first
    with psycopg.connect(empty_dsn) as conn:  # and it works after the round trip
        assert conn.execute("SELECT jobqueue.enqueue('x')").fetchone()[0]


def test_each_revision_downgrades_to_the_one_before(empty_dsn):
    migrate.upgrade(empty_dsn)
    head = migrate.current_revision(empty_dsn)
    migrate.downgrade(empty_dsn, "-1")
    assert migrate.current_revision(empty_dsn) != head
    migrate.upgrade(empty_dsn)
    assert migrate.current_revision(empty_dsn) == head


def test_cli_migrate_is_idempotent(empty_dsn):
    for _ in range(2):
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from jobqueue.cli import main; sys.exit(main())",
                "migrate",
                "--dsn",
                empty_dsn,
            ],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr
    assert migrate.is_up_to_date(empty_dsn)


def test_reference_schema_matches_the_migrations(dsn):
    assert dump(dsn) == SCHEMA_FILE.read_text(), (
        "sql/schema.sql is stale: run `.venv/bin/python -m tests.support.schema --write`"
    )


def _plan(conn, name: str, params: dict) -> str:
    plan = conn.execute("EXPLAIN (FORMAT JSON) " + queries()[name], params).fetchone()[0]
    return json.dumps(plan)


def seq_scanned(plan) -> set[str]:
    """The tables a plan (EXPLAIN FORMAT JSON, as text or parsed) reads whole."""
    found: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            if node.get("Node Type") == "Seq Scan":
                found.add(node["Relation Name"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(plan) if isinstance(plan, str) else plan)
    return found


#: The claim's guard reads jobqueue.job_limits whole: a handful of rows, one page (see job_claim).
SMALL_TABLES = {"job_limits"}


CLAIM = claim_params(queues=["default", "other"], limit=4)


def test_claim_reads_few_pages_past_many_scheduled_higher_priority_jobs(dsn):
    """LESSONS: stuck or scheduled high-priority rows can make every claim scan past them. With
    100,000 "high" jobs due next week, claiming the runnable ones still reads a handful of pages
    (one ordered scan over all levels read ~670), and takes them in priority, then FIFO order
    across the queues."""
    with psycopg.connect(dsn) as conn:
        conn.execute("""INSERT INTO jobqueue.jobs (job_type, priority, run_at)
                        SELECT 'later', 1, now() + interval '7 days' + g * interval '1 second'
                        FROM generate_series(1, 100000) g""")
        runnable = [
            conn.execute(
                "INSERT INTO jobqueue.jobs (job_type, priority, queue) VALUES ('now', %s, %s) RETURNING id",
                (level, queue),
            ).fetchone()[0]
            for level, queue in ((3, "default"), (2, "other"), (0, "other"), (2, "default"), (3, "other"))
        ]
        conn.execute("ANALYZE jobqueue.jobs")
        for _ in range(3):  # past the first, planning executions of the prepared statement
            conn.execute("SAVEPOINT probe")
            taken = [row[0] for row in conn.execute(queries()["job_claim"], CLAIM, prepare=True).fetchall()]
            conn.execute("ROLLBACK TO SAVEPOINT probe")
        plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + queries()["job_claim"], CLAIM).fetchone()[0]
        conn.rollback()
    assert taken == [runnable[2], runnable[1], runnable[3], runnable[0]]
    buffers = plan[0]["Plan"]["Shared Hit Blocks"] + plan[0]["Plan"]["Shared Read Blocks"]
    assert buffers < 150, buffers


def _claim_reads(conn, params: dict, name: str = "job_claim") -> tuple[list[tuple], int]:
    """The claim's rows (rolled back) and the pages its executed plan read."""
    conn.execute("SAVEPOINT probe")
    rows = conn.execute(queries()[name], params).fetchall()
    conn.execute("ROLLBACK TO SAVEPOINT probe")
    plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + queries()[name], params).fetchone()[0]
    conn.execute("ROLLBACK TO SAVEPOINT probe")
    return rows, plan[0]["Plan"]["Shared Hit Blocks"] + plan[0]["Plan"]["Shared Read Blocks"]


def test_a_long_run_of_jobs_the_worker_does_not_serve_in_front_of_its_own_costs_its_claims_nothing(dsn):
    """Issue 17 §5: a claim takes only the job types its worker serves, and 50,000 jobs of a type
    nobody serves in front of them (another app's backlog, its workers down) are not walked by
    every claim: it reads the head, sees a type it does not serve, and claims by type. Before the
    filter the claim took the other app's jobs; filtered in the ordered scan alone, each claim read
    ~1,800 pages (10 ms) to get past them. One queue, several queues and weighted claims alike."""
    with psycopg.connect(dsn) as conn:
        for queue in ("default", "other"):
            conn.execute(
                "INSERT INTO jobqueue.jobs (job_type, queue) SELECT 'theirs', %s FROM generate_series(1, 50000)",
                (queue,),
            )
            conn.execute(
                "INSERT INTO jobqueue.jobs (job_type, queue) SELECT CASE WHEN g %% 2 = 0 THEN 'a' ELSE 'b' END, "
                "%s FROM generate_series(1, 1000) AS g",
                (queue,),
            )
        conn.execute("ANALYZE jobqueue.jobs")
        first = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM jobqueue.jobs WHERE queue = 'default' AND job_type <> 'theirs' ORDER BY seq LIMIT 10"
            ).fetchall()
        ]
        reads = {}
        for name, params in (
            ("one queue", CLAIM | {"queues": ["default"], "limit": 10}),
            ("two queues", CLAIM | {"queues": ["default", "other"], "limit": 10}),
            ("a served type blocked", CLAIM | {"queues": ["default"], "limit": 10, "blocked": ["b"]}),
            # an open breaker's backlog in front, or a limited type claimed on its own
            (
                "the head blocked",
                CLAIM | {"queues": ["default"], "limit": 10, "blocked": ["theirs"], "served": ["theirs", "a", "b"]},
            ),
            (
                "only a and b",
                CLAIM | {"queues": ["default"], "limit": 10, "only": ["a", "b"], "served": ["theirs", "a", "b"]},
            ),
        ):
            rows, reads[name] = _claim_reads(conn, params | {"served": params["served"] or ["a", "b"]})
            assert {row[2] for row in rows} <= {"a", "b"} and len(rows) == 10, name
            if name in ("one queue", "the head blocked", "only a and b"):
                assert [row[0] for row in rows] == first  # still in submission order across the types
            if name == "a served type blocked":
                assert {row[2] for row in rows} == {"a"}
        weighted = {
            "worker_id": "w",
            "lease_seconds": 30,
            "now": None,
            "blocked": [],
            "served": ["a", "b"],
            "queues": ["default", "other"],
            "priorities": [2, 2],
            "quotas": [6, 4],
            **Deadlines().params(),
        }
        rows, reads["weighted"] = _claim_reads(conn, weighted, "job_claim_weighted")
        assert len(rows) == 10 and {row[2] for row in rows} <= {"a", "b"}
        conn.rollback()
    assert max(reads.values()) < 400, reads  # the ordered scan past them read ~1,800 per queue


def test_jobs_of_types_the_worker_serves_interleaved_with_others_are_claimed_in_order_by_either_path(dsn):
    """Head served: the ordered scan, testing each entry's type; head not served: by type, merged."""
    with psycopg.connect(dsn) as conn:
        types = ["theirs", "a", "theirs", "b", "theirs", "a", "b", "theirs"]
        ids = [
            conn.execute("INSERT INTO jobqueue.jobs (job_type) VALUES (%s) RETURNING id", (t,)).fetchone()[0]
            for t in types
        ]
        ours = [i for i, t in zip(ids, types) if t != "theirs"]
        rows, _ = _claim_reads(conn, CLAIM | {"queues": ["default"], "limit": 3, "served": ["a", "b"]})
        assert [r[0] for r in rows] == ours[:3]  # head 'theirs': by type
        conn.execute("DELETE FROM jobqueue.jobs WHERE id = %s", (ids[0],))
        rows, _ = _claim_reads(conn, CLAIM | {"queues": ["default"], "limit": 3, "served": ["a", "b"]})
        assert [r[0] for r in rows] == ours[:3]  # head 'a': the ordered scan
        rows, _ = _claim_reads(conn, CLAIM | {"queues": ["default"], "limit": 10, "served": []})
        assert rows == []  # an app without tasks claims nothing
        conn.rollback()


def test_with_a_served_head_the_claim_walks_the_claim_index_in_order_never_sorting_a_types_backlog(dsn):
    """1,000 served jobs at the head, 50,000 of another type behind: the ordered scan takes the
    first ten. Were the served types an index condition, the planner (knowing them rare) would sort
    every runnable job of those types out of jobs_claim_type_idx instead — a cost that grows with
    the worker's own backlog (it did, until the filter was written not to be one)."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO jobqueue.jobs (job_type) SELECT CASE WHEN g <= 1000 THEN 'mine' ELSE 'theirs' END "
            "FROM generate_series(1, 51000) AS g"
        )
        conn.execute("ANALYZE jobqueue.jobs")
        params = CLAIM | {"queues": ["default"], "limit": 10, "served": ["mine"]}
        conn.execute("SAVEPOINT probe")
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + queries()["job_claim"], params).fetchone()[0]
        conn.rollback()
    ran = [node for node in _nodes(plan[0]["Plan"], "jobs_claim_type_idx") if node.get("Actual Loops")]
    walked = [node for node in _nodes(plan[0]["Plan"], "jobs_claim_idx") if node.get("Actual Rows")]
    assert ran == [] and walked, plan


def test_a_one_queue_claim_locks_only_the_rows_it_takes(dsn):
    """Workers woken together skip each other's locked rows: a claim must not hold rows it does
    not take (another worker would pass over them for lower-priority ones meanwhile)."""
    with psycopg.connect(dsn, autocommit=True) as setup:
        for level, n in ((0, 3), (1, 3), (2, 3), (3, 20)):
            setup.execute(
                "INSERT INTO jobqueue.jobs (job_type, priority) SELECT 'x', %s FROM generate_series(1, %s)", (level, n)
            )
    with psycopg.connect(dsn) as claimer, psycopg.connect(dsn) as other:
        taken = claimer.execute(queries()["job_claim"], dict(CLAIM, queues=["default"], limit=10)).fetchall()
        free = other.execute(
            "SELECT count(*) FROM (SELECT id FROM jobqueue.jobs WHERE state = 'pending' FOR UPDATE SKIP LOCKED) AS s"
        ).fetchone()[0]
        claimer.rollback()
    assert [row[4] for row in taken] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    assert free == 29 - 10


def test_a_claim_resuming_after_its_last_job_does_not_walk_the_dead_entries_behind_it(dsn):
    """A drained backlog leaves dead claim-index entries in front of the runnable jobs, and a
    held snapshot (a long report query) keeps vacuum and the scan's hints from clearing them: a
    claim from the start walks them all, a claim resuming after the last job it took does not."""
    from jobqueue.db import gateway as db
    from jobqueue.store import jobs as job_store

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO jobqueue.jobs (job_type) SELECT 'x' FROM generate_series(1, 30000)")
        conn.execute("VACUUM ANALYZE jobqueue.jobs")
        with psycopg.connect(dsn) as holder:
            holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            holder.execute("SELECT count(*) FROM jobqueue.jobs")  # the snapshot stays until rollback
            last = None
            for _ in range(100):  # 20,000 claimed and completed behind the held snapshot
                jobs = db.run_sync(
                    conn, job_store.claim(worker_id="w", queues=["default"], limit=200, lease_seconds=30)
                )
                db.run_sync(
                    conn,
                    job_store.complete_many(
                        worker_id="w",
                        ids=[j.id for j in jobs],
                        attempts=[j.attempt for j in jobs],
                        results=[None] * len(jobs),
                        durations=[1.0] * len(jobs),
                    ),
                )
                last = jobs[-1].order_key
            params = dict(CLAIM, queues=["default"], limit=200)
            resumed = dict(params, after_run_at=[None, None, last[0], None], after_seq=[None, None, last[1], None])
            reads = {}
            for name, claim in (("from the start", params), ("resumed", resumed)):
                conn.execute("BEGIN")
                plan = conn.execute(
                    "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + queries()["job_claim"], claim
                ).fetchone()[0]
                conn.execute("ROLLBACK")
                probes = _nodes(plan[0]["Plan"], "jobs_claim_idx")
                reads[name] = sum(node["Shared Hit Blocks"] + node["Shared Read Blocks"] for node in probes)
            holder.rollback()
    assert reads["resumed"] * 20 < reads["from the start"], reads


def _nodes(node: dict, index: str) -> list[dict]:
    """The plan nodes (under ``node``) that scan ``index``."""
    found = [node] if node.get("Index Name") == index else []
    for child in node.get("Plans", []):
        found += _nodes(child, index)
    return found


def test_a_job_put_back_behind_the_resume_point_is_claimed_within_a_second(dsn, conn):
    """Resuming claims skip what lies behind their mark; a job put back there (its lease
    reclaimed) is found by the full scan each worker makes at least every second."""
    from jobqueue.db import gateway as db
    from jobqueue.store import jobs as job_store
    from tests.support import apps
    from tests.support.waiting import wait_until
    from tests.support.workers import WorkerThread, test_settings

    early = conn.execute("SELECT jobqueue.enqueue('slow', '{\"seconds\": 0.01}')").fetchone()[0]
    db.run_sync(conn, job_store.claim(worker_id="gone", queues=["default"], limit=1, lease_seconds=30))
    conn.execute(
        "INSERT INTO jobqueue.jobs (job_type, payload) SELECT 'slow', '{\"seconds\": 0.01}' "
        "FROM generate_series(1, 3000)"
    )
    with WorkerThread(apps.queue, test_settings(dsn, concurrency=20)):
        wait_until(
            lambda: conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'completed'").fetchone()[0] > 300,
            timeout=20,
        )
        db.run_sync(conn, job_store.reclaim_expired(now=datetime.now(timezone.utc) + timedelta(seconds=31)))
        put_back = time.monotonic()
        wait_until(
            lambda: (
                conn.execute("SELECT state FROM jobqueue.jobs WHERE id = %s", (early,)).fetchone()[0] == "completed"
            ),
            timeout=10,
        )
        found_in = time.monotonic() - put_back
        still_pending = conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state = 'pending'").fetchone()[0]
    assert found_in < 2.0 and still_pending > 0  # taken while the backlog was still being drained
    apps.runs.clear()


def test_the_claim_probes_the_claim_index_and_updates_by_primary_key(dsn):
    with psycopg.connect(dsn) as conn:
        conn.execute("""INSERT INTO jobqueue.jobs (job_type, priority, state, finished_at)
                        SELECT 'x', (g % 4), CASE WHEN g % 10 = 0 THEN 'pending' ELSE 'completed' END, now()
                        FROM generate_series(1, 20000) g""")
        conn.execute("ANALYZE jobqueue.jobs")
        plan = _plan(conn, "job_claim", dict(CLAIM, limit=100))
        conn.rollback()
    assert "jobs_claim_idx" in plan and "jobs_pkey" in plan
    assert seq_scanned(plan) <= SMALL_TABLES


def test_acks_find_jobs_by_primary_key_even_with_stale_statistics(dsn):
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO jobqueue.jobs (job_type) SELECT 'x' FROM generate_series(1, 20000)")
        conn.execute("ANALYZE jobqueue.jobs")  # statistics say: nothing is processing
        conn.execute(
            "UPDATE jobqueue.jobs SET state = 'processing', attempts = 1, locked_until = now() WHERE seq <= 5000"
        )
        ids = [r[0] for r in conn.execute("SELECT id FROM jobqueue.jobs WHERE seq <= 200").fetchall()]
        params = {
            "worker_id": "w",
            "ids": ids,
            "attempts": [1] * len(ids),
            "results": [None] * len(ids),
            "durations": [1.0] * len(ids),
        }
        plan = _plan(conn, "job_complete_many", params)
        conn.rollback()
    assert "jobs_pkey" in plan
    assert "jobs_lease_idx" not in plan and '"Seq Scan"' not in plan


def test_lean_states_keeps_every_jobs_values_and_moves_the_transition_columns_last(empty_dsn):
    """0016 re-creates the columns claims and acks write at the end of the row: every job keeps its
    values, nobody listening to job events hears a transition, and the columns come last."""
    moved = [
        "attempts",
        "started_at",
        "locked_by",
        "state",
        "locked_until",
        "deadline_at",
        "updated_at",
        "finished_at",
        "duration_ms",
    ]
    migrate.upgrade(empty_dsn, "0016_lean_states-1")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("""INSERT INTO jobqueue.jobs (job_type, queue, state, attempts, locked_by, locked_until,
                                                   deadline_at, started_at, finished_at, duration_ms, updated_at)
                        SELECT 't', 'q', (ARRAY['pending', 'processing', 'completed', 'failed', 'dead_letter',
                                                'cancelled'])[1 + g % 6],
                               g % 3, 'w' || g, now() + g * interval '1 s', now() + interval '1 h',
                               now() - interval '1 h', now() - g * interval '1 min', g * 1.5,
                               now() - g * interval '1 s'
                        FROM generate_series(1, 60) g""")
        conn.execute("INSERT INTO jobqueue.event_listeners VALUES ('test', now() + interval '1 hour')")
        select = f"SELECT id, {', '.join(moved)} FROM jobqueue.jobs ORDER BY id"
        before = conn.execute(select).fetchall()
        heard: list[str] = []
        conn.add_notify_handler(lambda n: heard.append(n.payload))
        conn.execute("LISTEN jobqueue_events")
        migrate.upgrade(empty_dsn, "0016_lean_states")  # later revisions may add columns of their own after these
        assert conn.execute(select).fetchall() == before
        columns = [
            r[0]
            for r in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = 'jobqueue.jobs'::regclass AND attnum > 0 "
                "AND NOT attisdropped ORDER BY attnum"
            )
        ]
        assert columns[-len(moved) :] == moved
        assert (
            "fillfactor=60"
            in conn.execute("SELECT reloptions::text FROM pg_class WHERE oid = 'jobqueue.jobs'::regclass").fetchone()[0]
        )
        conn.execute("SELECT 1")  # collect any notification the migration's commit sent
        assert heard == []
        assert conn.execute("SELECT count(*) FROM jobqueue.dead_letters").fetchone()[0] == 10
