"""`JobQueue`: the object a worker app defines, holding its task handlers and their policies.

    queue = JobQueue()

    @queue.task("send_email", max_attempts=5, backoff=Backoff(base=2), timeout=30, queue="mail")
    async def send_email(job): ...

`jobqueue-worker --app mymodule:queue` imports it and runs the handlers. The decorated function is
a `jobqueue.tasks.Task`: still callable as the function, and ``await send_email.enqueue(to=...)`` /
``send_email.enqueue_sync(...)`` enqueue its jobs with the task's queue, priority, max attempts and
encrypted fields, through the client ``queue.connect(...)`` names (else JOBQUEUE_DSN).

    @queue.middleware
    async def timing(job):
        started = time.monotonic()
        outcome = yield
        metrics.observe(job.job_type, outcome.status, time.monotonic() - started)

wraps every attempt (`jobqueue.runtime.middleware`; what its errors do: `jobqueue.worker.executor`).

    @queue.periodic("*/5 * * * *", name="cleanup", timezone="Europe/Berlin")
    async def cleanup(job): ...

declares a cron schedule too: workers write it to ``jobqueue.schedules`` when they start (creating
or redefining the row of that name; a pause made with the CLI or REST survives restarts), and the
elected scheduler enqueues one ``cleanup`` job per tick.

    queue.circuit("payments-api", threshold=5, window=60, reset_after=30, trip_on=(TimeoutError,))

    @queue.task("charge", circuit="payments-api")
    async def charge(job): ...

declares a circuit breaker shared by every worker (`jobqueue.circuits`): workers write it and the
job types behind it to ``jobqueue.circuits`` when they start. Breakers and limits are the declaring
app's (``JobQueue(name)``, by default its module): another app sharing the database, with tasks of
the same names, neither redefines nor removes them. A worker claims only its app's job types.

    @queue.task("charge", encrypted=["card.number", "ssn"], encrypt_result=True)
    async def charge(job): ...

encrypts those payload fields before they reach the database (`jobqueue.crypto.envelopes`): workers
publish the list in ``jobqueue.task_defaults.encrypted_fields`` when they start, and every Python
client and the REST API encrypt them from then on (read at most 5 s late); the worker decrypts them
just before the handler runs, and encrypts the handler's result too with ``encrypt_result``.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from jobqueue.crypto.field_paths import check_paths
from jobqueue.model.circuits import DEFAULT_RESET_AFTER, DEFAULT_THRESHOLD, DEFAULT_WINDOW, CircuitSpec
from jobqueue.model.durations import duration_problem
from jobqueue.model.errors import ValidationError
from jobqueue.model.jobs import Priority
from jobqueue.model.limits import LimitSpec
from jobqueue.model.names import name_problem
from jobqueue.model.retry import Backoff
from jobqueue.model.schedules import DEFAULT_MISFIRE_LIMIT, DEFAULT_MISFIRE_POLICY, ScheduleSpec
from jobqueue.runtime.middleware import Middleware
from jobqueue.tasks import Producers, Task

if TYPE_CHECKING:
    from jobqueue.client import AsyncClient, Client
    from jobqueue.config import Settings

DEFAULT_MAX_ATTEMPTS = 4  # SPEC: three retries after the first attempt


@dataclass(frozen=True, slots=True)
class TaskDef:
    name: str
    handler: Callable[..., Any]
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: Backoff = field(default_factory=Backoff)
    timeout: float | None = None  # seconds per attempt; None: the worker's processing TTL (900 s)
    is_async: bool = False
    circuit: CircuitSpec | None = None  # the breaker its failures count toward, and that blocks it
    encrypted: tuple[str, ...] = ()  # dotted payload fields every producer encrypts (jobqueue.crypto.envelopes)
    encrypt_result: bool = False  # the worker stores the handler's result encrypted
    limit: LimitSpec | None = None  # its global concurrency / rate limit (scope job_type)
    queue: str = "default"  # where `Task.enqueue` puts its jobs (and @queue.periodic its cron jobs)
    priority: str = Priority.NORMAL.label  # the priority `Task.enqueue` gives them


class JobQueue:
    def __init__(self, name: str | None = None) -> None:
        """``name`` says which app this is (default: the module that creates it, e.g. ``myapp``):
        the breakers and limits it declares are its own, so another app sharing the database, with
        tasks of the same names, neither redefines nor removes them. Give each app its own name when
        two apps live in modules of the same name."""
        if name is None:
            name = sys._getframe(1).f_globals.get("__name__") or "jobqueue"
        if problem := name_problem(name):
            raise ValidationError("name", problem)
        self.name = name
        self.tasks: dict[str, TaskDef] = {}
        self.schedules: dict[str, ScheduleSpec] = {}
        self.circuits: dict[str, CircuitSpec] = {}
        self.queue_limits: dict[str, LimitSpec] = {}
        #: around every attempt, outermost first (`middleware`)
        self.middlewares: list[Middleware] = []
        #: the clients its tasks enqueue with (`connect`)
        self.producers = Producers(name)

    def circuit(
        self,
        name: str,
        *,
        threshold: int = DEFAULT_THRESHOLD,
        window: float = DEFAULT_WINDOW,
        reset_after: float = DEFAULT_RESET_AFTER,
        trip_on: type[BaseException] | tuple[type[BaseException], ...] = (Exception,),
    ) -> CircuitSpec:
        """Declare a circuit breaker that tasks name with ``@queue.task(..., circuit=name)``.

        ``threshold`` counted failures within ``window`` seconds open it: no worker claims its
        tasks' jobs (they wait, pending, no attempt used) until, ``reset_after`` seconds later, one
        probe job succeeds. A failure counts when its exception is one of ``trip_on`` (default:
        any). Bad settings raise `ValidationError` here, at import.
        """
        spec = CircuitSpec.build(name, threshold=threshold, window=window, reset_after=reset_after, trip_on=trip_on)
        if spec.name in self.circuits:
            raise ValueError(f"circuit {spec.name!r} is declared twice")
        self.circuits[spec.name] = spec
        return spec

    def queue_limit(self, queue: str, *, concurrency: int | None = None, rate: str | None = None) -> LimitSpec:
        """Limit a whole queue, all its job types together, across every worker: at most
        ``concurrency`` of its jobs running at once, at most ``rate`` starts (``"10/s"``, ``"100/m"``,
        ``"5/2s"``) in any such window. Bad settings raise `ValidationError` here, at import."""
        spec = LimitSpec.build("queue", queue, concurrency=concurrency, rate=rate)
        if spec.name in self.queue_limits:
            raise ValueError(f"queue {spec.name!r} has its limit declared twice")
        self.queue_limits[spec.name] = spec
        return spec

    def limits(self) -> list[LimitSpec]:
        """Every limit the app declares: its tasks' and its queues'."""
        return [t.limit for t in self.tasks.values() if t.limit is not None] + list(self.queue_limits.values())

    def task(
        self,
        name: str | None = None,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff: Backoff | None = None,
        timeout: float | None = None,
        circuit: str | None = None,
        encrypted: list[str] | tuple[str, ...] | None = None,
        encrypt_result: bool = False,
        concurrency: int | None = None,
        rate: str | None = None,
        queue: str | None = None,
        priority: str | int | Priority | None = None,
    ) -> Callable[[Callable[..., Any]], Task]:
        """Register a handler. It receives the `Job`; what it returns (JSON) is stored as the result.
        The decorator returns a `Task`: the function still, with ``enqueue``/``enqueue_sync``.

        ``timeout``: each attempt's deadline in seconds (a job may carry its own, given at enqueue);
        without one the worker's processing TTL applies (``JOBQUEUE_PROCESSING_TTL``, 15 minutes).
        Past it the attempt fails as a retryable `JobTimeout`.
        ``circuit``: the name of a breaker declared before with `circuit`; several tasks may share one.
        ``encrypted``: dotted payload fields (``"card.number"``, at most 100) that producers encrypt before
        enqueueing and the worker decrypts just before the handler runs; a job missing one is refused.
        ``encrypt_result``: store the handler's result encrypted (``client.get``/``wait`` decrypt it).
        Both need a key ring (``JOBQUEUE_ENCRYPTION_KEYS``) wherever jobs of the task are made or run.
        ``concurrency``: at most this many of its jobs run at once across every worker on every host;
        ``rate``: at most so many start in any window (``"10/s"``, ``"100/m"``, ``"5/2s"``). Jobs over
        the limit wait, pending, while other job types keep flowing (`jobqueue.limits`).
        ``queue``, ``priority``: what ``send_email.enqueue(...)`` gives its jobs (default ``default``,
        ``normal``) and ``@queue.periodic`` its cron jobs. Enqueue-side defaults: a worker runs the
        task's jobs only if its ``--queues`` include that queue (it warns at start when not), and
        ``client.enqueue("send_email", ...)`` by name does not apply them.
        """
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if timeout is not None and (problem := duration_problem(timeout)):
            raise ValidationError("timeout", problem)  # it becomes every claim's JSON and the job's deadline
        if circuit is not None and circuit not in self.circuits:
            raise ValueError(
                f"circuit {circuit!r} is not declared: call queue.circuit({circuit!r}, ...) before "
                "the tasks that use it"
            )
        breaker = self.circuits[circuit] if circuit is not None else None
        fields = check_paths(encrypted, "encrypted")
        if queue is not None and (problem := name_problem(queue)):
            raise ValidationError("queue", problem)
        level = Priority.parse(priority).label if priority is not None else Priority.NORMAL.label
        limited = concurrency is not None or rate is not None
        if limited:  # checked now, at import, whatever the task's name turns out to be
            LimitSpec.build("job_type", name or "task", concurrency=concurrency, rate=rate)

        def register(handler: Callable[..., Any]) -> Task:
            if isinstance(handler, Task):  # another app's task: its function
                handler = handler.handler
            task_name = name or handler.__name__
            if not task_name:
                raise ValueError("task name must not be empty")
            if task_name in self.tasks:
                raise ValueError(f"task {task_name!r} is registered twice")
            self.tasks[task_name] = TaskDef(
                name=task_name,
                handler=handler,
                max_attempts=max_attempts,
                backoff=backoff or Backoff(),
                timeout=timeout,
                is_async=inspect.iscoroutinefunction(handler),
                circuit=breaker,
                encrypted=fields,
                encrypt_result=encrypt_result,
                limit=LimitSpec.build("job_type", task_name, concurrency=concurrency, rate=rate) if limited else None,
                queue=queue or "default",
                priority=level,
            )
            return Task(self.tasks[task_name], self.producers)

        return register

    def periodic(
        self,
        cron: str,
        *,
        name: str | None = None,
        job_type: str | None = None,
        timezone: str = "UTC",
        payload: Any = None,
        priority: str | None = None,
        queue: str | None = None,
        max_attempts: int | None = None,
        misfire_policy: str = DEFAULT_MISFIRE_POLICY,
        misfire_limit: int = DEFAULT_MISFIRE_LIMIT,
        enabled: bool = True,
    ) -> Callable[[Callable[..., Any]], Task]:
        """Run the decorated handler on a cron schedule (croniter syntax, 5 or 6 fields, in ``timezone``).

        The handler becomes a task named ``job_type`` (default: the function's name) unless it is
        one already — put ``@queue.periodic`` above ``@queue.task(...)`` to give task options. The
        schedule is called ``name`` (default: the job type); each tick enqueues one job with
        ``payload``, ``priority``, ``queue`` (default: the task's, as ``@queue.task`` set them) and
        ``max_attempts``; the job's ``scheduled_for`` is the tick it fired for. ``misfire_policy`` says what
        happens to ticks missed while no scheduler ran: ``fire_once``, ``fire_all`` (at most
        ``misfire_limit`` of them) or ``skip``. An invalid expression or zone raises
        `ValidationError` here, at import.
        """

        def register(handler: Callable[..., Any]) -> Task:
            own = isinstance(handler, Task) and self.tasks.get(handler.name) is handler.definition
            function = handler.handler if isinstance(handler, Task) else handler
            registered = next((t.name for t in self.tasks.values() if t.handler is function), None)
            if registered is not None and job_type not in (None, registered):
                raise ValueError(f"{handler.__name__} is task {registered!r}, not {job_type!r}")
            task_name = registered or job_type or handler.__name__
            defaults = self.tasks[registered] if registered is not None else None
            spec = ScheduleSpec.build(
                name or task_name,
                cron,
                task_name,
                timezone=timezone,
                payload=payload,
                priority=priority if priority is not None else defaults.priority if defaults else Priority.NORMAL.label,
                queue=queue if queue is not None else defaults.queue if defaults else "default",
                max_attempts=max_attempts,
                misfire_policy=misfire_policy,
                misfire_limit=misfire_limit,
                enabled=enabled,
            )
            if spec.name in self.schedules:
                raise ValueError(f"schedule {spec.name!r} is declared twice (give each one a name=)")
            if registered is None:
                task = self.task(task_name)(function)
            else:
                task = handler if isinstance(handler, Task) and own else Task(self.tasks[registered], self.producers)
            self.schedules[spec.name] = spec
            return task

        return register

    def middleware(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Wrap every attempt of this app's tasks (`jobqueue.runtime.middleware`): a generator
        function, sync or async, that yields once where the attempt runs and gets its
        `AttemptOutcome` back from the ``yield``. Declared first, outermost. It runs on the
        worker's event loop, inside the attempt's deadline, and for sync handlers too; an exception
        it raises is the attempt's (an ordinary one: a retry with the task's backoff), so it never
        loses the job. A function that is not a generator function is a `TypeError` here."""
        self.middlewares.append(Middleware(function))
        return function

    def connect(
        self,
        dsn: str | None = None,
        *,
        client: AsyncClient | Client | None = None,
        settings: Settings | None = None,
        producer_id: str | None = None,
    ) -> None:
        """Where ``send_email.enqueue(...)`` writes (`jobqueue.tasks`): a database (``dsn``, else
        ``settings``; the app opens its clients on first use), or a client of yours (an
        `AsyncClient` for ``enqueue``, a `Client` for ``enqueue_sync``; the other kind is opened on
        the same database). Without a call, JOBQUEUE_DSN. Replaces an earlier connect."""
        self.producers.connect(dsn, client=client, settings=settings, producer_id=producer_id)

    def close(self) -> None:
        """Close the sync client the app opened for its tasks' ``enqueue_sync``."""
        self.producers.close()

    async def aclose(self) -> None:
        """Close the clients the app opened for its tasks: this event loop's and the sync one."""
        await self.producers.aclose()

    def queues_not_served(self, queues: Sequence[str]) -> dict[str, list[str]]:
        """The queues this app's tasks (``queue=``) and schedules put jobs in that ``queues`` (a
        worker's) leave out, each with the tasks and schedules that do: a worker warns at start."""
        missing: dict[str, list[str]] = {}
        for name, task in self.tasks.items():
            if task.queue not in queues:
                missing.setdefault(task.queue, []).append(f"task {name}")
        for name, spec in self.schedules.items():
            if spec.queue not in queues:
                missing.setdefault(spec.queue, []).append(f"schedule {name}")
        return missing

    def timeouts_by_type(self) -> dict[str, float]:
        """The tasks' own attempt timeouts, in seconds (a claim gives the others the processing TTL)."""
        return {name: task.timeout for name, task in self.tasks.items() if task.timeout}

    def max_attempts_by_type(self) -> dict[str, int]:
        return {name: task.max_attempts for name, task in self.tasks.items()}

    def encrypted_fields_by_type(self) -> dict[str, list[str]]:
        """Each task's encrypted payload fields (empty: none), as workers publish them at start."""
        return {name: list(task.encrypted) for name, task in self.tasks.items()}

    def check_keys(self, keys: object | None) -> None:
        """A worker of tasks that encrypt needs a key ring: without one, a `ValueError` at start
        (not a dead-lettered job per run)."""
        needing = [name for name, task in self.tasks.items() if task.encrypted or task.encrypt_result]
        if needing and keys is None:
            raise ValueError(
                f"tasks {', '.join(needing)} use encryption (encrypted= or encrypt_result=) but no "
                "encryption keys are configured: set JOBQUEUE_ENCRYPTION_KEYS or "
                "JOBQUEUE_ENCRYPTION_KEYS_FILE (`jobqueue keys generate` makes a key)"
            )

    def circuit_by_type(self) -> dict[str, str | None]:
        """Each task's breaker (None: it has none), as workers write it at start."""
        return {name: task.circuit.name if task.circuit else None for name, task in self.tasks.items()}
