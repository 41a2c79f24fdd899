"""`Task`: what ``@queue.task`` returns. It is still the handler (calling it calls the function, so
tests and other code call it directly) and it enqueues its own jobs with the task's defaults:

    @queue.task("send_email", queue="mail", priority="high", max_attempts=5)
    async def send_email(job): ...

    await send_email.enqueue(to="a@b.c")                  # payload {"to": "a@b.c"}
    send_email.enqueue_sync({"to": "a@b.c"})              # the same, blocking
    await send_email.with_options(delay=60, idempotency_key="welcome-42").enqueue(to="a@b.c")

The payload is the keyword arguments (as Celery's ``delay`` and Dramatiq's ``send`` take them), or
one positional value (any JSON). A keyword that is an enqueue option (``priority=``, ``delay=``…)
is refused rather than silently stored in the payload: options go to `with_options`, which takes
`ENQUEUE_OPTIONS` and ``client=`` / ``connection=``. The task's defaults — its ``queue``,
``priority`` and ``max_attempts``, and its ``encrypted`` fields, sealed by this producer even before
any worker has published them — apply unless an option says otherwise. ``client.enqueue("send_email",
...)`` by name knows no app: it applies what the database holds (the queue's enqueue defaults, the
max attempts and encrypted fields workers published), never the decorator's queue or priority.

Where a task enqueues (`Producers`, one per app), the first that applies:
1. ``with_options(client=...)``: an `AsyncClient` for ``enqueue``, a `Client` for ``enqueue_sync``;
2. the client given to ``queue.connect(client=...)`` (of that kind);
3. a client the app opens on first use, from ``queue.connect(dsn, settings=...)``, else from
   JOBQUEUE_DSN (the rest of the settings from JOBQUEUE_*, encryption keys included). The async
   one is per event loop — a pool belongs to the loop that opened it — and is closed when that
   loop's run ends (``asyncio.run`` and test runners cancel what is left) or by ``await
   queue.aclose()``; the sync one is shared by all threads and closed by ``queue.close()`` or at exit.
None of these (no JOBQUEUE_DSN either): `NotConnected`, one line naming them, nothing written.
``connection=`` enqueues inside the caller's transaction, as ``client.enqueue(connection=...)`` does.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import inspect
import os
import threading
import uuid
from typing import TYPE_CHECKING, Any

from jobqueue.model.errors import NotConnected

if TYPE_CHECKING:
    from jobqueue.app import TaskDef
    from jobqueue.client import AsyncClient, Client
    from jobqueue.config import Settings

#: What `Task.with_options` passes on to ``client.enqueue`` (a unit test keeps it equal to
#: `NewJob.build`'s keywords, plus ``encrypt``).
ENQUEUE_OPTIONS = frozenset(
    {
        "priority",
        "queue",
        "run_at",
        "delay",
        "max_attempts",
        "idempotency_key",
        "producer_id",
        "traceparent",
        "timeout",
        "expires_at",
        "expire_after",
        "idempotency_window",
        "idempotency_mismatch",
        "ordering_key",
        "encrypt",
    }
)
_CALL_OPTIONS = frozenset({"client", "connection"})


class Task:
    """The decorated handler: call it as the function; ``enqueue``/``enqueue_sync`` make its jobs."""

    def __init__(self, definition: TaskDef, producers: Producers) -> None:
        self.definition = definition
        self.handler = definition.handler
        self._producers = producers
        functools.update_wrapper(self, definition.handler)
        if definition.is_async:  # inspect.iscoroutinefunction(send_email) stays true
            if hasattr(inspect, "markcoroutinefunction"):  # Python 3.12+
                self._is_coroutine_marker = inspect._is_coroutine_mark  # type: ignore[attr-defined]
            else:
                self._is_coroutine = asyncio.coroutines._is_coroutine  # type: ignore[attr-defined]

    @property
    def name(self) -> str:
        return self.definition.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.handler(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name!r} queue={self.definition.queue!r} priority={self.definition.priority!r}>"

    def with_options(self, **options: Any) -> "TaskCall":
        """This task's enqueue with ``options`` (`ENQUEUE_OPTIONS`, ``client=``, ``connection=``);
        an unknown one is a `TypeError` now, not at the first enqueue."""
        unknown = sorted(set(options) - ENQUEUE_OPTIONS - _CALL_OPTIONS)
        if unknown:
            raise TypeError(
                f"{self.name}.with_options(): unknown option {', '.join(map(repr, unknown))} "
                f"(options: {', '.join(sorted(ENQUEUE_OPTIONS | _CALL_OPTIONS))})"
            )
        return TaskCall(self, options)

    async def enqueue(self, *payload: Any, **fields: Any) -> uuid.UUID:
        """Enqueue a job of this task (payload: the keywords, or one positional value); its id."""
        return await TaskCall(self, {}).enqueue(*payload, **fields)

    def enqueue_sync(self, *payload: Any, **fields: Any) -> uuid.UUID:
        """`enqueue`, blocking (a sync `Client`)."""
        return TaskCall(self, {}).enqueue_sync(*payload, **fields)


class TaskCall:
    """A task's enqueue with options bound (`Task.with_options`)."""

    def __init__(self, task: Task, options: dict[str, Any]) -> None:
        self.task = task
        self.options = options

    async def enqueue(self, *payload: Any, **fields: Any) -> uuid.UUID:
        from jobqueue.client import AsyncClient

        options = dict(self.options)
        client = options.pop("client", None)
        if client is not None and not isinstance(client, AsyncClient):
            raise TypeError(f"{self.task.name}.enqueue() needs an AsyncClient (client= is a {type(client).__name__})")
        body = self._payload(payload, fields, "enqueue")
        client = client or await self.task._producers.async_client(self.task.name)
        return await client.enqueue(self.task.name, body, **self._with_defaults(options))

    def enqueue_sync(self, *payload: Any, **fields: Any) -> uuid.UUID:
        from jobqueue.client import Client

        options = dict(self.options)
        client = options.pop("client", None)
        if client is not None and not isinstance(client, Client):
            raise TypeError(f"{self.task.name}.enqueue_sync() needs a Client (client= is a {type(client).__name__})")
        body = self._payload(payload, fields, "enqueue_sync")
        client = client or self.task._producers.sync_client(self.task.name)
        return client.enqueue(self.task.name, body, **self._with_defaults(options))

    def _payload(self, positional: tuple[Any, ...], fields: dict[str, Any], method: str) -> Any:
        if len(positional) > 1 or (positional and fields):
            raise TypeError(
                f"{self.task.name}.{method}() takes the payload as keywords or as one positional value, not both"
            )
        clashing = sorted(set(fields) & (ENQUEUE_OPTIONS | _CALL_OPTIONS))
        if clashing:
            names = ", ".join(map(repr, clashing))
            raise TypeError(
                f"{self.task.name}.{method}(): {names} is an enqueue option, not a payload field: use "
                f"{self.task.name}.with_options({clashing[0]}=...).{method}(...), or pass a payload that "
                f"holds such a field as one dict"
            )
        return positional[0] if positional else fields

    def _with_defaults(self, options: dict[str, Any]) -> dict[str, Any]:
        definition = self.task.definition
        options.setdefault("queue", definition.queue)
        options.setdefault("priority", definition.priority)
        options.setdefault("max_attempts", definition.max_attempts)
        if definition.encrypted:
            options["encrypt"] = sorted({*definition.encrypted, *(options.get("encrypt") or ())})
        return options


class Producers:
    """The clients an app's tasks enqueue with (see the module docstring for the order)."""

    def __init__(self, app_name: str) -> None:
        self.app_name = app_name
        self._dsn: str | None = None
        self._settings: Settings | None = None
        self._producer_id: str | None = None
        self._given_async: AsyncClient | None = None
        self._given_sync: Client | None = None
        self._lock = threading.Lock()
        self._sync: Client | None = None
        #: event loop -> (the client opened for it, the task that keeps and then closes it)
        self._async: dict[asyncio.AbstractEventLoop, tuple[asyncio.Future, asyncio.Task]] = {}
        self._atexit = False

    def connect(
        self,
        dsn: str | None = None,
        *,
        client: AsyncClient | Client | None = None,
        settings: Settings | None = None,
        producer_id: str | None = None,
    ) -> None:
        from jobqueue.client import AsyncClient, Client

        if client is not None and (dsn is not None or settings is not None or producer_id is not None):
            raise ValueError("queue.connect(): give a client, or a dsn / settings / producer_id, not both")
        if client is not None and not isinstance(client, (AsyncClient, Client)):
            raise TypeError(f"queue.connect(client=...) takes an AsyncClient or a Client, not {type(client).__name__}")
        self.close()  # the sync client it opened; async ones close with their loops (or aclose())
        self._async.clear()
        self._given_async = client if isinstance(client, AsyncClient) else None
        self._given_sync = client if isinstance(client, Client) else None
        if client is not None:  # the other kind is made from the same database and settings
            dsn, settings, producer_id = client.dsn, client.settings, client.producer_id
        self._dsn, self._settings, self._producer_id = dsn, settings, producer_id

    def database(self, who: str) -> tuple[str | None, Settings | None]:
        """The DSN and settings its clients open from (None, None: JOBQUEUE_*); `NotConnected`
        when nothing names a database (``who`` says what needed one)."""
        if self._dsn is None and self._settings is None and not os.environ.get("JOBQUEUE_DSN"):
            raise NotConnected(
                f"{who} has no database: call queue.connect(dsn) on app {self.app_name!r} (or connect(client=...)), "
                "pass one (with_options(client=...) for an enqueue), or set JOBQUEUE_DSN"
            )
        return self._dsn, self._settings

    def sync_client(self, task: str) -> Client:
        if self._given_sync is not None:
            return self._given_sync
        with self._lock:
            if self._sync is None:
                from jobqueue.client import Client

                dsn, settings = self.database(f"task {task!r}")
                self._sync = Client(dsn, settings=settings, producer_id=self._producer_id).open()
                if not self._atexit:
                    atexit.register(self.close)
                    self._atexit = True
            return self._sync

    async def async_client(self, task: str) -> AsyncClient:
        if self._given_async is not None:
            return self._given_async
        loop = asyncio.get_running_loop()
        held = self._async.get(loop)
        if held is None:
            dsn, settings = self.database(f"task {task!r}")
            for gone in [other for other in self._async if other.is_closed()]:
                del self._async[gone]  # a loop closed without its tasks cancelled
            ready: asyncio.Future = loop.create_future()
            keeper = loop.create_task(self._keep(loop, dsn, settings, ready), name=f"jobqueue-producer-{self.app_name}")
            held = self._async[loop] = (ready, keeper)
        return await asyncio.shield(held[0])

    async def _keep(
        self, loop: asyncio.AbstractEventLoop, dsn: str | None, settings: Settings | None, ready: asyncio.Future
    ) -> None:
        """Open the loop's client, hold it while the loop runs, close it when cancelled (the loop's
        run ending, or `aclose`). A client that cannot be opened is the enqueue's error, and the
        next enqueue tries again."""
        from jobqueue.client import AsyncClient

        try:
            try:
                client = await AsyncClient(dsn, settings=settings, producer_id=self._producer_id).open()
            except Exception as exc:
                ready.set_exception(exc)
                return
            except BaseException:
                ready.set_exception(NotConnected("the event loop stopped while the task's client was opening"))
                raise
            ready.set_result(client)
            try:
                await asyncio.Event().wait()
            finally:
                with contextlib.suppress(Exception):
                    await client.close()
        finally:
            if self._async.get(loop, (None, None))[0] is ready:
                del self._async[loop]

    def close(self) -> None:
        """Close the sync client the app opened (a client given to `connect` is the caller's)."""
        with self._lock:
            client, self._sync = self._sync, None
        if client is not None:
            client.close()

    async def aclose(self) -> None:
        """Close this event loop's client, and the sync one, that the app opened."""
        held = self._async.pop(asyncio.get_running_loop(), None)
        if held is not None:
            held[1].cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await held[1]
        self.close()
