"""Listing with bounded work per page: each page examines at most ``scan`` rows, so a filter that
matches few jobs gives short (even empty) pages with a cursor, and following the cursors lists
exactly the matching jobs, newest first, once each — for every filter, on both walks (jobs_pkey,
and jobs_state_listing_idx for failed, dead_letter and cancelled)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

import pytest

from jobqueue.client import Client
from jobqueue.model.errors import ValidationError
from jobqueue.model.jobs import Priority
from tests.support.factories import make_job

STATES = ("pending", "completed", "failed", "dead_letter", "cancelled")


def _every_page(client: Client, *, limit: int, scan: int, **filters) -> tuple[list, list[int]]:
    """All pages of a listing: the ids in order, and how many jobs each page held."""
    ids, sizes, cursor = [], [], None
    while True:
        page = client.list_jobs(limit=limit, scan=scan, cursor=cursor, **filters)
        ids += [job.id for job in page.jobs]
        sizes.append(len(page.jobs))
        if page.next_cursor is None:
            return ids, sizes
        assert len(sizes) < 200, "the cursors never ended"
        cursor = page.next_cursor


@pytest.fixture
def jobs(conn) -> list[dict]:
    """60 jobs: two producers, two queues, two types, every listed state, some scheduled."""
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    made = []
    for n in range(60):
        row = dict(
            state=STATES[n % 5],
            queue=("a", "b")[n % 2],
            job_type=("x", "y")[n % 3 == 0],
            producer_id=("p1", "p2")[n % 7 == 0],
            priority=n % 4,
            run_at=later if n % 4 == 1 else None,
        )
        made.append(dict(row, id=make_job(conn, **row)))
    return made


def test_every_filter_combination_pages_through_exactly_its_jobs(conn, jobs):
    values = dict(
        state=("dead_letter", "pending"),
        queue=("a",),
        job_type=("y",),
        priority=("high",),
        producer_id=("p2",),
        scheduled=(True,),
    )
    expected_scan_cut = 0
    with Client(conn.info.dsn) as client:
        for names in itertools.chain.from_iterable(itertools.combinations(values, k) for k in range(len(values) + 1)):
            for chosen in itertools.product(*(values[name] for name in names)):
                filters = dict(zip(names, chosen))
                wanted = [
                    j["id"]
                    for j in sorted(jobs, key=lambda j: j["id"], reverse=True)
                    if all(_matches(j, name, value) for name, value in filters.items())
                ]
                ids, sizes = _every_page(client, limit=3, scan=4, **filters)
                assert ids == wanted, filters
                expected_scan_cut += any(size < 3 for size in sizes[:-1])
    assert expected_scan_cut > 0  # some pages were cut short by the budget, and the cursors carried on


def _matches(job: dict, name: str, value) -> bool:
    if name == "scheduled":
        return (job["run_at"] is not None) == value
    if name == "priority":
        return job["priority"] == int(Priority.parse(value))
    return job[name] == value


def test_a_page_examines_at_most_its_budget(conn):
    """Ten jobs of p1 under 100 newer jobs of p2: a page of p1's jobs with a budget of 40 rows
    holds none of them and says where to go on; the third page reaches them."""
    conn.execute("INSERT INTO jobqueue.jobs (job_type, producer_id) SELECT 't', 'p1' FROM generate_series(1, 10)")
    conn.execute("INSERT INTO jobqueue.jobs (job_type, producer_id) SELECT 't', 'p2' FROM generate_series(1, 100)")
    with Client(conn.info.dsn) as client:
        first = client.list_jobs(limit=5, scan=40, producer_id="p1")
        second = client.list_jobs(limit=5, scan=40, producer_id="p1", cursor=first.next_cursor)
        third = client.list_jobs(limit=5, scan=40, producer_id="p1", cursor=second.next_cursor)
        ids, _ = _every_page(client, limit=5, scan=40, producer_id="p1")
    assert (first.jobs, second.jobs) == ([], []) and first.next_cursor and second.next_cursor
    assert len(third.jobs) == 5 and {job.producer_id for job in third.jobs} == {"p1"}
    assert len(ids) == 10


def test_the_dead_letter_listing_reads_only_dead_jobs(conn):
    """Two dead jobs under 50 newer completed ones: one page with a budget as small as the page
    finds both, through jobs_state_listing_idx."""
    dead = [make_job(conn, state="dead_letter") for _ in range(2)]
    conn.execute(
        "INSERT INTO jobqueue.jobs (job_type, state, finished_at) "
        "SELECT 't', 'completed', now() FROM generate_series(1, 50)"
    )
    with Client(conn.info.dsn) as client:
        page = client.list_jobs(limit=5, scan=5, state="dead_letter")
    assert [job.id for job in page.jobs] == dead[::-1] and page.next_cursor is None


def test_a_bad_budget_is_refused(conn):
    with Client(conn.info.dsn) as client:
        for scan in (0, 4, 100_001, "5", True):
            with pytest.raises(ValidationError) as refused:
                client.list_jobs(limit=5, scan=scan)
            assert refused.value.field == "scan"
