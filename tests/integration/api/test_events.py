"""GET /events: Server-Sent Events fed by the database's job-event NOTIFYs (one per statement)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue as queue_module
import threading
import uuid

import httpx
import psycopg

from jobqueue.api.controllers.events import event_stream
from jobqueue.client import AsyncClient, Client
from jobqueue.db.queries import query
from jobqueue.events.hub import MAX_BACKLOG, EventHub, StoreRegistrar, decode
from tests.support import apps
from tests.support.factories import claim_params
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings


class EventReader:
    """Reads an SSE stream in a thread: ``events`` receives (event name, data dict) pairs."""

    def __init__(self, url: str, key: str, **params) -> None:
        self.events: queue_module.Queue = queue_module.Queue()
        self.subscribed = threading.Event()
        self._client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=None)
        self._stop = False
        self._thread = threading.Thread(target=self._read, args=(params,), daemon=True)
        self._thread.start()
        assert self.subscribed.wait(10), "stream did not open"

    def _read(self, params: dict) -> None:
        name = None
        try:
            with self._client.stream("GET", "/events", params=params) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                for line in response.iter_lines():
                    if line.startswith(":"):
                        self.subscribed.set()
                    elif line.startswith("event:"):
                        name = line.split(":", 1)[1].strip()
                    elif line.startswith("data:") and line.split(":", 1)[1].strip():  # comments send empty data
                        self.events.put((name, json.loads(line.split(":", 1)[1])))
        except (httpx.HTTPError, RuntimeError):
            if not self._stop:
                raise

    def take(self, n: int, timeout: float = 10.0) -> list[tuple[str, dict]]:
        return [self.events.get(timeout=timeout) for _ in range(n)]

    def nothing_more(self, wait: float = 0.3) -> bool:
        try:
            self.events.get(timeout=wait)
        except queue_module.Empty:
            return True
        return False

    def close(self) -> None:
        self._stop = True
        self._client.close()  # the reading thread ends when the server closes the stream at teardown


def names_for(events: list[tuple[str, dict]], job_id: str) -> list[str]:
    return [name for name, data in events if data["job_id"] == job_id]


def listeners(conn) -> int:
    return conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN%%'"
    ).fetchone()[0]


def test_a_stream_sees_one_jobs_whole_life(api, keys, http, dsn, conn):
    http("alice").post("/jobs", json={"job_type": "x", "queue": "before-anyone-listens"})
    assert listeners(conn) == 0  # no stream open: the API neither LISTENs nor asks for events
    assert conn.execute("SELECT count(*) FROM jobqueue.event_listeners").fetchone()[0] == 0
    reader = EventReader(api.url, keys["alice"], queue="sse-life")
    try:
        assert listeners(conn) == 1
        assert conn.execute("SELECT count(*) FROM jobqueue.event_listeners WHERE expires_at > now()").fetchone()[0] == 1
        job_id = http("alice").post("/jobs", json={"job_type": "record", "queue": "sse-life"}).json()["id"]
        with WorkerThread(apps.queue, test_settings(dsn, queues=("sse-life",))):
            events = reader.take(3)
        assert [name for name, _ in events] == ["job.queued", "job.started", "job.completed"]
        assert {data["job_id"] for _, data in events} == {job_id}
        assert {data["queue"] for _, data in events} == {"sse-life"}
    finally:
        reader.close()


def test_failures_retries_dead_letters_and_cancels_are_streamed(api, keys, http, dsn):
    reader = EventReader(api.url, keys["alice"])
    try:
        client = http("alice")
        failing = client.post(
            "/jobs", json={"job_type": "always_fails", "queue": "sse-fail", "max_attempts": 2}
        ).json()["id"]
        with WorkerThread(apps.queue, test_settings(dsn, queues=("sse-fail",))):
            events = reader.take(5)
        assert names_for(events, failing) == [
            "job.queued",
            "job.started",
            "job.failed",
            "job.started",
            "job.dead_letter",
        ]
        cancelled = client.post("/jobs", json={"job_type": "record", "queue": "sse-idle"}).json()["id"]
        client.post(f"/jobs/{cancelled}/cancel")
        assert names_for(reader.take(2), cancelled) == ["job.queued", "job.cancelled"]
        retried = http("admin").post(f"/admin/jobs/{failing}/retry")
        assert retried.status_code == 200 and names_for(reader.take(1), failing) == ["job.queued"]
    finally:
        reader.close()


def test_streams_filter_by_job_and_by_producer(api, keys, http):
    mine = EventReader(api.url, keys["bob"])
    watcher = EventReader(api.url, keys["admin"])
    alice = http("alice")
    first = alice.post("/jobs", json={"job_type": "x"}).json()["id"]
    one_job = EventReader(api.url, keys["alice"], job_id=first)
    try:
        alice.post(f"/jobs/{first}/cancel")
        second = alice.post("/jobs", json={"job_type": "x"}).json()["id"]
        bobs = http("bob").post("/jobs", json={"job_type": "x"}).json()["id"]
        assert [(n, d["job_id"]) for n, d in one_job.take(1)] == [("job.cancelled", first)]
        assert one_job.nothing_more()
        assert [d["job_id"] for _, d in mine.take(1)] == [bobs] and mine.nothing_more()
        assert [d["job_id"] for _, d in watcher.take(4)] == [first, first, second, bobs]
    finally:
        for reader in (mine, watcher, one_job):
            reader.close()


def test_a_bad_job_id_filter_is_422(http):
    response = http("alice").get("/events", params={"job_id": "nope"})
    assert response.status_code == 422 and response.json()["field"] == "job_id"


def _notifications(conn: psycopg.Connection) -> list[str]:
    return [n.payload for n in conn.notifies(timeout=0.5, stop_after=1000) if n.channel == "jobqueue_events"]


def register(conn: psycopg.Connection) -> None:
    """What an API process with open streams does: the triggers send events only then."""
    conn.execute("INSERT INTO jobqueue.event_listeners VALUES ('test', now() + interval '1 minute')")


def test_no_listener_registered_no_events_built_or_sent(dsn, conn):
    with psycopg.connect(dsn, autocommit=True) as listener, Client(dsn, pool_size=1) as client:
        listener.execute("LISTEN jobqueue_events")
        client.enqueue_many([{"job_type": "x"} for _ in range(10)])
        assert _notifications(listener) == []
        conn.execute("INSERT INTO jobqueue.event_listeners VALUES ('gone', now() - interval '1 second')")
        client.enqueue("x")
        assert _notifications(listener) == []  # an expired registration does not count
        register(conn)
        client.enqueue("x")
        assert len(_notifications(listener)) == 1


def test_one_notify_per_batch_statement_and_payloads_under_8000_bytes(dsn, conn):
    register(conn)
    with psycopg.connect(dsn, autocommit=True) as listener, Client(dsn, pool_size=1) as client:
        listener.execute("LISTEN jobqueue_events")
        ids = client.enqueue_many([{"job_type": "x", "queue": "bulk", "producer_id": "p" * 150} for _ in range(1000)])
        payloads = _notifications(listener)
        assert 1 < len(payloads) <= 10 and all(len(p.encode()) < 8000 for p in payloads)
        queued = [e for p in payloads for e in decode(p, 0.0)]
        assert sorted(e.job_id for e in queued) == sorted(ids)
        assert {(e.event, e.queue, e.producer_id) for e in queued} == {("job.queued", "bulk", "p" * 150)}

        with psycopg.connect(dsn, autocommit=True) as worker:
            claimed = worker.execute(query("job_claim"), claim_params(queues=["bulk"], limit=200)).fetchall()
            assert len(claimed) == 200
            started = _notifications(listener)
            assert len(started) == 1  # one statement, one NOTIFY, 200 ids
            assert {e.job_id for e in decode(started[0], 0.0)} == {row[0] for row in claimed}
            worker.execute(
                "UPDATE jobqueue.jobs SET locked_until = now() + interval '1 minute' WHERE state = 'processing'"
            )
            assert _notifications(listener) == []  # a heartbeat changes no state: no event


def test_names_too_long_for_a_payload_are_sent_as_null(dsn, conn):
    """A queue name within its 255 characters can still be over 1,000 bytes as JSON (4-byte characters)."""
    register(conn)
    with psycopg.connect(dsn, autocommit=True) as listener, Client(dsn, pool_size=1) as client:
        listener.execute("LISTEN jobqueue_events")
        job_id = client.enqueue("x", queue="\U0001f680" * 255)
        (event,) = [e for p in _notifications(listener) for e in decode(p, 0.0)]
        assert (event.job_id, event.queue) == (job_id, None)


def test_decode_ignores_what_is_not_a_job_event():
    job_id = uuid.uuid4()
    assert decode(json.dumps({"id": str(job_id), "event": "job.cancelled"}), 0.0) == []
    assert decode("not json", 0.0) == [] and decode('[["job.queued", "q", null, "%%%"]]', 0.0) == []


def test_a_stream_says_reconnected_after_losing_the_listen_connection_and_goes_on(api, keys, http, conn):
    reader = EventReader(api.url, keys["alice"], queue="sse-gap")
    try:
        killed = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query ILIKE 'LISTEN%%'"
        ).fetchall()
        assert len(killed) == 1
        name, data = reader.take(1)[0]
        assert name == "stream.reconnected" and data["job_id"] is None
        job_id = http("alice").post("/jobs", json={"job_type": "x", "queue": "sse-gap"}).json()["id"]
        name, data = reader.take(1)[0]
        assert (name, data["job_id"]) == ("job.queued", job_id)
    finally:
        reader.close()


def test_a_stream_that_falls_too_far_behind_gets_overflow_and_ends(dsn, conn):
    """A reader that does not keep up loses its stream, not the others' events or the API's memory."""

    async def scenario() -> tuple[list[str], int]:
        async with AsyncClient(dsn, pool_size=1) as client:
            hub = EventHub(StoreRegistrar(client.connection), dsn)
            slow = await hub.subscribe(queue=None, job_id=None, producer_id=None)
            for chunk in (MAX_BACKLOG, 1):  # one enqueue_many takes at most MAX_BATCH_JOBS
                await client.enqueue_many([{"job_type": "x"} for _ in range(chunk)])
            for _ in range(500):
                if slow.overflowed:
                    break
                await asyncio.sleep(0.01)

            async def valid() -> bool:
                return True

            messages = [
                message
                async for message in event_stream(hub, slow, still_valid=valid, check_every=1.0, release=lambda: None)
            ]
            for _ in range(500):  # its last stream gone, the hub stops listening
                if listeners(conn) == 0:
                    break
                await asyncio.sleep(0.01)
            await hub.stop()
            return [message.event or message.comment for message in messages]

    assert asyncio.run(scenario()) == ["subscribed", "stream.overflow"]
    assert listeners(conn) == 0


def test_a_stream_opened_as_the_last_one_closes_still_gets_events(dsn, conn):
    """Closing the last stream stops the hub's listener, which unregisters on its way out; a new
    stream at that moment must not lose its registration to that cleanup (a page reload)."""

    async def scenario() -> tuple[list[str], int]:
        async with AsyncClient(dsn, pool_size=2) as client:
            registrar = StoreRegistrar(client.connection)
            hub = EventHub(registrar, dsn)
            unregister = registrar.unregister_event_listener

            async def slow_unregister(listener_id: str) -> None:  # a database a little slow to answer
                await asyncio.sleep(0.2)
                await unregister(listener_id)

            registrar.unregister_event_listener = slow_unregister
            hub.unsubscribe(await hub.subscribe(queue=None, job_id=None, producer_id=None))
            again = await hub.subscribe(queue=None, job_id=None, producer_id=None)
            await asyncio.sleep(0.5)  # any cleanup of the old listener is over by now
            registered = conn.execute(
                "SELECT count(*) FROM jobqueue.event_listeners WHERE expires_at > now()"
            ).fetchone()[0]
            await client.enqueue("x")
            event = await asyncio.wait_for(again.inbox.get(), 5)
            await hub.stop()
            return [event.event], registered

    assert asyncio.run(scenario()) == (["job.queued"], 1)


def test_a_key_holds_a_bounded_number_of_streams_and_gets_them_back_when_they_close(start_api, keys, dsn):
    server = start_api(api_max_streams_per_key=2)
    alice = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {keys['alice']}"}, timeout=10)
    bob = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {keys['bob']}"}, timeout=10)
    with alice, bob, contextlib.ExitStack() as streams:
        first = streams.enter_context(alice.stream("GET", "/events"))
        second = streams.enter_context(alice.stream("GET", "/events"))
        assert first.status_code == second.status_code == 200
        refused = alice.get("/events")
        assert refused.status_code == 429 and refused.json()["error"] == "too_many_streams", refused.text
        assert "Retry-After" in refused.headers
        with bob.stream("GET", "/events") as other:  # another key is not held back by alice's streams
            assert other.status_code == 200
        first.close()  # the connection goes; the server notices and gives the slot back
        wait_until(lambda: _opens(alice), timeout=10, message="a freed stream slot")


def _opens(client: httpx.Client) -> bool:
    with client.stream("GET", "/events") as response:
        return response.status_code == 200


def test_a_revoked_keys_stream_ends_within_the_key_cache_time(start_api, dsn):
    with Client(dsn, pool_size=1) as client:
        key, info = client.create_api_key("leaving")
    server = start_api(api_key_cache_seconds=1.0)
    reader = EventReader(server.url, key)
    try:
        with Client(dsn, pool_size=1) as client:
            client.revoke_api_key(info.id)
        name, _ = reader.events.get(timeout=10)
        assert name == "stream.revoked"
    finally:
        reader.close()
