"""Connections and execution: the one gateway through which every SQL statement runs.

The store modules describe statements as `Call` values (SQL name, parameters, how to decode the
rows). This module runs a Call on an async or a sync psycopg connection, so the async client, the
thin sync facade and a caller's own transaction (`connection=`) all execute the very same SQL, and
it turns driver errors into jobqueue's own: a refused input names its field, an unreachable
database is `DatabaseUnavailable`, a missing schema is `NotMigrated`.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterator, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from jobqueue.errors import (Conflict, DatabaseBusy, DatabaseUnavailable, IdempotencyMismatch, NotMigrated,
                             ValidationError)
from jobqueue.sql import query

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One SQL statement to run: a named query, its parameters, and how its rows become a value."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    decode: Callable[[list[tuple]], T] = lambda rows: rows  # type: ignore[assignment]

    @property
    def sql(self) -> str:
        return query(self.name)


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
            raise IdempotencyMismatch(message.removeprefix("jobqueue: idempotency_key: "),
                                      _uuid_or_none(exc.diag.message_detail)) from None
        raise Conflict(message) from None
    except psycopg.DataError as exc:  # bad text for a type, a number out of range, a NUL character
        raise ValidationError("input", exc.diag.message_primary or str(exc)) from None
    except pg_errors.ProgramLimitExceeded as exc:  # e.g. an idempotency key too long for its index
        raise ValidationError("input", exc.diag.message_primary or str(exc)) from None
    except (pg_errors.UndefinedTable, pg_errors.UndefinedFunction, pg_errors.InvalidSchemaName) as exc:
        raise NotMigrated(f"jobqueue schema missing or outdated, run `jobqueue migrate` ({exc.diag.message_primary})") from exc
    except (pg_errors.TransactionRollback, pg_errors.SerializationFailure, pg_errors.DeadlockDetected,
            pg_errors.LockNotAvailable, pg_errors.QueryCanceled) as exc:
        raise DatabaseBusy(f"database busy: {exc.diag.message_primary or exc}") from exc
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:  # AdminShutdown, pool timeouts too
        raise DatabaseUnavailable(f"database unavailable: {exc}") from exc


def _uuid_or_none(text: str | None) -> uuid.UUID | None:
    try:
        return uuid.UUID(text) if text else None
    except ValueError:
        return None


async def run(conn: psycopg.AsyncConnection, call: Call[T]) -> T:
    with translated_errors():
        cur = conn.cursor(row_factory=tuple_row)
        await cur.execute(call.sql, call.params)
        rows = await cur.fetchall() if cur.description is not None else []
    return call.decode(rows)


def run_sync(conn: psycopg.Connection, call: Call[T]) -> T:
    with translated_errors():
        cur = conn.cursor(row_factory=tuple_row)
        cur.execute(call.sql, call.params)
        rows = cur.fetchall() if cur.description is not None else []
    return call.decode(rows)


def _configure(conn: psycopg.Connection | psycopg.AsyncConnection) -> None:
    # Hot statements are prepared server-side from their second run (psycopg's default is 5).
    conn.prepare_threshold = 1


async def _configure_async(conn: psycopg.AsyncConnection) -> None:
    _configure(conn)


def async_pool(dsn: str, *, min_size: int = 1, max_size: int = 10, name: str = "jobqueue",
               timeout: float = 10.0, connect_timeout: int | None = None) -> AsyncConnectionPool:
    """An autocommit pool (each Call is its own transaction); open it with `await pool.open()`.

    ``timeout`` bounds the wait for a connection (then `DatabaseUnavailable`); the REST API passes
    short ones so an outage answers 503 quickly instead of holding requests.
    """
    kwargs: dict[str, Any] = {"autocommit": True}
    if connect_timeout is not None:
        kwargs["connect_timeout"] = connect_timeout
    return AsyncConnectionPool(
        dsn, min_size=min_size, max_size=max_size, open=False, name=name,
        kwargs=kwargs, configure=_configure_async, timeout=timeout,
        reconnect_timeout=30.0,
    )


def sync_pool(dsn: str, *, min_size: int = 1, max_size: int = 5, name: str = "jobqueue-sync",
              timeout: float = 10.0) -> ConnectionPool:
    return ConnectionPool(
        dsn, min_size=min_size, max_size=max_size, open=False, name=name,
        kwargs={"autocommit": True}, configure=_configure, timeout=timeout,
        reconnect_timeout=30.0,
    )


async def connect(dsn: str, *, autocommit: bool = True) -> psycopg.AsyncConnection:
    with translated_errors():
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=autocommit)
    _configure(conn)
    return conn


#: How long shutdown steps (releasing unfinished jobs, deregistering, resigning a lease) wait for a
#: connection: with the database gone, a stopping process must not spend the pool's full timeout
#: on each step. What they fail to do is undone by leases running out (the sweeper reclaims).
SHUTDOWN_WAIT = 2.0


@contextlib.asynccontextmanager
async def connection(pool: AsyncConnectionPool, timeout: float | None = None):
    """A pooled connection whose acquisition failures (pool timeout, refused) are translated too;
    ``timeout`` overrides the pool's wait for this one."""
    with translated_errors():
        async with pool.connection(timeout=timeout) as conn:
            yield conn
