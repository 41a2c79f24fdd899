"""The producer/admin API: enqueue, enqueue_many, get, cancel — async, with a thin sync facade.

Both clients run the same store Calls through `jobqueue.db`; only the connection type differs.
Pass ``connection=`` to run inside your own psycopg transaction: the job then exists if and only
if your transaction commits (the NOTIFY that wakes workers is sent at that commit too).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping

import psycopg

from jobqueue import db, tracing
from jobqueue.config import Settings
from jobqueue.errors import JobNotFound, ValidationError
from jobqueue.models import CancelOutcome, JobInfo, Priority
from jobqueue.store import jobs as job_store

_ENQUEUE_FIELDS = frozenset({
    "job_type", "payload", "priority", "queue", "run_at", "delay", "max_attempts",
    "idempotency_key", "producer_id", "traceparent",
})


@dataclass(frozen=True, slots=True)
class NewJob:
    """One job to enqueue, validated and normalised the same way for every path."""

    job_type: str
    payload_json: str
    priority: str
    queue: str
    run_at: datetime | None
    delay: timedelta | None
    max_attempts: int | None
    idempotency_key: str | None
    producer_id: str | None
    traceparent: str | None

    @classmethod
    def build(cls, job_type: Any, payload: Any = None, *, priority: Any = "normal", queue: Any = "default",
              run_at: Any = None, delay: Any = None, max_attempts: Any = None, idempotency_key: Any = None,
              producer_id: str | None = None, traceparent: str | None = None, field_prefix: str = "") -> "NewJob":
        def invalid(name: str, message: str) -> ValidationError:
            return ValidationError(field_prefix + name, message)

        if not isinstance(job_type, str) or not job_type.strip():
            raise invalid("job_type", "must be a non-empty string")
        if not isinstance(queue, str) or not queue.strip():
            raise invalid("queue", "must be a non-empty string")
        try:
            payload_json = job_store.dumps({} if payload is None else payload)
        except (TypeError, ValueError) as exc:
            raise invalid("payload", f"must be JSON-serialisable ({exc})") from None
        try:
            level = Priority.parse(priority)
        except ValidationError as exc:
            raise invalid("priority", exc.message) from None
        if run_at is not None:
            if not isinstance(run_at, datetime):
                raise invalid("run_at", "must be a datetime")
            if run_at.tzinfo is None:
                raise invalid("run_at", "must be timezone-aware")
        if delay is not None:
            if isinstance(delay, (int, float)) and not isinstance(delay, bool):
                delay = timedelta(seconds=delay)
            if not isinstance(delay, timedelta):
                raise invalid("delay", "must be seconds or a timedelta")
            if delay < timedelta(0):
                raise invalid("delay", f"must not be negative (got {delay.total_seconds()} s)")
            if run_at is not None:
                raise invalid("run_at", "give run_at or delay, not both")
        if max_attempts is not None and (
            not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1
        ):
            raise invalid("max_attempts", f"must be an integer of at least 1 (got {max_attempts!r})")
        if idempotency_key is not None and (not isinstance(idempotency_key, str) or not idempotency_key):
            raise invalid("idempotency_key", "must be a non-empty string when given")
        return cls(job_type, payload_json, level.label, queue, run_at, delay, max_attempts,
                   idempotency_key, producer_id, traceparent)

    @classmethod
    def from_mapping(cls, spec: Mapping[str, Any], index: int, producer_id: str | None) -> "NewJob":
        prefix = f"jobs[{index}]."
        if not isinstance(spec, Mapping):
            raise ValidationError(f"jobs[{index}]", "must be a mapping of enqueue fields")
        unknown = set(spec) - _ENQUEUE_FIELDS
        if unknown:
            raise ValidationError(prefix + sorted(unknown)[0], "is not a field of a job")
        fields = dict(spec)
        fields.setdefault("producer_id", producer_id)
        return cls.build(field_prefix=prefix, **fields)

    def call(self) -> db.Call[uuid.UUID]:
        return job_store.enqueue(
            job_type=self.job_type, payload_json=self.payload_json, priority=self.priority,
            run_at=self.run_at, delay=self.delay, queue=self.queue, max_attempts=self.max_attempts,
            idempotency_key=self.idempotency_key, producer_id=self.producer_id, traceparent=self.traceparent)

    def as_json_fragment(self) -> str:
        """This job as one element of enqueue_many's JSON array (payload spliced in verbatim)."""
        fields = {
            "job_type": self.job_type, "priority": self.priority, "queue": self.queue,
            "run_at": self.run_at.isoformat() if self.run_at else None,
            "delay": f"{self.delay.total_seconds()} seconds" if self.delay is not None else None,
            "max_attempts": self.max_attempts, "idempotency_key": self.idempotency_key,
            "producer_id": self.producer_id, "traceparent": self.traceparent,
        }
        head = job_store.dumps({k: v for k, v in fields.items() if v is not None})
        return head[:-1] + ',"payload":' + self.payload_json + "}"


def _many_call(jobs: Iterable[Mapping[str, Any]], producer_id: str | None) -> db.Call[list[tuple[uuid.UUID, bool]]]:
    built = [NewJob.from_mapping(spec, i, producer_id) for i, spec in enumerate(jobs)]
    return job_store.enqueue_many("[" + ",".join(job.as_json_fragment() for job in built) + "]")


def _found(job_id: uuid.UUID, info: JobInfo | None) -> JobInfo:
    if info is None:
        raise JobNotFound(job_id)
    return info


def _job_id(value: Any) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise ValidationError("job_id", f"must be a UUID (got {value!r})") from None


class AsyncClient:
    """Async producer/admin client over a small autocommit pool (open it, or use ``async with``)."""

    def __init__(self, dsn: str | None = None, *, settings: Settings | None = None,
                 producer_id: str | None = None, pool_size: int = 5) -> None:
        self.settings = settings or Settings.from_env()
        self.dsn = dsn or self.settings.dsn
        self.producer_id = producer_id
        self.tracing = tracing.from_env()  # None (no spans, no cost) unless OpenTelemetry is configured
        self._pool = db.async_pool(self.dsn, min_size=1, max_size=pool_size, name="jobqueue-client")

    async def open(self) -> "AsyncClient":
        await self._pool.open()
        return self

    async def close(self) -> None:
        await self._pool.close()

    async def __aenter__(self) -> "AsyncClient":
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self, call: db.Call, connection: psycopg.AsyncConnection | None) -> Any:
        if connection is not None:
            return await db.run(connection, call)
        async with db.connection(self._pool) as conn:
            return await db.run(conn, call)

    async def enqueue(self, job_type: str, payload: Any = None, *, connection: psycopg.AsyncConnection | None = None,
                      **options: Any) -> uuid.UUID:
        options.setdefault("producer_id", self.producer_id)
        with tracing.producing(self.tracing, job_type, options) as span:
            job_id = await self._run(NewJob.build(job_type, payload, **options).call(), connection)
            span.enqueued([job_id])
        return job_id

    async def enqueue_many(self, jobs: Iterable[Mapping[str, Any]], *,
                           connection: psycopg.AsyncConnection | None = None) -> list[uuid.UUID]:
        with tracing.producing_many(self.tracing, list(jobs)) as (span, jobs):
            ids = [job_id for job_id, _ in await self._run(_many_call(jobs, self.producer_id), connection)]
            span.enqueued(ids)
        return ids

    async def get(self, job_id: uuid.UUID | str, *, connection: psycopg.AsyncConnection | None = None) -> JobInfo:
        job_id = _job_id(job_id)
        return _found(job_id, await self._run(job_store.get(job_id), connection))

    async def cancel(self, job_id: uuid.UUID | str, *, connection: psycopg.AsyncConnection | None = None) -> CancelOutcome:
        return await self._run(job_store.cancel(_job_id(job_id)), connection)


class Client:
    """The same API, blocking: for scripts, web frameworks without asyncio, and psycopg sync code."""

    def __init__(self, dsn: str | None = None, *, settings: Settings | None = None,
                 producer_id: str | None = None, pool_size: int = 5) -> None:
        self.settings = settings or Settings.from_env()
        self.dsn = dsn or self.settings.dsn
        self.producer_id = producer_id
        self._pool = db.sync_pool(self.dsn, min_size=1, max_size=pool_size, name="jobqueue-client-sync")
        self.tracing = tracing.from_env()  # None (no spans, no cost) unless OpenTelemetry is configured

    def open(self) -> "Client":
        self._pool.open()
        return self

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> "Client":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, call: db.Call, connection: psycopg.Connection | None) -> Any:
        if connection is not None:
            return db.run_sync(connection, call)
        with db.translated_errors():
            with self._pool.connection() as conn:
                return db.run_sync(conn, call)

    def enqueue(self, job_type: str, payload: Any = None, *, connection: psycopg.Connection | None = None,
                **options: Any) -> uuid.UUID:
        options.setdefault("producer_id", self.producer_id)
        with tracing.producing(self.tracing, job_type, options) as span:
            job_id = self._run(NewJob.build(job_type, payload, **options).call(), connection)
            span.enqueued([job_id])
        return job_id

    def enqueue_many(self, jobs: Iterable[Mapping[str, Any]], *,
                     connection: psycopg.Connection | None = None) -> list[uuid.UUID]:
        with tracing.producing_many(self.tracing, list(jobs)) as (span, jobs):
            ids = [job_id for job_id, _ in self._run(_many_call(jobs, self.producer_id), connection)]
            span.enqueued(ids)
        return ids

    def get(self, job_id: uuid.UUID | str, *, connection: psycopg.Connection | None = None) -> JobInfo:
        job_id = _job_id(job_id)
        return _found(job_id, self._run(job_store.get(job_id), connection))

    def cancel(self, job_id: uuid.UUID | str, *, connection: psycopg.Connection | None = None) -> CancelOutcome:
        return self._run(job_store.cancel(_job_id(job_id)), connection)
