"""Backpressure: 429 above the soft limit (token bucket per producer), 503 at the hard limit,
optional shedding of low-priority jobs; limits per queue; cached depths, not a count per request."""

from __future__ import annotations

import asyncio
import time

import httpx
import psycopg

from jobqueue.api.backpressure import Backpressure, TokenBucket
from jobqueue.api.store_access import ApiStore
from jobqueue.client import AsyncClient
from jobqueue.model.quotas import WaitingCounts
from tests.integration.api.conftest import api_settings
from tests.support.factories import count_jobs
from tests.support.waiting import wait_until


def fill(conn, queue: str, n: int) -> None:
    conn.execute("INSERT INTO jobqueue.jobs (job_type, queue) SELECT 'x', %s FROM generate_series(1, %s)", (queue, n))


def client_for(server, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"})


def test_token_bucket_refills_at_its_rate():
    now = [0.0]
    bucket = TokenBucket(rate=10, burst=5, clock=lambda: now[0])
    assert [bucket.take(1) for _ in range(5)] == [0.0] * 5
    assert bucket.take(1) == 0.1
    now[0] += 0.25
    assert bucket.take(2) == 0.0 and bucket.take(1) > 0
    assert bucket.take(50) > 0  # bigger than the burst: waits for a full bucket, not forever


def test_soft_limit_rate_limits_each_producer_with_429(start_api, keys, conn):
    server = start_api(api_soft_limit=5, api_hard_limit=1000, api_rate_limit=1.0, api_rate_burst=3)
    fill(conn, "busy", 10)
    alice, bob = client_for(server, keys["alice"]), client_for(server, keys["bob"])
    wait_until(
        lambda: alice.post("/jobs", json={"job_type": "x", "queue": "busy"}).status_code == 429, message="depth refresh"
    )
    before = count_jobs(conn, "busy")
    refused = alice.post("/jobs", json={"job_type": "x", "queue": "busy"})
    assert refused.status_code == 429 and refused.json()["error"] == "rate_limited"
    assert int(refused.headers["Retry-After"]) >= 1
    assert count_jobs(conn, "busy") == before
    assert [bob.post("/jobs", json={"job_type": "x", "queue": "busy"}).status_code for _ in range(4)] == [
        201,
        201,
        201,
        429,
    ]
    assert alice.post("/jobs", json={"job_type": "x", "queue": "calm"}).status_code == 201  # other queues unaffected


def test_hard_limit_refuses_with_503_and_writes_nothing(start_api, keys, conn):
    server = start_api(api_soft_limit=5, api_hard_limit=10, api_rate_limit=1000.0, api_rate_burst=1000)
    fill(conn, "full", 10)
    alice = client_for(server, keys["alice"])
    wait_until(
        lambda: alice.post("/jobs", json={"job_type": "x", "queue": "full"}).status_code == 503, message="depth refresh"
    )
    before = count_jobs(conn, "full")
    response = alice.post("/jobs/batch", json={"jobs": [{"job_type": "x", "queue": "full"}]})
    assert response.status_code == 503 and response.json()["error"] == "queue_full"
    assert response.headers["Retry-After"] == "2"
    assert count_jobs(conn, "full") == before
    conn.execute("DELETE FROM jobqueue.jobs WHERE queue = 'full'")
    wait_until(
        lambda: alice.post("/jobs", json={"job_type": "x", "queue": "full"}).status_code == 201,
        message="recovery below the limit",
    )


def test_admitted_jobs_count_at_once_between_refreshes(start_api, keys, conn):
    server = start_api(api_soft_limit=3, api_hard_limit=4, api_depth_refresh=60.0)
    alice = client_for(server, keys["alice"])
    statuses = [alice.post("/jobs", json={"job_type": "x", "queue": "burst"}).status_code for _ in range(6)]
    assert statuses == [201, 201, 201, 201, 503, 503]
    assert count_jobs(conn, "burst") == 4


def test_low_priority_jobs_are_shed_above_the_soft_limit(start_api, keys, conn):
    server = start_api(api_soft_limit=2, api_hard_limit=100, api_shed_low=True)
    fill(conn, "shed", 5)
    alice = client_for(server, keys["alice"])
    wait_until(
        lambda: alice.post("/jobs", json={"job_type": "x", "queue": "shed", "priority": "low"}).status_code == 503,
        message="depth refresh",
    )
    response = alice.post("/jobs", json={"job_type": "x", "queue": "shed", "priority": "low"})
    assert response.json()["error"] == "shed" and "Retry-After" in response.headers
    assert alice.post("/jobs", json={"job_type": "x", "queue": "shed", "priority": "high"}).status_code == 201


def test_per_queue_limits_override_the_defaults(start_api, keys, conn):
    server = start_api()
    admin = client_for(server, keys["admin"])
    assert admin.put("/queues/tiny/limits", json={"soft_limit": 1, "hard_limit": 2}).status_code == 200
    fill(conn, "tiny", 2)
    alice = client_for(server, keys["alice"])
    wait_until(
        lambda: alice.post("/jobs", json={"job_type": "x", "queue": "tiny"}).status_code == 503,
        message="per-queue hard limit",
    )
    assert alice.post("/jobs", json={"job_type": "x", "queue": "roomy"}).status_code == 201


def test_requests_use_the_cached_depth_not_a_count_of_their_own(start_api, keys, conn):
    server = start_api(api_soft_limit=5, api_hard_limit=10, api_depth_refresh=3600.0)
    alice = client_for(server, keys["alice"])
    assert alice.post("/jobs", json={"job_type": "x", "queue": "q"}).status_code == 201  # first refresh done
    fill(conn, "q", 50)  # behind the API's back: only the next refresh (an hour away) would see it
    assert alice.post("/jobs", json={"job_type": "x", "queue": "q"}).status_code == 201


def test_depth_is_recounted_only_when_submissions_could_reach_a_limit(dsn, conn):
    """The count walks every runnable job, so the refresher skips it while the job sequence shows
    too few submissions to bring any queue to its soft limit; it counts again once they could,
    and after JOBQUEUE_API_DEPTH_MAX_AGE for what the sequence cannot see (here: a delete)."""
    now = [0.0]
    settings = api_settings(dsn, api_soft_limit=10, api_hard_limit=20, api_depth_max_age=30.0)

    async def scenario() -> list[int]:
        client = AsyncClient(settings=settings, pool_size=1)
        await client.open()
        try:
            backpressure = Backpressure.of(ApiStore(client), settings, clock=lambda: now[0])
            seen = []
            fill(conn, "deep", 6)
            await backpressure.refresh()
            seen.append(backpressure.depths.get("deep", 0))  # first refresh: counted
            await backpressure.refresh()
            seen.append(backpressure.depths.get("deep", 0))  # counted again: growth is measured from
            # the count before the last one, and before the first there was none
            conn.execute("DELETE FROM jobqueue.jobs WHERE queue = 'deep'")
            fill(conn, "deep", 2)  # sequence +2: 6 + 2 < 10, the old depth stands
            await backpressure.refresh()
            seen.append(backpressure.depths.get("deep", 0))
            fill(conn, "deep", 2)  # sequence +4 since the counts: 6 + 4 reaches the soft limit
            await backpressure.refresh()
            seen.append(backpressure.depths.get("deep", 0))
            conn.execute("DELETE FROM jobqueue.jobs WHERE queue = 'deep'")
            await backpressure.refresh()  # invisible to the sequence, and the count is fresh
            seen.append(backpressure.depths.get("deep", 0))
            now[0] += 30.0
            await backpressure.refresh()  # too old: counted again
            seen.append(backpressure.depths.get("deep", 0))
            return seen
        finally:
            await client.close()

    assert asyncio.run(scenario()) == [6, 6, 6, 4, 4, 0]


def test_the_count_is_every_waiting_job_scheduled_included_and_the_queues_workers_serve(dsn, conn):
    """What backpressure counts: pending (due or not) and waiting for a retry, at every level; not
    running or finished jobs. Queues a live worker serves are listed even with nothing waiting."""
    conn.execute("""INSERT INTO jobqueue.jobs (job_type, queue, priority, state, run_at, attempts) VALUES
                    ('x', 'mix', 0, 'pending', now(), 0), ('x', 'mix', 2, 'pending', now(), 0),
                    ('x', 'mix', 3, 'failed', now() - interval '1 second', 1),
                    ('x', 'mix', 1, 'pending', now() + interval '1 day', 0),
                    ('x', 'mix', 0, 'failed', now() + interval '1 minute', 1),
                    ('x', 'mix', 0, 'processing', now(), 1), ('x', 'mix', 0, 'completed', now(), 1),
                    ('x', 'other', 2, 'pending', now() + interval '3000 days', 0)""")
    conn.execute(
        "INSERT INTO jobqueue.workers (id, host, pid, queues, concurrency) VALUES ('w', 'h', 1, '{idle,other}', 1)"
    )
    conn.execute(
        "INSERT INTO jobqueue.workers (id, host, pid, queues, concurrency, last_heartbeat) "
        "VALUES ('gone', 'h', 2, '{stale}', 1, now() - interval '2 minutes')"
    )

    async def counts(cap: int) -> WaitingCounts:
        async with AsyncClient(dsn, pool_size=1) as client:
            return await ApiStore(client).waiting_counts(cap=cap, stale_seconds=60)

    assert asyncio.run(counts(100)) == WaitingCounts({"mix": 5, "other": 1, "idle": 0}, frozenset({"idle", "other"}))
    assert asyncio.run(counts(2)).depths["mix"] == 2


def test_jobs_uncommitted_during_a_count_are_still_growth_after_it(dsn, conn):
    """The sequence moves at insert, the count sees commits: 8 jobs inserted before a count and
    committed after it must still bring the next check to a count."""
    now = [0.0]
    settings = api_settings(dsn, api_soft_limit=10, api_hard_limit=20, api_depth_max_age=30.0)

    async def scenario() -> list[int]:
        async with AsyncClient(dsn, settings=settings, pool_size=1) as client:
            backpressure = Backpressure.of(ApiStore(client), settings, clock=lambda: now[0])
            fill(conn, "open", 2)
            await backpressure.refresh()
            await backpressure.refresh()
            with psycopg.connect(dsn) as producer:  # a producer's transaction, open across a count
                fill(producer, "open", 8)
                now[0] += 30.0
                await backpressure.refresh()
                during = backpressure.depths.get("open", 0)
            await backpressure.refresh()
            return [during, backpressure.depths.get("open", 0)]

    assert asyncio.run(scenario()) == [2, 10]


def test_submissions_the_database_refused_or_that_existed_do_not_use_up_the_limit(start_api, keys, conn):
    server = start_api(api_soft_limit=3, api_hard_limit=3, api_depth_refresh=3600.0)
    alice = client_for(server, keys["alice"])
    refused = [alice.post("/jobs", json={"job_type": "x\u0000y", "queue": "tight"}).status_code for _ in range(3)]
    first = alice.post("/jobs", json={"job_type": "x", "queue": "tight", "idempotency_key": "once"})
    again = [
        alice.post("/jobs", json={"job_type": "x", "queue": "tight", "idempotency_key": "once"}).status_code
        for _ in range(3)
    ]
    rest = [alice.post("/jobs", json={"job_type": "x", "queue": "tight"}).status_code for _ in range(3)]
    assert (refused, first.status_code, again) == ([422] * 3, 201, [200] * 3)
    assert rest == [201, 201, 503]
    assert count_jobs(conn, "tight") == 3


def refreshed_depth(dsn: str, failure: Exception, failures: int, *, every: float = 0.02) -> int:
    """Run the depth refresher while its first ``failures`` counts raise ``failure``; the depth of
    queue "steady" once a count got through (0 if none did within ~4 s)."""
    settings = api_settings(dsn, api_depth_refresh=every)

    async def scenario() -> int:
        async with AsyncClient(dsn, settings=settings, pool_size=1) as client:
            store = ApiStore(client)
            counts, calls = store.waiting_counts, []

            async def failing(*, cap: int, stale_seconds: float) -> WaitingCounts:
                calls.append(cap)
                if len(calls) <= failures:
                    raise failure
                return await counts(cap=cap, stale_seconds=stale_seconds)

            store.waiting_counts = failing  # type: ignore[method-assign]
            backpressure = Backpressure.of(store, settings)
            refresher = asyncio.create_task(backpressure.run())
            for _ in range(200):
                if backpressure.depths.get("steady"):
                    break
                await asyncio.sleep(every)
            refresher.cancel()
            assert len(calls) > failures
            return backpressure.depths.get("steady", 0)

    return asyncio.run(scenario())


def test_the_depth_refresher_survives_an_unexpected_error(dsn, conn, caplog):
    """A refresher that died would leave the depths only growing (every job admitted is added):
    after enough submissions every POST /jobs would be a 503 until a restart."""
    fill(conn, "steady", 3)
    with caplog.at_level("ERROR", logger="jobqueue.api.backpressure"):
        assert refreshed_depth(dsn, RuntimeError("a bug in a decoder"), 1) == 3
    assert "queue depth refresh failed" in caplog.text


def test_a_refresher_refused_for_want_of_a_grant_says_so_once_and_recovers(dsn, conn, caplog):
    """An API logged in under the wrong role logged a two-part traceback every second; now one line
    that names the grant it needs, and none again while the refusals go on."""
    from jobqueue.model.errors import PermissionDenied

    fill(conn, "steady", 2)
    with caplog.at_level("DEBUG", logger="jobqueue.api.backpressure"):
        assert refreshed_depth(dsn, PermissionDenied("permission denied for table queue_settings"), 5) == 2
    said = [record for record in caplog.records if "refresh refused" in record.getMessage()]
    assert len(said) == 1 and said[0].exc_info is None and "jobqueue_api" in said[0].getMessage()
    assert "Traceback" not in caplog.text


def test_scheduled_jobs_count_toward_the_limits(start_api, keys, conn):
    """Issue 18: backpressure counted runnable jobs only, so a queue with hard limit 10 held 40
    far-future jobs after 44 s, and kept growing: every recount found it empty."""
    server = start_api(api_soft_limit=10, api_hard_limit=10, api_depth_max_age=0.1)
    alice = client_for(server, keys["alice"])
    far = {"job_type": "x", "queue": "later", "delay_seconds": 3000 * 86400}
    statuses = []
    for _ in range(40):
        statuses.append(alice.post("/jobs", json=far).status_code)
        time.sleep(0.02)  # recounted every 0.1 s
    # (a job committed while a count ran may be counted twice until the next count: refused early, never late)
    assert statuses[:9] == [201] * 9 and set(statuses[9:]) <= {201, 503} and statuses.count(201) <= 10
    assert count_jobs(conn, "later") == statuses.count(201)
    fill(conn, "behind", 10)  # scheduled behind the API's back: counted too
    conn.execute("UPDATE jobqueue.jobs SET run_at = now() + interval '1 day' WHERE queue = 'behind'")
    wait_until(
        lambda: alice.post("/jobs", json={"job_type": "x", "queue": "behind"}).status_code == 503,
        message="a recount that sees the scheduled jobs",
    )
    refusal = alice.post("/jobs", json={"job_type": "x", "queue": "behind"}).json()
    assert refusal["error"] == "queue_full" and "waiting jobs, limit 10)" in refusal["message"]


def test_a_producer_cannot_invent_queue_names_past_the_cap(start_api, keys, conn, dsn):
    """Issue 18: three batches on new queue names grew /metrics from 49 KB to 23.7 MB. Past
    JOBQUEUE_API_MAX_QUEUES (1,000) queues holding jobs that no worker serves and no admin
    configured, a new name is 503 too_many_queues; the queues that exist keep taking jobs."""
    server = start_api()
    alice, admin = client_for(server, keys["alice"]), client_for(server, keys["admin"])
    created = alice.post("/jobs/batch", json={"jobs": [{"job_type": "x", "queue": f"n{n}"} for n in range(1000)]})
    assert created.status_code == 201
    more = alice.post("/jobs/batch", json={"jobs": [{"job_type": "x", "queue": f"m{n}"} for n in range(10)]})
    assert more.status_code == 503 and more.json()["error"] == "too_many_queues"
    assert "Retry-After" in more.headers
    assert alice.post("/jobs", json={"job_type": "x", "queue": "m0"}).status_code == 503
    assert count_jobs(conn) == 1000
    assert alice.post("/jobs", json={"job_type": "x", "queue": "n7"}).status_code == 201  # exists
    assert admin.put("/queues/declared/limits", json={"soft_limit": 5, "hard_limit": 10}).status_code == 200
    wait_until(
        lambda: alice.post("/jobs", json={"job_type": "x", "queue": "declared"}).status_code == 201,
        message="a queue an admin configured",
    )
    conn.execute(
        "INSERT INTO jobqueue.workers (id, host, pid, queues, concurrency) VALUES ('w1', 'h', 1, '{served}', 1)"
    )
    wait_until(
        lambda: alice.post("/jobs", json={"job_type": "x", "queue": "served"}).status_code == 201,
        message="a queue a live worker serves",
    )
    conn.execute("DELETE FROM jobqueue.jobs WHERE queue LIKE 'n%%'")
    wait_until(
        lambda: alice.post("/jobs", json={"job_type": "x", "queue": "m0"}).status_code == 201,
        message="room again once the invented queues drained",
    )
