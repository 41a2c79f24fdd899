"""``GET /healthz`` (the process is up) and ``GET /readyz`` (database reachable and migrated).

Both are public: load balancers and orchestrators probe them without a key.
"""

from __future__ import annotations

from litestar import Controller, get
from litestar.response import Response

from jobqueue.api.errors import error_response, error_responses
from jobqueue.api.schemas import ErrorBody, Health
from jobqueue.api.services import ServicesDep


class HealthController(Controller):
    tags = ["health"]

    @get("/healthz", exclude_from_auth=True, security=[], summary="The API process is up")
    async def healthz(self) -> Health:
        return Health(status="ok")

    @get(
        "/readyz",
        exclude_from_auth=True,
        security=[],
        summary="The database is reachable and migrated",
        responses=error_responses(503),
    )
    async def readyz(self, services: ServicesDep) -> Response[Health | ErrorBody]:
        revision = await services.store.schema_revision()
        if revision != services.head_revision:
            return error_response(
                503,
                f"database schema at {revision or 'nothing'}, this API needs "
                f"{services.head_revision}: run `jobqueue migrate`",
                error="not_migrated",
                retry_after=services.settings.api.retry_after,
            )
        return Response(Health(status="ready", revision=revision))
