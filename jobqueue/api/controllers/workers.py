"""``GET /workers``: the worker registry — every worker process, its queues, status (running,
stopping, stopped, lost) and heartbeat. Any valid key may read it, as ``/queues``."""

from __future__ import annotations

from datetime import datetime

import msgspec
from litestar import Controller, get

from jobqueue.api.errors import error_responses
from jobqueue.api.services import ServicesDep
from jobqueue.store.workers import WorkerInfo


class WorkerOut(msgspec.Struct):
    id: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    status: str
    jobs_processed: int
    jobs_failed: int
    started_at: datetime
    last_heartbeat: datetime
    heartbeat_interval: float

    @classmethod
    def of(cls, worker: WorkerInfo) -> "WorkerOut":
        return cls(**{field: getattr(worker, field) for field in cls.__struct_fields__})


class WorkerList(msgspec.Struct):
    workers: list[WorkerOut]


class WorkersController(Controller):
    path = "/workers"
    tags = ["workers"]

    @get("/", summary="The worker registry, live workers first", responses=error_responses(503))
    async def list_workers(self, services: ServicesDep) -> WorkerList:
        return WorkerList([WorkerOut.of(w) for w in await services.client.workers()])
