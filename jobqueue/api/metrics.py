"""``GET /metrics``: the one Prometheus scrape target for the whole system (an admin key or the
metrics token: see `jobqueue.api.request_checks`).

Workers report through the database, so scraping the API is enough: the figures are described in
`jobqueue.observability.metrics`. Every process of the API keeps one cached `Collector` (in the app's state), so
any number of scrapers and dashboards cost one collection per TTL.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get
from litestar.response import Response

from jobqueue.api.errors import error_responses
from jobqueue.api.request_checks import metrics_reader
from jobqueue.api.services import Services, ServicesDep
from jobqueue.client import AsyncClient
from jobqueue.model.autoscale import Rule
from jobqueue.observability import metrics, prometheus

_MEDIA_TYPE = prometheus.CONTENT_TYPE.removesuffix("; charset=utf-8")  # Litestar appends the charset


def collector(request: Request[Any, Any, Any], services: Services) -> metrics.Collector:
    """This app's collector, made on first use from the services' client and settings."""
    state = request.app.state
    found = state.get("metrics_collector")
    if found is None:
        settings = services.settings.metrics

        async def collect(client: AsyncClient) -> metrics.Snapshot:
            """What /metrics and the dashboard show, read on one pooled connection (`metrics.collect`)."""
            async with client.connection() as conn:
                return await metrics.collect(
                    conn,
                    cap=settings.count_cap,
                    stale_seconds=settings.worker_stale_seconds,
                    max_queues=settings.max_queues,
                )

        async def source() -> metrics.Snapshot:
            return await services.reads.read(None, collect)

        found = state["metrics_collector"] = metrics.Collector(source, ttl=settings.ttl)
    return found


class MetricsController(Controller):
    tags = ["observability"]

    @get(
        "/metrics",
        exclude_from_auth=True,
        guards=[metrics_reader],
        media_type=_MEDIA_TYPE,
        summary="Prometheus metrics: queues, dead letters, workers (text format 0.0.4); an admin key or "
        "the metrics token",
        responses=error_responses(403, 503),
    )
    async def scrape(self, request: Request[Any, Any, Any], services: ServicesDep) -> Response[str]:
        snapshot = await collector(request, services).snapshot()
        settings = services.settings.autoscale
        text = prometheus.render(
            snapshot, rule=Rule(step=settings.step), worker_bounds=(settings.min_workers, settings.max_workers)
        )
        return Response(text, media_type=_MEDIA_TYPE)
