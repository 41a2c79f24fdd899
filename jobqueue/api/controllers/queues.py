"""``/queues``: depth and state counts per queue and priority; pause/resume; limits, enqueue
defaults (job TTL, idempotency window) and load shedding of low-priority retries (admin).

Who sees what: an admin key lists every queue; a producer key with a queue allow-list lists those
queues only (it submits there, and their depth, limits and pause decide its submissions); a
producer key without one is refused (403) — every queue it could name is potentially another
producer's, and the listing is every producer's queues, as /metrics, which is locked the same way.

The listing is the cached metrics snapshot (`jobqueue.observability.metrics.Collector`, the one /metrics and the
dashboard share), never a count per request: any number of callers cost one bounded collection
per ``JOBQUEUE_METRICS_TTL`` (2 s) per API process, and the answer says when it was measured and
how long it may be served.

A paused queue keeps accepting jobs; workers stop claiming from it within milliseconds (the
change NOTIFYs ``jobqueue_control``) and resume the same way.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import Controller, get, post, put
from litestar.exceptions import PermissionDeniedException
from litestar.params import FromPath, JSONBody, QueryParameter

from jobqueue.api.auth import AnyRequest, admin_only
from jobqueue.api.errors import error_responses
from jobqueue.api.metrics import collector
from jobqueue.api.queue_schemas import QueueDefaults, QueueLimits, QueueList, QueueSettingsOut, QueueShedding
from jobqueue.api.services import ServicesDep
from jobqueue.model.errors import ValidationError


class QueuesController(Controller):
    path = "/queues"
    tags = ["queues"]

    @get(
        "/",
        summary="Per queue and priority: depth, scheduled, retrying, processing, dead, oldest age "
        "(the cached metrics snapshot: see measured_at and max_age_seconds); admin keys, or the queues of a "
        "key's allow-list",
        responses=error_responses(403, 503),
    )
    async def list_queues(self, request: AnyRequest, services: ServicesDep) -> QueueList:
        user = request.user
        if not user.is_admin and user.queues is None:
            raise PermissionDeniedException(
                "/queues lists every producer's queues: it needs an admin API key, or a "
                "key with a queue allow-list (it lists those queues)"
            )
        cache = collector(request, services)
        snapshot = await cache.snapshot()
        listing = QueueList.of(snapshot, cache.valid_for(snapshot))
        if user.is_admin:
            return listing
        allowed = set(user.queues or ())
        # ``other`` sums queues beyond the listing's cap: other producers' too, so a producer key gets none.
        return msgspec.structs.replace(listing, queues=[q for q in listing.queues if q.queue in allowed], other=None)

    @post(
        "/{name:str}/pause",
        summary="Stop workers claiming from the queue (admin); a queue no worker ever served, no "
        "operator configured and no job is in is a 404 unless force=true (a misspelling, mostly)",
        status_code=200,
        guards=[admin_only],
        responses=error_responses(403, 404, 422, 503),
    )
    async def pause(
        self,
        name: FromPath[str],
        services: ServicesDep,
        force: Annotated[bool, QueryParameter(description="pause it before its first worker starts")] = False,
    ) -> QueueSettingsOut:
        return QueueSettingsOut.of(await services.client.pause_queue(name, force=force))

    @post(
        "/{name:str}/resume",
        summary="Let workers claim from the queue again (admin); an unknown queue is a 404",
        status_code=200,
        guards=[admin_only],
        responses=error_responses(403, 404, 422, 503),
    )
    async def resume(self, name: FromPath[str], services: ServicesDep) -> QueueSettingsOut:
        return QueueSettingsOut.of(await services.client.resume_queue(name))

    @put(
        "/{name:str}/limits",
        summary="Set the queue's backpressure limits (admin; null: the default)",
        guards=[admin_only],
        responses=error_responses(403, 422, 503),
    )
    async def set_limits(
        self, name: FromPath[str], data: JSONBody[QueueLimits], services: ServicesDep
    ) -> QueueSettingsOut:
        return QueueSettingsOut.of(
            await services.client.set_queue_limits(name, soft_limit=data.soft_limit, hard_limit=data.hard_limit)
        )

    @put(
        "/{name:str}/defaults",
        summary="Set the queue's job TTL and idempotency window (admin; null: the default)",
        guards=[admin_only],
        responses=error_responses(403, 422, 503),
    )
    async def set_defaults(
        self, name: FromPath[str], data: JSONBody[QueueDefaults], services: ServicesDep
    ) -> QueueSettingsOut:
        try:
            settings = await services.client.set_queue_defaults(
                name, job_ttl=data.job_ttl_seconds, idempotency_window=data.idempotency_window_seconds
            )
        except ValidationError as exc:  # named as the body sent it (job_ttl_seconds), not as the client's option
            sent = exc.field + "_seconds" if exc.field in ("job_ttl", "idempotency_window") else exc.field
            raise ValidationError(sent, exc.message) from None
        return QueueSettingsOut.of(settings)

    @put(
        "/{name:str}/shedding",
        summary="Shed low-priority retries above the soft limit, or stop (admin)",
        guards=[admin_only],
        responses=error_responses(403, 422, 503),
    )
    async def set_shedding(
        self, name: FromPath[str], data: JSONBody[QueueShedding], services: ServicesDep
    ) -> QueueSettingsOut:
        return QueueSettingsOut.of(await services.client.set_queue_shedding(name, data.shed_low_retries))
