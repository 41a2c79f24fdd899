"""Forged job events: any login that may connect may NOTIFY jobqueue_events with any payload. The
event hub (SSE streams, `Client.wait`) takes a notification as "these jobs may have changed",
reads them, and fans out only what their rows bear out, under their own producer and queue.
Each attack is sent by a login holding no jobqueue role (``stranger_dsn``)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import queue as queue_module
import time
import uuid

from jobqueue.client import AsyncClient
from jobqueue.events.hub import CONFIRM_GAP, EventHub, StoreRegistrar
from tests.integration.api.test_events import EventReader
from tests.support import apps
from tests.support.factories import finish_job, make_job
from tests.support.forgery import flood, notify
from tests.support.roles import stranger_dsn  # noqa: F401 (a fixture)
from tests.support.waiting import async_wait_until
from tests.support.workers import WorkerThread, test_settings


def code(job_id: uuid.UUID | str) -> str:
    """A job id as the database's event triggers write it: 22 characters of base64."""
    return base64.b64encode(uuid.UUID(str(job_id)).bytes).decode().rstrip("=")


def forged(*pieces: tuple) -> str:
    """A jobqueue_events payload in the triggers' format: pieces of [event, queue, producer, ids]."""
    return json.dumps([list(piece) for piece in pieces])


def test_a_forged_job_completed_for_a_pending_job_reaches_no_stream(api, keys, http, stranger_dsn):  # noqa: F811
    """Before, alice's streams showed job.completed for her job that no worker had touched."""
    alice = http("alice")
    job_id = alice.post("/jobs", json={"job_type": "x", "queue": "forged-q"}).json()["id"]
    readers = [
        EventReader(api.url, keys["alice"]),
        EventReader(api.url, keys["alice"], queue="forged-q"),
        EventReader(api.url, keys["alice"], job_id=job_id),
    ]
    try:
        notify(stranger_dsn, "jobqueue_events", forged(("job.completed", "forged-q", "alice", code(job_id))))
        alice.post(f"/jobs/{job_id}/cancel")  # a real event after the forged one
        for reader in readers:
            name, data = reader.take(1)[0]
            assert (name, data["job_id"]) == ("job.cancelled", job_id)
            assert reader.nothing_more()
    finally:
        for reader in readers:
            reader.close()


def test_forged_stream_events_and_another_producers_jobs_reach_no_stream(api, keys, http, stranger_dsn):  # noqa: F811
    """Before, a forged stream.revoked told alice's stream its key was gone, and an event naming
    bob's job with alice as its producer went to alice."""
    bobs = http("bob").post("/jobs", json={"job_type": "x", "queue": "bobs"}).json()["id"]
    reader = EventReader(api.url, keys["alice"])
    try:
        notify(
            stranger_dsn,
            "jobqueue_events",
            forged(
                ("stream.revoked", None, "alice", code(bobs)),
                ("job.queued", "alices", "alice", code(bobs)),
                ("job.cancelled", None, "alice", code(bobs)),
            ),
        )
        mine = http("alice").post("/jobs", json={"job_type": "x"}).json()["id"]
        assert [(name, data["job_id"]) for name, data in reader.take(1)] == [("job.queued", mine)]
        assert reader.nothing_more()
    finally:
        reader.close()


def test_a_replayed_event_of_a_job_finished_long_ago_reaches_no_stream(api, keys, http, conn, stranger_dsn):  # noqa: F811
    """The row bears out "completed", but nothing changed: an event announces a change of the
    last minute (a pending job's job.queued aside, which is true however old it is)."""
    old = make_job(conn, state="completed", producer_id="alice")
    conn.execute("UPDATE jobqueue.jobs SET updated_at = now() - interval '1 hour' WHERE id = %s", (old,))
    reader = EventReader(api.url, keys["alice"])
    try:
        notify(
            stranger_dsn,
            "jobqueue_events",
            forged(("job.completed", "default", "alice", code(old)), ("job.started", "default", "alice", code(old))),
        )
        mine = http("alice").post("/jobs", json={"job_type": "x"}).json()["id"]
        assert [(name, data["job_id"]) for name, data in reader.take(1)] == [("job.queued", mine)]
        assert reader.nothing_more()
    finally:
        reader.close()


def test_a_forged_copy_of_a_real_event_is_not_delivered_twice(api, keys, http, stranger_dsn):  # noqa: F811
    alice = http("alice")
    reader = EventReader(api.url, keys["alice"])
    try:
        job_id = alice.post("/jobs", json={"job_type": "x", "queue": "copied"}).json()["id"]
        assert [name for name, _ in reader.take(1)] == ["job.queued"]
        notify(stranger_dsn, "jobqueue_events", forged(("job.queued", "copied", "alice", code(job_id))), times=3)
        assert reader.nothing_more(0.5)
    finally:
        reader.close()


def test_a_flood_of_forged_events_costs_a_bounded_number_of_reads(api, keys, http, stranger_dsn, monkeypatch):  # noqa: F811
    """An admin stream wants every job, so every forged notification names jobs it might want:
    they are read back in batches, at most one read per CONFIRM_GAP. What cannot be read back in
    time is dropped, and the streams are told so (stream.reconnected: re-read what you care about);
    no forged event reaches them, and once the flood is over real events flow again."""
    reads: list[int] = []
    job_event_rows = StoreRegistrar.job_event_rows

    async def counting(self, job_ids, **kwargs):
        reads.append(len(job_ids))
        return await job_event_rows(self, job_ids, **kwargs)

    monkeypatch.setattr(StoreRegistrar, "job_event_rows", counting)
    reader = EventReader(api.url, keys["admin"])
    try:
        started = time.monotonic()
        pieces = [
            forged(("job.completed", "q", "alice", "".join(code(uuid.uuid4()) for _ in range(300)))) for _ in range(4)
        ]
        sent = flood(stranger_dsn, [("jobqueue_events", payload) for payload in pieces], count=200)
        left = _drain(reader, quiet=1.0)
        elapsed = time.monotonic() - started
        assert set(left) <= {"stream.reconnected"}, left  # what the flood left: "you may have missed some"
        counted = len(reads)
        job_id = http("alice").post("/jobs", json={"job_type": "x"}).json()["id"]
        assert [(name, data["job_id"]) for name, data in reader.take(1)] == [("job.queued", job_id)]
    finally:
        reader.close()
    assert sent == 200  # ~150 of these 6.6 KB payloads a second on a quiet machine; a loaded one takes longer
    assert counted <= elapsed / CONFIRM_GAP + 5, f"{counted} reads in {elapsed:.1f} s for {sent} notifications"


def _drain(reader: EventReader, *, quiet: float) -> list[str]:
    """The names of the events the stream gets until it stays quiet for ``quiet`` seconds."""
    names = []
    while True:
        try:
            names.append(reader.events.get(timeout=quiet)[0])
        except queue_module.Empty:
            return names


def test_malformed_notifications_log_one_line_a_minute_and_break_nothing(dsn, conn, stranger_dsn, caplog):  # noqa: F811
    """Before, a payload nested 3,900 deep logged a RecursionError traceback per notification and
    every bad piece a warning of its own."""
    malformed = [
        "[" * 3900 + "]" * 3900,
        "not json",
        '{"a": 1}',
        "[[1, 2, 3]]",
        '[["job.queued", [], {}, 5]]',
        '[[5, "q", null, "AAAAAAAAAAAAAAAAAAAAAA"]]',
        '[["job.queued", "q", null, "%%%%%%%%%%%%%%%%%%%%%%"]]',
    ]

    async def scenario() -> str:
        async with AsyncClient(dsn, pool_size=1) as client:
            hub = EventHub(StoreRegistrar(client.connection), dsn)
            subscription = await hub.subscribe(queue=None, job_id=None, producer_id=None)
            await asyncio.to_thread(flood, stranger_dsn, [("jobqueue_events", p) for p in malformed], seconds=0.5)
            job_id = await client.enqueue("x")
            event = await asyncio.wait_for(subscription.inbox.get(), 10)
            await hub.stop()
            assert event.job_id == job_id
            return event.event

    with caplog.at_level(logging.DEBUG, logger="jobqueue"):
        assert asyncio.run(scenario()) == "job.queued"
    complaints = [r for r in caplog.records if r.name in ("jobqueue.events", "jobqueue.notifier")]
    assert len(complaints) <= 1, [r.getMessage()[:200] for r in complaints]
    assert not any(r.exc_info for r in complaints)


def test_a_forged_event_with_a_bad_name_does_not_break_wait(dsn, conn, stranger_dsn):  # noqa: F811
    """Before, a number as the event's name crashed `wait()` with AttributeError; a forged final
    event of a pending job only makes it read the job again."""
    job_id = make_job(conn, job_type="x", queue="nobody-claims")

    async def scenario():
        async with AsyncClient(dsn, pool_size=2) as client:
            waiting = asyncio.create_task(client.wait(job_id, timeout=20))
            await async_wait_until(lambda: _registered(conn), message="wait() listening")
            await asyncio.to_thread(
                notify,
                stranger_dsn,
                "jobqueue_events",
                forged(
                    (5, "nobody-claims", None, code(job_id)), ("job.completed", "nobody-claims", None, code(job_id))
                ),
            )
            await asyncio.sleep(0.3)
            assert not waiting.done()  # neither crashed nor returned for a job still pending
            await asyncio.to_thread(_finish, conn, job_id)
            return await waiting

    assert asyncio.run(scenario()) == {"done": True}


def _finish(conn, job_id) -> None:
    with conn.transaction():  # state and result together, as a worker's ack writes them
        finish_job(conn, job_id, "completed", {"done": True})


async def _registered(conn) -> bool:
    return conn.execute("SELECT count(*) FROM jobqueue.event_listeners WHERE expires_at > now()").fetchone()[0] > 0


def test_events_of_a_fast_job_still_arrive_whole_and_in_order(api, keys, http, dsn):
    """Reading each job back must not cost a real event: a job that completes before its
    job.started is read (the row says completed) still streams queued, started, completed."""
    reader = EventReader(api.url, keys["alice"], queue="fast")
    try:
        ids = [
            http("alice").post("/jobs", json={"job_type": "record", "queue": "fast"}).json()["id"] for _ in range(20)
        ]
        with WorkerThread(apps.queue, test_settings(dsn, queues=("fast",))):
            events = reader.take(60)
        for job_id in ids:
            assert [name for name, data in events if data["job_id"] == job_id] == [
                "job.queued",
                "job.started",
                "job.completed",
            ]
    finally:
        reader.close()
