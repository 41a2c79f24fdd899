"""No listing page does unbounded work: with 1,000,000 jobs, every combination of the filters
``GET /jobs`` and ``/admin/dlq`` accept — each given a value that matches nothing, so the page
examines its whole budget, the worst case — walks an index in id order (jobs_pkey backwards, or
jobs_state_listing_idx for failed, dead_letter and cancelled), examines at most the budget, sorts
nothing and reads a bounded number of buffers. Checked with the plan a first execution gets
(custom) and the one a prepared statement may settle on (generic), where "IS NULL OR" filters can
no longer be folded away."""

from __future__ import annotations

import itertools
import json
import re

import psycopg
import pytest

from jobqueue.client.admin import LIST_SCAN
from jobqueue.db.queries import queries

ROWS = 1_000_000
#: Buffers one page of the jobs_pkey walk may touch: 5,000 index entries and the heap pages
#: behind them (ids follow the heap's order): 138 here. A walk ignoring the budget reads ~40,000.
MAX_BUFFERS = 400
#: The state index walk: its rows lie scattered over the heap, a page each at worst (here all
#: 1,000 dead jobs are examined when no other filter matches: 1,025).
MAX_STATE_BUFFERS = LIST_SCAN + 100

#: The million-job database is made once per module: on one of `make test`'s xdist workers.
pytestmark = pytest.mark.xdist_group("million_jobs")

#: Values that match no job, so every page examines its whole budget.
NOTHING = dict(queue="nowhere", job_type="nothing", priority=0, producer_id="nobody", scheduled=True)


@pytest.fixture(scope="module")
def million(pg_server):
    name = pg_server.create_database()
    dsn = pg_server.dsn_for(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Time-ordered ids as enqueue makes them; one job in 1,000 dead, failed or cancelled, the
        # rest completed, all of priority 2 and run_at in the past (so the NOTHING values match none).
        conn.execute(
            """
            INSERT INTO jobqueue.jobs (id, job_type, queue, producer_id, state, attempts, priority, run_at,
                                       finished_at)
            SELECT jobqueue.uuid_v7(g), 't' || g %% 5, 'q' || g %% 10, 'p' || g %% 100,
                   CASE g %% 1000 WHEN 7 THEN 'dead_letter' WHEN 8 THEN 'failed' WHEN 9 THEN 'cancelled'
                                 ELSE 'completed' END,
                   1, 2, now() - interval '1 day', now()
            FROM generate_series(1, %s) g""",
            (ROWS,),
        )
        conn.execute("VACUUM ANALYZE jobqueue.jobs")
    yield dsn
    pg_server.drop_database(name)


def _cases():
    """Every subset of the filters, with state absent, 'pending' (the pkey walk) or 'dead_letter'
    (the state index walk)."""
    names = list(NOTHING)
    for k in range(len(names) + 1):
        for subset in itertools.combinations(names, k):
            for state in (None, "pending", "dead_letter"):
                yield dict({name: NOTHING[name] for name in subset}, state=state)


def _params(filters: dict) -> dict:
    base = dict(
        limit=50,
        scan=LIST_SCAN,
        before=None,
        state=None,
        queue=None,
        job_type=None,
        priority=None,
        producer_id=None,
        scheduled=None,
    )
    return dict(base, **filters)


def _query_name(filters: dict) -> str:
    return "job_list_in_state" if filters["state"] == "dead_letter" else "job_list"


def _generic_plan(conn: psycopg.Connection, name: str, params: dict) -> dict:
    """EXPLAIN of the statement prepared with $n parameters under force_generic_plan."""
    order: list[str] = []

    def number(match: re.Match) -> str:
        if match.group(1) not in order:
            order.append(match.group(1))
        return f"${order.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, queries()[name])
    conn.execute(f"PREPARE listing AS {text}")
    try:
        with psycopg.ClientCursor(conn) as cur:
            cur.execute(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE listing({', '.join(['%s'] * len(order))})",
                [params[p] for p in order],
            )
            return cur.fetchone()[0][0]
    finally:
        conn.execute("DEALLOCATE listing")


def _custom_plan(conn: psycopg.Connection, name: str, params: dict) -> dict:
    return conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + queries()[name], params).fetchone()[0][0]


def _walk(node: dict) -> list[dict]:
    return [node] + [n for child in node.get("Plans", []) for n in _walk(child)]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["custom", "generic"])
def test_every_filter_combination_reads_a_bounded_page_of_a_million_jobs(million, mode):
    failures = []
    with psycopg.connect(million, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = " + ("force_generic_plan" if mode == "generic" else "auto"))
        for filters in _cases():
            name, params = _query_name(filters), _params(filters)
            plan = (_generic_plan if mode == "generic" else _custom_plan)(conn, name, params)
            nodes = _walk(plan["Plan"])
            scans = [n for n in nodes if n.get("Relation Name") == "jobs"]
            index = "jobs_state_listing_idx" if name == "job_list_in_state" else "jobs_pkey"
            buffers = plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"]
            shape = [(n["Node Type"], n.get("Index Name"), n.get("Scan Direction")) for n in scans]
            ok = (
                shape == [("Index Scan", index, "Backward")]
                and scans[0]["Actual Rows"] <= LIST_SCAN
                and not any(n["Node Type"] in ("Sort", "Incremental Sort") for n in nodes)
                and buffers <= (MAX_STATE_BUFFERS if name == "job_list_in_state" else MAX_BUFFERS)
            )
            if not ok:
                failures.append((filters, shape, scans[0]["Actual Rows"] if scans else None, buffers))
    assert not failures, json.dumps(failures, default=str, indent=1)


@pytest.mark.slow
def test_a_page_of_a_million_jobs_goes_on_where_the_budget_ran_out(million):
    """The cursor of a page that found nothing is the last row it examined: the next page starts
    there, and with the state index the dead-letter queue fills its pages."""
    from jobqueue.client import Client

    with Client(million) as client:
        first = client.list_jobs(limit=50, producer_id="nobody")
        second = client.list_jobs(limit=50, producer_id="nobody", cursor=first.next_cursor)
        own = client.list_jobs(limit=50, producer_id="p7")
        dead = client.list_jobs(limit=50, state="dead_letter")
    assert first.jobs == [] and second.jobs == [] and first.next_cursor and second.next_cursor
    assert second.next_cursor < first.next_cursor  # older and older
    assert len(own.jobs) == 50 and {job.producer_id for job in own.jobs} == {"p7"}
    assert len(dead.jobs) == 50 and {job.state.value for job in dead.jobs} == {"dead_letter"}
