"""The REST API (Litestar): a thin HTTP layer over `jobqueue.client.AsyncClient`.

Start it with `jobqueue api`, or build the ASGI app with `create_app(settings)` (imported lazily,
so the CLI's other commands do not load the web stack).
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from jobqueue.api.app import create_app

        return create_app
    raise AttributeError(name)
