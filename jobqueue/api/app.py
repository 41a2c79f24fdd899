"""The app factory: `create_app(settings)` builds the Litestar application.

The API adds nothing the database does not know: every handler calls `jobqueue.client.AsyncClient`
(the same client Python producers use), so validation, defaults and idempotency are identical on
every path; what only the API reads (key lookups, queue depths, /readyz, /metrics) runs on that
client's pooled connections (`jobqueue.api.store_access`). Shared, per-process state lives in one `Services` object
(client pool, API-key cache,
queue-depth cache, rate limiters, event hub), opened and closed with the app's lifespan and handed
to handlers as the ``services`` dependency.

Adding a controller (how the schedules, workers, metrics and dashboard endpoints plug in):
  1. write ``jobqueue/api/controllers/<name>.py`` with a ``litestar.Controller`` (or plain handler
     functions); take ``services: ServicesDep`` (`jobqueue.api.services`) as a parameter to reach
     the client and settings (the submission handlers, the hot path, use ``services_of(request)``
     instead), and mark parameters explicitly (``FromPath[...]``, ``FromQuery[...]``,
     ``JSONBody[...]``: Litestar deprecates inferred ones); return schema objects from
     ``jobqueue/api/schemas.py`` (or your own dataclasses), never rows;
  2. add the controller to ``ROUTE_HANDLERS`` below — a one-line edit.

How auth is applied:
  * Every route needs ``Authorization: Bearer <key>`` by default: the `ApiKeyAuth` middleware
    resolves the key to a `Principal` (``request.user``: ``producer_id``, ``role``) or answers 401.
  * Any valid key (role ``producer`` or ``admin``): nothing to add. Handlers that touch jobs pass
    ``request.user`` on so a producer sees and cancels only its own jobs (admins see all).
  * Admin only: ``guards=[admin_only]`` on the controller or handler (403 for producer keys).
  * Public (health probes, the dashboard's page and assets): ``exclude_from_auth=True`` on the
    handler (Litestar route ``opt``). The OpenAPI schema at ``/schema`` is public too.
  * The system's figures (``/metrics``, ``/dashboard/overview``): ``exclude_from_auth=True`` plus
    ``guards=[metrics_reader]``, which takes an admin key or the metrics token (see
    `jobqueue.api.request_checks`, which also refuses ambiguous query strings before any handler).

Errors are JSON ``{"error", "message", "field"?}`` with the status codes of `jobqueue.api.errors`:
a database outage is 503 with ``Retry-After``, never 500.
"""

from __future__ import annotations

import gc
from contextlib import asynccontextmanager
from typing import AsyncIterator

from litestar import Litestar, Request
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme
from litestar.types import Receive, Scope, Send

from jobqueue.api import openapi_ui, paths
from jobqueue.api.audit_page import AuditPageController
from jobqueue.api.auth import auth_middleware
from jobqueue.api.controllers.admin import AdminController
from jobqueue.api.controllers.audit import AuditController
from jobqueue.api.controllers.circuits import CircuitsController
from jobqueue.api.controllers.events import EventsController
from jobqueue.api.controllers.health import HealthController
from jobqueue.api.controllers.jobs import JobsController
from jobqueue.api.controllers.limits import LimitsController
from jobqueue.api.controllers.queues import QueuesController
from jobqueue.api.controllers.schedules import SchedulesController
from jobqueue.api.controllers.workers import WorkersController
from jobqueue.api.dashboard import DashboardController, root
from jobqueue.api.errors import EXCEPTION_HANDLERS
from jobqueue.api.metrics import MetricsController
from jobqueue.api.request_checks import refuse_ambiguous_query
from jobqueue.api.security import add_security_headers
from jobqueue.api.services import Services
from jobqueue.config import Settings

# Every controller of the API. Add yours here (one line); see the module docstring.
ROUTE_HANDLERS: list = [
    HealthController,
    JobsController,
    EventsController,
    QueuesController,
    AdminController,
    MetricsController,
    DashboardController,
    root,  # / -> /dashboard
    SchedulesController,
    WorkersController,
    CircuitsController,
    LimitsController,
    AuditController,
    AuditPageController,
]


def settle_garbage_collector() -> None:
    """Keep garbage-collection pauses out of the request latency tail of a served process.

    The app's start-up objects (routes, schemas, the OpenAPI model) never die; `gc.freeze()`
    moves them out of every later collection, and a larger first-generation threshold makes
    collections rarer. Only `jobqueue api` turns it on (JOBQUEUE_API_SETTLE_GC): a process that
    builds many apps, like the test suite, would keep every frozen one alive.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


async def before_each_request(request: Request) -> None:
    """Decode the names in the path (`jobqueue.api.paths`); refuse an ambiguous query string;
    remember that a key wrote (its reads then stay on the primary for a while, see
    `jobqueue.api.reads`)."""
    paths.decode_names(request.scope)
    await refuse_ambiguous_query(request)
    if request.method not in ("GET", "HEAD", "OPTIONS") and request.scope.get("user") is not None:
        request.app.state["services"].reads.wrote(request.user.id)


class Api(Litestar):
    """The Litestar app, routing names that hold ``/`` or ``%`` as one path segment (`jobqueue.api.paths`)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # type: ignore[override]
        paths.route_encoded_names(scope)
        await super().__call__(scope, receive, send)


def create_app(settings: Settings | None = None, *, services: Services | None = None) -> Litestar:
    """The ASGI app for ``settings`` (default: from ``JOBQUEUE_*``); ``services`` is for tests."""
    settings = settings or Settings.from_env()
    services = services or Services(settings)

    @asynccontextmanager
    async def lifespan(_app: Litestar) -> AsyncIterator[None]:
        await services.start()
        if settings.api.settle_gc:
            settle_garbage_collector()
        try:
            yield
        finally:
            await services.stop()

    async def provide_services() -> Services:
        return services

    return Api(
        route_handlers=[*ROUTE_HANDLERS, *openapi_ui.routes()],
        dependencies={"services": Provide(provide_services, use_cache=True)},
        middleware=[auth_middleware()],
        exception_handlers=EXCEPTION_HANDLERS,
        before_request=before_each_request,
        before_send=[add_security_headers],
        lifespan=[lifespan],
        request_max_body_size=settings.api.max_body_bytes,
        openapi_config=OpenAPIConfig(
            title="jobqueue",
            version="1.0.0",
            description="Submit, inspect and cancel background jobs; dead-letter administration; "
            "live job events. Authenticate with `Authorization: Bearer <API key>` "
            "(`jobqueue apikey create`).",
            path="/schema",
            render_plugins=[openapi_ui.render_plugin()],
            components=Components(
                security_schemes={"apiKey": SecurityScheme(type="http", scheme="bearer", description="an API key")}
            ),
            security=[{"apiKey": []}],
        ),
        state=State({"services": services}),
        debug=False,
    )
