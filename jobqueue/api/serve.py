"""`jobqueue api`: serve the REST API with uvicorn (a production ASGI server, uvloop and httptools
when installed), one or more processes. Settings come from ``JOBQUEUE_*``; the flags override
host, port and process count, and ``--dsn`` is handed to every process through the environment.
"""

from __future__ import annotations

import os

from jobqueue.config import Settings


def serve(
    settings: Settings,
    *,
    host: str | None = None,
    port: int | None = None,
    workers: int | None = None,
    access_log: bool = False,
) -> int:
    import uvicorn

    os.environ["JOBQUEUE_DSN"] = settings.db.dsn  # uvicorn's worker processes build their app from the env
    # Each process takes its share of every producer's rate limit (see api.backpressure).
    os.environ["JOBQUEUE_API_WORKERS"] = str(workers or settings.api.workers)
    os.environ["JOBQUEUE_API_SETTLE_GC"] = "1"  # a long-lived server: keep GC pauses out of the tail
    uvicorn.run(
        "jobqueue.api.app:create_app",
        factory=True,
        host=host or settings.api.host,
        port=port or settings.api.port,
        workers=workers or settings.api.workers,
        access_log=access_log,
        timeout_graceful_shutdown=5,
        log_level="info",
    )
    return 0


def wait_ready(url: str, timeout: float = 15.0) -> bool:
    """Poll ``url``/readyz until it answers 200 (``make run`` waits so before printing the curl line)."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/readyz", timeout=1) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


if __name__ == "__main__":  # python -m jobqueue.api.serve URL: wait until the API there is ready
    import sys

    sys.exit(0 if wait_ready(sys.argv[1]) else 1)
