"""The API's interactive documentation, offline: Swagger UI at ``/schema`` and ``/schema/swagger``.

Litestar's render plugins load their scripts from a CDN, so on a machine without internet access
(a locked-down server, an air-gapped cluster) the page stayed blank. The scripts and styles come
from the `swagger-ui-bundle` package instead and are served from ``/schema/assets/`` (public, like
the schema itself).
"""

from __future__ import annotations

from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.static_files import create_static_files_router
from swagger_ui_bundle import swagger_ui_path

ASSETS = "/schema/assets"


def render_plugin() -> SwaggerRenderPlugin:
    return SwaggerRenderPlugin(js_url=f"{ASSETS}/swagger-ui-bundle.js", css_url=f"{ASSETS}/swagger-ui.css",
                               standalone_preset_js_url=f"{ASSETS}/swagger-ui-standalone-preset.js",
                               path=["/", "/swagger"])


def assets_router():
    return create_static_files_router(path=ASSETS, directories=[swagger_ui_path], name="openapi-assets",
                                      opt={"exclude_from_auth": True}, include_in_schema=False)
