"""`AsyncClient`: the producer's and operator's API — enqueue, enqueue_many, submit, get, wait,
cancel; listings, dead letters, queues, workers, circuits, limits, API keys, schedules.

Every method validates its request (`jobqueue.client.validation` for jobs,
`jobqueue.client.admin` for the rest) and runs the store Calls through `jobqueue.db.gateway`; the sync
`Client` runs the same ones. Pass ``connection=`` to run inside your own psycopg transaction: the
job then exists if and only if your transaction commits (the NOTIFY that wakes workers is sent at
that commit too).

Encryption (`jobqueue.crypto.envelopes`): ``enqueue(..., encrypt=["card.number"])`` and an ``"encrypt"``
entry in an ``enqueue_many`` spec encrypt those payload fields, as do the fields a task declared
(``@queue.task(encrypted=...)``, read from ``jobqueue.task_defaults`` at most 5 s late), with the key
ring of ``settings.encryption.keys``, once the job is validated (`jobqueue.client.sealing`).
`AsyncClient` seals a request of many values in a thread, off the event loop. `get` and `wait`
decrypt an encrypted result when this client holds its key; payloads stay encrypted outside the worker.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta
from typing import Any, AsyncContextManager, Callable, Iterable, Mapping, Sequence

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
from jobqueue.client.coalesce import SubmitCoalescer
from jobqueue.client.schedules import Schedules
from jobqueue.client.sealing import SEAL_OFF_LOOP, SealPlan, seal_slices, sealed_jobs, with_sealed
from jobqueue.client.validation import NewJob, ValidatedJob, build_many, many_call
from jobqueue.client.waiting import Waiter, readable
from jobqueue.config import Settings
from jobqueue.crypto.envelopes import Sealer
from jobqueue.db import gateway as db
from jobqueue.db.transactions import run_steps, run_together
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
from jobqueue.runtime.refresh_ahead import RefreshAheadCache
from jobqueue.store import api_keys as key_store
from jobqueue.store import audit as audit_store
from jobqueue.store import circuits as circuit_store
from jobqueue.store import history as history_store
from jobqueue.store import job_admin
from jobqueue.store import jobs as job_store
from jobqueue.store import limits as limit_store
from jobqueue.store import queues as queue_store
from jobqueue.store import workers as worker_store


class AsyncClient:
    """Async producer/admin client over a small autocommit pool (open it, or use ``async with``)."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        settings: Settings | None = None,
        producer_id: str | None = None,
        pool_size: int | None = None,
        pool_timeout: float = 10.0,
        connect_timeout: int | None = None,
        submit_lanes: int = 0,
        coalesce_max_jobs: int = 1000,
        coalesce_stall_after: float = 0.1,
        coalesce_lock_wait: float = 0.2,
        application_name: str = db.CLIENT_NAME,
        decrypt_results: bool = True,
    ) -> None:
        """``application_name``: how its connections show in ``pg_stat_activity``; their timeouts
        and PgBouncer mode come from ``settings``.

        ``submit_lanes`` > 0 coalesces concurrent `submit` calls made without ``connection=``
        (group commit, `jobqueue.client.coalesce`): at most that many statements in flight, later
        callers' jobs ride together in the next one, up to ``coalesce_max_jobs`` jobs; a statement
        in flight for ``coalesce_stall_after`` seconds no longer holds its lane; a statement of several
        callers waits at most ``coalesce_lock_wait`` seconds for a lock (another transaction's
        uncommitted holder of one caller's idempotency key) before each caller goes again alone.
        ``decrypt_results=False``: `get` leaves encrypted results as stored (the REST API redacts them)."""
        self.settings = settings or Settings.from_env()
        self.dsn = dsn or self.settings.db.dsn
        self.producer_id = producer_id
        self.tracing = tracing.from_env()  # None (no spans, no cost) unless OpenTelemetry is configured
        self._pool = db.async_pool(
            self.dsn,
            min_size=1,
            max_size=pool_size or self.settings.db.pool_max_size,
            name=application_name,
            settings=self.settings.db,
            timeout=pool_timeout,
            connect_timeout=connect_timeout,
        )
        self.coalescer = (
            SubmitCoalescer(
                lambda built, grouped: self._run(
                    many_call(built, lock_wait=coalesce_lock_wait if grouped else None), None
                ),
                lanes=submit_lanes,
                max_jobs=coalesce_max_jobs,
                max_wait=pool_timeout,
                stall_after=coalesce_stall_after,
            )
            if submit_lanes > 0
            else None
        )
        #: cron schedules: ``await client.schedules.add(name, cron, job_type, ...)`` (jobqueue.client.schedules)
        self.schedules = Schedules(self._act)
        self._waiter = Waiter(
            self.settings.db, self.settings.encryption.keys, self.dsn, application_name, self.connection
        )
        self.sealer = Sealer(self.settings.encryption.keys)
        self._declarations: RefreshAheadCache[None, Sealer] = RefreshAheadCache(
            self._learn_declarations, self.sealer.ttl
        )
        self._held: tuple[str | None] | None = None  # the pool's session producer, once read
        self.decrypt_results = decrypt_results

    async def open(self) -> "AsyncClient":
        await self._pool.open()
        return self

    async def close(self) -> None:
        await self._waiter.stop()
        await db.close_pool(self._pool)

    async def __aenter__(self) -> "AsyncClient":
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def connection(self) -> AsyncContextManager[psycopg.AsyncConnection]:
        """``async with client.connection() as conn:`` a connection of this client's pool (autocommit:
        ``async with conn.transaction():`` for a transaction of your own, to pass as ``connection=``),
        given back when the block ends; an unreachable database raises `DatabaseUnavailable`."""
        return db.connection(self._pool)

    async def _run(self, call: db.Call, connection: psycopg.AsyncConnection | None) -> Any:
        if connection is not None:
            return await db.run(connection, call)
        async with db.connection(self._pool) as conn:
            return await db.run(conn, call)

    async def _act(self, call: db.Call, connection: psycopg.AsyncConnection | None = None) -> Any:
        """An operator's or producer's action (and any call its method makes): for the API key the
        REST API acts for, if any (`jobqueue.client.acting`: its setting first, in the same
        transaction), else as `_run`. On a caller's own connection it is the caller's to attribute."""
        calls = None if connection is not None else actor_calls(call)
        if calls is None:
            return await self._run(call, connection)
        async with db.connection(self._pool) as conn:
            return await run_together(conn, calls)

    async def enqueue(
        self, job_type: str, payload: Any = None, *, connection: psycopg.AsyncConnection | None = None, **options: Any
    ) -> uuid.UUID:
        options.setdefault("producer_id", self.producer_id)
        paths = (await self._sealer()).paths(job_type, options.pop("encrypt", None))
        with tracing.producing(self.tracing, job_type, options) as span:
            job = NewJob.build(job_type, payload, **options)
            if paths:
                job = (await self._seal([job], [(0, paths, "")], [payload], connection))[0]
            job_id = await self._run(job.call(), connection)
            span.enqueued([job_id])
        return job_id

    async def enqueue_many(
        self, jobs: Iterable[Mapping[str, Any]], *, connection: psycopg.AsyncConnection | None = None
    ) -> list[uuid.UUID]:
        return [job_id for job_id, _ in await self.submit(jobs, connection=connection)]

    async def submit(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        connection: psycopg.AsyncConnection | None = None,
        admit: Callable[[Sequence[ValidatedJob]], None] | None = None,
    ) -> list[tuple[uuid.UUID, bool]]:
        """`enqueue_many` that also says, per job, whether it was created (False: its idempotency key
        was held — within its window — and the holder's id is returned). One statement, all or nothing.
        ``admit`` is called with the jobs validated (and sealed) before anything is written — each
        a `ValidatedJob`: job_type, queue, priority label, in call order — and refuses the call by
        raising, which `submit` raises in turn with nothing written; the REST API's key allow-lists
        and backpressure do so. It runs on the caller's task, so a group-commit lane is not held
        while it decides."""
        jobs, plan = (await self._sealer()).plan(jobs)
        heavy = sum(len(paths) for _, paths, _ in plan) > SEAL_OFF_LOOP
        with tracing.producing_many(self.tracing, list(jobs)) as (span, jobs):
            built = build_many(jobs, self.producer_id)
            if plan:
                built = await self._seal(built, plan, [jobs[index].get("payload") for index, _, _ in plan], connection)
            if admit is not None:
                admit(built)
            if heavy:  # sealing made a statement of ~10x the request (60,000 values: 9.7 MB, 35-84 ms to write)
                results = await self._run(await asyncio.to_thread(many_call, built), connection)
            elif connection is None and self.coalescer is not None:
                results = await self.coalescer.submit(built)
            else:
                results = await self._run(many_call(built), connection)
            span.enqueued([job_id for job_id, _ in results])
        return results

    async def _sealer(self) -> Sealer:
        """The sealer, with the tasks' encrypted fields read again when its copy is stale — ahead of
        time and once for concurrent callers (`jobqueue.runtime.refresh_ahead`), so a busy producer never
        waits for that read, and never uses declarations older than the sealer's ttl."""
        await self._declarations.get(None)
        return self.sealer

    async def _learn_declarations(self, _key: None) -> Sealer:
        self.sealer.learn(await self._run(worker_store.encrypted_fields(), None))
        return self.sealer

    async def _seal(
        self, built: list[NewJob], plan: SealPlan, payloads: Sequence[Any], connection: psycopg.AsyncConnection | None
    ) -> list[NewJob]:
        """``built`` with the planned jobs sealed: on the loop for at most `SEAL_OFF_LOOP` values,
        else in a thread a slice at a time, so a heavy request never holds the event loop every
        other request waits on (30,000 paths once held it for 22-29 s)."""
        held = await self._held_producer(connection)
        if sum(len(paths) for _, paths, _ in plan) <= SEAL_OFF_LOOP:  # (submit() counts the same)
            return with_sealed(built, plan, sealed_jobs(self.sealer, built, plan, payloads, held))
        sealed: list[NewJob] = []
        for part in seal_slices(plan, SEAL_OFF_LOOP):
            sealed += await asyncio.to_thread(sealed_jobs, self.sealer, built, plan[part], payloads[part], held)
        return with_sealed(built, plan, sealed)

    async def _held_producer(self, connection: psycopg.AsyncConnection | None) -> str | None:
        """The producer the database holds this login to (None: any), which the rows of its jobs
        carry whatever a call asks: read once for the pool (it logs in as one role), and on each
        call that brings a connection of its own."""
        if connection is not None:
            return await self._run(job_admin.session_producer(), connection)
        if self._held is None:
            self._held = (await self._run(job_admin.session_producer(), None),)
        return self._held[0]

    async def get(
        self,
        job_id: uuid.UUID | str,
        *,
        producer_id: str | None = None,
        connection: psycopg.AsyncConnection | None = None,
    ) -> JobInfo:
        """``producer_id``: as that producer (another producer's job is `JobNotFound`, and costs
        the database what a missing one does)."""
        job_id = as_uuid(job_id)
        info = found(job_id, await self._run(job_store.get(job_id, producer_id), connection))
        return readable(info, self.settings.encryption.keys, self.decrypt_results)

    async def cancel(
        self,
        job_id: uuid.UUID | str,
        *,
        producer_id: str | None = None,
        connection: psycopg.AsyncConnection | None = None,
    ) -> CancelOutcome:
        """``producer_id``: act as that producer (another producer's job is ``NOT_FOUND``)."""
        return await self._act(job_store.cancel(as_uuid(job_id), producer_id), connection)

    async def wait(self, job_id: uuid.UUID | str, *, timeout: float | None = None) -> Any:
        """The job's result once it has completed; `JobFailed` when it was dead-lettered or
        cancelled (``.info`` holds its errors); `WaitTimeout` after ``timeout`` seconds (None: no
        limit). Woken by the job's own events (LISTEN, one connection per client, shared by every
        wait), not by polling: the job is read once when waiting starts, then on its final event,
        and every `WAIT_RECHECK` seconds and after a reconnect in case an event was missed. Without
        a LISTEN connection (``JOBQUEUE_LISTEN=0``) it reads the job every `WAIT_POLL` seconds."""
        return await self._waiter.wait(as_uuid(job_id), timeout, self.get)

    async def outcomes(self, job_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, JobOutcome]:
        """The state of each job and its result once completed, in one query; ids that do not
        exist are left out."""
        return await self._run(job_store.outcomes(list(job_ids)), None)

    # --- listings, dead letters, queues, API keys (operators: the CLI, the REST API) -----------

    async def list_jobs(self, *, limit: int = 50, cursor: str | None = None, **filters: Any) -> JobPage:
        """Newest first; filters: state, queue, job_type, priority, producer_id, scheduled (True:
        run_at still ahead, False: due). Each page examines at most ``scan`` rows (default
        `LIST_SCAN`): a page may hold fewer than ``limit`` jobs, even none, and still have a
        ``next_cursor`` — only a None cursor means there is nothing older."""
        return await self._run(list_call(limit, cursor, **filters), None)

    async def delete_waiting(self, job_id: uuid.UUID | str) -> tuple[DeleteOutcome, JobState | None]:
        """Delete a job that has not started (pending or scheduled, no attempt yet) with its
        idempotency key; (outcome, the state it was found in). A started job is kept: cancel it."""
        return await self._act(job_admin.delete_waiting(as_uuid(job_id)))

    async def running_jobs(self, *, per_worker: int = 10) -> dict[str, tuple[int, list[RunningJob]]]:
        """Per worker id: how many jobs it runs now, and the oldest ``per_worker`` of them."""
        return await self._run(job_admin.running_by_worker(per_worker=per_worker), None)

    async def throughput_history(self, *, minutes: int = 60) -> list[ThroughputMinute]:
        """The last ``minutes`` minutes of throughput (rates per second), as the maintenance leader
        sampled them; oldest first. Empty while no leader has run the historian."""
        return await self._run(history_store.rates(minutes=minutes), None)

    async def retry_dead(self, job_id: uuid.UUID | str) -> RetryOutcome:
        """A dead-lettered job back to pending now (one more attempt allowed)."""
        return await self._act(job_admin.retry_dead(as_uuid(job_id)))

    async def retry_dead_letters(
        self, *, queue: str | None = None, job_type: str | None = None, batch_size: int = 500
    ) -> int:
        """Every dead job matching the filters back to pending, in batches; returns how many."""
        return await self._batches(retry_batches(queue, job_type, batch_size), batch_size)

    async def purge_dead_letters(
        self,
        *,
        queue: str | None = None,
        job_type: str | None = None,
        before: datetime | None = None,
        batch_size: int = 1000,
    ) -> int:
        """Delete dead jobs matching the filters (died before ``before``), in batches; returns how many."""
        return await self._batches(purge_batches(queue, job_type, before, batch_size), batch_size)

    async def cancel_jobs(
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
        """Cancel every job matching the filters (created before ``before``; ``state``: pending,
        failed, processing or waiting, None: all four), in batches of one short transaction each:
        waiting jobs become cancelled, running ones get a cancel request. No filter at all is refused
        unless ``all_jobs=True``. Jobs enqueued after it started are left alone."""
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
            await asyncio.sleep(run.take(await self._act(call)))
        return run.result

    async def _batches(self, batch: BatchCall, batch_size: int) -> int:
        total, after, scanned = 0, 0, batch_size
        while scanned >= batch_size:
            done, scanned, after = await self._act(batch(after))
            total += done
        return total

    async def workers(self) -> list[WorkerInfo]:
        """The worker registry: every worker process's row, live ones first."""
        return await self._run(worker_store.list_all(), None)

    async def queue_stats(self) -> list[QueueStats]:
        return await self._run(queue_store.stats(), None)

    async def unserved_jobs(self, *, cap: int = 1_000_000) -> list[Unserved]:
        """Runnable jobs whose type no live worker of their queue has a handler for, per queue and
        job type (counts stop at ``cap`` per priority level): no worker claims them until one whose
        app can run them starts."""
        return await self._run(unserved_call(self.settings.metrics, cap), None)

    async def circuits(self) -> list[Circuit]:
        """Every circuit breaker workers declared, with its state and job types."""
        return await self._run(circuit_store.list_all(), None)

    async def open_circuit(self, name: str) -> Circuit:
        """Hold the breaker open: no worker claims its job types, and no probe runs, until
        `close_circuit`. CircuitNotFound if no worker declared it."""
        return await self._force_circuit(name, "open")

    async def close_circuit(self, name: str) -> Circuit:
        """Close the breaker now (its failure count starts afresh; it trips again on new failures)."""
        return await self._force_circuit(name, "close")

    async def _force_circuit(self, name: str, action: str) -> Circuit:
        name = circuit_name(name)
        changed = await self._act(circuit_store.force(name, action))
        return (await self._run(forced(name, changed), None))[0]

    async def limits(self) -> list[Limit]:
        """Every global limit, with the jobs running under it and the starts in its current window."""
        return await self._run(limit_store.list_all(), None)

    async def set_limit(
        self, scope: str, name: str, *, concurrency: int | None | Keep = KEEP, rate: str | None | Keep = KEEP
    ) -> Limit:
        """Set a limit on a job type (``scope="job_type"``) or queue (``"queue"``); it wins over the
        code's until `clear_limit`. Its jobs already running count against it. A part not given
        stays as the limit has it (the code's ``10/s`` survives ``concurrency=2``); None removes it."""
        spec = LimitSpec.operators(scope, name, concurrency=concurrency, rate=rate)
        limit_written(spec, await self._act(limit_store.set_limit(spec)))
        return limit_of(spec.scope, spec.name, await self._run(limit_store.list_all(), None))

    async def clear_limit(self, scope: str, name: str) -> None:
        """Remove a limit (LimitNotFound if there is none); a code limit returns at the next worker start."""
        scope, name = limit_key(scope, name)
        if await self._act(limit_store.clear(scope, name)) is None:
            raise LimitNotFound(scope, name)

    async def pause_queue(self, queue: str, *, force: bool = False) -> QueueSettings:
        """Workers stop claiming from ``queue`` (within milliseconds); it keeps accepting jobs. A
        queue no worker ever served, no operator configured and no job is in is `QueueNotFound`
        (a misspelling, mostly) unless ``force``: pausing one before its first worker starts."""
        return known_queue(queue, await self._act(paused_call(queue, True, force)))

    async def resume_queue(self, queue: str) -> QueueSettings:
        return known_queue(queue, await self._act(paused_call(queue, False, False)))

    async def name_warnings(self, jobs: Iterable[tuple[str, str]]) -> list[str]:
        """For (queue, job type) pairs: a line per name no worker ever served and nothing declared
        (a misspelling?), as the CLI and the REST API warn after an enqueue that names one."""
        return (await self._run(queue_store.known_names(), None)).warnings(jobs)

    async def set_queue_limits(self, queue: str, *, soft_limit: int | None, hard_limit: int | None) -> QueueSettings:
        return await self._act(limits_call(queue, soft_limit, hard_limit))

    async def set_queue_defaults(
        self, queue: str, *, job_ttl: timedelta | float | None, idempotency_window: timedelta | float | None
    ) -> QueueSettings:
        """What enqueue applies to ``queue``'s jobs when a call gives none (seconds or timedelta):
        ``job_ttl`` expires waiting jobs that long after their run_at (None: never);
        ``idempotency_window`` holds their keys that long (None: 24 hours)."""
        return await self._act(defaults_call(queue, job_ttl, idempotency_window))

    async def set_queue_shedding(self, queue: str, shed_low_retries: bool) -> QueueSettings:
        """Load shedding on retry for ``queue``: while on and the queue is above its soft limit, a
        retryable failure of a ``low`` job is dead-lettered (dead_reason ``shed``), not retried."""
        return await self._act(shedding_call(queue, shed_low_retries))

    async def queue_settings(self) -> dict[str, QueueSettings]:
        """Every queue's settings row (paused, limits, enqueue defaults, shedding), by queue."""
        return await self._run(queue_store.all_settings(), None)

    async def create_api_key(
        self,
        producer_id: str,
        *,
        role: str = "producer",
        queues: Iterable[str] | None = None,
        job_types: Iterable[str] | None = None,
        name: str | None = None,
        expires_in: timedelta | float | None = None,
    ) -> tuple[str, ApiKey]:
        """A new key (returned once, stored only hashed) acting as ``producer_id``; ``queues`` /
        ``job_types``: the only ones it may submit (producer keys; None: any); ``name``: what it is
        for; ``expires_in``: seconds or a timedelta after which the API refuses it (None: never)."""
        key, call = new_key_call(producer_id, role, queues, job_types, name, expires_in)
        return key, await self._act(call)

    async def api_keys(self) -> list[ApiKey]:
        return await self._run(key_store.list_all(), None)

    async def revoke_api_key(self, key_id: uuid.UUID | str) -> ApiKey | None:
        return await self._act(key_store.revoke(as_uuid(key_id, field="key_id")))

    async def audit_log(self, *, limit: int = 50, cursor: str | None = None, **filters: Any) -> AuditPage:
        """The audit log (every operator's and producer's action), newest first; filters: actor,
        action (``dlq.purge``, or an area: ``dlq``), target, since (an aware datetime), producer_id
        (only that producer's own entries). Pages as `list_jobs` does (at most ``scan`` entries
        examined per page: a short page may still have a ``next_cursor``)."""
        return await self._run(audit_list_call(limit, cursor, **filters), None)

    async def verify_audit_log(self) -> AuditVerdict:
        """Recompute the audit log's hash chain from its anchor to its head, in one snapshot: the
        verdict names the first entry where it breaks (edited, removed or rewritten), if any."""
        async with db.connection(self._pool) as conn:
            return await run_steps(conn, audit_store.verification())
