"""The sections the serving side reads: queue depth limits (``backpressure``, applied alike by the
API, the gatekeeper and a worker's shedding), the REST API (``api``), metrics and the key ring."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from jobqueue.config.reading import (
    MAX_QUEUES_PROBLEM,
    Section,
    check_dsn,
    check_spans,
    read_bool,
    read_float,
    read_int,
    read_numbers,
)
from jobqueue.crypto.keyring import KeyRing
from jobqueue.model.names import MAX_BATCH_JOBS


@dataclass(frozen=True, slots=True)
class BackpressureSettings(Section):
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
        check_spans(self, "backpressure")
        if not 0 < self.soft_limit <= self.hard_limit:
            raise ValueError("the API soft limit must be positive and at most the hard limit")
        if not 0 < self.total_soft_limit <= self.total_hard_limit:
            raise ValueError("the API total soft limit must be positive and at most the total hard limit")
        if self.max_queues < 1:
            raise ValueError(MAX_QUEUES_PROBLEM)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "BackpressureSettings":
        return cls(
            **read_numbers(
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
class ApiSettings(Section):
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
        check_spans(self, "api")
        if self.read_dsn is not None:
            check_dsn("JOBQUEUE_READ_DSN", self.read_dsn)
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
        values = read_numbers(
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
            shed_low=read_bool(env, "JOBQUEUE_API_SHED_LOW", defaults.shed_low),
            settle_gc=read_bool(env, "JOBQUEUE_API_SETTLE_GC", defaults.settle_gc),
            read_dsn=env.get("JOBQUEUE_READ_DSN") or defaults.read_dsn,
            read_after_write=read_float(env, "JOBQUEUE_READ_AFTER_WRITE_SECONDS", defaults.read_after_write),
        )


@dataclass(frozen=True, slots=True)
class MetricsSettings(Section):
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
        check_spans(self, "metrics")
        if self.max_queues < 0:
            raise ValueError(MAX_QUEUES_PROBLEM)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "MetricsSettings":
        defaults = cls()
        return cls(
            stats_interval=read_float(env, "JOBQUEUE_STATS_INTERVAL", defaults.stats_interval),
            worker_stale_seconds=read_float(env, "JOBQUEUE_WORKER_STALE_SECONDS", defaults.worker_stale_seconds),
            token=env.get("JOBQUEUE_METRICS_TOKEN") or defaults.token,
            public=read_bool(env, "JOBQUEUE_METRICS_PUBLIC", defaults.public),
            ttl=read_float(env, "JOBQUEUE_METRICS_TTL", defaults.ttl),
            count_cap=read_int(env, "JOBQUEUE_METRICS_COUNT_CAP", defaults.count_cap),
            max_queues=read_int(env, "JOBQUEUE_METRICS_MAX_QUEUES", defaults.max_queues),
        )


@dataclass(frozen=True, slots=True)
class EncryptionSettings(Section):
    """Payload encryption (jobqueue.crypto.keyring): JOBQUEUE_ENCRYPTION_KEYS or _FILE; None: no keys."""

    keys: KeyRing | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "EncryptionSettings":
        return cls(keys=KeyRing.from_env(env))
