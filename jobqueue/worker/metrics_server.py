"""`jobqueue-worker --metrics-port N`: this worker process's own figures over HTTP, for Prometheus.

The fleet's figures are the API's /metrics (workers report through the database, so one target is
enough); this endpoint shows one process's view without the database in the way: its attempts
per queue and job type since it started (under the same metric names), the processing-time
histogram, its utilization, running jobs, slots (the most it runs) and its concurrency target (the
slots it fills now: the autoscaler's choice with --concurrency MIN:MAX, else the concurrency). It listens on all
interfaces; with
``--processes P``, process i listens on N + i. A minimal HTTP/1.1 responder: GET /metrics only.
It reads the worker's figures from its `WorkerStats` and its `WorkerStatus` (``ShownStatus``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from jobqueue.observability.prometheus import CONTENT_TYPE, render_worker
from jobqueue.worker.stats import WorkerStats

log = logging.getLogger("jobqueue.worker.metrics")


#: Where a worker serves its own figures: every interface, as a scrape target must be reachable.
METRICS_HOST = "0.0.0.0"


class ShownStatus(Protocol):
    """Jobs running now, the slots filled now and at most, handlers stuck past their deadline."""

    @property
    def running(self) -> int: ...

    @property
    def slots(self) -> int: ...

    @property
    def concurrency(self) -> int: ...

    @property
    def stuck_handlers(self) -> int: ...


class MetricsServer:
    def __init__(self, stats: WorkerStats, status: ShownStatus, *, port: int, host: str = METRICS_HOST) -> None:
        self.stats = stats
        self.status = status
        self.port = port
        self.host = host

    async def run(self) -> None:
        try:
            server = await asyncio.start_server(self._handle, self.host, self.port)
        except OSError as exc:
            # checked at startup (process.preflight); taken since: the worker stops, as for any lost service
            raise RuntimeError(f"worker metrics: cannot listen on {self.host}:{self.port} ({exc})") from exc
        log.info("worker metrics on http://%s:%s/metrics", self.host, self.port)
        async with server:
            await server.serve_forever()

    def body(self) -> str:
        status = self.status
        return render_worker(
            worker_id=self.stats.worker_id,
            totals=self.stats.totals(),
            utilization=self.stats.utilization,
            running=status.running,
            concurrency=status.concurrency,
            stuck_handlers=status.stuck_handlers,
            concurrency_target=status.slots,
        )

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            method, _, rest = request.decode("latin-1").partition(" ")
            path = rest.partition(" ")[0]
            if method == "GET" and path.split("?")[0] == "/metrics":
                status, kind, payload = "200 OK", CONTENT_TYPE, self.body().encode()
            else:
                status, kind, payload = "404 Not Found", "text/plain; charset=utf-8", b"GET /metrics\n"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(payload)}\r\n"
                f"Connection: close\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()
