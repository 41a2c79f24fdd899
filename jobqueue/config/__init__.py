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

The sections live in `jobqueue.config.process` (db, worker, autoscale, maintenance) and
`jobqueue.config.serving` (backpressure, api, metrics, encryption); `jobqueue.config.reading` holds the
parsers and checks they share.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

from jobqueue.config.process import AutoscaleSettings, DbSettings, MaintenanceSettings, WorkerSettings
from jobqueue.config.reading import (
    DEFAULT_DSN,
    DEFAULT_PRIORITY_WEIGHTS,
    DURATIONS,
    OTHER_FLOATS,
    RETENTION_DAYS,
    Section,
    concurrency_range,
    parse_weights,
)
from jobqueue.config.serving import ApiSettings, BackpressureSettings, EncryptionSettings, MetricsSettings

__all__ = [
    "DEFAULT_DSN",
    "DEFAULT_PRIORITY_WEIGHTS",
    "DURATIONS",
    "OTHER_FLOATS",
    "RETENTION_DAYS",
    "ApiSettings",
    "AutoscaleSettings",
    "BackpressureSettings",
    "DbSettings",
    "EncryptionSettings",
    "MaintenanceSettings",
    "MetricsSettings",
    "Settings",
    "WorkerSettings",
    "concurrency_range",
    "parse_weights",
]


@dataclass(frozen=True, slots=True)
class Settings(Section):
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
