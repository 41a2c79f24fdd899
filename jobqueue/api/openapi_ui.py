"""The API's interactive documentation, offline: Swagger UI at ``/schema`` and ``/schema/swagger``.

Litestar's render plugins load their scripts (and the page's icon) from a CDN, so on a machine
without internet access (a locked-down server, an air-gapped cluster) the page stayed blank. The
scripts, styles and icon come from the `swagger-ui-py` package instead and are served from
``/schema/assets/`` (public, like the schema itself). Its Swagger UI is 5.x: the schema Litestar
writes is OpenAPI 3.1, which Swagger UI 4 (the `swagger-ui-bundle` package) refuses to render.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.static_files import create_static_files_router

ASSETS = "/schema/assets"


def _static_directory() -> Path:
    """swagger-ui-py's static files, found without importing the package (its __init__ loads an
    adapter for every web framework it supports)."""
    spec = importlib.util.find_spec("swagger_ui")
    assert spec is not None and spec.submodule_search_locations, "swagger-ui-py is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def render_plugin() -> SwaggerRenderPlugin:
    return SwaggerRenderPlugin(js_url=f"{ASSETS}/swagger-ui-bundle.js", css_url=f"{ASSETS}/swagger-ui.css",
                               standalone_preset_js_url=f"{ASSETS}/swagger-ui-standalone-preset.js",
                               favicon=f"<link rel='icon' type='image/png' href='{ASSETS}/favicon-32x32.png'>",
                               path=["/", "/swagger"])


def assets_router():
    return create_static_files_router(path=ASSETS, directories=[_static_directory()], name="openapi-assets",
                                      opt={"exclude_from_auth": True}, include_in_schema=False)
