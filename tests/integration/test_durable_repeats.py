"""Every "already there" answer is as durable as a first write: with a synchronous standby that
confirms nothing (its WAL receiver SIGSTOPped), an idempotent repeat blocks exactly as a new
submission does, on every path — SQL ``enqueue`` and ``enqueue_many``, the Python client (one
statement, and its group commit), REST — and so do a cron tick already fired and a cancel of a
cancelled job; each answers once the standby is back.

Why it matters: a repeat that writes nothing takes no transaction id and its commit does not wait
for the standby, so it answered at once with an id whose row could still exist on the primary
alone (a commit whose wait for the standby was cut short: the client was cancelled, or the
primary's postmaster died and crash recovery replayed it). A failover then lost the job the
producer had been told exists (issue 17: 711 ids lost in one failover test run).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from datetime import timedelta
from typing import Any, Callable

import httpx
import psycopg
import pytest

from jobqueue import AsyncClient, Client
from tests.integration.api.conftest import ApiServer, api_settings
from tests.support import pg
from tests.support.standby import SyncStandby

pytestmark = pytest.mark.xdist_group("sync_standby")

FROZEN = 0.5  # how long a blocked call is watched before the standby is let go


@pytest.fixture(scope="module")
def pair():
    server = pg.TestServer.throwaway()
    standby = None
    try:
        server.create_template()
        standby = SyncStandby(server.cluster, server.cluster.datadir.parent / "standby").start()
        yield server, standby
    finally:
        if standby is not None:
            standby.stop()
        server.close()


@pytest.fixture
def dsn(pair):
    server, _ = pair
    name = server.create_database()
    yield server.dsn_for(name)
    server.drop_database(name)


@pytest.fixture
def standby(pair) -> SyncStandby:
    return pair[1]


def blocks_until_thawed(standby: SyncStandby, call: Callable[[], Any]) -> Any:
    """Run ``call`` while the standby confirms nothing: it must not have answered after `FROZEN`
    seconds, and must answer soon after the standby is back. Its answer."""
    done: dict[str, Any] = {}

    def run() -> None:
        started = time.monotonic()
        try:
            done["value"] = call()
        except BaseException as exc:  # reported to the test below
            done["error"] = exc
        done["seconds"] = time.monotonic() - started

    worker = threading.Thread(target=run, daemon=True)
    with standby.frozen():
        worker.start()
        worker.join(FROZEN)
        answered_early = dict(done)
    worker.join(30)
    assert not answered_early, f"answered in {answered_early.get('seconds', 0) * 1000:.0f} ms without the standby"
    assert "error" not in done, done.get("error")
    assert "value" in done, "no answer 30 s after the standby was back"
    return done["value"]


def sql(dsn: str, statement: str, params: dict | None = None) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(statement, params).fetchall()


ENQUEUE = "SELECT jobqueue.enqueue('pay', '{}', idempotency_key => %(key)s)"
ENQUEUE_MANY = "SELECT id, created FROM jobqueue.enqueue_many(%(jobs)s::jsonb)"


def test_the_freeze_blocks_a_first_submission_and_not_a_read(dsn, standby):
    """The control: a new key waits for the standby; a read does not."""
    job_id = blocks_until_thawed(standby, lambda: sql(dsn, ENQUEUE, {"key": "new"})[0][0])
    with standby.frozen():
        started = time.monotonic()
        assert sql(dsn, "SELECT id FROM jobqueue.jobs") == [(job_id,)]
        assert time.monotonic() - started < FROZEN


def test_a_sql_repeat_waits_for_the_standby_like_a_first_submission(dsn, standby):
    first = sql(dsn, ENQUEUE, {"key": "k1"})[0][0]
    assert blocks_until_thawed(standby, lambda: sql(dsn, ENQUEUE, {"key": "k1"})[0][0]) == first


def test_a_repeat_inside_the_callers_transaction_waits_at_its_commit(dsn, standby):
    first = sql(dsn, ENQUEUE, {"key": "k1"})[0][0]

    def in_transaction() -> uuid.UUID:
        with psycopg.connect(dsn) as conn:  # not autocommit: the commit is the caller's
            job_id = conn.execute(ENQUEUE, {"key": "k1"}).fetchone()[0]
            conn.commit()
        return job_id

    assert blocks_until_thawed(standby, in_transaction) == first


def test_enqueue_many_of_repeats_only_waits_for_the_standby(dsn, standby):
    jobs = '[{"job_type": "pay", "idempotency_key": "a"}, {"job_type": "pay", "idempotency_key": "b"}]'
    first = sql(dsn, ENQUEUE_MANY, {"jobs": jobs})
    assert [created for _, created in first] == [True, True]
    again = blocks_until_thawed(standby, lambda: sql(dsn, ENQUEUE_MANY, {"jobs": jobs}))
    assert again == [(job_id, False) for job_id, _ in first]


def test_the_python_clients_repeat_waits_for_the_standby(dsn, standby):
    with Client(dsn, pool_size=1) as client:
        first = client.enqueue("pay", idempotency_key="k1")
        assert blocks_until_thawed(standby, lambda: client.enqueue("pay", idempotency_key="k1")) == first
        assert blocks_until_thawed(standby, lambda: client.submit([{"job_type": "pay", "idempotency_key": "k1"}])) == [
            (first, False)
        ]


def test_group_committed_repeats_wait_for_the_standby(dsn, standby):
    """Through the coalescer: the first caller's statement goes alone and stalls on the standby,
    the next callers ride together in the statement after it (enqueue_many_waiting_briefly)."""
    keys = [f"g{i}" for i in range(4)]

    async def scenario(first: bool) -> list:
        async with AsyncClient(dsn, pool_size=3, submit_lanes=1, coalesce_stall_after=0.05) as client:
            results = await asyncio.gather(
                *(client.submit([{"job_type": "pay", "idempotency_key": key}]) for key in keys)
            )
            statements = client.coalescer.statements
        assert first or statements < len(keys), "no two callers shared a statement"
        return [result[0] for result in results]

    originals = asyncio.run(scenario(first=True))
    assert all(created for _, created in originals)
    again = blocks_until_thawed(standby, lambda: asyncio.run(scenario(first=False)))
    assert again == [(job_id, False) for job_id, _ in originals]


def test_a_rest_repeat_waits_for_the_standby(dsn, standby):
    with Client(dsn, pool_size=1) as admin:
        key = admin.create_api_key("alice")[0]
    server = ApiServer(api_settings(dsn)).start()
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            body = {"job_type": "pay", "idempotency_key": "r1"}
            first = http.post("/jobs", json=body)
            assert first.status_code == 201, first.text
            again = blocks_until_thawed(standby, lambda: http.post("/jobs", json=body))
            assert again.status_code == 200 and again.json()["id"] == first.json()["id"], again.text
    finally:
        server.stop()


def test_a_cron_tick_already_fired_waits_for_the_standby(dsn, standby):
    """fire_schedule moves next_fire_at on (a write) even when every tick it is given was fired."""
    with Client(dsn, pool_size=1) as client:
        client.schedules.add("tick", "* * * * *", "pay")
    schedule_id, cron, zone, tick = sql(dsn, "SELECT id, cron, timezone, next_fire_at FROM jobqueue.schedules")[0]
    fire = (
        "SELECT fire_at, job_id FROM jobqueue.fire_schedule(%(id)s, %(expected)s, %(cron)s, %(zone)s, "
        "ARRAY[%(tick)s::timestamptz], %(next)s, 'test')"
    )
    later = tick + timedelta(minutes=1)
    params = {"id": schedule_id, "cron": cron, "zone": zone, "tick": tick, "next": later}
    assert len(sql(dsn, fire, params | {"expected": tick})) == 1
    assert blocks_until_thawed(standby, lambda: sql(dsn, fire, params | {"expected": later})) == []
    assert sql(dsn, "SELECT count(*) FROM jobqueue.schedule_fires") == [(1,)]


def test_cancelling_a_cancelled_job_waits_for_the_standby(dsn, standby):
    with Client(dsn, pool_size=1) as client:
        job_id = client.enqueue("pay")
        client.cancel(job_id)
        assert blocks_until_thawed(standby, lambda: client.cancel(job_id)).value == "cancelled_already"
