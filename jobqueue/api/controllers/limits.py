"""``/limits``: the global concurrency and rate limits per job type or queue — settings, who set
them, jobs running under each and the starts in its current window; an operator may set or clear
one. Admin keys only: the running jobs and starts counted are every producer's, and the names are
other producers' job types and queues. A limit set here wins over the workers'
code until it is cleared.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, delete, get, put
from litestar.params import FromPath, JSONBody

from jobqueue.api.auth import admin_only
from jobqueue.api.errors import error_responses
from jobqueue.api.services import ServicesDep
from jobqueue.model.limits import KEEP, Limit


class LimitList(msgspec.Struct):
    limits: list[Limit]


class LimitSettings(msgspec.Struct, forbid_unknown_fields=True):
    """At least one of the two. A part left out stays as the limit has it (a new concurrency keeps
    the code's rate); null removes it. ``rate``: starts per window, ``"10/s"``, ``"100/m"``,
    ``"5/2s"``, ``"1000/h"``."""

    concurrency: int | None | msgspec.UnsetType = msgspec.UNSET
    rate: str | None | msgspec.UnsetType = msgspec.UNSET

    def part(self, name: str) -> Any:
        value = getattr(self, name)
        return KEEP if value is msgspec.UNSET else value


class LimitsController(Controller):
    path = "/limits"
    tags = ["limits"]

    @get(
        "/",
        summary="Every limit: concurrency, rate, set by code or admin, running jobs, starts in the window (admin)",
        guards=[admin_only],
        responses=error_responses(403, 503),
    )
    async def list_limits(self, services: ServicesDep) -> LimitList:
        return LimitList(await services.client.limits())

    @put(
        "/{limit_scope:str}/{name:str}",
        summary="Set a limit on a job type (scope job_type) or a queue (scope queue); a part left out "
        "stays as it is, null removes it; it wins over the code's until cleared (admin)",
        status_code=200,
        guards=[admin_only],
        responses=error_responses(403, 422, 503),
    )
    async def set_limit(
        self, limit_scope: FromPath[str], name: FromPath[str], data: JSONBody[LimitSettings], services: ServicesDep
    ) -> Limit:
        return await services.client.set_limit(
            limit_scope, name, concurrency=data.part("concurrency"), rate=data.part("rate")
        )

    @delete(
        "/{limit_scope:str}/{name:str}",
        summary="Remove a limit; one the code declares returns at the next worker start (admin)",
        status_code=204,
        guards=[admin_only],
        responses=error_responses(403, 404, 422, 503),
    )
    async def clear_limit(self, limit_scope: FromPath[str], name: FromPath[str], services: ServicesDep) -> None:
        await services.client.clear_limit(limit_scope, name)
