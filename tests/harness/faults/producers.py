"""Producers for the fault campaign: seeding a drain in bulk, and submitting jobs one call at a
time over Python (`AsyncClient`) and REST (``POST /jobs`` to a real `jobqueue api`) while faults
happen.

Each logical job has a key (payload ``"k"``, also its idempotency key). A producer submits it until
a call succeeds, retrying after each failure with the same key, as docs/enqueue.md tells producers to do
on a 503 or `DatabaseUnavailable`. Every call is timed. A failure is *clean* when it is the
documented answer to an outage — `DatabaseUnavailable` in Python, 503 over REST, or a refused
connection while the API process itself is down — and came within `ERROR_LIMIT` seconds; anything
else (a 500, another exception, a late or missing answer) is counted as unclean.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from datetime import datetime, timezone
from typing import Iterable, Protocol

from jobqueue.bench.http import Connection
from jobqueue.client import AsyncClient
from jobqueue.model.errors import DatabaseUnavailable

#: A failure that takes longer than this is not the "clean error within seconds" a producer is owed.
ERROR_LIMIT = 10.0
#: A call still unanswered after this is abandoned (and counted as unclean).
CALL_TIMEOUT = 30.0
RETRY_PAUSE = 0.1
SEED_CHUNK = 2_000


async def seed(client: AsyncClient, jobs: list[dict]) -> list[uuid.UUID]:
    """Enqueue ``jobs`` (enqueue_many specs) in chunks; their ids in order."""
    ids: list[uuid.UUID] = []
    for offset in range(0, len(jobs), SEED_CHUNK):
        ids += await client.enqueue_many(jobs[offset : offset + SEED_CHUNK])
    return ids


class Failed(Exception):
    def __init__(self, kind: str, clean: bool) -> None:
        super().__init__(kind)
        self.kind = kind
        self.clean = clean


class Tally:
    """What one path's producers got back: accepted ids by key, and every failure."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.accepted: dict[str, uuid.UUID] = {}
        self.accepted_at: list[float] = []  # wall-clock seconds of each success
        self.clean_errors = 0
        self.unclean: Counter[str] = Counter()
        self.max_error_latency = 0.0

    def ok(self, key: str, job_id: uuid.UUID) -> None:
        self.accepted[key] = job_id
        self.accepted_at.append(time.time())

    def failed(self, failure: Failed, latency: float) -> None:
        self.max_error_latency = max(self.max_error_latency, latency)
        if not failure.clean:
            self.unclean[failure.kind] += 1
        elif latency > ERROR_LIMIT:
            self.unclean[f"{failure.kind} after {latency:.1f} s"] += 1
        else:
            self.clean_errors += 1

    def first_accept_after(self, at: datetime) -> datetime | None:
        later = [t for t in self.accepted_at if t >= at.timestamp()]
        return datetime.fromtimestamp(min(later), timezone.utc) if later else None

    def summary(self) -> str:
        text = (
            f"{self.path}: {len(self.accepted)} accepted, {self.clean_errors} clean errors "
            f"(slowest {self.max_error_latency:.1f} s)"
        )
        if self.unclean:
            text += ", UNCLEAN: " + ", ".join(f"{n}x {kind}" for kind, n in self.unclean.most_common())
        return text


class Submitter(Protocol):
    async def submit(self, key: str) -> uuid.UUID: ...

    def reset(self) -> None: ...


def job_body(key: str, ms: float, max_attempts: int) -> dict:
    return {"job_type": "record", "payload": {"k": key, "ms": ms}, "idempotency_key": key, "max_attempts": max_attempts}


class PythonSubmitter:
    def __init__(self, client: AsyncClient, ms: float, max_attempts: int) -> None:
        self.client, self.ms, self.max_attempts = client, ms, max_attempts

    async def submit(self, key: str) -> uuid.UUID:
        body = job_body(key, self.ms, self.max_attempts)
        try:
            return await self.client.enqueue(body.pop("job_type"), body.pop("payload"), **body)
        except DatabaseUnavailable as exc:
            raise Failed(type(exc).__name__, clean=True) from None
        except Exception as exc:  # anything else is not the documented answer to an outage
            raise Failed(type(exc).__name__, clean=False) from None

    def reset(self) -> None:
        pass


class RestSubmitter:
    """One keep-alive connection to the API, opened again after any error."""

    def __init__(self, url: str, api_key: str, ms: float, max_attempts: int, *, api_may_be_down: bool) -> None:
        self.url, self.api_key, self.ms, self.max_attempts = url, api_key, ms, max_attempts
        self.api_may_be_down = api_may_be_down  # a refused or cut connection is then expected, not a fault
        self._conn: Connection | None = None

    async def submit(self, key: str) -> uuid.UUID:
        body = json.dumps(job_body(key, self.ms, self.max_attempts)).encode()
        try:
            if self._conn is None:
                self._conn = await Connection.open(self.url, self.api_key)
            status, answer = await self._conn.post(body)
        except (OSError, ValueError, IndexError, asyncio.IncompleteReadError):
            self.reset()
            raise Failed("no HTTP answer (connection refused or cut)", clean=self.api_may_be_down) from None
        if status in (200, 201):
            return uuid.UUID(json.loads(answer)["id"])
        raise Failed(f"HTTP {status}", clean=status == 503)

    def reset(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


async def produce(submitter: Submitter, keys: Iterable[str], tally: Tally) -> None:
    """Submit each key until a call succeeds, timing every failure into ``tally``."""
    for key in keys:
        while True:
            started = time.monotonic()
            try:
                job_id = await asyncio.wait_for(submitter.submit(key), CALL_TIMEOUT)
            except asyncio.TimeoutError:
                submitter.reset()
                tally.failed(Failed(f"no answer within {CALL_TIMEOUT:.0f} s", clean=False), CALL_TIMEOUT)
            except Failed as failure:
                tally.failed(failure, time.monotonic() - started)
            else:
                tally.ok(key, job_id)
                break
            await asyncio.sleep(RETRY_PAUSE)
