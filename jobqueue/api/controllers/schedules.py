"""``/schedules``: cron schedules — list, create, read, replace, delete, pause, resume, run now.
Admin keys only.

The same rows as ``@queue.periodic``, ``jobqueue schedule`` and plain SQL, validated the same way
(`client.schedules`): an expression croniter refuses or an unknown time zone is a 422 naming the
field, a taken name on create a 409, an unknown name a 404.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import msgspec
from litestar import Controller, delete, get, post, put
from litestar.params import FromPath, JSONBody
from msgspec import Meta

from jobqueue.api.auth import admin_only
from jobqueue.api.errors import error_responses
from jobqueue.api.services import ServicesDep
from jobqueue.model.jobs import Priority
from jobqueue.model.schedules import DEFAULT_MISFIRE_LIMIT, DEFAULT_MISFIRE_POLICY, Schedule


class ScheduleDefinition(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """What a schedule fires, and when. Validated like `client.schedules.add` and the table's trigger."""

    cron: Annotated[str, Meta(description="croniter expression: 5 fields, or 6 with seconds last; or @hourly…")]
    job_type: Annotated[str, Meta(description="the job type each tick enqueues")]
    timezone: Annotated[str, Meta(description="IANA zone the expression is read in")] = "UTC"
    payload: Annotated[Any, Meta(description="JSON payload of each job (default {})")] = None
    priority: Annotated[str, Meta(description="critical, high, normal or low")] = Priority.NORMAL.label
    queue: str = "default"
    max_attempts: Annotated[int | None, Meta(description="null: the job type's default")] = None
    misfire_policy: Annotated[
        str, Meta(description="ticks missed while no scheduler ran: fire_once, fire_all (up to misfire_limit) or skip")
    ] = DEFAULT_MISFIRE_POLICY
    misfire_limit: int = DEFAULT_MISFIRE_LIMIT
    enabled: Annotated[bool, Meta(description="on create only; pause/resume change it later")] = True

    def options(self) -> dict[str, Any]:
        """The keyword options of `client.schedules.add` / `put`."""
        return {
            field: getattr(self, field) for field in self.__struct_fields__ if field not in ("name", "cron", "job_type")
        }


class NewSchedule(ScheduleDefinition, kw_only=True):
    name: Annotated[str, Meta(description="unique name")]


class ScheduleList(msgspec.Struct):
    schedules: list[Schedule]


class ScheduleRun(msgspec.Struct):
    job_id: uuid.UUID


class SchedulesController(Controller):
    path = "/schedules"
    tags = ["schedules"]
    guards = [admin_only]

    @get("/", summary="Every cron schedule", responses=error_responses(403, 503))
    async def list_schedules(self, services: ServicesDep) -> ScheduleList:
        return ScheduleList(await services.client.schedules.list())

    @post("/", summary="Create a schedule", status_code=201, responses=error_responses(403, 409, 422, 503))
    async def create(self, data: JSONBody[NewSchedule], services: ServicesDep) -> Schedule:
        schedules = services.client.schedules.with_source("api")
        return await schedules.add(data.name, data.cron, data.job_type, **data.options())

    @get("/{name:str}", summary="One schedule", responses=error_responses(403, 404, 503))
    async def read(self, name: FromPath[str], services: ServicesDep) -> Schedule:
        return await services.client.schedules.get(name)

    @put(
        "/{name:str}",
        summary="Create the schedule or replace its definition (its paused state is kept)",
        responses=error_responses(403, 422, 503),
    )
    async def replace(self, name: FromPath[str], data: JSONBody[ScheduleDefinition], services: ServicesDep) -> Schedule:
        schedules = services.client.schedules.with_source("api")
        return await schedules.put(name, data.cron, data.job_type, **data.options())

    @delete(
        "/{name:str}",
        summary="Delete a schedule (and its fire history)",
        status_code=204,
        responses=error_responses(403, 404, 503),
    )
    async def remove(self, name: FromPath[str], services: ServicesDep) -> None:
        await services.client.schedules.remove(name)

    @post(
        "/{name:str}/pause",
        summary="Stop firing until resumed",
        status_code=200,
        responses=error_responses(403, 404, 503),
    )
    async def pause(self, name: FromPath[str], services: ServicesDep) -> Schedule:
        return await services.client.schedules.pause(name)

    @post(
        "/{name:str}/resume",
        summary="Fire again from now on (ticks missed while paused are not fired)",
        status_code=200,
        responses=error_responses(403, 404, 503),
    )
    async def resume(self, name: FromPath[str], services: ServicesDep) -> Schedule:
        return await services.client.schedules.resume(name)

    @post(
        "/{name:str}/run",
        summary="Enqueue one job from the schedule now",
        status_code=201,
        responses=error_responses(403, 404, 503),
    )
    async def run_now(self, name: FromPath[str], services: ServicesDep) -> ScheduleRun:
        return ScheduleRun(await services.client.schedules.run_now(name))
