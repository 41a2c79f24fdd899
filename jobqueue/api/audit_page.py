"""``GET /dashboard/audit``: the dashboard's audit log page — a page of its own beside the dashboard
(linked from its tabs), served from files in the package like it (no build step).

The page and its script (``/dashboard/audit/static/audit.js``, ``audit.css``) are public: they
hold no data. What they show comes from ``GET /admin/audit`` with the API key the operator typed
in the dashboard (the browser's localStorage), so a producer key sees its own entries only; the
page's policy and headers are the dashboard's (`jobqueue.api.security`).
"""

from __future__ import annotations

from litestar import Controller, get
from litestar.exceptions import NotFoundException
from litestar.params import FromPath
from litestar.response import Response

from jobqueue.api.dashboard import _asset

_ASSETS = {"audit.js": "text/javascript", "audit.css": "text/css"}


class AuditPageController(Controller):
    path = "/dashboard/audit"
    tags = ["observability"]

    @get("/", exclude_from_auth=True, security=[], media_type="text/html", include_in_schema=False)
    async def page(self) -> Response[str]:
        return Response(_asset("audit.html"), media_type="text/html", headers={"Cache-Control": "no-store"})

    @get("/static/{name:str}", exclude_from_auth=True, security=[], include_in_schema=False)
    async def asset(self, name: FromPath[str]) -> Response[str]:
        if name not in _ASSETS:
            raise NotFoundException(f"no audit page file {name!r}")
        return Response(_asset(name), media_type=_ASSETS[name], headers={"Cache-Control": "max-age=60"})
