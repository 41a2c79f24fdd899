"""Calls about the installation (sql/queries/meta.sql)."""

from __future__ import annotations

from datetime import datetime

from jobqueue.db.gateway import Call, scalar, scalar_or_none


def schema_revision() -> Call[str | None]:
    return Call("schema_revision", {}, scalar_or_none)


def server_started() -> Call[datetime]:
    return Call("meta_server_started", {}, scalar)
