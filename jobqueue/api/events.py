"""Job events for the SSE stream: one LISTEN connection per API process, fanned out to streams.

The database announces job transitions itself (statement-level triggers of migration 0003): one
NOTIFY on ``jobqueue_events`` per statement, whatever path changed the job — REST, Python, SQL,
a worker's batched claim or ack, the sweeper. The payload is compact: pieces of
``[event, queue, producer_id, ids]`` with each id as 22 characters of base64. Nothing polls.

Each stream subscribes with filters (queue, job id, and the producer for non-admin keys) and gets
a bounded queue; a stream that falls ``MAX_BACKLOG`` events behind is ended with a
``stream.overflow`` event rather than slowing everyone. When the LISTEN connection is lost and
comes back, streams get ``stream.reconnected``: events in between may have been missed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
import uuid
from dataclasses import dataclass, field

from jobqueue.notifier import Notifier

log = logging.getLogger("jobqueue.api.events")

CHANNEL = "jobqueue_events"
MAX_BACKLOG = 10_000
ID_WIDTH = 22
EVENT_TYPES = ("job.queued", "job.started", "job.completed", "job.failed", "job.dead_letter", "job.cancelled")


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
    def __init__(self, dsn: str) -> None:
        self.notifier = Notifier(dsn)
        self.notifier.subscribe(CHANNEL, self._on_notification)
        self.notifier.on_reconnect(self._on_reconnect)
        self._subscriptions: set[Subscription] = set()

    async def run(self) -> None:
        await self.notifier.run()

    def subscribe(self, *, queue: str | None, job_id: uuid.UUID | None, producer_id: str | None) -> Subscription:
        subscription = Subscription(queue, job_id, producer_id)
        self._subscriptions.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscriptions.discard(subscription)

    @property
    def listening(self) -> bool:
        return self.notifier.connected.is_set()

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
