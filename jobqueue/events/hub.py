"""Job events: one LISTEN connection per process, fanned out to subscriptions — the REST API's SSE
streams and `AsyncClient.wait()`.

The database announces job transitions itself (statement-level triggers of migration 0003): one
NOTIFY on ``jobqueue_events`` per statement, whatever path changed the job — REST, Python, SQL,
a worker's batched claim or ack, the sweeper. The payload is compact: pieces of
``[event, queue, producer_id, ids]`` with each id as 22 characters of base64. Nothing polls.

The LISTEN connection is open, and the process registered in ``jobqueue.event_listeners`` (which
the triggers check first), only while at least one stream is. Each stream subscribes with filters (queue, job id, and
the producer for non-admin keys) and gets
a bounded queue; a stream that falls ``MAX_BACKLOG`` events behind is ended with a
``stream.overflow`` event rather than slowing everyone. When the LISTEN connection is lost and
comes back, streams get ``stream.reconnected``: events in between may have been missed.

A transaction pooler cannot carry LISTEN: behind PgBouncer the LISTEN connection goes to
``JOBQUEUE_DIRECT_DSN``; with none (or with ``JOBQUEUE_LISTEN=0``) there is no stream, and
``/events`` answers 503 `EventsUnavailable` saying so.

**A notification is a hint, not an event.** Any login that may connect may NOTIFY
``jobqueue_events`` with any payload (naming any job, any producer, any event). So the hub
decodes strictly (the six job event names only, typed fields; malformed payloads are dropped with
one log line a minute at most), keeps the ids some subscription might want, reads those jobs (one
query for whatever arrived meanwhile, at most one per ``CONFIRM_GAP``; row-level security applies
to a producer's client) and fans out only the events their rows bear out (`confirms`), under the
row's own queue and producer — never the payload's — and each at most once per change of the row.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, AsyncContextManager, Callable, Protocol, Sequence, TypeVar

import psycopg

from jobqueue.db import gateway as db
from jobqueue.events import channels
from jobqueue.events.notifier import LogLimit, Notifier, Throttled
from jobqueue.model.errors import DatabaseUnavailable, JobQueueError, NotMigrated, PermissionDenied
from jobqueue.store import events as event_store
from jobqueue.store.events import EventRow

log = logging.getLogger("jobqueue.events")

MAX_BACKLOG = 10_000
LISTENER_TTL = 30.0  # seconds a registration lasts; refreshed every third of it
ID_WIDTH = 22

#: what each job event announces: the state the job entered
ANNOUNCES = {
    "job.queued": "pending",
    "job.started": "processing",
    "job.failed": "failed",
    "job.completed": "completed",
    "job.dead_letter": "dead_letter",
    "job.cancelled": "cancelled",
    "job.progress": "processing",  # a running attempt reported progress (not a transition)
}
#: an event other than a pending job's job.queued announces a change of the last RECENT_SECONDS
RECENT_SECONDS = 60.0
#: the jobs notifications name are read at most once per CONFIRM_GAP seconds (the first at once)
CONFIRM_GAP = 0.01
#: events waiting to be read back; past that, streams get stream.reconnected (events were missed)
MAX_PENDING = 20_000
#: events read back per query
READ_BATCH = 2_000
#: (job, event, row version) pairs already fanned out, so a forged copy is not delivered again
SEEN_SIZE = 50_000


class EventsUnavailable(JobQueueError):
    """This process opens no LISTEN connection (``JOBQUEUE_LISTEN=0``), so it has no events."""


class Registrar(Protocol):
    """Registers the process in ``jobqueue.event_listeners`` (a `StoreRegistrar` does)."""

    async def register_event_listener(self, listener_id: str, *, ttl: float) -> None: ...

    async def unregister_event_listener(self, listener_id: str) -> None: ...

    async def job_event_rows(self, job_ids: Sequence[uuid.UUID], *, recent_seconds: float) -> dict[uuid.UUID, EventRow]:
        """The jobs named by notifications, as this client may see them."""


T = TypeVar("T")
#: Where a registrar gets a connection for each statement: a pool's, e.g. `AsyncClient.connection`.
Connect = Callable[[], AsyncContextManager[psycopg.AsyncConnection]]


class StoreRegistrar:
    """The `Registrar` of a client's waits and of the REST API's streams: the store's statements
    (`jobqueue.store.events`), each on a connection from ``connect`` (the client's pool, so row-level
    security reads the jobs back as that login may see them)."""

    def __init__(self, connect: Connect) -> None:
        self._connect = connect

    async def _run(self, call: db.Call[T]) -> T:
        async with self._connect() as conn:
            return await db.run(conn, call)

    async def register_event_listener(self, listener_id: str, *, ttl: float) -> None:
        """Ask the database to send job events for ``ttl`` seconds (refresh while listening)."""
        await self._run(event_store.register_listener(listener_id, ttl=ttl))

    async def unregister_event_listener(self, listener_id: str) -> None:
        await self._run(event_store.unregister_listener(listener_id))

    async def job_event_rows(self, job_ids: Sequence[uuid.UUID], *, recent_seconds: float) -> dict[uuid.UUID, EventRow]:
        """The rows of jobs that job-event notifications named (what the hub checks them against)."""
        return await self._run(event_store.job_rows(job_ids, recent_seconds=recent_seconds))


@dataclass(frozen=True, slots=True)
class JobEvent:
    event: str
    job_id: uuid.UUID | None
    queue: str | None
    producer_id: str | None
    at: float

    def as_json(self) -> str:
        return json.dumps(
            {
                "event": self.event,
                "job_id": str(self.job_id) if self.job_id else None,
                "queue": self.queue,
                "at": self.at,
            }
        )


def decode(payload: str, at: float, *, complaints: LogLimit | None = None) -> list[JobEvent]:
    """What one notification claims, in the triggers' format (pieces of ``[event, queue,
    producer, ids]``), as unconfirmed events. Anything else — not JSON, nested too deep, an unknown
    event name, a field of the wrong type, an id that is not 22 characters of base64 — is dropped
    (and, with ``complaints``, counted in its rate-limited log)."""
    try:
        pieces = json.loads(payload)
    except (ValueError, RecursionError):
        pieces = None
    if not isinstance(pieces, list):
        _complain(complaints, payload)
        return []
    events: list[JobEvent] = []
    bad = None
    for piece in pieces:
        decoded = _piece(piece, at)
        if decoded is None:
            bad = piece if bad is None else bad
        else:
            events.extend(decoded)
    if bad is not None:
        _complain(complaints, bad)
    return events


def _piece(piece: Any, at: float) -> list[JobEvent] | None:
    if not isinstance(piece, list) or len(piece) != 4:
        return None
    name, queue, producer, codes = piece
    if (
        not isinstance(name, str)
        or name not in ANNOUNCES
        or not isinstance(codes, str)
        or not codes
        or len(codes) % ID_WIDTH
        or not all(value is None or isinstance(value, str) for value in (queue, producer))
    ):
        return None
    try:
        ids = [
            uuid.UUID(bytes=base64.b64decode(codes[i : i + ID_WIDTH] + "==", validate=True))
            for i in range(0, len(codes), ID_WIDTH)
        ]
    except (ValueError, binascii.Error):
        return None
    return [JobEvent(name, job_id, queue, producer, at) for job_id in ids]


def _complain(complaints: LogLimit | None, what: object) -> None:
    if complaints is not None:
        complaints.log(logging.WARNING, "ignored a malformed notification on %s: %.200r", channels.EVENTS, what)


def confirms(event: str, row: EventRow) -> bool:
    """Whether a job's row bears out an event a notification claimed for it: the job is in the
    state the event announces (job.failed: or back in pending, as after a lost lease), or — for
    job.queued, job.started and job.failed, which a job passes through in milliseconds — it has
    moved on since: job.started and job.failed need the attempt they were about, and a failure
    followed by a run one attempt more. Only a pending job's job.queued holds however old the row
    is; every other event announces a change of the last `RECENT_SECONDS`, so an old transition
    cannot be replayed. A job.progress holds for a running job (a progress write is no change of
    state, so the row's updated_at says nothing of it; a forged one costs a reader a re-read)."""
    if event == "job.queued" and row.state == "pending":
        return True
    if event == "job.progress":  # updated_at stays as the claim left it: a running job is all it needs
        return row.state == "processing"
    if not row.recent:
        return False
    if row.state == ANNOUNCES[event] or (event == "job.failed" and row.state == "pending"):
        return event not in ("job.started", "job.failed") or row.attempts >= 1
    if event in ("job.completed", "job.cancelled", "job.dead_letter"):
        return False  # final, or (a dead job) left only by an admin's retry, long after its event was read
    if event == "job.queued":
        return True
    ran_again = event == "job.failed" and row.state in ("processing", "completed")
    return row.attempts >= (2 if ran_again else 1)


@dataclass(eq=False)
class Subscription:
    queue: str | None
    job_id: uuid.UUID | None
    producer_id: str | None  # None: every producer's jobs (admin keys)
    inbox: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(MAX_BACKLOG))
    overflowed: bool = False
    told_of_gap: bool = False  # the last thing delivered was stream.reconnected: once says it all

    def wants(self, event: JobEvent) -> bool:
        return (
            (self.job_id is None or event.job_id == self.job_id)
            and (self.queue is None or event.queue == self.queue)
            and (self.producer_id is None or event.producer_id == self.producer_id)
        )

    def may_want(self, claim: JobEvent) -> bool:
        """Before the row is read: the notification's queue and producer may be false (or NULL, for
        names too long for a payload), so only its job id can rule the event out for certain; the
        rest is checked again, on the row, by `wants`."""
        return (
            (self.job_id is None or claim.job_id == self.job_id)
            and (self.queue is None or claim.queue is None or claim.queue == self.queue)
            and (self.producer_id is None or claim.producer_id is None or claim.producer_id == self.producer_id)
        )

    def deliver(self, event: JobEvent) -> None:
        gap = event.event == "stream.reconnected"
        if self.overflowed or (gap and self.told_of_gap):
            return
        self.told_of_gap = gap
        try:
            self.inbox.put_nowait(event)
        except asyncio.QueueFull:
            self.overflowed = True  # the stream notices before its next read and ends


class EventHub:
    """LISTENs, and registers in ``jobqueue.event_listeners``, only while a stream is open: with
    no subscriber anywhere the database's event triggers stop after one probe of that table, so
    neither a worker's claim/ack statements nor this process spend anything on events."""

    def __init__(
        self, client: Registrar, dsn: str | None, *, connect_timeout: float = 5.0, name: str = "api-events"
    ) -> None:
        """``dsn``: where to LISTEN (a conninfo naming the connection); None: no events here."""
        self.client = client
        self.listener_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.enabled = dsn is not None
        self.notifier = Notifier(dsn or "")
        self.notifier.subscribe(channels.EVENTS, self._on_notification)
        self.notifier.on_reconnect(self._on_reconnect)
        self._connect_timeout = connect_timeout
        self._subscriptions: set[Subscription] = set()
        self._listener: asyncio.Task | None = None
        self._stopping: asyncio.Task | None = None  # a listener cancelled, still unregistering
        self._registered = asyncio.Event()
        self._name = name
        self._malformed = LogLimit(log)  # what anyone can send: one line a minute at most
        self._troubles = LogLimit(log)  # events dropped: their reads failed, or too many waited
        self._pending: list[JobEvent] = []  # claimed by notifications, not read back yet
        self._missed = False  # some were dropped (too many pending, or their read failed)
        self._seen: OrderedDict[tuple, None] = OrderedDict()
        self._confirm = Throttled(self._confirm_pending, gap=CONFIRM_GAP, name=f"{name}-confirm")

    async def subscribe(self, *, queue: str | None, job_id: uuid.UUID | None, producer_id: str | None) -> Subscription:
        """A subscription that receives every event committed from now on; `DatabaseUnavailable`
        if the LISTEN connection or the registration cannot be made in time."""
        if not self.enabled:
            raise EventsUnavailable(
                "job events need a LISTEN connection, and this process opens none "
                "(JOBQUEUE_LISTEN=0; behind PgBouncer set JOBQUEUE_DIRECT_DSN to reach "
                "PostgreSQL directly for it)"
            )
        subscription = Subscription(queue, job_id, producer_id)
        self._subscriptions.add(subscription)
        if self._stopping is not None:  # the last stream just closed: let that listener unregister first,
            stopping, self._stopping = self._stopping, None  # or its cleanup would undo our registration
            await asyncio.gather(stopping, return_exceptions=True)
        if self._listener is None or self._listener.done():
            self._registered.clear()
            self._listener = asyncio.create_task(self._listen(), name=self._name)
        try:
            await asyncio.wait_for(
                asyncio.gather(self.notifier.connected.wait(), self._registered.wait()), self._connect_timeout
            )
        except asyncio.TimeoutError:
            self.unsubscribe(subscription)
            raise DatabaseUnavailable("database unavailable: cannot listen for job events") from None
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscriptions.discard(subscription)
        if not self._subscriptions and self._listener is not None:
            self._listener.cancel()
            self._stopping, self._listener = self._listener, None

    async def stop(self) -> None:
        self._subscriptions.clear()
        self._confirm.cancel()
        for task in (self._listener, self._stopping):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._listener = self._stopping = None

    async def _listen(self) -> None:
        """LISTEN, and keep this process registered (TTL ``LISTENER_TTL``) until cancelled."""
        notifier = asyncio.create_task(self.notifier.run(), name=f"{self._name}-listen")
        try:
            while True:
                try:
                    await self.client.register_event_listener(self.listener_id, ttl=LISTENER_TTL)
                    self._registered.set()
                except (DatabaseUnavailable, NotMigrated) as exc:
                    log.warning("cannot register for job events (%s); retrying", exc)
                except Exception:
                    log.exception("cannot register for job events; retrying")
                await asyncio.sleep(LISTENER_TTL / 3 if self._registered.is_set() else 0.5)
        finally:
            notifier.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await notifier
            with contextlib.suppress(Exception):  # best effort: the row expires anyway
                await asyncio.shield(self.client.unregister_event_listener(self.listener_id))

    def _on_notification(self, payload: str) -> None:
        """Note what the notification claims for a subscription to have it read back soon."""
        if not self._subscriptions:
            return
        subscriptions = list(self._subscriptions)
        claims = [
            claim
            for claim in decode(payload, time.time(), complaints=self._malformed)
            if any(subscription.may_want(claim) for subscription in subscriptions)
        ]
        if not claims:
            return
        room = MAX_PENDING - len(self._pending)
        if len(claims) > room:
            self._missed = True
            self._troubles.log(
                logging.WARNING,
                "%d job events wait to be read back: dropped %d, streams are told they may have missed some",
                len(self._pending),
                len(claims) - room,
            )
            claims = claims[:room]
        self._pending.extend(claims)
        self._confirm.request()

    async def _confirm_pending(self) -> None:
        """Read back the jobs of pending events and fan out the events their rows bear out."""
        batch, self._pending = self._pending[:READ_BATCH], self._pending[READ_BATCH:]
        if self._pending:
            self._confirm.request()
        rows: dict[uuid.UUID, EventRow] = {}
        if batch:
            try:
                rows = await self.client.job_event_rows(
                    sorted({claim.job_id for claim in batch if claim.job_id}), recent_seconds=RECENT_SECONDS
                )
            except (DatabaseUnavailable, NotMigrated, PermissionDenied) as exc:
                self._troubles.log(
                    logging.WARNING,
                    "cannot read back the jobs of %d job events (%s): streams are told they may have missed some",
                    len(batch),
                    exc,
                )
                self._missed = True
        if self._missed:
            self._missed = False
            self._on_reconnect()
        for claim in batch:
            row = rows.get(claim.job_id) if claim.job_id else None
            if row is None or not confirms(claim.event, row) or self._seen_before(claim, row):
                continue
            event = JobEvent(claim.event, claim.job_id, row.queue, row.producer_id, claim.at)
            for subscription in list(self._subscriptions):
                if subscription.wants(event):
                    subscription.deliver(event)

    def _seen_before(self, claim: JobEvent, row: EventRow) -> bool:
        key = (claim.job_id, claim.event, row.state, row.attempts, row.updated_at)
        if key in self._seen:
            return True
        self._seen[key] = None
        if len(self._seen) > SEEN_SIZE:
            self._seen.popitem(last=False)
        return False

    def _on_reconnect(self) -> None:
        gap = JobEvent("stream.reconnected", None, None, None, time.time())
        for subscription in list(self._subscriptions):
            subscription.deliver(gap)
