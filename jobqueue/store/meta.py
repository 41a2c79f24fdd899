"""Calls about the installation (sql/queries/meta.sql)."""

from __future__ import annotations

from jobqueue.db import Call, scalar_or_none


def schema_revision() -> Call[str | None]:
    return Call("schema_revision", {}, scalar_or_none)
