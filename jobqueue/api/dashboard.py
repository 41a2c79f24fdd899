"""``GET /dashboard``: the live web dashboard, served from files in the package (no build step).

- ``/dashboard`` is the page, ``/dashboard/static/<file>`` its script and styles (hand-written,
  no third-party code): public, they hold no data. The page holds no inline script or style and
  may not be framed (`jobqueue.api.security`): a page of another site cannot click its buttons.
- ``/dashboard/overview`` is the figures it polls every second: the `jobqueue.observability.metrics` snapshot as
  JSON, the same cached collection /metrics serves. ``/dashboard/running`` is what each worker
  runs now (its processing jobs, the oldest first); ``/dashboard/history`` the last hour of
  throughput per minute, sampled by the maintenance leader (`jobqueue.maintenance.historian`), so
  the chart is full after a reload. These describe the whole system: an admin key or the metrics
  token, as /metrics.
- ``/`` redirects to ``/dashboard``: the API's bare address, typed into a browser (as `make run`
  prints it), shows the page instead of a 404.
- Everything else the page does goes through the REST API with the key the operator types (kept
  in the browser's localStorage): the jobs list, search and detail, cancel, delete of a job that
  has not started, the dead-letter list, retry and purge, pausing a queue, circuit breakers and
  cron schedules.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Annotated, Any

from litestar import Controller, Request, get
from litestar.exceptions import NotFoundException
from litestar.params import FromPath, QueryParameter
from litestar.response import Redirect, Response

from jobqueue.api.errors import error_responses
from jobqueue.api.metrics import collector
from jobqueue.api.request_checks import metrics_reader
from jobqueue.api.services import ServicesDep
from jobqueue.observability import metrics

# The REST routes the page calls; {name} placeholders are filled in by the script.
ROUTES = {
    "overview": "/dashboard/overview",
    "running": "/dashboard/running",
    "history": "/dashboard/history",
    "jobs": "/jobs",
    "job": "/jobs/{id}",
    "cancel": "/jobs/{id}/cancel",
    "delete": "/admin/jobs/{id}",
    "dlq": "/admin/dlq",
    "retry": "/admin/jobs/{id}/retry",
    "retryAll": "/admin/dlq/retry-all",
    "purge": "/admin/dlq",
    "pause": "/queues/{queue}/pause",
    "resume": "/queues/{queue}/resume",
    "circuits": "/circuits",
    "circuitOpen": "/circuits/{name}/open",
    "circuitClose": "/circuits/{name}/close",
    "schedules": "/schedules",
    "schedulePause": "/schedules/{name}/pause",
    "scheduleResume": "/schedules/{name}/resume",
    "scheduleRun": "/schedules/{name}/run",
}
#: Jobs listed per worker by /dashboard/running (the count is always complete).
RUNNING_PER_WORKER = 10
_ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
_NO_STORE = {"Cache-Control": "no-store"}


@functools.cache
def _asset(name: str) -> str:
    return resources.files("jobqueue.api").joinpath("static", name).read_text(encoding="utf-8")


@functools.cache
def _page() -> str:
    """The page with the routes as a JSON data block the script reads (not an inline script: the
    page's policy, `jobqueue.api.security`, runs files of this origin only)."""
    routes = (
        '<script type="application/json" id="jobqueue-routes">'
        + json.dumps(ROUTES).replace("<", "\\u003c")
        + "</script>\n"
    )
    return _asset("dashboard.html").replace(
        '<script src="/dashboard/static/dashboard.js">', routes + '<script src="/dashboard/static/dashboard.js">'
    )


#: Where ``/`` sends a browser.
ROOT_REDIRECT = "/dashboard"


@get("/", exclude_from_auth=True, security=[], include_in_schema=False)
async def root() -> Redirect:
    return Redirect(path=ROOT_REDIRECT)


class DashboardController(Controller):
    path = "/dashboard"
    tags = ["observability"]

    @get(
        "/",
        exclude_from_auth=True,
        security=[],
        media_type="text/html",
        summary="The live dashboard (a web page)",
        include_in_schema=False,
    )
    async def page(self) -> Response[str]:
        return Response(_page(), media_type="text/html", headers=_NO_STORE)

    @get("/static/{name:str}", exclude_from_auth=True, security=[], include_in_schema=False)
    async def asset(self, name: FromPath[str]) -> Response[str]:
        if name not in _ASSETS:
            raise NotFoundException(f"no dashboard file {name!r}")
        return Response(_asset(name), media_type=_ASSETS[name], headers={"Cache-Control": "max-age=60"})

    @get(
        "/overview",
        exclude_from_auth=True,
        guards=[metrics_reader],
        summary="The dashboard's figures (JSON); an admin key or the metrics token",
        responses=error_responses(403, 503),
    )
    async def overview(self, request: Request[Any, Any, Any], services: ServicesDep) -> Response[dict[str, Any]]:
        snapshot = await collector(request, services).snapshot()
        return Response(metrics.overview(snapshot), headers=_NO_STORE)

    @get(
        "/running",
        exclude_from_auth=True,
        guards=[metrics_reader],
        summary=(
            "What each worker runs now: its count and its oldest processing jobs; an admin key or the metrics token"
        ),
        responses=error_responses(403, 503),
    )
    async def running(self, services: ServicesDep) -> Response[dict[str, Any]]:
        found = await services.reads.read(None, lambda client: client.running_jobs(per_worker=RUNNING_PER_WORKER))
        workers = {
            worker_id: {
                "running": count,
                "jobs": [
                    {
                        "id": str(job.id),
                        "queue": job.queue,
                        "job_type": job.job_type,
                        "attempt": job.attempt,
                        "started_at": job.started_at.isoformat() if job.started_at else None,
                    }
                    for job in jobs
                ],
            }
            for worker_id, (count, jobs) in found.items()
        }
        return Response({"workers": workers, "per_worker": RUNNING_PER_WORKER}, headers=_NO_STORE)

    @get(
        "/history",
        exclude_from_auth=True,
        guards=[metrics_reader],
        summary="Throughput per minute (rates per second) over the last minutes, as the maintenance leader "
        "sampled it; an admin key or the metrics token",
        responses=error_responses(403, 422, 503),
    )
    async def history(
        self, services: ServicesDep, minutes: Annotated[int, QueryParameter(ge=1, le=1440)] = 60
    ) -> Response[dict[str, Any]]:
        rows = await services.reads.read(None, lambda client: client.throughput_history(minutes=minutes))
        return Response(
            {
                "minutes": [
                    {
                        "minute": r.minute.isoformat(),
                        "measured_at": r.measured_at.isoformat(),
                        "submitted_per_s": round(r.submitted_per_s, 3),
                        "completed_per_s": round(r.completed_per_s, 3),
                        "failed_per_s": round(r.failed_per_s, 3),
                    }
                    for r in rows
                ]
            },
            headers=_NO_STORE,
        )
