"""``GET /events``: Server-Sent Events of job transitions as they happen (LISTEN/NOTIFY, no polling).

Event names: job.queued, job.started, job.completed, job.failed, job.dead_letter, job.cancelled,
and job.progress (a running job reported progress: ``GET /jobs/{id}`` has it); data: ``{"event",
"job_id", "queue", "at"}``. Filters: ``queue`` and ``job_id``; a producer key
only receives its own jobs' events. A comment line every 15 s keeps proxies from closing an idle
stream. ``stream.reconnected`` means the API lost its LISTEN connection for a moment (events in
between may be missing: re-read the jobs you care about); ``stream.overflow`` ends a stream whose
reader fell too far behind; ``stream.revoked`` ends a stream whose key was revoked (checked as
often as keys are cached, at least every second).

What a stream receives is what the database bears out, never what a notification says: any login
may NOTIFY ``jobqueue_events``, so the hub (`jobqueue.events.hub.EventHub`) reads each named job
back and streams an event only when the job's row agrees, under the row's queue and producer.

Each key may hold at most ``JOBQUEUE_API_MAX_STREAMS_PER_KEY`` streams per API process (default
10): one more is 429 ``too_many_streams``, so no producer key can hold every connection open.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Annotated, Any, AsyncIterator, Awaitable, Callable

from litestar import Controller, Request, get
from litestar.params import QueryParameter
from litestar.response import ServerSentEvent, ServerSentEventMessage

from jobqueue.api.auth import Principal
from jobqueue.api.errors import error_responses
from jobqueue.api.services import ServicesDep
from jobqueue.events.hub import EventHub, JobEvent, Subscription
from jobqueue.model.errors import DatabaseUnavailable

KEEPALIVE_SECONDS = 15.0


async def event_stream(
    hub: EventHub,
    subscription: Subscription,
    *,
    still_valid: Callable[[], Awaitable[bool]],
    check_every: float,
    release: Callable[[], None],
) -> AsyncIterator[ServerSentEventMessage]:
    """Events until the reader goes, falls behind, or its key is revoked (``still_valid`` is
    asked every ``check_every`` seconds)."""
    try:
        yield ServerSentEventMessage(comment="subscribed")
        quiet_since = time.monotonic()
        while True:
            if subscription.overflowed:
                yield _message(JobEvent("stream.overflow", None, None, None, 0.0))
                return
            try:
                event = await asyncio.wait_for(subscription.inbox.get(), check_every)
            except asyncio.TimeoutError:
                event = None
            if not await still_valid():
                yield _message(JobEvent("stream.revoked", None, None, None, 0.0))
                return
            if event is not None:
                quiet_since = time.monotonic()
                yield _message(event)
            elif time.monotonic() - quiet_since >= KEEPALIVE_SECONDS:
                quiet_since = time.monotonic()
                yield ServerSentEventMessage(comment="keepalive")
    finally:
        hub.unsubscribe(subscription)
        release()


def _message(event: JobEvent) -> ServerSentEventMessage:
    return ServerSentEventMessage(data=event.as_json(), event=event.event)


class EventsController(Controller):
    tags = ["events"]

    @get("/events", summary="Stream job events (text/event-stream)", responses=error_responses(422, 429, 503))
    async def events(
        self,
        request: Request[Principal, Any, Any],
        services: ServicesDep,
        queue: Annotated[str | None, QueryParameter(description="only this queue's jobs")] = None,
        job_id: Annotated[uuid.UUID | None, QueryParameter(description="only this job")] = None,
    ) -> ServerSentEvent:
        user = request.user
        hub = services.events
        release = services.streams.take(user.id)
        try:
            subscription = await hub.subscribe(
                queue=queue, job_id=job_id, producer_id=None if user.is_admin else user.producer_id
            )
        except BaseException:
            release()
            raise
        token = request.headers.get("authorization", "").partition(" ")[2].strip()

        async def still_valid() -> bool:
            try:
                return await services.keys.principal(token) is not None
            except DatabaseUnavailable:  # cannot tell now: keep streaming, ask again next time
                return True

        check_every = min(max(services.settings.api.key_cache_seconds, 1.0), KEEPALIVE_SECONDS)
        return ServerSentEvent(
            event_stream(hub, subscription, still_valid=still_valid, check_every=check_every, release=release)
        )
