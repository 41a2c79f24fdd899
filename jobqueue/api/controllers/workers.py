"""``GET /workers``: the worker registry — every worker process, its host and PID, queues, job
types, status (running, stopping, stopped, lost) and heartbeat. Admin keys only: it describes the
machines and every producer's job types, which no producer owns (as /metrics, which shows the same)."""

from __future__ import annotations

import msgspec
from litestar import Controller, get

from jobqueue.api.auth import AnyRequest, admin_only
from jobqueue.api.errors import error_responses
from jobqueue.api.services import ServicesDep
from jobqueue.model.workers import WorkerInfo


class WorkerList(msgspec.Struct):
    workers: list[WorkerInfo]


class WorkersController(Controller):
    path = "/workers"
    tags = ["workers"]

    @get(
        "/",
        summary="The worker registry, live workers first (admin)",
        guards=[admin_only],
        responses=error_responses(403, 503),
    )
    async def list_workers(self, request: AnyRequest, services: ServicesDep) -> WorkerList:
        return WorkerList(await services.reads.read(request.user.id, lambda client: client.workers()))
