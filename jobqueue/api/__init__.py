"""The REST API (Litestar): a thin HTTP layer over `jobqueue.client.AsyncClient`.

Start it with `jobqueue api`, or build the ASGI app with `create_app(settings)`.
"""

from jobqueue.api.app import create_app

__all__ = ["create_app"]
