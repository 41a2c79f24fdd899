"""Settings: one frozen dataclass built once from ``JOBQUEUE_*`` environment variables and passed down.

Nothing reads the environment at import time; `Settings.from_env()` is called by the entry points
(CLI, API factory) and the result is handed to whatever needs it. `Settings` holds one section per
concern, each frozen and checked on its own, so a component is handed the sections it reads and
nothing else; the variables keep their names (docs/operations.md "Configuration"):

- ``db`` (`DbSettings`): DSNs, PgBouncer mode, LISTEN, timeouts, a client's pool size — every
  process, through `jobqueue.db.gateway.Session`.
- ``worker`` (`WorkerSettings`): the claim loop and its process; the worker's command-line options.
- ``autoscale`` (`AutoscaleSettings`): a worker's slot scaler; the API's desired-workers gauge.
- ``maintenance`` (`MaintenanceSettings`): the leader-only services, retention included.
- ``backpressure`` (`BackpressureSettings`): the queue depth limits — the API, the gatekeeper and a
  worker's shedding of low-priority retries apply the same ones.
- ``api`` (`ApiSettings`): the REST API alone.
- ``metrics`` (`MetricsSettings`): worker counters, worker liveness, the API's /metrics.
- ``encryption`` (`EncryptionSettings`): the key ring — workers, clients, key rotation.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, TypeVar

from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict

from jobqueue.crypto.keyring import KeyRing
from jobqueue.model.durations import LONGEST, duration_problem
from jobqueue.model.names import MAX_BATCH_JOBS, name_problem

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/jobqueue"
DEFAULT_PRIORITY_WEIGHTS = (8, 4, 2, 1)


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer (got {raw!r})") from None


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number (got {raw!r})") from None


#: Every setting that is a span of seconds (days, for retention), by section and field, with the
#: environment variable that sets it and whether 0 is allowed (off, none, no wait). Each is checked
#: by the one duration rule (`jobqueue.model.durations`: finite, not negative, at most 3650 days), so
#: `inf`, `nan` or 1e300 from the environment is one clear line at start-up (exit 2 from the CLI),
#: not a wedged worker.
_DURATIONS: dict[str, dict[str, tuple[str, bool]]] = {
    "db": {
        "statement_timeout": ("JOBQUEUE_STATEMENT_TIMEOUT", True),
        "lock_timeout": ("JOBQUEUE_LOCK_TIMEOUT", True),
        "idle_in_transaction_timeout": ("JOBQUEUE_IDLE_IN_TRANSACTION_TIMEOUT", True),
    },
    "worker": {
        "lease_seconds": ("JOBQUEUE_LEASE_SECONDS (--lease)", False),
        "poll_interval": ("JOBQUEUE_POLL_INTERVAL (--poll-interval)", False),
        "shutdown_grace": ("JOBQUEUE_SHUTDOWN_GRACE (--shutdown-grace)", True),
        "ack_flush_interval": ("JOBQUEUE_ACK_FLUSH_MS (in seconds here)", True),
        "processing_ttl": ("JOBQUEUE_PROCESSING_TTL", False),
    },
    "autoscale": {
        "interval": ("JOBQUEUE_AUTOSCALE_INTERVAL", False),
        "up_cooldown": ("JOBQUEUE_AUTOSCALE_UP_COOLDOWN", True),
        "down_cooldown": ("JOBQUEUE_AUTOSCALE_DOWN_COOLDOWN", True),
    },
    "maintenance": {
        "sweep_interval": ("JOBQUEUE_SWEEP_INTERVAL", False),
        "leader_ttl": ("JOBQUEUE_LEADER_TTL", False),
        "misfire_grace": ("JOBQUEUE_MISFIRE_GRACE", True),
        "prune_interval": ("JOBQUEUE_PRUNE_INTERVAL", False),
        "history_interval": ("JOBQUEUE_HISTORY_INTERVAL", True),
        "reindex_interval": ("JOBQUEUE_REINDEX_INTERVAL", True),
        "vacuum_interval": ("JOBQUEUE_VACUUM_INTERVAL", True),
        "max_xact_age": ("JOBQUEUE_MAINTENANCE_XACT_AGE", True),
    },
    "backpressure": {
        "depth_refresh": ("JOBQUEUE_API_DEPTH_REFRESH", False),
        "depth_max_age": ("JOBQUEUE_API_DEPTH_MAX_AGE", False),
    },
    "api": {
        "db_timeout": ("JOBQUEUE_API_DB_TIMEOUT", False),
        "submit_stall": ("JOBQUEUE_API_SUBMIT_STALL", False),
        "key_cache_seconds": ("JOBQUEUE_API_KEY_CACHE_SECONDS", True),
        "read_after_write": ("JOBQUEUE_READ_AFTER_WRITE_SECONDS", True),
    },
    "metrics": {
        "stats_interval": ("JOBQUEUE_STATS_INTERVAL", False),
        "ttl": ("JOBQUEUE_METRICS_TTL", True),
        "worker_stale_seconds": ("JOBQUEUE_WORKER_STALE_SECONDS", False),
    },
}
_RETENTION_DAYS = {
    "maintenance": {
        "retention_completed_days": "JOBQUEUE_RETENTION_COMPLETED_DAYS",
        "retention_cancelled_days": "JOBQUEUE_RETENTION_CANCELLED_DAYS",
        "retention_dead_letter_days": "JOBQUEUE_RETENTION_DEAD_LETTER_DAYS",
    }
}
#: Settings that are numbers but not durations: finite, and their own range (checked in their section).
_OTHER_FLOATS = {
    "api": {"rate_limit": "JOBQUEUE_API_RATE_LIMIT"},
    "maintenance": {
        "reindex_factor": "JOBQUEUE_REINDEX_FACTOR",
        "reindex_min_waste_mb": "JOBQUEUE_REINDEX_MIN_WASTE_MB",
    },
}


def _check_spans(section: object, name: str) -> None:
    """The duration rule over the seconds settings of section ``name`` (see _DURATIONS), naming the variable."""
    for field_name, (variable, zero) in _DURATIONS.get(name, {}).items():
        if problem := duration_problem(getattr(section, field_name), zero=zero):
            raise ValueError(f"{variable}: {problem}")
    for field_name, variable in _RETENTION_DAYS.get(name, {}).items():
        days = getattr(section, field_name)
        if duration_problem(days * 86400.0 if isinstance(days, (int, float)) else days, zero=True):
            raise ValueError(f"{variable}: must be a finite number of days from 0 to {LONGEST.days} (got {days!r})")
    for field_name, variable in _OTHER_FLOATS.get(name, {}).items():
        if not math.isfinite(getattr(section, field_name)):
            raise ValueError(f"{variable}: must be a finite number (got {getattr(section, field_name)!r})")


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name} must be 1/true/yes/on or 0/false/no/off (got {env[name]!r})")


def concurrency_range(raw: str, name: str = "concurrency") -> tuple[int, int]:
    """``N`` → (0, N), a fixed concurrency; ``MIN:MAX`` → (MIN, MAX), autoscaling between them
    (MIN = MAX is fixed too)."""
    low_text, sep, high_text = raw.strip().partition(":")
    try:
        low, high = int(low_text), int(high_text if sep else low_text)
    except ValueError:
        raise ValueError(f"{name} must be N or MIN:MAX, whole numbers (got {raw!r})") from None
    if not 1 <= low <= high:
        raise ValueError(f"{name} must be at least 1, and MIN:MAX needs MIN <= MAX (got {raw!r})")
    return (low if low < high else 0), high


def parse_weights(raw: str) -> tuple[int, int, int, int]:
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"priority weights must be four positive integers for critical,high,normal,low (got {raw!r})")
    return tuple(int(p) for p in parts)  # type: ignore[return-value]


def _numbers(
    env: Mapping[str, str], defaults: object, prefix: str, ints: Mapping[str, str], floats: Mapping[str, str]
) -> dict:
    """The integer and number fields of a section, by field name, from ``prefix`` + their variable."""
    values: dict = {name: _int(env, prefix + var, getattr(defaults, name)) for name, var in ints.items()}
    values.update({name: _float(env, prefix + var, getattr(defaults, name)) for name, var in floats.items()})
    return values


_S = TypeVar("_S", bound="_Section")


class _Section:
    """What every section (and `Settings`, which holds them) has: a changed copy, checked again."""

    __slots__ = ()

    def with_(self: _S, **changes: Any) -> _S:
        return replace(self, **changes)  # type: ignore[type-var]


@dataclass(frozen=True, slots=True)
class DbSettings(_Section):
    """Connections (jobqueue.db.gateway): where, how many for a client, and the waits every connection jobqueue
    opens is allowed, in seconds (0: off); whether a transaction pooler (PgBouncer) sits between
    jobqueue and PostgreSQL, and whether processes LISTEN at all."""

    dsn: str = DEFAULT_DSN
    direct_dsn: str | None = None  # reaches PostgreSQL itself: LISTEN, reindexing, migrations (default: dsn)
    pgbouncer: bool = False  # no server-side prepared statements, no startup options, no LISTEN via `dsn`
    listen: bool = True  # False: poll-only, no LISTEN connection (workers poll; the API's /events answers 503)
    pool_max_size: int = 10  # JOBQUEUE_POOL_SIZE: connections of a Client/AsyncClient pool
    statement_timeout: float = 60.0
    lock_timeout: float = 10.0
    idle_in_transaction_timeout: float = 60.0

    def __post_init__(self) -> None:
        _check_spans(self, "db")
        for name, dsn in (("JOBQUEUE_DSN", self.dsn), ("JOBQUEUE_DIRECT_DSN", self.direct_dsn)):
            if dsn is not None:
                _check_dsn(name, dsn)
        if self.pgbouncer and self.listen and not self.direct_dsn:
            raise ValueError(
                "LISTEN does not work through PgBouncer in transaction mode: with JOBQUEUE_PGBOUNCER=1 "
                "set JOBQUEUE_DIRECT_DSN (a connection that bypasses it) or JOBQUEUE_LISTEN=0"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "DbSettings":
        defaults = cls()
        pgbouncer = _bool(env, "JOBQUEUE_PGBOUNCER", defaults.pgbouncer)
        direct_dsn = env.get("JOBQUEUE_DIRECT_DSN") or defaults.direct_dsn
        return cls(
            dsn=env.get("JOBQUEUE_DSN") or defaults.dsn,
            direct_dsn=direct_dsn,
            pgbouncer=pgbouncer,
            # Behind PgBouncer without a direct DSN, poll-only unless asked otherwise (then refused).
            listen=_bool(env, "JOBQUEUE_LISTEN", defaults.listen and not (pgbouncer and not direct_dsn)),
            pool_max_size=_int(env, "JOBQUEUE_POOL_SIZE", defaults.pool_max_size),
            statement_timeout=_float(env, "JOBQUEUE_STATEMENT_TIMEOUT", defaults.statement_timeout),
            lock_timeout=_float(env, "JOBQUEUE_LOCK_TIMEOUT", defaults.lock_timeout),
            idle_in_transaction_timeout=_float(
                env, "JOBQUEUE_IDLE_IN_TRANSACTION_TIMEOUT", defaults.idle_in_transaction_timeout
            ),
        )


@dataclass(frozen=True, slots=True)
class WorkerSettings(_Section):
    """A worker process (jobqueue.worker, jobqueue.process): what it serves, how many jobs at once, its
    leases and polls, its acks, and the guarantees per attempt (every attempt has a deadline; what a
    worker may hold). The command line's options (jobqueue.cli.worker) all land here."""

    queues: tuple[str, ...] = ("default",)
    concurrency: int = 10  # slots per worker process; with autoscaling, the most it scales to
    # --concurrency MIN:MAX (jobqueue.model.autoscale, knobs in AutoscaleSettings): the fewest slots (0: a fixed
    # concurrency)
    concurrency_min: int = 0
    processes: int = 1
    lease_seconds: float = 30.0
    poll_interval: float = 5.0
    shutdown_grace: float = 30.0
    priority_mode: str = "strict"
    priority_weights: tuple[int, int, int, int] = DEFAULT_PRIORITY_WEIGHTS
    ack_flush_interval: float = 0.005
    ack_batch_size: int = 200
    processing_ttl: float = 900.0  # an attempt's deadline when neither the job nor its task sets a timeout
    max_unacked: int = (
        0  # finished-but-unwritten outcomes before the worker stops claiming (0: 2 x max(concurrency, ack batch))
    )
    max_unacked_bytes: int = 256 * 1024 * 1024  # ... and their results and errors, in bytes
    max_stuck_handlers: int = 0  # handlers past their deadline still running before a restart (0: concurrency)
    max_result_bytes: int = 64 * 1024 * 1024  # a larger handler result dead-letters instead of reaching PostgreSQL
    run_maintenance: bool = True  # JOBQUEUE_MAINTENANCE, --no-maintenance: this process also runs the leader services
    metrics_port: int = 0  # JOBQUEUE_WORKER_METRICS_PORT, --metrics-port: this process's own figures (0: off)

    def __post_init__(self) -> None:
        _check_spans(self, "worker")
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 0 <= self.concurrency_min <= self.concurrency:
            raise ValueError("the autoscaling minimum concurrency must be between 1 and the concurrency")
        if self.processes < 1:
            raise ValueError("processes must be at least 1")
        if self.priority_mode not in ("strict", "weighted"):
            raise ValueError(f"priority mode must be 'strict' or 'weighted' (got {self.priority_mode!r})")
        if not self.queues or not all(q.strip() for q in self.queues):
            raise ValueError("queues must be a non-empty list of names")
        for queue in self.queues:  # the enqueue's rule: a queue it refuses could never have a job
            if problem := name_problem(queue):
                raise ValueError(f"queue {queue[:40]!r}{'…' if len(queue) > 40 else ''}: {problem}")
        if self.metrics_port and not 0 < self.metrics_port <= 65536 - self.processes:
            raise ValueError(
                f"the worker metrics port must be from 1 to {65536 - self.processes} (one port per "
                f"process from it; got {self.metrics_port})"
            )
        if self.max_unacked < 0 or self.max_stuck_handlers < 0 or self.max_result_bytes < 1:
            raise ValueError("max unacked and max stuck handlers must not be negative, max result bytes positive")
        if self.max_unacked_bytes < 1:
            raise ValueError("max unacked bytes (JOBQUEUE_MAX_UNACKED_BYTES) must be positive")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "WorkerSettings":
        defaults = cls()
        queues = tuple(q.strip() for q in env.get("JOBQUEUE_QUEUES", "default").split(",") if q.strip())
        weights_raw = env.get("JOBQUEUE_PRIORITY_WEIGHTS")
        concurrency_min, concurrency = concurrency_range(
            env.get("JOBQUEUE_CONCURRENCY") or str(defaults.concurrency), "JOBQUEUE_CONCURRENCY"
        )
        return cls(
            queues=queues or defaults.queues,
            concurrency=concurrency,
            concurrency_min=concurrency_min,
            processes=_int(env, "JOBQUEUE_PROCESSES", defaults.processes),
            lease_seconds=_float(env, "JOBQUEUE_LEASE_SECONDS", defaults.lease_seconds),
            poll_interval=_float(env, "JOBQUEUE_POLL_INTERVAL", defaults.poll_interval),
            shutdown_grace=_float(env, "JOBQUEUE_SHUTDOWN_GRACE", defaults.shutdown_grace),
            priority_mode=env.get("JOBQUEUE_PRIORITY_MODE", defaults.priority_mode),
            priority_weights=parse_weights(weights_raw) if weights_raw else defaults.priority_weights,
            ack_flush_interval=_float(env, "JOBQUEUE_ACK_FLUSH_MS", defaults.ack_flush_interval * 1000) / 1000,
            ack_batch_size=_int(env, "JOBQUEUE_ACK_BATCH", defaults.ack_batch_size),
            processing_ttl=_float(env, "JOBQUEUE_PROCESSING_TTL", defaults.processing_ttl),
            max_unacked=_int(env, "JOBQUEUE_MAX_UNACKED", defaults.max_unacked),
            max_unacked_bytes=_int(env, "JOBQUEUE_MAX_UNACKED_BYTES", defaults.max_unacked_bytes),
            max_stuck_handlers=_int(env, "JOBQUEUE_MAX_STUCK_HANDLERS", defaults.max_stuck_handlers),
            max_result_bytes=_int(env, "JOBQUEUE_MAX_RESULT_BYTES", defaults.max_result_bytes),
            run_maintenance=_bool(env, "JOBQUEUE_MAINTENANCE", defaults.run_maintenance),
            metrics_port=_int(env, "JOBQUEUE_WORKER_METRICS_PORT", defaults.metrics_port),
        )

    @property
    def autoscaling(self) -> bool:
        """--concurrency MIN:MAX with MIN < MAX: the worker scales its slots between them."""
        return 0 < self.concurrency_min < self.concurrency

    @property
    def unacked_bound(self) -> int:
        return self.max_unacked or 2 * max(self.concurrency, self.ack_batch_size)

    @property
    def stuck_handler_bound(self) -> int:
        return self.max_stuck_handlers or self.concurrency


@dataclass(frozen=True, slots=True)
class AutoscaleSettings(_Section):
    """The ``JOBQUEUE_AUTOSCALE_*`` variables (see docs/workers.md "Autoscaling"): how often a worker
    started with --concurrency MIN:MAX decides, its cooldowns and step (jobqueue.worker.slot_scaler); the
    step and the worker bounds of the fleet gauge ``jobqueue_desired_workers`` (the API's /metrics)."""

    interval: float = 5.0
    up_cooldown: float = 30.0
    down_cooldown: float = 300.0
    step: int = 2
    min_workers: int = 2
    max_workers: int = 100

    def __post_init__(self) -> None:
        _check_spans(self, "autoscale")
        if self.step < 1 or not 1 <= self.min_workers <= self.max_workers:
            raise ValueError("the autoscaling step must be positive, and 1 <= min workers <= max workers")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "AutoscaleSettings":
        return cls(
            **_numbers(
                env,
                cls(),
                "JOBQUEUE_AUTOSCALE_",
                ints={"step": "STEP", "min_workers": "MIN_WORKERS", "max_workers": "MAX_WORKERS"},
                floats={"interval": "INTERVAL", "up_cooldown": "UP_COOLDOWN", "down_cooldown": "DOWN_COOLDOWN"},
            )
        )


@dataclass(frozen=True, slots=True)
class MaintenanceSettings(_Section):
    """Leader-only maintenance (jobqueue.maintenance): election, sweeps, cron, retention, history and
    the job table's upkeep. The sweeper also needs the workers' lease (WorkerSettings.lease_seconds)
    and the gatekeeper the queue depth limits (BackpressureSettings)."""

    sweep_interval: float = 5.0
    leader_ttl: float = 15.0  # seconds a leader lease lasts; a dead leader is replaced within it
    misfire_grace: float = 60.0  # a cron tick later than this counts as missed (misfire policy)
    prune_interval: float = 60.0
    history_interval: float = 15.0  # seconds between samples of the dashboard's throughput history; 0: off
    reindex_interval: float = 600.0  # seconds between bloat checks of the job table's indexes; 0: off
    reindex_factor: float = 2.0  # rebuild an index whose file is this many times what it needs...
    reindex_min_waste_mb: float = 10.0  # ... and at least this much bigger
    vacuum_interval: float = 60.0  # seconds between the vacuumer's checks of the job table; 0: off
    vacuum_min_dead: int = 50_000  # dead row versions that make the job table due a VACUUM (and 20 % of live rows)
    max_xact_age: float = (
        10.0  # JOBQUEUE_MAINTENANCE_XACT_AGE: an older open transaction holds the vacuumer and reindexer back
    )
    retention_completed_days: float = 30.0
    retention_cancelled_days: float = 7.0
    retention_dead_letter_days: float = 90.0

    def __post_init__(self) -> None:
        _check_spans(self, "maintenance")
        if self.reindex_factor < 1 or self.reindex_min_waste_mb < 0 or self.vacuum_min_dead < 0:
            raise ValueError(
                "the reindex factor must be at least 1, its minimum waste and the vacuum's minimum "
                "dead rows not negative"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "MaintenanceSettings":
        return cls(
            **_numbers(
                env,
                cls(),
                "JOBQUEUE_",
                ints={"vacuum_min_dead": "VACUUM_MIN_DEAD"},
                floats={
                    "sweep_interval": "SWEEP_INTERVAL",
                    "leader_ttl": "LEADER_TTL",
                    "misfire_grace": "MISFIRE_GRACE",
                    "prune_interval": "PRUNE_INTERVAL",
                    "history_interval": "HISTORY_INTERVAL",
                    "reindex_interval": "REINDEX_INTERVAL",
                    "reindex_factor": "REINDEX_FACTOR",
                    "reindex_min_waste_mb": "REINDEX_MIN_WASTE_MB",
                    "vacuum_interval": "VACUUM_INTERVAL",
                    "max_xact_age": "MAINTENANCE_XACT_AGE",
                    "retention_completed_days": "RETENTION_COMPLETED_DAYS",
                    "retention_cancelled_days": "RETENTION_CANCELLED_DAYS",
                    "retention_dead_letter_days": "RETENTION_DEAD_LETTER_DAYS",
                },
            )
        )


#: One message for both queue-count settings, which used to be checked together.
_MAX_QUEUES_PROBLEM = "JOBQUEUE_API_MAX_QUEUES must be positive, JOBQUEUE_METRICS_MAX_QUEUES not negative"


@dataclass(frozen=True, slots=True)
class BackpressureSettings(_Section):
    """The queue depth limits (``JOBQUEUE_API_*``, see api.backpressure and jobqueue.model.quotas) every process
    applies alike where a queue sets none: the API refuses or sheds by them, the gatekeeper
    (maintenance) closes queues past them, and a worker sheds low-priority retries by them."""

    soft_limit: int = 50_000
    hard_limit: int = 100_000
    # The same two limits over the waiting jobs of all queues together: inventing queue names
    # does not dodge backpressure (see api.backpressure).
    total_soft_limit: int = 200_000
    total_hard_limit: int = 400_000
    # At most this many queues holding jobs that no live worker serves and no admin configured: a
    # new queue name past it is refused (see jobqueue.model.quotas).
    max_queues: int = 1000
    depth_refresh: float = 1.0
    depth_max_age: float = 10.0  # a depth count is redone at least this often (see api.backpressure)

    def __post_init__(self) -> None:
        _check_spans(self, "backpressure")
        if not 0 < self.soft_limit <= self.hard_limit:
            raise ValueError("the API soft limit must be positive and at most the hard limit")
        if not 0 < self.total_soft_limit <= self.total_hard_limit:
            raise ValueError("the API total soft limit must be positive and at most the total hard limit")
        if self.max_queues < 1:
            raise ValueError(_MAX_QUEUES_PROBLEM)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "BackpressureSettings":
        return cls(
            **_numbers(
                env,
                cls(),
                "JOBQUEUE_API_",
                ints={
                    "soft_limit": "SOFT_LIMIT",
                    "hard_limit": "HARD_LIMIT",
                    "total_soft_limit": "TOTAL_SOFT_LIMIT",
                    "total_hard_limit": "TOTAL_HARD_LIMIT",
                    "max_queues": "MAX_QUEUES",
                },
                floats={"depth_refresh": "DEPTH_REFRESH", "depth_max_age": "DEPTH_MAX_AGE"},
            )
        )


@dataclass(frozen=True, slots=True)
class ApiSettings(_Section):
    """The REST API (jobqueue.api, the ``JOBQUEUE_API_*`` variables, see docs/rest.md): serving, its
    database pool and timeouts, producers' rate limits, request limits, the read replica."""

    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    pool_size: int = 10
    db_timeout: float = 2.0
    connect_timeout: int = 2
    retry_after: int = 5
    rate_limit: float = 200.0
    rate_burst: int = 400
    shed_low: bool = False
    settle_gc: bool = False  # set by `jobqueue api`: freeze start-up objects out of the GC (see api.app)
    max_batch: int = 1000
    max_streams_per_key: int = 10  # open /events streams one API key may hold per API process
    submit_lanes: int = 1  # submission statements in flight per API process; 0: no coalescing
    submit_stall: float = 0.1  # seconds after which a statement in flight stops holding its lane
    max_body_bytes: int = 1_048_576
    key_cache_seconds: float = 2.0
    read_dsn: str | None = None  # JOBQUEUE_READ_DSN: a standby the API's status reads may use (api.reads)
    read_after_write: float = 5.0  # JOBQUEUE_READ_AFTER_WRITE_SECONDS: a key that wrote reads the primary this long

    def __post_init__(self) -> None:
        _check_spans(self, "api")
        if self.read_dsn is not None:
            _check_dsn("JOBQUEUE_READ_DSN", self.read_dsn)
        if self.submit_lanes < 0:
            raise ValueError("API submit lanes must not be negative")
        if self.max_batch < 1 or self.rate_limit <= 0 or self.rate_burst < 1:
            raise ValueError("API batch size, rate limit and burst must be positive")
        if self.max_batch > MAX_BATCH_JOBS:
            raise ValueError(
                f"JOBQUEUE_API_MAX_BATCH must be at most {MAX_BATCH_JOBS}, the most jobs one "
                f"enqueue_many() takes (got {self.max_batch})"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "ApiSettings":
        defaults = cls()
        values = _numbers(
            env,
            defaults,
            "JOBQUEUE_API_",
            ints={
                "port": "PORT",
                "workers": "WORKERS",
                "pool_size": "POOL_SIZE",
                "connect_timeout": "CONNECT_TIMEOUT",
                "retry_after": "RETRY_AFTER",
                "rate_burst": "RATE_BURST",
                "max_batch": "MAX_BATCH",
                "max_streams_per_key": "MAX_STREAMS_PER_KEY",
                "submit_lanes": "SUBMIT_LANES",
                "max_body_bytes": "MAX_BODY_BYTES",
            },
            floats={
                "db_timeout": "DB_TIMEOUT",
                "rate_limit": "RATE_LIMIT",
                "submit_stall": "SUBMIT_STALL",
                "key_cache_seconds": "KEY_CACHE_SECONDS",
            },
        )
        return cls(
            **values,
            host=env.get("JOBQUEUE_API_HOST") or defaults.host,
            shed_low=_bool(env, "JOBQUEUE_API_SHED_LOW", defaults.shed_low),
            settle_gc=_bool(env, "JOBQUEUE_API_SETTLE_GC", defaults.settle_gc),
            read_dsn=env.get("JOBQUEUE_READ_DSN") or defaults.read_dsn,
            read_after_write=_float(env, "JOBQUEUE_READ_AFTER_WRITE_SECONDS", defaults.read_after_write),
        )


@dataclass(frozen=True, slots=True)
class MetricsSettings(_Section):
    """The figures (jobqueue.observability.metrics, docs/observability.md): how often a worker writes its counters,
    when a worker counts as alive (workers' autoscaling, the API, the gatekeeper, `unserved`), and how
    the API serves /metrics and the dashboard's figures."""

    stats_interval: float = 2.0  # seconds between a worker's writes of its /metrics counters
    worker_stale_seconds: float = 60.0  # a worker silent this long is not counted as alive
    token: str | None = None  # JOBQUEUE_METRICS_TOKEN: a bearer token for /metrics and the dashboard's figures
    public: bool = False  # JOBQUEUE_METRICS_PUBLIC=1: /metrics and /dashboard/overview without a key
    ttl: float = 2.0  # seconds a /metrics + dashboard snapshot is reused
    count_cap: int = 1_000_000  # a job count stops here (per queue and priority)
    max_queues: int = 50  # undeclared queues /metrics, /queues and the dashboard list by name; the rest: "(other)"

    def __post_init__(self) -> None:
        _check_spans(self, "metrics")
        if self.max_queues < 0:
            raise ValueError(_MAX_QUEUES_PROBLEM)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "MetricsSettings":
        defaults = cls()
        return cls(
            stats_interval=_float(env, "JOBQUEUE_STATS_INTERVAL", defaults.stats_interval),
            worker_stale_seconds=_float(env, "JOBQUEUE_WORKER_STALE_SECONDS", defaults.worker_stale_seconds),
            token=env.get("JOBQUEUE_METRICS_TOKEN") or defaults.token,
            public=_bool(env, "JOBQUEUE_METRICS_PUBLIC", defaults.public),
            ttl=_float(env, "JOBQUEUE_METRICS_TTL", defaults.ttl),
            count_cap=_int(env, "JOBQUEUE_METRICS_COUNT_CAP", defaults.count_cap),
            max_queues=_int(env, "JOBQUEUE_METRICS_MAX_QUEUES", defaults.max_queues),
        )


@dataclass(frozen=True, slots=True)
class EncryptionSettings(_Section):
    """Payload encryption (jobqueue.crypto.keyring): JOBQUEUE_ENCRYPTION_KEYS or _FILE; None: no keys."""

    keys: KeyRing | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "EncryptionSettings":
        return cls(keys=KeyRing.from_env(env))


@dataclass(frozen=True, slots=True)
class Settings(_Section):
    """Every section; each component is handed the ones it reads (see the module docstring)."""

    db: DbSettings = field(default_factory=DbSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    autoscale: AutoscaleSettings = field(default_factory=AutoscaleSettings)
    maintenance: MaintenanceSettings = field(default_factory=MaintenanceSettings)
    backpressure: BackpressureSettings = field(default_factory=BackpressureSettings)
    api: ApiSettings = field(default_factory=ApiSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    encryption: EncryptionSettings = field(default_factory=EncryptionSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if env is None else env
        return cls(
            db=DbSettings.from_env(env),
            worker=WorkerSettings.from_env(env),
            autoscale=AutoscaleSettings.from_env(env),
            maintenance=MaintenanceSettings.from_env(env),
            backpressure=BackpressureSettings.from_env(env),
            api=ApiSettings.from_env(env),
            metrics=MetricsSettings.from_env(env),
            encryption=EncryptionSettings.from_env(env),
        )


def _check_dsn(name: str, dsn: str) -> None:
    """A DSN libpq cannot parse is a setting error, said once at startup and naming the setting,
    not a traceback from the first connection."""
    try:
        conninfo_to_dict(dsn)
    except ProgrammingError as exc:
        raise ValueError(f"{name} (or --dsn) is not a PostgreSQL connection string or URI: {exc}") from None
