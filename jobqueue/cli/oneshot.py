"""The client a one-shot command opens (`jobqueue enqueue|get|cancel|schedule|apikey|demo`).

A command should say "database unavailable" within a few seconds instead of waiting the
library's 10 s for a pooled connection, and every command should do so alike.
"""

from __future__ import annotations

from typing import Any

from jobqueue.client import Client
from jobqueue.config import Settings
from jobqueue.db import gateway as db

CLI_DB_TIMEOUT = 5.0  # seconds a one-shot command waits for the database before saying it is unavailable


def open_client(settings: Settings, **options: Any) -> Client:
    """Its connections show as ``jobqueue-cli`` in ``pg_stat_activity``."""
    _probe(settings)
    return Client(settings=settings, pool_timeout=CLI_DB_TIMEOUT, application_name=db.CLI_NAME, **options)


def _probe(settings: Settings) -> None:
    """One direct connection before the pool opens. A refused connection, an unknown host or a bad
    password then fails at once with the server's own reason (`DatabaseUnavailable`), where the
    pool would retry in the background, log each try, and answer "couldn't get a connection" only
    after the full CLI_DB_TIMEOUT."""
    db.connect_sync(db.Session.of(settings.db, db.CLI_NAME), connect_timeout=int(CLI_DB_TIMEOUT)).close()
