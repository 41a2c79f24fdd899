"""The API's interactive documentation, offline: Swagger UI at ``/schema`` and ``/schema/swagger``.

Litestar's render plugins load their scripts (and the page's icon) from a CDN, so on a machine
without internet access (a locked-down server, an air-gapped cluster) the page stayed blank. The
scripts, styles and icon come from the `swagger-ui-py` package instead and are served from
``/schema/assets/`` (public, like the schema itself). Its Swagger UI is 5.x: the schema Litestar
writes is OpenAPI 3.1, which Swagger UI 4 (the `swagger-ui-bundle` package) refuses to render.

The page holds no inline script or style, so it renders under the same Content-Security-Policy as
the dashboard (`jobqueue.api.security`): Litestar's template starts Swagger UI in an inline script
that embeds the whole schema; `OfflineSwagger` starts it from ``/schema/start.js`` (a file of this
package), which fetches ``/schema/openapi.json``.
"""

from __future__ import annotations

import functools
import html
import importlib.util
from importlib import resources
from pathlib import Path
from typing import Any

from litestar import Request, get
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.response import Response
from litestar.static_files import create_static_files_router

ASSETS = "/schema/assets"
START = "/schema/start.js"


def _static_directory() -> Path:
    """swagger-ui-py's static files, found without importing the package (its __init__ loads an
    adapter for every web framework it supports)."""
    spec = importlib.util.find_spec("swagger_ui")
    assert spec is not None and spec.submodule_search_locations, "swagger-ui-py is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / "static"


class OfflineSwagger(SwaggerRenderPlugin):
    """Swagger UI from local files, started by `START` rather than an inline script."""

    def render(self, request: Request, openapi_schema: dict[str, Any]) -> bytes:
        title = html.escape(str(openapi_schema["info"]["title"]))
        return (
            f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{title}</title>\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'{self.favicon}\n<link rel="stylesheet" href="{self.css_url}">\n'
            f'<link rel="stylesheet" href="{ASSETS}/index.css">\n</head>\n<body>\n'
            '<div id="swagger-container"></div>\n'
            f'<script src="{self.js_url}"></script>\n<script src="{self.standalone_preset_js_url}"></script>\n'
            f'<script src="{START}"></script>\n</body>\n</html>\n'
        ).encode()


@functools.cache
def _start_script() -> str:
    return resources.files("jobqueue.api").joinpath("static", "schema.js").read_text(encoding="utf-8")


@get(START, exclude_from_auth=True, include_in_schema=False, media_type="text/javascript")
async def start_script() -> Response[str]:
    return Response(_start_script(), media_type="text/javascript", headers={"Cache-Control": "max-age=60"})


def render_plugin() -> SwaggerRenderPlugin:
    return OfflineSwagger(
        js_url=f"{ASSETS}/swagger-ui-bundle.js",
        css_url=f"{ASSETS}/swagger-ui.css",
        standalone_preset_js_url=f"{ASSETS}/swagger-ui-standalone-preset.js",
        favicon=f"<link rel='icon' type='image/png' href='{ASSETS}/favicon-32x32.png'>",
        path=["/", "/swagger"],
    )


def routes() -> list:
    """The page's files: Swagger UI's (from swagger-ui-py) and its start-up script."""
    return [
        create_static_files_router(
            path=ASSETS,
            directories=[_static_directory()],
            name="openapi-assets",
            opt={"exclude_from_auth": True},
            include_in_schema=False,
        ),
        start_script,
    ]
