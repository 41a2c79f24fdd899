"""Job events: one LISTEN connection per process, fanned out to subscriptions — the REST API's SSE
streams and `AsyncClient.wait()`.

The database announces job transitions itself (statement-level triggers of migration 0003): one
NOTIFY on ``jobqueue_events`` per statement, whatever path changed the job — REST, Python, SQL,
a worker's batched claim or ack, the sweeper. The payload is compact: pieces of
``[event, queue, producer_id, ids]`` with each id as 22 characters of base64. Nothing polls.

The LISTEN connection is open, and the process registered in ``jobqueue.event_listeners`` (which
the triggers check first), only while at least one stream is. Each stream subscribes with filters (queue, job id, and the producer for non-admin keys) and gets
a bounded queue; a stream that falls ``MAX_BACKLOG`` events behind is ended with a
``stream.overflow`` event rather than slowing everyone. When the LISTEN connection is lost and
comes back, streams get ``stream.reconnected``: events in between may have been missed.

A transaction pooler cannot carry LISTEN: behind PgBouncer the LISTEN connection goes to
``JOBQUEUE_DIRECT_DSN``; with none (or with ``JOBQUEUE_LISTEN=0``) there is no stream, and
``/events`` answers 503 `EventsUnavailable` saying so.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass, field

from typing import Protocol

from jobqueue.errors import DatabaseUnavailable, JobQueueError, NotMigrated
from jobqueue.notifier import Notifier

log = logging.getLogger("jobqueue.events")

CHANNEL = "jobqueue_events"
MAX_BACKLOG = 10_000
LISTENER_TTL = 30.0  # seconds a registration lasts; refreshed every third of it
ID_WIDTH = 22


class EventsUnavailable(JobQueueError):
    """This process opens no LISTEN connection (``JOBQUEUE_LISTEN=0``), so it has no events."""


class Registrar(Protocol):
    """Registers the process in ``jobqueue.event_listeners`` (an `AsyncClient` does)."""

    async def register_event_listener(self, listener_id: str, *, ttl: float) -> None: ...

    async def unregister_event_listener(self, listener_id: str) -> None: ...


@dataclass(frozen=True, slots=True)
class JobEvent:
    event: str
    job_id: uuid.UUID | None
    queue: str | None
    producer_id: str | None
    at: float

    def as_json(self) -> str:
        return json.dumps({"event": self.event, "job_id": str(self.job_id) if self.job_id else None,
                           "queue": self.queue, "at": self.at})


def decode(payload: str, at: float) -> list[JobEvent]:
    """The events of one notification. Anything else on the channel (cancel() also sends a JSON
    object there; the trigger reports that transition too) is ignored."""
    try:
        pieces = json.loads(payload)
    except ValueError:
        return []
    events: list[JobEvent] = []
    if not isinstance(pieces, list):
        return events
    for piece in pieces:
        try:
            name, queue, producer, codes = piece
            ids = [uuid.UUID(bytes=base64.b64decode(codes[i:i + ID_WIDTH] + "=="))
                   for i in range(0, len(codes), ID_WIDTH)]
        except (TypeError, ValueError):
            log.warning("undecodable job event piece: %.200r", piece)
            continue
        events.extend(JobEvent(name, job_id, queue, producer, at) for job_id in ids)
    return events


@dataclass(eq=False)
class Subscription:
    queue: str | None
    job_id: uuid.UUID | None
    producer_id: str | None  # None: every producer's jobs (admin keys)
    inbox: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(MAX_BACKLOG))
    overflowed: bool = False

    def wants(self, event: JobEvent) -> bool:
        return ((self.job_id is None or event.job_id == self.job_id)
                and (self.queue is None or event.queue == self.queue)
                and (self.producer_id is None or event.producer_id == self.producer_id))

    def deliver(self, event: JobEvent) -> None:
        if self.overflowed:
            return
        try:
            self.inbox.put_nowait(event)
        except asyncio.QueueFull:
            self.overflowed = True  # the stream notices before its next read and ends


class EventHub:
    """LISTENs, and registers in ``jobqueue.event_listeners``, only while a stream is open: with
    no subscriber anywhere the database's event triggers stop after one probe of that table, so
    neither a worker's claim/ack statements nor this process spend anything on events."""

    def __init__(self, client: Registrar, dsn: str | None, *, connect_timeout: float = 5.0,
                 name: str = "api-events") -> None:
        """``dsn``: where to LISTEN (a conninfo naming the connection); None: no events here."""
        self.client = client
        self.listener_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.enabled = dsn is not None
        self.notifier = Notifier(dsn or "")
        self.notifier.subscribe(CHANNEL, self._on_notification)
        self.notifier.on_reconnect(self._on_reconnect)
        self._connect_timeout = connect_timeout
        self._subscriptions: set[Subscription] = set()
        self._listener: asyncio.Task | None = None
        self._stopping: asyncio.Task | None = None  # a listener cancelled, still unregistering
        self._registered = asyncio.Event()
        self._name = name

    async def subscribe(self, *, queue: str | None, job_id: uuid.UUID | None,
                        producer_id: str | None) -> Subscription:
        """A subscription that receives every event committed from now on; `DatabaseUnavailable`
        if the LISTEN connection or the registration cannot be made in time."""
        if not self.enabled:
            raise EventsUnavailable("job events need a LISTEN connection, and this process opens none "
                                    "(JOBQUEUE_LISTEN=0; behind PgBouncer set JOBQUEUE_DIRECT_DSN to reach "
                                    "PostgreSQL directly for it)")
        subscription = Subscription(queue, job_id, producer_id)
        self._subscriptions.add(subscription)
        if self._stopping is not None:  # the last stream just closed: let that listener unregister first,
            stopping, self._stopping = self._stopping, None  # or its cleanup would undo our registration
            await asyncio.gather(stopping, return_exceptions=True)
        if self._listener is None or self._listener.done():
            self._registered.clear()
            self._listener = asyncio.create_task(self._listen(), name=self._name)
        try:
            await asyncio.wait_for(asyncio.gather(self.notifier.connected.wait(), self._registered.wait()),
                                   self._connect_timeout)
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
        if not self._subscriptions:
            return
        for event in decode(payload, time.time()):
            for subscription in list(self._subscriptions):
                if subscription.wants(event):
                    subscription.deliver(event)

    def _on_reconnect(self) -> None:
        gap = JobEvent("stream.reconnected", None, None, None, time.time())
        for subscription in list(self._subscriptions):
            subscription.deliver(gap)
