"""Calls about the installation (sql/queries/meta.sql)."""

from __future__ import annotations

from jobqueue.db import Call


def schema_revision() -> Call[str | None]:
    return Call("schema_revision", {}, lambda rows: rows[0][0] if rows else None)
