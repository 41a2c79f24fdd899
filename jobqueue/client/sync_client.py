"""`Client`: `AsyncClient`'s methods, blocking — for scripts, web frameworks without asyncio and
psycopg sync code — over a sync pool. Each method validates with the same functions and runs the
same store Calls as its async twin; `wait` runs an `AsyncClient` for the call.

Both have the same public methods with the same parameters (tests/unit/test_client_parity.py).
The differences: connections are ``psycopg.Connection`` (async: ``psycopg.AsyncConnection``),
`connection()` a context manager (async: an async one), `open()` returns the `Client`; and the
constructor lacks the async client's ``connect_timeout``, ``submit_lanes`` and ``coalesce_*``
(group commit needs an event loop) and ``decrypt_results`` (`get` decrypts what it can).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime, timedelta
from typing import Any, Callable, ContextManager, Iterable, Mapping, Sequence

import psycopg

from jobqueue.client.acting import actor_calls
from jobqueue.client.admin import (
    BatchCall,
    CancelRun,
    as_uuid,
    audit_list_call,
    circuit_name,
    defaults_call,
    forced,
    found,
    known_queue,
    limit_key,
    limit_of,
    limit_written,
    limits_call,
    list_call,
    new_key_call,
    paused_call,
    purge_batches,
    retry_batches,
    shedding_call,
    unserved_call,
)
from jobqueue.client.async_client import AsyncClient
from jobqueue.client.schedules import Schedules
from jobqueue.client.sealing import sealed_jobs, with_sealed
from jobqueue.client.validation import NewJob, ValidatedJob, build_many, many_call
from jobqueue.client.waiting import readable
from jobqueue.config import Settings
from jobqueue.crypto.envelopes import Sealer
from jobqueue.db import gateway as db
from jobqueue.db.transactions import run_steps_sync, run_together_sync
from jobqueue.model.api_keys import ApiKey
from jobqueue.model.audit import AuditPage, AuditVerdict
from jobqueue.model.circuits import Circuit
from jobqueue.model.errors import LimitNotFound
from jobqueue.model.jobs import (
    BulkCancel,
    CancelOutcome,
    DeleteOutcome,
    JobInfo,
    JobOutcome,
    JobPage,
    JobState,
    RetryOutcome,
    ThroughputMinute,
)
from jobqueue.model.limits import KEEP, Keep, Limit, LimitSpec
from jobqueue.model.queues import QueueSettings, QueueStats, Unserved
from jobqueue.model.workers import RunningJob, WorkerInfo
from jobqueue.observability import tracing
from jobqueue.store import api_keys as key_store
from jobqueue.store import audit as audit_store
from jobqueue.store import circuits as circuit_store
from jobqueue.store import history as history_store
from jobqueue.store import job_admin
from jobqueue.store import jobs as job_store
from jobqueue.store import limits as limit_store
from jobqueue.store import queues as queue_store
from jobqueue.store import workers as worker_store


class Client:
    """The same API, blocking: for scripts, web frameworks without asyncio, and psycopg sync code."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        settings: Settings | None = None,
        producer_id: str | None = None,
        pool_size: int | None = None,
        pool_timeout: float = 10.0,
        application_name: str = db.CLIENT_NAME,
    ) -> None:
        self.settings = settings or Settings.from_env()
        self.dsn = dsn or self.settings.db.dsn
        self.producer_id = producer_id
        self._pool = db.sync_pool(
            self.dsn,
            min_size=1,
            max_size=pool_size or self.settings.db.pool_max_size,
            name=application_name,
            settings=self.settings.db,
            timeout=pool_timeout,
        )
        #: cron schedules: ``client.schedules.add(name, cron, job_type, ...)`` (jobqueue.client.schedules)
        self.schedules = Schedules(self._act)
        self.tracing = tracing.from_env()  # None (no spans, no cost) unless OpenTelemetry is configured
        self.sealer = Sealer(self.settings.encryption.keys)
        self._held: tuple[str | None] | None = None  # the pool's session producer, once read

    def open(self) -> "Client":
        self._pool.open()
        return self

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> "Client":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connection(self) -> ContextManager[psycopg.Connection]:
        """`AsyncClient.connection`: ``with client.connection() as conn:``."""
        return db.connection_sync(self._pool)

    def _run(self, call: db.Call, connection: psycopg.Connection | None) -> Any:
        if connection is not None:
            return db.run_sync(connection, call)
        with db.connection_sync(self._pool) as conn:
            return db.run_sync(conn, call)

    def _act(self, call: db.Call, connection: psycopg.Connection | None = None) -> Any:
        """`AsyncClient._act`: an action, for the acting API key if any (`jobqueue.client.acting`)."""
        calls = None if connection is not None else actor_calls(call)
        if calls is None:
            return self._run(call, connection)
        with db.connection_sync(self._pool) as conn:
            return run_together_sync(conn, calls)

    def enqueue(
        self, job_type: str, payload: Any = None, *, connection: psycopg.Connection | None = None, **options: Any
    ) -> uuid.UUID:
        options.setdefault("producer_id", self.producer_id)
        paths = self._sealer().paths(job_type, options.pop("encrypt", None))
        with tracing.producing(self.tracing, job_type, options) as span:
            job = NewJob.build(job_type, payload, **options)
            if paths:
                job = sealed_jobs(self.sealer, [job], [(0, paths, "")], [payload], self._held_producer(connection))[0]
            job_id = self._run(job.call(), connection)
            span.enqueued([job_id])
        return job_id

    def enqueue_many(
        self, jobs: Iterable[Mapping[str, Any]], *, connection: psycopg.Connection | None = None
    ) -> list[uuid.UUID]:
        return [job_id for job_id, _ in self.submit(jobs, connection=connection)]

    def submit(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        connection: psycopg.Connection | None = None,
        admit: Callable[[Sequence[ValidatedJob]], None] | None = None,
    ) -> list[tuple[uuid.UUID, bool]]:
        """`AsyncClient.submit` (``admit`` too)."""
        jobs, plan = self._sealer().plan(jobs)
        with tracing.producing_many(self.tracing, list(jobs)) as (span, jobs):
            built = build_many(jobs, self.producer_id)
            if plan:
                built = with_sealed(
                    built,
                    plan,
                    sealed_jobs(
                        self.sealer,
                        built,
                        plan,
                        [jobs[index].get("payload") for index, _, _ in plan],
                        self._held_producer(connection),
                    ),
                )
            if admit is not None:
                admit(built)
            results = self._run(many_call(built), connection)
            span.enqueued([job_id for job_id, _ in results])
        return results

    def _sealer(self) -> Sealer:
        if self.sealer.stale():
            self.sealer.learn(self._run(worker_store.encrypted_fields(), None))
        return self.sealer

    def _held_producer(self, connection: psycopg.Connection | None) -> str | None:
        """`AsyncClient._held_producer`."""
        if connection is not None:
            return self._run(job_admin.session_producer(), connection)
        if self._held is None:
            self._held = (self._run(job_admin.session_producer(), None),)
        return self._held[0]

    def get(
        self, job_id: uuid.UUID | str, *, producer_id: str | None = None, connection: psycopg.Connection | None = None
    ) -> JobInfo:
        job_id = as_uuid(job_id)
        return readable(
            found(job_id, self._run(job_store.get(job_id, producer_id), connection)),
            self.settings.encryption.keys,
            True,
        )

    def cancel(
        self, job_id: uuid.UUID | str, *, producer_id: str | None = None, connection: psycopg.Connection | None = None
    ) -> CancelOutcome:
        return self._act(job_store.cancel(as_uuid(job_id), producer_id), connection)

    def wait(self, job_id: uuid.UUID | str, *, timeout: float | None = None) -> Any:
        """`AsyncClient.wait`, blocking (it runs one on its own event loop for the call: not from
        inside a running event loop)."""

        async def waiting() -> Any:
            async with AsyncClient(self.dsn, settings=self.settings, pool_size=1) as client:
                return await client.wait(job_id, timeout=timeout)

        return asyncio.run(waiting())

    def outcomes(self, job_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, JobOutcome]:
        return self._run(job_store.outcomes(list(job_ids)), None)

    def list_jobs(self, *, limit: int = 50, cursor: str | None = None, **filters: Any) -> JobPage:
        return self._run(list_call(limit, cursor, **filters), None)

    def retry_dead(self, job_id: uuid.UUID | str) -> RetryOutcome:
        return self._act(job_admin.retry_dead(as_uuid(job_id)))

    def delete_waiting(self, job_id: uuid.UUID | str) -> tuple[DeleteOutcome, JobState | None]:
        return self._act(job_admin.delete_waiting(as_uuid(job_id)))

    def running_jobs(self, *, per_worker: int = 10) -> dict[str, tuple[int, list[RunningJob]]]:
        return self._run(job_admin.running_by_worker(per_worker=per_worker), None)

    def throughput_history(self, *, minutes: int = 60) -> list[ThroughputMinute]:
        return self._run(history_store.rates(minutes=minutes), None)

    def retry_dead_letters(
        self, *, queue: str | None = None, job_type: str | None = None, batch_size: int = 500
    ) -> int:
        return self._batches(retry_batches(queue, job_type, batch_size), batch_size)

    def purge_dead_letters(
        self,
        *,
        queue: str | None = None,
        job_type: str | None = None,
        before: datetime | None = None,
        batch_size: int = 1000,
    ) -> int:
        return self._batches(purge_batches(queue, job_type, before, batch_size), batch_size)

    def cancel_jobs(
        self,
        *,
        queue: str | None = None,
        job_type: str | None = None,
        state: str | None = None,
        before: datetime | None = None,
        producer_id: str | None = None,
        all_jobs: bool = False,
        batch_size: int = 500,
    ) -> BulkCancel:
        run = CancelRun(
            queue=queue,
            job_type=job_type,
            state=state,
            before=before,
            producer_id=producer_id,
            all_jobs=all_jobs,
            batch_size=batch_size,
        )
        while (call := run.next_call()) is not None:
            time.sleep(run.take(self._act(call)))
        return run.result

    def _batches(self, batch: BatchCall, batch_size: int) -> int:
        total, after, scanned = 0, 0, batch_size
        while scanned >= batch_size:
            done, scanned, after = self._act(batch(after))
            total += done
        return total

    def workers(self) -> list[WorkerInfo]:
        return self._run(worker_store.list_all(), None)

    def queue_stats(self) -> list[QueueStats]:
        return self._run(queue_store.stats(), None)

    def unserved_jobs(self, *, cap: int = 1_000_000) -> list[Unserved]:
        return self._run(unserved_call(self.settings.metrics, cap), None)

    def circuits(self) -> list[Circuit]:
        return self._run(circuit_store.list_all(), None)

    def open_circuit(self, name: str) -> Circuit:
        return self._force_circuit(name, "open")

    def close_circuit(self, name: str) -> Circuit:
        return self._force_circuit(name, "close")

    def _force_circuit(self, name: str, action: str) -> Circuit:
        name = circuit_name(name)
        changed = self._act(circuit_store.force(name, action))
        return self._run(forced(name, changed), None)[0]

    def limits(self) -> list[Limit]:
        return self._run(limit_store.list_all(), None)

    def set_limit(
        self, scope: str, name: str, *, concurrency: int | None | Keep = KEEP, rate: str | None | Keep = KEEP
    ) -> Limit:
        spec = LimitSpec.operators(scope, name, concurrency=concurrency, rate=rate)
        limit_written(spec, self._act(limit_store.set_limit(spec)))
        return limit_of(spec.scope, spec.name, self._run(limit_store.list_all(), None))

    def clear_limit(self, scope: str, name: str) -> None:
        scope, name = limit_key(scope, name)
        if self._act(limit_store.clear(scope, name)) is None:
            raise LimitNotFound(scope, name)

    def pause_queue(self, queue: str, *, force: bool = False) -> QueueSettings:
        return known_queue(queue, self._act(paused_call(queue, True, force)))

    def resume_queue(self, queue: str) -> QueueSettings:
        return known_queue(queue, self._act(paused_call(queue, False, False)))

    def name_warnings(self, jobs: Iterable[tuple[str, str]]) -> list[str]:
        return self._run(queue_store.known_names(), None).warnings(jobs)

    def set_queue_limits(self, queue: str, *, soft_limit: int | None, hard_limit: int | None) -> QueueSettings:
        return self._act(limits_call(queue, soft_limit, hard_limit))

    def set_queue_defaults(
        self, queue: str, *, job_ttl: timedelta | float | None, idempotency_window: timedelta | float | None
    ) -> QueueSettings:
        return self._act(defaults_call(queue, job_ttl, idempotency_window))

    def set_queue_shedding(self, queue: str, shed_low_retries: bool) -> QueueSettings:
        return self._act(shedding_call(queue, shed_low_retries))

    def queue_settings(self) -> dict[str, QueueSettings]:
        return self._run(queue_store.all_settings(), None)

    def create_api_key(
        self,
        producer_id: str,
        *,
        role: str = "producer",
        queues: Iterable[str] | None = None,
        job_types: Iterable[str] | None = None,
        name: str | None = None,
        expires_in: timedelta | float | None = None,
    ) -> tuple[str, ApiKey]:
        key, call = new_key_call(producer_id, role, queues, job_types, name, expires_in)
        return key, self._act(call)

    def api_keys(self) -> list[ApiKey]:
        return self._run(key_store.list_all(), None)

    def revoke_api_key(self, key_id: uuid.UUID | str) -> ApiKey | None:
        return self._act(key_store.revoke(as_uuid(key_id, field="key_id")))

    def audit_log(self, *, limit: int = 50, cursor: str | None = None, **filters: Any) -> AuditPage:
        """`AsyncClient.audit_log`."""
        return self._run(audit_list_call(limit, cursor, **filters), None)

    def verify_audit_log(self) -> AuditVerdict:
        """`AsyncClient.verify_audit_log`."""
        with db.connection_sync(self._pool) as conn:
            return run_steps_sync(conn, audit_store.verification())
