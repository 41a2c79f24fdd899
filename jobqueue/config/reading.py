"""How a settings section reads its ``JOBQUEUE_*`` variables and checks them: the parsers, the one
duration rule over every span of seconds, and the DSN check, shared by the sections in
`jobqueue.config.process` and `jobqueue.config.serving`."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping, TypeVar

from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict

from jobqueue.model.durations import LONGEST, duration_problem

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/jobqueue"
DEFAULT_PRIORITY_WEIGHTS = (8, 4, 2, 1)


def read_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer (got {raw!r})") from None


def read_float(env: Mapping[str, str], name: str, default: float) -> float:
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
DURATIONS: dict[str, dict[str, tuple[str, bool]]] = {
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
RETENTION_DAYS = {
    "maintenance": {
        "retention_completed_days": "JOBQUEUE_RETENTION_COMPLETED_DAYS",
        "retention_cancelled_days": "JOBQUEUE_RETENTION_CANCELLED_DAYS",
        "retention_dead_letter_days": "JOBQUEUE_RETENTION_DEAD_LETTER_DAYS",
        "retention_audit_days": "JOBQUEUE_RETENTION_AUDIT_DAYS",
    }
}
#: Settings that are numbers but not durations: finite, and their own range (checked in their section).
OTHER_FLOATS = {
    "api": {"rate_limit": "JOBQUEUE_API_RATE_LIMIT"},
    "maintenance": {
        "reindex_factor": "JOBQUEUE_REINDEX_FACTOR",
        "reindex_min_waste_mb": "JOBQUEUE_REINDEX_MIN_WASTE_MB",
    },
}


def check_spans(section: object, name: str) -> None:
    """The duration rule over the seconds settings of section ``name`` (see DURATIONS), naming the variable."""
    for field_name, (variable, zero) in DURATIONS.get(name, {}).items():
        if problem := duration_problem(getattr(section, field_name), zero=zero):
            raise ValueError(f"{variable}: {problem}")
    for field_name, variable in RETENTION_DAYS.get(name, {}).items():
        days = getattr(section, field_name)
        if duration_problem(days * 86400.0 if isinstance(days, (int, float)) else days, zero=True):
            raise ValueError(f"{variable}: must be a finite number of days from 0 to {LONGEST.days} (got {days!r})")
    for field_name, variable in OTHER_FLOATS.get(name, {}).items():
        if not math.isfinite(getattr(section, field_name)):
            raise ValueError(f"{variable}: must be a finite number (got {getattr(section, field_name)!r})")


def read_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
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


def read_numbers(
    env: Mapping[str, str], defaults: object, prefix: str, ints: Mapping[str, str], floats: Mapping[str, str]
) -> dict:
    """The integer and number fields of a section, by field name, from ``prefix`` + their variable."""
    values: dict = {name: read_int(env, prefix + var, getattr(defaults, name)) for name, var in ints.items()}
    values.update({name: read_float(env, prefix + var, getattr(defaults, name)) for name, var in floats.items()})
    return values


_S = TypeVar("_S", bound="Section")


class Section:
    """What every section (and `Settings`, which holds them) has: a changed copy, checked again."""

    __slots__ = ()

    def with_(self: _S, **changes: Any) -> _S:
        return replace(self, **changes)  # type: ignore[type-var]


def check_dsn(name: str, dsn: str) -> None:
    """A DSN libpq cannot parse is a setting error, said once at startup and naming the setting,
    not a traceback from the first connection."""
    try:
        conninfo_to_dict(dsn)
    except ProgrammingError as exc:
        raise ValueError(f"{name} (or --dsn) is not a PostgreSQL connection string or URI: {exc}") from None


#: One message for both queue-count settings, which used to be checked together.
MAX_QUEUES_PROBLEM = "JOBQUEUE_API_MAX_QUEUES must be positive, JOBQUEUE_METRICS_MAX_QUEUES not negative"
