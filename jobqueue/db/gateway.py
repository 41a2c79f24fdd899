"""Connections and execution: the one gateway through which every SQL statement runs.

The store modules describe statements as `Call` values (SQL name, parameters, how to decode the
rows). This module runs a Call on an async or a sync psycopg connection, so the async client, the
thin sync facade and a caller's own transaction (`connection=`) all execute the very same SQL, and
it turns driver errors into jobqueue's own: a refused input names its field, an unreachable
database (or a read-only standby) is `DatabaseUnavailable`, a statement given up on (lock or
statement timeout, deadlock) `DatabaseBusy`, a missing privilege `PermissionDenied`, a missing
schema `NotMigrated`.

It also opens every connection jobqueue makes (`Session`): each says who it is in
``application_name`` (the names below, so operators find them in ``pg_stat_activity`` and can
``pg_terminate_backend`` them) and has bounded waits (``statement_timeout``, ``lock_timeout``,
``idle_in_transaction_session_timeout`` from `DbSettings`, sent as startup options: no round trip).
Behind PgBouncer in transaction mode (``JOBQUEUE_PGBOUNCER=1``) no statement is prepared
server-side and no startup option is sent (PgBouncer refuses them, and a session ``SET`` would
land on whichever server connection ran it): the timeouts must come from the server's own
configuration (``ALTER ROLE … SET``), which each pool checks once and warns about.
A connection a caller passes in (``connection=``) is the caller's: nothing here changes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, ClassVar, Generic, Iterator, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from psycopg_pool.base import AttemptWithBackoff

from jobqueue.config import DbSettings
from jobqueue.db.queries import queries_in, query
from jobqueue.model.errors import (
    Conflict,
    DatabaseBusy,
    DatabaseUnavailable,
    IdempotencyMismatch,
    NotMigrated,
    PermissionDenied,
    QueueFull,
    ValidationError,
)

T = TypeVar("T")

log = logging.getLogger("jobqueue.db")


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One SQL statement to run: a named query, its parameters, and how its rows become a value."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    decode: Callable[[list[tuple]], T] = lambda rows: rows  # type: ignore[assignment,return-value]

    @property
    def sql(self) -> str:
        return query(self.name)


class ActionCall(Call[T]):
    """A Call whose statement is an operator's or producer's action and records it in the audit log
    (``jobqueue.audit()``, migration 0032) in the same statement. When the REST API acts for an API
    key (`jobqueue.client.acting`), the clients run it after the key's setting in one transaction
    (`jobqueue.db.transactions.run_together`), so the entry names the key; otherwise it runs as any
    Call, and the entry names the login role."""

    __slots__ = ()


class FileCall(Call[T]):
    """A Call whose SQL is in a file of its room's own (``queries_file``, named blocks as in
    sql/queries/): for statements only one tool runs, which stay out of the dictionary every worker
    and API process loads. A room subclasses it once and names its file; it runs through the same
    gateway as every other Call."""

    __slots__ = ()
    queries_file: ClassVar[Path]

    @property
    def sql(self) -> str:
        return queries_in(self.queries_file)[self.name]


# Decoders shared by the store's Calls (rows → value), for the shapes most statements answer in.


def no_result(rows: list[tuple]) -> None:
    return None


def scalar(rows: list[tuple]) -> Any:
    """The one value of a statement that always returns one row."""
    return rows[0][0]


def scalar_or_none(rows: list[tuple]) -> Any:
    return rows[0][0] if rows else None


def column(rows: list[tuple]) -> list:
    return [row[0] for row in rows]


def any_row(rows: list[tuple]) -> bool:
    return bool(rows)


@contextlib.contextmanager
def translated_errors() -> Iterator[None]:
    try:
        yield
    except pg_errors.InvalidParameterValue as exc:
        field_name = exc.diag.column_name or "input"
        message = exc.diag.message_primary or str(exc)
        prefix = f"jobqueue: {field_name}: "
        raise ValidationError(field_name, message.removeprefix(prefix)) from None
    except pg_errors.UniqueViolation as exc:
        message = exc.diag.message_primary or str(exc)
        if exc.diag.constraint_name == "idempotency_keys_pkey" and exc.diag.column_name == "idempotency_key":
            raise IdempotencyMismatch(
                message.removeprefix("jobqueue: idempotency_key: "), _uuid_or_none(exc.diag.message_detail)
            ) from None
        raise Conflict(message) from None
    except psycopg.DataError as exc:  # bad text for a type, a number out of range, a NUL character
        raise ValidationError("input", exc.diag.message_primary or str(exc)) from None
    except pg_errors.ProgramLimitExceeded as exc:  # e.g. an idempotency key too long for its index
        raise ValidationError("input", exc.diag.message_primary or str(exc)) from None
    except (pg_errors.UndefinedTable, pg_errors.UndefinedFunction, pg_errors.InvalidSchemaName) as exc:
        raise NotMigrated(
            f"jobqueue schema missing or outdated, run `jobqueue migrate` ({exc.diag.message_primary})"
        ) from exc
    except (
        pg_errors.TransactionRollback,
        pg_errors.SerializationFailure,
        pg_errors.DeadlockDetected,
        pg_errors.LockNotAvailable,
        pg_errors.QueryCanceled,
    ) as exc:
        raise DatabaseBusy(f"database busy: {exc.diag.message_primary or exc}") from exc
    except pg_errors.ReadOnlySqlTransaction as exc:  # 25006: this connection reached a standby (a failover)
        raise DatabaseUnavailable(
            f"database unavailable: the server is read-only, a standby? ({exc.diag.message_primary or exc})"
        ) from exc
    except pg_errors.IdleInTransactionSessionTimeout as exc:  # 25P03: the server closed the connection
        raise DatabaseUnavailable(f"database unavailable: {exc.diag.message_primary or exc}") from exc
    except pg_errors.ConfigurationLimitExceeded as exc:  # 53400: a queue gate is closed (migration 0023)
        raise _queue_full(exc) from None
    except pg_errors.InsufficientPrivilege as exc:  # 42501: the role lacks a GRANT; retrying cannot help
        raise PermissionDenied(f"the database refused this role: {exc.diag.message_primary or exc}") from exc
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:  # AdminShutdown, pool timeouts too
        raise DatabaseUnavailable(f"database unavailable: {describe(exc)}") from exc


def describe(exc: psycopg.Error) -> str:
    """The server's message and its hint, on one line: ``str(exc)`` goes on with a CONTEXT line per
    PL/pgSQL frame the error passed through (4 to 12 of them for an error inside ``jobqueue.enqueue``),
    which tells the database's author where, and an operator nothing. An error the client made (a
    refused connection, a pool timeout) has no server message: its own text, as it is."""
    primary = exc.diag.message_primary
    if not primary:
        return str(exc).strip()
    hint = exc.diag.message_hint
    return f"{primary} (hint: {hint})" if hint else primary


def _queue_full(exc: psycopg.Error) -> DatabaseBusy:
    """`QueueFull` from jobqueue.refuse_gated_queues() (DETAIL: {"reason", "queue"}), else a plain
    `DatabaseBusy` for a limit of the server's own."""
    message = exc.diag.message_primary or str(exc)
    try:
        detail = json.loads(exc.diag.message_detail or "")
    except ValueError:
        detail = None
    if not isinstance(detail, dict) or not isinstance(detail.get("reason"), str):
        return DatabaseBusy(f"database busy: {message}")
    return QueueFull(message.removeprefix("jobqueue: queue: "), detail["reason"], detail.get("queue"))


def _uuid_or_none(text: str | None) -> uuid.UUID | None:
    try:
        return uuid.UUID(text) if text else None
    except ValueError:
        return None


async def run(conn: psycopg.AsyncConnection, call: Call[T]) -> T:
    # Errors are translated only when there is one: every statement of every process runs here,
    # and entering a generator-based context manager costs more than the rest of this function.
    try:
        cur = conn.cursor(row_factory=tuple_row)
        await cur.execute(call.sql, call.params)
        rows = await cur.fetchall() if cur.description is not None else []
    except Exception:
        with translated_errors():
            raise
    return call.decode(rows)


def run_sync(conn: psycopg.Connection, call: Call[T]) -> T:
    try:
        cur = conn.cursor(row_factory=tuple_row)
        cur.execute(call.sql, call.params)
        rows = cur.fetchall() if cur.description is not None else []
    except Exception:
        with translated_errors():
            raise
    return call.decode(rows)


# --- the connections jobqueue opens ---------------------------------------------------------

#: ``application_name`` of each kind of connection jobqueue opens. PostgreSQL keeps 63 bytes of it.
API_NAME = "jobqueue-api"
API_READ_NAME = "jobqueue-api-read"  # the API's connections to a read replica (JOBQUEUE_READ_DSN)
CLIENT_NAME = "jobqueue-client"
CLI_NAME = "jobqueue-cli"
MIGRATE_NAME = "jobqueue-migrate"


def worker_name(worker_id: str) -> str:
    """A worker process's claim/ack pool and its LISTEN connection."""
    return f"jobqueue-worker {worker_id}"


def maintenance_name(leader_id: str) -> str:
    """The maintenance services' pool (elector, sweeper, scheduler…) and the reindexer's connection."""
    return f"jobqueue-maintenance {leader_id}"


_TIMEOUTS = (
    ("statement_timeout", "statement_timeout"),
    ("lock_timeout", "lock_timeout"),
    ("idle_in_transaction_session_timeout", "idle_in_transaction_timeout"),
)


def _ms(seconds: float) -> int:
    return 0 if seconds <= 0 else max(1, round(seconds * 1000))


@dataclass(frozen=True, slots=True)
class Session:
    """Where and how one kind of connection connects: the DSN, the ``application_name`` operators
    see, the waits its statements are allowed (seconds, 0: none) and whether a transaction pooler
    (PgBouncer) sits in between."""

    dsn: str
    name: str
    statement_timeout: float = 60.0
    lock_timeout: float = 10.0
    idle_in_transaction_timeout: float = 60.0
    pooler: bool = False

    @classmethod
    def of(cls, settings: DbSettings, name: str, *, dsn: str | None = None, direct: bool = False) -> "Session":
        """``direct``: session-bound work (LISTEN, REINDEX, migrations) goes to ``JOBQUEUE_DIRECT_DSN``
        when there is one, which bypasses the pooler."""
        if direct and settings.direct_dsn:
            dsn, pooler = settings.direct_dsn, False
        else:
            dsn, pooler = dsn or settings.dsn, settings.pgbouncer
        return cls(
            dsn, name, settings.statement_timeout, settings.lock_timeout, settings.idle_in_transaction_timeout, pooler
        )

    def with_(self, **changes: Any) -> "Session":
        return replace(self, **changes)

    def unbounded(self) -> "Session":
        """No statement or lock timeout: for the statements that legitimately run or wait long
        (``REINDEX CONCURRENTLY`` waits for every older transaction)."""
        return self.with_(statement_timeout=0, lock_timeout=0)

    def timeouts_ms(self) -> dict[str, int]:
        return {parameter: _ms(getattr(self, attribute)) for parameter, attribute in _TIMEOUTS}

    def conninfo(self) -> str:
        """The DSN with ``application_name`` and, unless behind a pooler, the timeouts as startup
        ``options`` (before the DSN's own ``options``/``PGOPTIONS``, so those win where they clash)."""
        params: dict[str, Any] = {"application_name": self.name}
        if not self.pooler:
            ours = " ".join(f"-c {parameter}={ms}" for parameter, ms in self.timeouts_ms().items())
            theirs = conninfo_to_dict(self.dsn).get("options") or os.environ.get("PGOPTIONS", "")
            params["options"] = f"{ours} {theirs}".strip()
        return make_conninfo(self.dsn, **params)


_SESSION_TIMEOUTS: Call[dict[str, int]] = Call("meta_session_timeouts", {}, dict)


class _Configure:
    """A pool's ``configure`` callback: server-side prepares (hot statements from their second run;
    psycopg's default is 5) unless behind a pooler, where the first connection checks instead that
    the server applies the timeouts jobqueue cannot send (once per pool: ``check``)."""

    def __init__(self, session: Session, *, check: bool = True) -> None:
        self.session = session
        self.checked = not (session.pooler and check)

    def prepare(self, conn: psycopg.Connection | psycopg.AsyncConnection) -> None:
        conn.prepare_threshold = None if self.session.pooler else 1

    def compare(self, applied: dict[str, int]) -> None:
        self.checked = True
        wanted = self.session.timeouts_ms()
        differ = {name: (applied.get(name), ms) for name, ms in wanted.items() if applied.get(name) != ms}
        if differ:
            log.warning(
                "%s: behind PgBouncer jobqueue cannot set its timeouts, and the server's differ "
                "(ms, server vs wanted: %s); set them on the role, e.g. ALTER ROLE … IN DATABASE … "
                "SET lock_timeout = '10s' (docs/operations.md: PgBouncer)",
                self.session.name,
                ", ".join(f"{name} {got} vs {ms}" for name, (got, ms) in differ.items()),
            )

    def sync(self, conn: psycopg.Connection) -> None:
        self.prepare(conn)
        if not self.checked and conn.autocommit:  # never open a transaction the caller did not ask for
            self.compare(run_sync(conn, _SESSION_TIMEOUTS))

    async def async_(self, conn: psycopg.AsyncConnection) -> None:
        self.prepare(conn)
        if not self.checked and conn.autocommit:
            self.compare(await run(conn, _SESSION_TIMEOUTS))


#: A pool tries a lost connection again at least this often (seconds). psycopg_pool's own backoff
#: doubles without bound (1, 2, 4, 8, 16 s): after an outage of 8 s — a crash recovery on a loaded
#: machine — a worker's next try came 6 s after the server was back, past its leases, and the
#: sweeper handed its running jobs out again; producers' enqueues stayed refused as long.
RECONNECT_MAX_DELAY = 1.0


class _CappedBackoff(AttemptWithBackoff):
    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, RECONNECT_MAX_DELAY)


class _AsyncPool(AsyncConnectionPool):
    """psycopg_pool's pool whose reconnection attempts are at most RECONNECT_MAX_DELAY apart
    (the attempt it starts for a lost connection is the one thing changed)."""

    async def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        await super()._add_connection(attempt or _CappedBackoff(timeout=self.reconnect_timeout), growing)


class _SyncPool(ConnectionPool):
    """The sync pool with the same bound on its reconnection attempts."""

    def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        super()._add_connection(attempt or _CappedBackoff(timeout=self.reconnect_timeout), growing)


def async_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    name: str = "jobqueue",
    settings: DbSettings | None = None,
    timeout: float = 10.0,
    connect_timeout: int | None = None,
    check: bool = False,
) -> AsyncConnectionPool:
    """An autocommit pool (each Call is its own transaction); open it with `await pool.open()`.

    ``name`` is the connections' ``application_name``; ``settings`` gives their timeouts and
    PgBouncer mode (defaults: `DbSettings()`'s). ``timeout`` bounds the wait for a connection (then
    `DatabaseUnavailable`); the REST API passes short ones so an outage answers 503 quickly
    instead of holding requests. ``check``: test each connection as it is handed out (one round
    trip), so a connection a server restart killed is replaced instead of failing its caller's
    cycle — for periodic services, never for a hot path.
    """
    session = Session.of(settings or DbSettings(), name, dsn=dsn)
    kwargs: dict[str, Any] = {"autocommit": True}
    if connect_timeout is not None:
        kwargs["connect_timeout"] = connect_timeout
    return _AsyncPool(
        session.conninfo(),
        min_size=min_size,
        max_size=max_size,
        open=False,
        name=name,
        kwargs=kwargs,
        configure=_Configure(session).async_,
        timeout=timeout,
        reconnect_timeout=30.0,
        check=AsyncConnectionPool.check_connection if check else None,
    )


def sync_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 5,
    name: str = CLIENT_NAME,
    settings: DbSettings | None = None,
    timeout: float = 10.0,
) -> ConnectionPool:
    session = Session.of(settings or DbSettings(), name, dsn=dsn)
    return _SyncPool(
        session.conninfo(),
        min_size=min_size,
        max_size=max_size,
        open=False,
        name=name,
        kwargs={"autocommit": True},
        configure=_Configure(session).sync,
        timeout=timeout,
        reconnect_timeout=30.0,
    )


async def connect(
    dsn: str | Session, *, name: str = "jobqueue", settings: DbSettings | None = None, autocommit: bool = True
) -> psycopg.AsyncConnection:
    """One connection of its own (named and bounded like a pooled one): a DSN with ``name`` and
    ``settings``, or a `Session` as it is."""
    session = dsn if isinstance(dsn, Session) else Session.of(settings or DbSettings(), name, dsn=dsn)
    with translated_errors():
        conn = await psycopg.AsyncConnection.connect(session.conninfo(), autocommit=autocommit)
    await _Configure(session, check=False).async_(conn)  # prepares only: no statement runs
    return conn


def connect_sync(
    session: Session, *, autocommit: bool = True, connect_timeout: int | None = None
) -> psycopg.Connection:
    """One blocking connection of its own (migrations, one-shot commands, a worker's preflight)."""
    kwargs: dict[str, Any] = {} if connect_timeout is None else {"connect_timeout": connect_timeout}
    with translated_errors():
        conn = psycopg.connect(session.conninfo(), autocommit=autocommit, **kwargs)
    _Configure(session, check=False).sync(conn)
    return conn


#: How long shutdown steps (releasing unfinished jobs, deregistering, resigning a lease) wait for a
#: connection: with the database gone, a stopping process must not spend the pool's full timeout
#: on each step. What they fail to do is undone by leases running out (the sweeper reclaims).
SHUTDOWN_WAIT = 2.0


def on_standby(exc: BaseException) -> bool:
    """The statement failed with 25006 (read-only transaction), raw or translated: the server this
    connection reached no longer takes writes — a primary demoted by a failover (or made read-only
    by an operator). The connection must be dropped: kept in its pool it would fail every write
    again, while a new one finds the current primary (``target_session_attrs=read-write``)."""
    return isinstance(exc, pg_errors.ReadOnlySqlTransaction) or isinstance(
        exc.__cause__, pg_errors.ReadOnlySqlTransaction
    )


async def close_pool(pool: AsyncConnectionPool) -> None:
    """``pool.close()``, also when the end of the event loop's run (``asyncio.run``, a test runner)
    has cancelled the pool's own tasks along with every other: close() then stops at awaiting them
    and would leave its idle connections open until the garbage collector found them, so they are
    closed here (the list of them is psycopg_pool's; the pin keeps it below 3.4)."""
    idle = list(getattr(pool, "_pool", ()))
    try:
        await pool.close()
    except asyncio.CancelledError:
        for conn in idle:
            with contextlib.suppress(Exception):
                await conn.close()


@contextlib.asynccontextmanager
async def connection(pool: AsyncConnectionPool, timeout: float | None = None):
    """A pooled connection whose acquisition failures (pool timeout, refused) are translated too;
    ``timeout`` overrides the pool's wait for this one. A connection to a standby is closed, so the
    pool discards it (`on_standby`)."""
    with translated_errors():
        async with pool.connection(timeout=timeout) as conn:
            try:
                yield conn
            except Exception as exc:
                if on_standby(exc):
                    await conn.close()
                raise


@contextlib.contextmanager
def connection_sync(pool: ConnectionPool, timeout: float | None = None) -> Iterator[psycopg.Connection]:
    """`connection` for a sync pool (the sync facade, handler threads)."""
    with translated_errors():
        with pool.connection(timeout=timeout) as conn:
            try:
                yield conn
            except Exception as exc:
                if on_standby(exc):
                    conn.close()
                raise
