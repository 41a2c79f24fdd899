"""``GET /events``: Server-Sent Events of job transitions as they happen (LISTEN/NOTIFY, no polling).

Event names: job.queued, job.started, job.completed, job.failed, job.dead_letter, job.cancelled;
data: ``{"event", "job_id", "queue", "at"}``. Filters: ``queue`` and ``job_id``; a producer key
only receives its own jobs' events. A comment line every 15 s keeps proxies from closing an idle
stream. ``stream.reconnected`` means the API lost its LISTEN connection for a moment (events in
between may be missing: re-read the jobs you care about); ``stream.overflow`` ends a stream whose
reader fell too far behind.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, Any, AsyncIterator

from litestar import Controller, Request, get
from litestar.params import QueryParameter
from litestar.response import ServerSentEvent, ServerSentEventMessage

from jobqueue.api.auth import Principal
from jobqueue.api.errors import error_responses
from jobqueue.job_events import EventHub, JobEvent, Subscription
from jobqueue.api.services import ServicesDep

KEEPALIVE_SECONDS = 15.0


async def event_stream(hub: EventHub, subscription: Subscription) -> AsyncIterator[ServerSentEventMessage]:
    try:
        yield ServerSentEventMessage(comment="subscribed")
        while True:
            if subscription.overflowed:
                yield _message(JobEvent("stream.overflow", None, None, None, 0.0))
                return
            try:
                event = await asyncio.wait_for(subscription.inbox.get(), KEEPALIVE_SECONDS)
            except asyncio.TimeoutError:
                yield ServerSentEventMessage(comment="keepalive")
                continue
            yield _message(event)
    finally:
        hub.unsubscribe(subscription)


def _message(event: JobEvent) -> ServerSentEventMessage:
    return ServerSentEventMessage(data=event.as_json(), event=event.event)


class EventsController(Controller):
    tags = ["events"]

    @get("/events", summary="Stream job events (text/event-stream)", responses=error_responses(422, 503))
    async def events(
        self, request: Request[Principal, Any, Any], services: ServicesDep,
        queue: Annotated[str | None, QueryParameter(description="only this queue's jobs")] = None,
        job_id: Annotated[uuid.UUID | None, QueryParameter(description="only this job")] = None,
    ) -> ServerSentEvent:
        user = request.user
        hub = services.events
        subscription = await hub.subscribe(queue=queue, job_id=job_id,
                                           producer_id=None if user.is_admin else user.producer_id)
        return ServerSentEvent(event_stream(hub, subscription))
