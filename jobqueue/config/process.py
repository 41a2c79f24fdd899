"""The sections of a worker process: its connections (``db``), its claim loop (``worker``), its slot
scaler (``autoscale``) and the leader-only services (``maintenance``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from jobqueue.config.reading import (
    DEFAULT_DSN,
    DEFAULT_PRIORITY_WEIGHTS,
    Section,
    check_dsn,
    check_spans,
    concurrency_range,
    parse_weights,
    read_bool,
    read_float,
    read_int,
    read_numbers,
)
from jobqueue.model.names import name_problem


@dataclass(frozen=True, slots=True)
class DbSettings(Section):
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
        check_spans(self, "db")
        for name, dsn in (("JOBQUEUE_DSN", self.dsn), ("JOBQUEUE_DIRECT_DSN", self.direct_dsn)):
            if dsn is not None:
                check_dsn(name, dsn)
        if self.pgbouncer and self.listen and not self.direct_dsn:
            raise ValueError(
                "LISTEN does not work through PgBouncer in transaction mode: with JOBQUEUE_PGBOUNCER=1 "
                "set JOBQUEUE_DIRECT_DSN (a connection that bypasses it) or JOBQUEUE_LISTEN=0"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "DbSettings":
        defaults = cls()
        pgbouncer = read_bool(env, "JOBQUEUE_PGBOUNCER", defaults.pgbouncer)
        direct_dsn = env.get("JOBQUEUE_DIRECT_DSN") or defaults.direct_dsn
        return cls(
            dsn=env.get("JOBQUEUE_DSN") or defaults.dsn,
            direct_dsn=direct_dsn,
            pgbouncer=pgbouncer,
            # Behind PgBouncer without a direct DSN, poll-only unless asked otherwise (then refused).
            listen=read_bool(env, "JOBQUEUE_LISTEN", defaults.listen and not (pgbouncer and not direct_dsn)),
            pool_max_size=read_int(env, "JOBQUEUE_POOL_SIZE", defaults.pool_max_size),
            statement_timeout=read_float(env, "JOBQUEUE_STATEMENT_TIMEOUT", defaults.statement_timeout),
            lock_timeout=read_float(env, "JOBQUEUE_LOCK_TIMEOUT", defaults.lock_timeout),
            idle_in_transaction_timeout=read_float(
                env, "JOBQUEUE_IDLE_IN_TRANSACTION_TIMEOUT", defaults.idle_in_transaction_timeout
            ),
        )


@dataclass(frozen=True, slots=True)
class WorkerSettings(Section):
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
        check_spans(self, "worker")
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
            processes=read_int(env, "JOBQUEUE_PROCESSES", defaults.processes),
            lease_seconds=read_float(env, "JOBQUEUE_LEASE_SECONDS", defaults.lease_seconds),
            poll_interval=read_float(env, "JOBQUEUE_POLL_INTERVAL", defaults.poll_interval),
            shutdown_grace=read_float(env, "JOBQUEUE_SHUTDOWN_GRACE", defaults.shutdown_grace),
            priority_mode=env.get("JOBQUEUE_PRIORITY_MODE", defaults.priority_mode),
            priority_weights=parse_weights(weights_raw) if weights_raw else defaults.priority_weights,
            ack_flush_interval=read_float(env, "JOBQUEUE_ACK_FLUSH_MS", defaults.ack_flush_interval * 1000) / 1000,
            ack_batch_size=read_int(env, "JOBQUEUE_ACK_BATCH", defaults.ack_batch_size),
            processing_ttl=read_float(env, "JOBQUEUE_PROCESSING_TTL", defaults.processing_ttl),
            max_unacked=read_int(env, "JOBQUEUE_MAX_UNACKED", defaults.max_unacked),
            max_unacked_bytes=read_int(env, "JOBQUEUE_MAX_UNACKED_BYTES", defaults.max_unacked_bytes),
            max_stuck_handlers=read_int(env, "JOBQUEUE_MAX_STUCK_HANDLERS", defaults.max_stuck_handlers),
            max_result_bytes=read_int(env, "JOBQUEUE_MAX_RESULT_BYTES", defaults.max_result_bytes),
            run_maintenance=read_bool(env, "JOBQUEUE_MAINTENANCE", defaults.run_maintenance),
            metrics_port=read_int(env, "JOBQUEUE_WORKER_METRICS_PORT", defaults.metrics_port),
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
class AutoscaleSettings(Section):
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
        check_spans(self, "autoscale")
        if self.step < 1 or not 1 <= self.min_workers <= self.max_workers:
            raise ValueError("the autoscaling step must be positive, and 1 <= min workers <= max workers")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "AutoscaleSettings":
        return cls(
            **read_numbers(
                env,
                cls(),
                "JOBQUEUE_AUTOSCALE_",
                ints={"step": "STEP", "min_workers": "MIN_WORKERS", "max_workers": "MAX_WORKERS"},
                floats={"interval": "INTERVAL", "up_cooldown": "UP_COOLDOWN", "down_cooldown": "DOWN_COOLDOWN"},
            )
        )


@dataclass(frozen=True, slots=True)
class MaintenanceSettings(Section):
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
    retention_audit_days: float = 365.0  # the audit log's entries (jobqueue.audit_log)

    def __post_init__(self) -> None:
        check_spans(self, "maintenance")
        if self.retention_audit_days < 1:  # the database keeps them a day whatever it is asked
            raise ValueError(
                "JOBQUEUE_RETENTION_AUDIT_DAYS: audit entries are kept at least 1 day "
                f"(got {self.retention_audit_days!r})"
            )
        if self.reindex_factor < 1 or self.reindex_min_waste_mb < 0 or self.vacuum_min_dead < 0:
            raise ValueError(
                "the reindex factor must be at least 1, its minimum waste and the vacuum's minimum "
                "dead rows not negative"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "MaintenanceSettings":
        return cls(
            **read_numbers(
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
                    "retention_audit_days": "RETENTION_AUDIT_DAYS",
                },
            )
        )
