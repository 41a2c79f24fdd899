"""How a connection is opened, decided without a database: the name, the timeouts as startup
options (or none behind PgBouncer), which DSN session-bound work uses, and the settings behind it."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from jobqueue.config import DbSettings, Settings
from jobqueue.db import gateway as db


def test_timeouts_go_into_startup_options_before_the_dsns_own(monkeypatch):
    monkeypatch.delenv("PGOPTIONS", raising=False)
    settings = DbSettings(
        dsn="postgresql://u@h/d?options=-c%20search_path%3Dq",
        statement_timeout=1.5,
        lock_timeout=0,
        idle_in_transaction_timeout=0.0004,
    )
    params = conninfo_to_dict(db.Session.of(settings, db.worker_name("h:1:ab")).conninfo())
    assert params["application_name"] == "jobqueue-worker h:1:ab"
    assert params["options"] == (
        "-c statement_timeout=1500 -c lock_timeout=0 -c idle_in_transaction_session_timeout=1 -c search_path=q"
    )
    monkeypatch.setenv("PGOPTIONS", "-c work_mem=8MB")  # libpq's default when the DSN has none: kept
    assert conninfo_to_dict(db.Session.of(settings.with_(dsn="host=h"), "x").conninfo())["options"].endswith(
        "-c work_mem=8MB"
    )


def test_behind_pgbouncer_no_options_and_session_bound_work_takes_the_direct_dsn():
    settings = DbSettings(dsn="host=bouncer", pgbouncer=True, direct_dsn="host=postgres", listen=True)
    pooled = db.Session.of(settings, "p")
    assert pooled.pooler and "options" not in conninfo_to_dict(pooled.conninfo())
    direct = db.Session.of(settings, "p", direct=True)
    assert not direct.pooler and conninfo_to_dict(direct.conninfo())["host"] == "postgres"
    assert "lock_timeout=10000" in conninfo_to_dict(direct.conninfo())["options"]
    without = db.Session.of(settings.with_(direct_dsn=None, listen=False), "p", direct=True)
    assert without.pooler and conninfo_to_dict(without.conninfo())["host"] == "bouncer"
    assert direct.unbounded().timeouts_ms() == {
        "statement_timeout": 0,
        "lock_timeout": 0,
        "idle_in_transaction_session_timeout": 60000,
    }


def test_connection_settings_from_the_environment():
    settings = Settings.from_env(
        {
            "JOBQUEUE_STATEMENT_TIMEOUT": "30",
            "JOBQUEUE_LOCK_TIMEOUT": "2.5",
            "JOBQUEUE_IDLE_IN_TRANSACTION_TIMEOUT": "0",
            "JOBQUEUE_PGBOUNCER": "yes",
        }
    ).db
    assert (settings.statement_timeout, settings.lock_timeout, settings.idle_in_transaction_timeout) == (30, 2.5, 0)
    assert settings.pgbouncer and not settings.listen  # PgBouncer without a direct DSN: poll-only
    assert Settings.from_env({"JOBQUEUE_PGBOUNCER": "1", "JOBQUEUE_DIRECT_DSN": "host=pg"}).db.listen
    assert Settings.from_env({}).db.listen and not Settings.from_env({}).db.pgbouncer
    with pytest.raises(ValueError, match="JOBQUEUE_DIRECT_DSN"):
        Settings.from_env({"JOBQUEUE_PGBOUNCER": "1", "JOBQUEUE_LISTEN": "1"})
    with pytest.raises(ValueError, match="JOBQUEUE_LOCK_TIMEOUT: must be 0 to 3650 days"):
        DbSettings(lock_timeout=-1)
    with pytest.raises(ValueError, match="JOBQUEUE_LOCK_TIMEOUT must be a number"):
        Settings.from_env({"JOBQUEUE_LOCK_TIMEOUT": "10s"})
