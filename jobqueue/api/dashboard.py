"""``GET /dashboard``: the live web dashboard, served from files in the package (no build step).

- ``/dashboard`` is the page, ``/dashboard/static/<file>`` its script and styles (hand-written,
  no third-party code), ``/dashboard/overview`` the figures it polls every second: the
  `jobqueue.metrics` snapshot as JSON, the same cached collection /metrics serves.
- Those three are public, like /metrics. Everything else the page does goes through the REST API
  with the key the operator types (kept in the browser's localStorage): the jobs list and detail
  (any key, a producer sees its own jobs), the dead-letter list, retry and purge, and pausing a
  queue (admin keys).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from litestar import Controller, Request, get
from litestar.exceptions import NotFoundException
from litestar.params import FromPath
from litestar.response import Response

from jobqueue import metrics
from jobqueue.api.errors import error_responses
from jobqueue.api.metrics import collector
from jobqueue.api.request_checks import metrics_reader
from jobqueue.api.services import ServicesDep

# The REST routes the page calls; {name} placeholders are filled in by the script.
ROUTES = {
    "overview": "/dashboard/overview",
    "jobs": "/jobs",
    "job": "/jobs/{id}",
    "dlq": "/admin/dlq",
    "retry": "/admin/jobs/{id}/retry",
    "retryAll": "/admin/dlq/retry-all",
    "purge": "/admin/dlq",
    "pause": "/queues/{queue}/pause",
    "resume": "/queues/{queue}/resume",
}
_ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
_NO_STORE = {"Cache-Control": "no-store"}


@functools.cache
def _asset(name: str) -> str:
    return resources.files("jobqueue.api").joinpath("static", name).read_text(encoding="utf-8")


@functools.cache
def _page() -> str:
    routes = "<script>window.JOBQUEUE_ROUTES = " + json.dumps(ROUTES) + ";</script>\n"
    return _asset("dashboard.html").replace('<script src="/dashboard/static/dashboard.js">',
                                            routes + '<script src="/dashboard/static/dashboard.js">')


class DashboardController(Controller):
    path = "/dashboard"
    tags = ["observability"]

    @get("/", exclude_from_auth=True, security=[], media_type="text/html",
         summary="The live dashboard (a web page)", include_in_schema=False)
    async def page(self) -> Response[str]:
        return Response(_page(), media_type="text/html", headers=_NO_STORE)

    @get("/static/{name:str}", exclude_from_auth=True, security=[], include_in_schema=False)
    async def asset(self, name: FromPath[str]) -> Response[str]:
        if name not in _ASSETS:
            raise NotFoundException(f"no dashboard file {name!r}")
        return Response(_asset(name), media_type=_ASSETS[name], headers={"Cache-Control": "max-age=60"})

    @get("/overview", exclude_from_auth=True, guards=[metrics_reader],
         summary="The dashboard's figures (JSON); an admin key or the metrics token", responses=error_responses(403, 503))
    async def overview(self, request: Request[Any, Any, Any], services: ServicesDep) -> Response[dict[str, Any]]:
        snapshot = await collector(request, services).snapshot()
        return Response(metrics.overview(snapshot), headers=_NO_STORE)
