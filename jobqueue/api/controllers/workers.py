"""``GET /workers``: the worker registry — every worker process, its queues, status (running,
stopping, stopped, lost) and heartbeat. Any valid key may read it, as ``/queues``."""

from __future__ import annotations

import msgspec
from litestar import Controller, get

from jobqueue.api.auth import AnyRequest
from jobqueue.api.errors import error_responses
from jobqueue.api.services import ServicesDep
from jobqueue.store.workers import WorkerInfo


class WorkerList(msgspec.Struct):
    workers: list[WorkerInfo]


class WorkersController(Controller):
    path = "/workers"
    tags = ["workers"]

    @get("/", summary="The worker registry, live workers first", responses=error_responses(503))
    async def list_workers(self, request: AnyRequest, services: ServicesDep) -> WorkerList:
        return WorkerList(await services.reads.read(request.user.id, lambda client: client.workers()))
