"""`jobqueue api`: serve the REST API with uvicorn (a production ASGI server, uvloop and httptools
when installed), one or more processes. Settings come from ``JOBQUEUE_*``; the flags override
host, port and process count, and ``--dsn`` is handed to every process through the environment.
"""

from __future__ import annotations

import os

from jobqueue.config import Settings


def serve(settings: Settings, *, host: str | None = None, port: int | None = None, workers: int | None = None,
          access_log: bool = False) -> int:
    import uvicorn

    os.environ["JOBQUEUE_DSN"] = settings.dsn  # uvicorn's worker processes build their app from the env
    uvicorn.run("jobqueue.api.app:create_app", factory=True,
                host=host or settings.api_host, port=port or settings.api_port,
                workers=workers or settings.api_workers, access_log=access_log,
                timeout_graceful_shutdown=5, log_level="info")
    return 0
