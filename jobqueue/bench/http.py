"""Load over real HTTP, generator on the same machine: `jobqueue api` started as a process of its
own, a minimal keep-alive HTTP/1.1 client, paced and closed-loop submission runs. Used by the
bench's REST figures, by `jobqueue bench api`, and by the fault campaign's REST producers (which
read the job id from the answer's body).

The client (`Connection`) is a few lines of asyncio on purpose: a load generator has to cost far
less than the server it measures (httpx's async pool spends more CPU per request than the API
itself once dozens of connections are open)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from urllib.parse import urlsplit

from jobqueue.bench.common import percentile, process_log, stop_process
from jobqueue.config import Settings


def free_port() -> int:
    """A port nothing on 127.0.0.1 listens on now, for the API the bench starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ApiServer:
    """`jobqueue api` with ``workers`` uvicorn processes on a free port; backpressure limits are
    raised so they never interfere with a measurement."""

    def __init__(self, settings: Settings, workers: int = 1) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = dict(
            os.environ,
            JOBQUEUE_DSN=settings.db.dsn,
            JOBQUEUE_API_SOFT_LIMIT="1000000000",
            JOBQUEUE_API_HARD_LIMIT="1000000000",
            JOBQUEUE_API_TOTAL_SOFT_LIMIT="1000000000",
            JOBQUEUE_API_TOTAL_HARD_LIMIT="1000000000",
        )
        command = [
            sys.executable,
            "-c",
            "import sys; from jobqueue.cli import main; sys.exit(main())",
            "api",
            "--port",
            str(port),
            "--workers",
            str(workers),
        ]
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=process_log("api"))

    async def wait_ready(self, timeout: float = 30.0) -> None:
        if not await wait_ready(self.url, timeout, alive=lambda: self.process.poll() is None):
            self.stop()
            raise RuntimeError(f"the API at {self.url} did not become ready within {timeout:.0f} s (see its log)")

    def stop(self) -> None:
        stop_process(self.process, timeout=15)


async def wait_ready(url: str, timeout: float, alive=lambda: True) -> bool:
    """Until ``GET /readyz`` answers 200 (False after ``timeout`` or once ``alive()`` is False)."""
    parsed = urlsplit(url)
    request = f"GET /readyz HTTP/1.1\r\nHost: {parsed.netloc}\r\nConnection: close\r\n\r\n".encode()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        try:
            reader, writer = await asyncio.open_connection(parsed.hostname, parsed.port or 80)
            try:
                writer.write(request)
                status = (await reader.readline()).split()
                if len(status) > 1 and status[1] == b"200":
                    return True
            finally:
                writer.close()
        except OSError:
            pass
        await asyncio.sleep(0.1)
    return False


class Connection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON and reads the answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, key: str) -> None:
        self.reader, self.writer = reader, writer
        self._headers = (
            f" HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\nContent-Length: "
        ).encode()

    @classmethod
    async def open(cls, url: str, key: str) -> "Connection":
        parsed = urlsplit(url)
        reader, writer = await asyncio.open_connection(parsed.hostname, parsed.port or 80)
        return cls(reader, writer, parsed.netloc, key)

    async def post(self, body: bytes, path: bytes = b"/jobs") -> tuple[int, bytes]:
        """The response's status and body."""
        self.writer.write(b"POST " + path + self._headers + str(len(body)).encode() + b"\r\n\r\n" + body)
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


def busy_cpu_seconds() -> float | None:
    """CPU time the whole machine has spent busy (Linux ``/proc/stat``), or None elsewhere: with
    load generator, API and PostgreSQL on one box, their sum per request is the honest cost."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(value) for value in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class Run:
    """Latencies and statuses of one load run."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.statuses: Counter[int] = Counter()
        self._busy_at_start = busy_cpu_seconds()
        self.elapsed = 0.0

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else float("nan")

    @property
    def errors(self) -> dict[int, int]:
        return {code: n for code, n in self.statuses.items() if code != 201}

    def line(self, label: str) -> str:
        done = len(self.latencies)
        busy_now = busy_cpu_seconds()
        cpu = (
            ""
            if busy_now is None or self._busy_at_start is None or not done
            else f"   machine CPU {(busy_now - self._busy_at_start) / done * 1e6:.0f} us/req"
        )
        return (
            f"{label}: {self.rate:>7.0f} req/s   p50 {percentile(self.latencies, 0.5):.2f} ms   "
            f"p99 {percentile(self.latencies, 0.99):.2f} ms   max {max(self.latencies, default=0):.1f} ms{cpu}   "
            f"({done} requests{', non-201: ' + str(self.errors) if self.errors else ', all 201'})"
        )


async def _submit(conn: Connection, queue: str, i: int, run: Run, since: float) -> None:
    try:
        status, _ = await conn.post(b'{"job_type":"noop","queue":"%s","payload":{"i":%d}}' % (queue.encode(), i))
    except (OSError, ValueError, IndexError, asyncio.IncompleteReadError):
        status = 0
    run.statuses[status] += 1
    run.latencies.append((time.perf_counter() - since) * 1000)


async def paced(conns: list[Connection], queue: str, rate: float, duration: float) -> Run:
    """``rate`` POST /jobs per second for ``duration`` seconds. Each request has a scheduled send
    time and its latency counts from then, so a stalled server shows up in the percentiles instead
    of silently lowering the rate."""
    run, total = Run(), int(rate * duration)
    counter = iter(range(total))
    start = time.perf_counter() + 0.05

    async def client(conn: Connection) -> None:
        for i in counter:
            scheduled = start + i / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await _submit(conn, queue, i, run, scheduled)

    await asyncio.gather(*(client(conn) for conn in conns))
    run.elapsed = time.perf_counter() - start
    return run


async def closed(conns: list[Connection], queue: str, duration: float) -> Run:
    """Every connection submitting back to back: the most requests per second this box sustains."""
    run = Run()
    start = time.perf_counter()
    deadline = start + duration

    async def client(conn: Connection, offset: int) -> None:
        i = offset
        while time.perf_counter() < deadline:
            await _submit(conn, queue, i, run, time.perf_counter())
            i += len(conns)

    await asyncio.gather(*(client(conn, n) for n, conn in enumerate(conns)))
    run.elapsed = time.perf_counter() - start
    return run
